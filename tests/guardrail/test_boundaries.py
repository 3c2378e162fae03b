"""Boundaries: formulas against direct references, and validity by seeded simulation."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from guardrail import ConfigError
from guardrail._boundaries import (
    betting_bets,
    betting_confidence_sequence,
    betting_log_wealth,
    paper_radius,
)


def test_paper_radius_hand_computed() -> None:
    # t = 100, v = 0.5, c = 1, delta = 0.05: level = log(1 + log 100) + log 20
    level = math.log(1 + math.log(100)) + math.log(20)
    expected = math.sqrt(2 * 0.5 * level / 100) + level / 100
    assert paper_radius(100, 0.5, 1.0, 0.05) == pytest.approx(expected, rel=1e-12)
    assert paper_radius(1, 1.0, 1.0, 0.05) == pytest.approx(
        math.sqrt(2 * math.log(20)) + math.log(20)
    )
    with pytest.raises(ConfigError):
        paper_radius(0, 1.0, 1.0, 0.05)
    with pytest.raises(ConfigError):
        paper_radius(5, -1.0, 1.0, 0.05)


def _reference_bets(x: list[float], delta: float) -> list[float]:
    """Waudby-Smith & Ramdas predictable plug-in, written as a plain loop."""
    bets = []
    total = 0.0
    sq = 0.0
    for t, xt in enumerate(x, start=1):
        s2_prev = 0.25 if t == 1 else (0.25 + sq) / t
        bets.append(math.sqrt(2 * math.log(2 / delta) / (s2_prev * t * math.log(1 + t))))
        total += xt
        mu_t = (0.5 + total) / (t + 1)
        sq += (xt - mu_t) ** 2
    return bets


def test_bets_and_wealth_match_a_plain_loop() -> None:
    rng = np.random.default_rng(3)
    x = rng.beta(0.5, 3.0, 60)
    np.testing.assert_allclose(betting_bets(x, 0.1), _reference_bets(list(x), 0.1), rtol=1e-12)
    ms = np.array([0.05, 0.2, 0.6])
    traj = betting_log_wealth(x, ms, 0.1, cap=0.5)
    bets = _reference_bets(list(x), 0.1)
    for j, m in enumerate(ms):
        up = down = 0.0
        for t, xt in enumerate(x):
            up += math.log(1 + min(bets[t], 0.5 / m) * (xt - m))
            down += math.log(1 - min(bets[t], 0.5 / (1 - m)) * (xt - m))
            assert traj.log_wealth_up[t, j] == pytest.approx(up, abs=1e-10)
            assert traj.log_wealth_down[t, j] == pytest.approx(down, abs=1e-10)


def test_wealth_is_monotone_in_the_candidate_mean() -> None:
    rng = np.random.default_rng(4)
    grid = np.linspace(0.001, 0.999, 300)
    for _ in range(20):
        x = rng.uniform(0, 1, 40) ** rng.uniform(0.3, 4)
        traj = betting_log_wealth(x, grid, 0.05)
        assert (np.diff(traj.log_wealth_up, axis=1) <= 1e-12).all()
        assert (np.diff(traj.log_wealth_down, axis=1) >= -1e-12).all()


def test_wealth_input_validation() -> None:
    with pytest.raises(ConfigError):
        betting_log_wealth([0.5, 1.5], [0.5], 0.05)
    with pytest.raises(ConfigError):
        betting_log_wealth([0.5], [0.0], 0.05)
    with pytest.raises(ConfigError):
        betting_log_wealth([0.5], [0.5], 0.05, cap=0.9)


# --- validity: the betting sequence excludes the true mean with probability <= delta ---


def _iid_beta(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.beta(2.0, 5.0, n), np.full(n, 2.0 / 7.0)


def _heavy_tailed(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    # Pareto(alpha = 1.2) lifts clipped at B = 12 and scaled: most mass near 0, rare spikes at 1
    b, alpha = 12.0, 1.2
    x = np.minimum(rng.pareto(alpha, n) * 0.3, b) / b
    # exact mean of min(0.3 * Lomax(alpha), b) / b
    u = b / 0.3
    mean = 0.3 * (1 - (1 + u) ** (1 - alpha)) / (alpha - 1) / b
    return x, np.full(n, mean)


def _zero_inflated(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    nz = rng.random(n) < 0.15
    x = np.where(nz, rng.uniform(0.3, 1.0, n), 0.0)
    return x, np.full(n, 0.15 * 0.65)


def _dependent(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """A Markov chain whose next-token distribution depends on the past.

    After a high value the next lift is drawn from a spread-out distribution with
    conditional mean 0.30, after a low one from a tight one with mean 0.20: tokens
    are dependent and their conditional means vary between 0.20 and 0.30.
    """
    x = np.empty(n)
    cond = np.empty(n)
    prev = 0.0
    for t in range(n):
        if prev > 0.25:
            cond[t] = 0.30
            x[t] = 0.9 if rng.random() < 0.25 else 0.1  # mean 0.3
        else:
            cond[t] = 0.20
            x[t] = rng.uniform(0.1, 0.3)  # mean 0.2
        prev = x[t]
    return x, cond


Scenario = Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]


def _crossed(x: np.ndarray, target: np.ndarray, delta: float) -> bool:
    """Does K+ or K- at the (running) true mean ever reach 2/delta?"""
    bets = betting_bets(x, delta)
    thr = math.log(2 / delta)
    up = np.cumsum(np.log1p(np.minimum(bets, 0.5 / target) * (x - target)))
    down = np.cumsum(np.log1p(-np.minimum(bets, 0.5 / (1 - target)) * (x - target)))
    return bool((up >= thr).any() or (down >= thr).any())


@pytest.mark.parametrize(
    "scenario", [_iid_beta, _heavy_tailed, _zero_inflated], ids=["iid", "heavy", "zero-inflated"]
)
@pytest.mark.parametrize("delta", [0.05, 0.2])
def test_betting_sequence_crossing_rate(scenario: Scenario, delta: float) -> None:
    rng = np.random.default_rng(2024)
    reps, n = 600, 300
    crossings = 0
    for _ in range(reps):
        x, target = scenario(rng, n)
        crossings += _crossed(x, target[0] + 0 * x, delta)
    # one-sided binomial test of "rate <= delta" at level 0.001
    assert stats.binom.sf(crossings - 1, reps, delta) > 1e-3, (crossings, reps, delta)


def test_betting_tests_are_valid_for_dependent_tokens() -> None:
    """No independence needed: certify-type errors (K+ at m reaches 2/delta although
    every conditional mean is <= m) and block-type errors (K- at m although every
    conditional mean is >= m) each happen with probability <= delta/2."""
    rng = np.random.default_rng(7)
    reps, n, delta = 800, 200, 0.1
    thr = math.log(2 / delta)
    up_err = down_err = 0
    for _ in range(reps):
        x, cond = _dependent(rng, n)
        assert cond.max() <= 0.30 and cond.min() >= 0.20
        bets = betting_bets(x, delta)
        up = np.cumsum(np.log1p(np.minimum(bets, 0.5 / 0.30) * (x - 0.30)))
        down = np.cumsum(np.log1p(-np.minimum(bets, 0.5 / 0.80) * (x - 0.20)))
        up_err += bool((up >= thr).any())
        down_err += bool((down >= thr).any())
    for count in (up_err, down_err):
        assert stats.binom.sf(count - 1, reps, delta / 2) > 1e-3, (up_err, down_err)
    # and the tests have power: the same streams are told apart from m = 0.5 and m = 0.05
    x, _ = _dependent(rng, n)
    traj = betting_log_wealth(x, np.array([0.05, 0.5]), delta)
    assert traj.log_wealth_up[-1, 0] >= thr and traj.log_wealth_down[-1, 1] >= thr


def test_confidence_sequence_shrinks_and_contains_mean() -> None:
    rng = np.random.default_rng(11)
    x = rng.beta(2.0, 5.0, 2000)
    lo, hi = betting_confidence_sequence(x, 0.05)
    assert (np.diff(lo) >= 0).all() and (np.diff(hi) <= 0).all()
    assert lo[-1] <= 2 / 7 <= hi[-1]
    assert hi[-1] - lo[-1] < 0.06
    assert hi[0] - lo[0] > 0.9  # nothing is known after one observation
