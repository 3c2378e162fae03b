"""Early-block margins widened to a share of answers (``margins_from_scores(share=...)``):
per position a quantile leaves many more answers than ``1 - quantile`` rising past the
margin somewhere along a long answer; one common factor bounds that share per answer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from guardrail import ConfigError
from guardrail._fit._replay import margin_scale, margins_from_scores


def _walks(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """Scores of long answers (100 to 300 tokens): a slow walk with one dip of 5 to 30
    tokens somewhere, of a random depth, after which the score recovers, as a correct
    solution's does over a hesitant step. Each position sees few dips, so its quantile
    is set by a few answers, and many others rise past it at their own dip."""
    out = []
    for _ in range(n):
        length = int(rng.integers(100, 301))
        s = np.cumsum(rng.normal(0.0, 0.02, length))
        start, width = int(rng.integers(0, length - 30)), int(rng.integers(5, 30))
        s[start : start + width] -= rng.exponential(1.0)
        out.append(s)
    return out


def _passed(scores: list[np.ndarray], margins: tuple[float, ...]) -> np.ndarray:
    """Per answer: did it rise past the margins at some position where they are positive?"""
    m = np.asarray(margins)
    out = []
    for s in scores:
        k = min(s.size, m.size)
        rise, base = s[-1] - s[:k], m[:k]
        out.append(bool(((rise > base) & (base > 0)).any()))
    return np.asarray(out)


def test_one_factor_widens_the_per_position_margins_to_the_share() -> None:
    fit = _walks(np.random.default_rng(0), 400)
    pointwise = margins_from_scores(fit, 0.99)
    widened = margins_from_scores(fit, 0.99, share=0.95)
    assert len(widened) == len(pointwise) > 100
    factors = {round(w / p, 9) for p, w in zip(pointwise, widened, strict=True) if p > 0}
    assert len(factors) == 1 and min(factors) > 1.0  # one common factor, above 1 here
    assert (_passed(fit, pointwise)).mean() > 0.10  # per position: far more than 1% pass
    assert (_passed(fit, widened)).mean() <= 0.05  # per answer: the share holds
    # on new answers of the same kind, counted against a binomial interval
    new = _walks(np.random.default_rng(1), 2000)
    passed = int(_passed(new, widened).sum())
    assert passed <= 0.05 * 2000 + 3 * (0.05 * 0.95 * 2000) ** 0.5 + 0.02 * 2000
    assert _passed(new, pointwise).sum() > 2 * passed


def test_the_factor_is_at_least_one_and_zero_margins_stay_zero() -> None:
    flat = [np.array([0.0, 0.0, 0.0])] * 30  # nothing rises: margins 0, nothing to widen
    assert margins_from_scores(flat, 0.99, share=0.95) == (0.0, 0.0, 0.0)
    rising = [np.array([0.0, 0.5, 1.0])] * 30  # every answer rises by its margin exactly
    assert margins_from_scores(rising, 0.99, share=0.95) == margins_from_scores(rising, 0.99)
    assert margins_from_scores([], 0.99, share=0.95) == ()
    assert margin_scale(rising, (1.0, 0.5, 0.0), 1.0) == 1.0


@pytest.mark.parametrize("share", [0.0, 1.5, True, "0.9"])
def test_a_bad_share_is_a_config_error(share: Any) -> None:
    with pytest.raises(ConfigError, match="share must be"):
        margins_from_scores([np.array([0.0, 1.0])] * 30, 0.9, share=share)


def _running_means(rng: np.random.Generator, n: int, lo: int, hi: int) -> list[np.ndarray]:
    """Scores that are running means of independent tokens, of lengths ``lo`` to ``hi``."""
    out = []
    for _ in range(n):
        k = int(rng.integers(lo, hi + 1))
        out.append(np.cumsum(rng.normal(0.0, 1.0, k)) / np.arange(1, k + 1))
    return out


def test_the_margins_run_to_the_token_limit_with_the_last_half_s_largest() -> None:
    fit = _walks(np.random.default_rng(0), 400)
    for share in (None, 0.95):
        fitted = margins_from_scores(fit, 0.99, share=share)
        carried = margins_from_scores(fit, 0.99, share=share, positions=512)
        n = len(fitted)
        assert 100 < n < 512 and len(carried) == 512
        assert carried[:n] == fitted  # the fitted positions, the widening included, as they were
        assert set(carried[n:]) == {max(fitted[n // 2 :])} and max(fitted[n // 2 :]) > 0.0
    assert margins_from_scores(fit, 0.99, positions=10) == margins_from_scores(fit, 0.99)
    assert margins_from_scores([], 0.99, positions=512) == ()
    for bad in (0, True):
        with pytest.raises(ConfigError, match="positions must be"):
            margins_from_scores(fit, 0.99, positions=bad)


def test_longer_answers_rise_past_the_carried_margin_as_rarely_as_the_quantile_says() -> None:
    """Running means: the fitting answers are 20 to 80 tokens long, new answers of the same
    kind 200 to 400. Past the fitted positions, the carried margin (the largest of the last
    half) is risen past about as rarely as the quantile says; the last fitted margin alone,
    read on answers about to end, is risen past by far more."""
    rng = np.random.default_rng(0)
    fit = _running_means(rng, 300, 20, 80)
    fitted = margins_from_scores(fit, 0.99)
    carried = margins_from_scores(fit, 0.99, positions=400)
    last = len(fitted)
    new = _running_means(rng, 2000, 200, 400)
    slack = 3 * (0.01 * 0.99 / 2000) ** 0.5  # three binomial standard deviations
    for t in (last, 2 * last, 150):  # 0-based positions past the fitted ones
        rose = sum(bool(s[-1] - s[t] > carried[t]) for s in new)
        assert rose <= (0.01 + slack) * 2000, t
        assert sum(bool(s[-1] - s[t] > fitted[-1]) for s in new) > 0.1 * 2000
