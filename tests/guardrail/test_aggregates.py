"""The running aggregates, one object per kind: each against its batch twin
(value and reachable ends) at every token, and the reachable ends against
brute-force continuations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from guardrail import ConfigError
from guardrail._aggregate_kinds import AGGREGATE_CLASSES, Aggregate, Lowest2, aggregate_of
from guardrail._aggregates import AGGREGATES, Feature, aggregate_path, reach_path

RANGES = ((-3.0, 2.0), (-3.0, 0.0), (0.0, 2.0))  # mixed signs; a sum that only falls / rises
LEVELS = (-1.0, 0.5, -5.0, 3.0)  # inside the range, below it (never below), above it
STEPS = (0.0, 1.0, 2.0, 5.0, math.inf)  # m: further tokens at most


def _features() -> list[Feature]:
    out = [Feature("length", "count"), Feature("length", "log")]
    for agg in AGGREGATES:
        if agg in ("count_below", "frac_below"):
            out += [Feature("lift", agg, lvl) for lvl in LEVELS]
        else:
            out.append(Feature("lift", agg))
    return out


def _sequences(seed: int, rng_of: tuple[float, float], n: int = 60) -> list[list[float]]:
    """Seeded answers of 1..30 values in the range, with ties and values at its ends."""
    rng = np.random.default_rng(seed)
    lo, hi = rng_of
    out = []
    for _ in range(n):
        x = rng.uniform(lo, hi, int(rng.integers(1, 31)))
        x[rng.random(x.size) < 0.15] = lo
        x[rng.random(x.size) < 0.15] = hi
        if rng.random() < 0.4:
            x = np.round(x * 2) / 2
        out.append(np.clip(x, lo, hi).tolist())
    return out


def test_the_classes_cover_every_aggregate() -> None:
    kinds = {type(aggregate_of(f, -1.0, 1.0)) for f in _features()}
    assert kinds == set(AGGREGATE_CLASSES)


@pytest.mark.parametrize("bounds", RANGES)
def test_every_aggregate_equals_its_batch_twin_at_every_token(bounds: tuple[float, float]) -> None:
    lo, hi = bounds
    for f in _features():
        for x in _sequences(1, bounds, 30):
            agg = aggregate_of(f, lo, hi)
            want = aggregate_path(x, f, hi)
            ends = {(m, up): reach_path(x, f, lo, hi, m, up=up) for m in STEPS for up in (1, 0)}
            for t, v in enumerate(x):
                got = agg.update(v)
                assert got == agg.value
                assert got == pytest.approx(want[t], rel=1e-12, abs=1e-12), (f.name, t)
                for m in STEPS:
                    for up, end in ((1, agg.upper_end(m)), (0, agg.lower_end(m))):
                        assert end == pytest.approx(ends[m, up][t], rel=1e-12, abs=1e-12), (
                            f.name, t, m, up)  # fmt: skip
    np.testing.assert_array_equal(aggregate_path([], Feature("length", "count"), 0.0), [])
    np.testing.assert_allclose(aggregate_path([1.0] * 3, Feature("length", "log"), 0.0),
                               np.log1p([1, 2, 3]))  # fmt: skip


def _run(f: Feature, bounds: tuple[float, float], x: list[float]) -> Aggregate:
    agg = aggregate_of(f, *bounds)
    for v in x:
        agg.update(v)
    return agg


@pytest.mark.parametrize("bounds", RANGES)
@pytest.mark.parametrize("m", STEPS)
def test_reachable_ends_bound_every_continuation(bounds: tuple[float, float], m: float) -> None:
    """Whatever the next (at most m) values in the range, the aggregate ends within
    [lower_end(m), upper_end(m)]; one that cannot rise (fall) never does. Extreme and
    random continuations of every length are tried."""
    lo, hi = bounds
    rng = np.random.default_rng(7)
    ends = sorted({lo, hi, *(v for v in LEVELS if lo <= v <= hi), max(lo, LEVELS[0] - 1e-9)})
    feats = _features()
    for x in _sequences(2, bounds, 25):
        conts: list[list[float]] = []
        for n in range(int(min(m, 12)) + 1):
            conts += [[e] * n for e in ends]
            conts += [rng.uniform(lo, hi, n).tolist() for _ in range(3)]
            conts += [rng.choice(ends, n).tolist() for _ in range(2)]
        for f in feats:
            base = _run(f, bounds, x)
            low, high, now = base.lower_end(m), base.upper_end(m), base.value
            assert low <= now <= high, (f.name, m)  # stopping now is a continuation
            for cont in conts:
                got = _run(f, bounds, x + cont).value
                assert low - 1e-12 <= got <= high + 1e-12, (f.name, m, cont)
                assert base.rises or got <= now, (f.name, cont)
                assert base.falls or got >= now, (f.name, cont)


def test_lowest2_counts_a_missing_value_as_the_top_of_the_range() -> None:
    agg = Lowest2(-3.0, 2.0)
    assert agg.update(-1.0) == (-1.0 + 2.0) / 2
    agg.update(-2.0)
    assert agg.update(1.0) == -1.5
    assert Lowest2(-3.0, 2.0).update(2.0) == 2.0


def test_an_empty_range_is_refused() -> None:
    with pytest.raises(ConfigError, match="empty range"):
        aggregate_of(Feature("lift", "mean"), 1.0, 0.0)
