"""Streaming statistics: each object against its batch twin after every token, and the
monitor that composes them against replay() at many thresholds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from guardrail import ConfigError, StreamPolicy
from guardrail._boundaries import betting_bets, betting_confidence_sequence
from guardrail._confidence_sequence import BettingConfidenceSequence
from guardrail._monitor import Monitor, State
from guardrail._policy import replay, shown_at, threshold_grid
from guardrail._statistics import (
    ABOVE,
    BELOW,
    BettingMean,
    LowestK,
    PaperMean,
    betting_mean_path,
    lowest_k_path,
    paper_mean_path,
)

CLIP = 12.0


def _answers(seed: int, n: int = 60, clip: float = CLIP) -> list[np.ndarray]:
    """Seeded answers of 0..40 clipped lifts with ties and values exactly at 0 and at the clip."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        size = int(rng.integers(0, 41))
        x = np.clip(rng.exponential(rng.uniform(0.2, 8.0), size), 0.0, clip)
        x[rng.random(size) < 0.15] = 0.0
        x[rng.random(size) < 0.15] = clip
        if rng.random() < 0.5:  # a coarse grid: many ties
            x = np.minimum(np.round(x * 2.0) / 2.0, clip)
        out.append(x)
    return out


# --- each streaming object equals its batch twin after every token ---------------------------


@pytest.mark.parametrize("clip", [CLIP, math.log(0.8 * 262_144)])
@pytest.mark.parametrize("k", [1, 2, 3, 5, 50])
def test_lowest_k_equals_its_batch_twin(k: int, clip: float) -> None:
    for x in _answers(1, clip=clip):
        stat = LowestK(k, clip)
        assert (stat.value, stat.t, stat.lowest) == (clip, 0, (clip,) * k)
        path = lowest_k_path(x, k, clip)
        assert path.shape == x.shape
        for t, xi in enumerate(x.tolist()):
            assert stat.update(xi) == path[t] == stat.value  # the same sums, in the same order
            ordered = sorted([*x[: t + 1].tolist(), *[clip] * k])[:k]  # missing ones = clip
            assert stat.lowest == tuple(ordered)
            assert stat.value == pytest.approx(sum(ordered) / k, rel=1e-15)
            assert stat.t == t + 1


def test_lowest_k_order_statistics_on_a_small_example() -> None:
    x = [6.0, 8.0, 2.0, 2.0, 9.0, 0.0, 12.0]
    expected = {
        1: [6, 6, 2, 2, 2, 0, 0],
        2: [9, 7, 4, 2, 2, 1, 1],
        3: [10, 26 / 3, 16 / 3, 10 / 3, 10 / 3, 4 / 3, 4 / 3],
    }
    for k, want in expected.items():
        stat = LowestK(k, 12.0)
        got = [stat.update(v) for v in x]
        np.testing.assert_allclose(got, want, rtol=1e-15)
        np.testing.assert_array_equal(lowest_k_path(x, k, 12.0), got)
    assert lowest_k_path([], 2).shape == (0,)
    # k larger than the answer: the missing lowest lifts count as the clip
    stat = LowestK(4, 10.0)
    assert stat.update(2.0) == (2.0 + 3 * 10.0) / 4
    assert stat.lowest == (2.0, 10.0, 10.0, 10.0)


def test_paper_mean_equals_its_batch_twin() -> None:
    for v, c, delta in ((0.5, 0.4, 0.2), (4.0, 4.0, 1e-6), (0.05, 0.01, 0.5)):
        for x in _answers(2, 30):
            stat = PaperMean(v, c, CLIP, delta)
            assert (stat.t, stat.mean, stat.lower, stat.upper) == (0, 0.0, 0.0, CLIP)
            assert stat.radius == math.inf
            mean, lower, upper = paper_mean_path(x, v, c, CLIP, delta)
            for t, xi in enumerate(x.tolist()):
                lo, up = stat.update(xi)
                assert (lo, up) == (stat.lower, stat.upper)
                assert stat.mean == mean[t]  # sequential sums on both sides
                assert lo == pytest.approx(lower[t], rel=1e-12, abs=1e-12)
                assert up == pytest.approx(upper[t], rel=1e-12, abs=1e-12)
                assert 0.0 <= lo <= up <= CLIP


@pytest.mark.parametrize("tau", [0.05, 1.0, 2.5, 6.0, 11.9])
def test_betting_mean_equals_its_batch_twin(tau: float) -> None:
    crossings = 0
    for delta, cap in ((0.05, 0.5), (0.3, 0.3), (0.8, 0.5)):
        for x in _answers(3, 40):
            stat = BettingMean(tau, CLIP, delta, cap)
            assert (stat.t, stat.log_wealth_up, stat.log_wealth_down) == (0, 0.0, 0.0)
            assert stat.variance == 0.25 and stat.tau == tau
            assert stat.threshold == math.log(2.0 / delta)
            up, down = betting_mean_path(x, tau, CLIP, delta, cap)
            bets = betting_bets(x / CLIP, delta)
            for t, xi in enumerate(x.tolist()):
                if t:  # the plug-in variance the next bet uses
                    s2 = 2.0 * math.log(2.0 / delta) / (bets[t] ** 2 * (t + 1) * math.log(t + 2))
                    assert stat.variance == pytest.approx(s2, rel=1e-9)
                hit = stat.update(xi)
                assert stat.log_wealth_up == pytest.approx(up[t], rel=1e-12, abs=1e-12)
                assert stat.log_wealth_down == pytest.approx(down[t], rel=1e-12, abs=1e-12)
                thr = stat.threshold
                if min(abs(up[t] - thr), abs(down[t] - thr)) > 1e-9:
                    want = (ABOVE if up[t] >= thr else 0) | (BELOW if down[t] >= thr else 0)
                    assert hit == want
                crossings += hit != 0
    assert crossings > 100


@pytest.mark.parametrize(("delta", "cap"), [(0.1, 0.5), (0.3, 0.2), (0.05, 0.5)])
def test_betting_confidence_sequence_equals_its_batch_twin(delta: float, cap: float) -> None:
    compared = 0
    for x in _answers(4, 50):
        seq = BettingConfidenceSequence(CLIP, delta, cap)
        assert (seq.t, seq.lower, seq.upper) == (0, 0.0, CLIP)
        lo, hi = betting_confidence_sequence(x / CLIP, delta, grid_size=49, cap=cap)
        prev = (0.0, CLIP)
        for t, xi in enumerate(x.tolist()):
            lower, upper = seq.update(xi)
            assert (lower, upper) == (seq.lower, seq.upper)
            assert prev[0] <= lower < upper <= prev[1]  # running intersection, never empty
            prev = (lower, upper)
            if lo[t] <= hi[t]:  # the batch hull can cross when the data drift; ours stays a cell
                compared += 1
                assert (lower, upper) == (lo[t] * CLIP, hi[t] * CLIP)
            else:
                assert upper - lower == pytest.approx(CLIP / 50)
    assert compared > 500


def test_confidence_sequence_grid_size() -> None:
    seq = BettingConfidenceSequence(10.0, 0.2, grid_size=9)
    for _ in range(200):
        lower, upper = seq.update(5.0)
    assert (lower, upper) == pytest.approx((4.0, 6.0))  # one grid cell (of 1) on each side


def test_statistics_validate_their_parameters() -> None:
    with pytest.raises(ConfigError, match="k must"):
        LowestK(0)
    with pytest.raises(ConfigError, match="k must"):
        lowest_k_path([1.0], True)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="clip"):
        LowestK(2, math.inf)
    with pytest.raises(ConfigError, match="tau"):
        BettingMean(12.0, 12.0)
    with pytest.raises(ConfigError, match="delta"):
        BettingMean(1.0, 12.0, 1.0)
    with pytest.raises(ConfigError, match="bet_cap"):
        BettingMean(1.0, 12.0, 0.1, 0.6)
    with pytest.raises(ConfigError, match="sub-gamma"):
        PaperMean(0.0, 1.0)
    with pytest.raises(ConfigError, match="grid_size"):
        BettingConfidenceSequence(grid_size=0)


# --- the monitor composes them: it equals replay() at many thresholds ------------------------

STATISTICS = {
    "betting": StreamPolicy(delta=0.3),
    "betting-min3-cap": StreamPolicy(delta=0.5, min_tokens=3, bet_cap=0.3),
    "betting-final-only": StreamPolicy(delta=0.3, early=False),
    "paper": StreamPolicy(boundary="paper", v=0.5, c=0.4, delta=0.3),
    "paper-min3": StreamPolicy(boundary="paper", v=1.5, c=0.2, delta=0.5, min_tokens=3),
    "min": StreamPolicy(aggregate="min"),
    "lowest2": StreamPolicy(aggregate="lowest", lowest_k=2),
    "lowest3-min2": StreamPolicy(aggregate="lowest", lowest_k=3, min_tokens=2),
    "lowest5-block": StreamPolicy(aggregate="lowest", lowest_k=5, final_rule="block"),
}


@pytest.mark.parametrize("track", [False, True])
@pytest.mark.parametrize("policy", STATISTICS.values(), ids=STATISTICS.keys())
def test_monitor_equals_replay_at_many_thresholds(policy: StreamPolicy, track: bool) -> None:
    taus = threshold_grid(policy.clip, 0.25)
    answers = _answers(5, 25)
    shown = shown_at(policy, answers, taus)
    early = 0
    for i, x in enumerate(answers):
        full = replay(policy, x, taus)
        np.testing.assert_array_equal(shown[i], full.answered)
        for g, tau in enumerate(taus.tolist()):
            mon = Monitor.lift(policy, tau, track_bounds=track)
            for xi in x.tolist():
                v = mon.update_evidence(xi)
                if v.final:
                    break
            assert mon.t == int(full.stop[g])
            end = mon.finish()
            assert (end.state is State.CERTIFIED) == bool(full.answered[g]), (x.tolist(), tau)
            assert end.t == int(full.stop[g])
            early += bool(full.early[g])
            if x.size and not policy.order_based:
                assert end.mean == pytest.approx(float(np.mean(x[: end.t])), rel=1e-12)
            if policy.order_based and x.size:
                assert mon.value == lowest_k_path(x[: end.t], policy.n_lowest, policy.clip)[-1]
    if policy.early:
        assert early > 20
    else:
        assert early == 0
