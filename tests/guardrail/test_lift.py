from __future__ import annotations

import math

import numpy as np
import pytest

from guardrail import ConfigError
from guardrail._lift import clipped_lift, clipped_lifts
from guardrail.stats import budget


@pytest.mark.parametrize(
    ("logp", "logs", "expected"),
    [
        (math.log(0.10), math.log(0.01), math.log(10.0)),  # the paper's BRCA1 example: 2.30
        (-1.0, -0.5, 0.0),  # negative lift clipped to 0
        (-0.1, -40.0, 12.0),  # above B clipped to B
        (-2.0, -2.0, 0.0),
    ],
)
def test_clipped_lift_values(logp: float, logs: float, expected: float) -> None:
    assert clipped_lift(logp, logs) == pytest.approx(expected)


def test_clipped_lift_custom_bound_and_vector_agree() -> None:
    rng = np.random.default_rng(1)
    lp = -rng.exponential(2.0, 500)
    ls = -rng.exponential(6.0, 500)
    vec = clipped_lifts(lp, ls, clip=8.0)
    ref = np.array([min(max(a - b, 0.0), 8.0) for a, b in zip(lp, ls, strict=True)])
    np.testing.assert_allclose(vec, ref, rtol=0, atol=0)
    assert [clipped_lift(a, b, 8.0) for a, b in zip(lp, ls, strict=True)] == list(ref)


def test_nan_is_refused() -> None:
    with pytest.raises(ConfigError, match="NaN"):
        clipped_lift(float("nan"), -1.0)
    with pytest.raises(ConfigError, match="NaN"):
        clipped_lifts([-1.0, float("nan")], [-2.0, -2.0])
    with pytest.raises(ConfigError, match="clip"):
        clipped_lifts([-1.0], [-2.0], clip=0.0)


def test_budget() -> None:
    assert budget([]) == 0.0
    assert budget([1.0, 2.0, 6.0]) == pytest.approx(3.0)
