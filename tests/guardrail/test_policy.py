"""The streaming policy: vectorised replay against a token-by-token reference."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from guardrail import Cause, ConfigError, MissingLogprobsError, Monitor, State, StreamPolicy
from guardrail._policy import replay, shown_at, threshold_grid
from guardrail.evaluate import critical_thresholds


def _reference(policy: StreamPolicy, x: list[float], tau: float) -> tuple[bool, int]:
    """Token-by-token evaluation of the policy, written independently of replay()."""
    b = policy.clip
    m = tau / b
    thr = math.log(2 / policy.delta)
    log_up = log_down = 0.0
    total = sq = 0.0
    if policy.aggregate in ("min", "lowest"):
        k = 1 if policy.aggregate == "min" else policy.lowest_k

        def stat(t: int) -> float:  # mean of the k smallest, missing ones = clip
            return sum(sorted([*x[:t], *[b] * k])[:k]) / k

        for t in range(1, len(x) + 1):
            if t >= policy.min_tokens and policy.early and stat(t) < tau:
                return False, t
        if not x:
            return False, 0
        return policy.final_rule == "mean" and stat(len(x)) >= tau, len(x)
    for t, raw in enumerate(x, start=1):
        xt = raw / b
        if policy.boundary == "betting":
            s2_prev = 0.25 if t == 1 else (0.25 + sq) / t
            lam = math.sqrt(2 * math.log(2 / policy.delta) / (s2_prev * t * math.log(1 + t)))
            log_up += math.log(1 + min(lam, policy.bet_cap / m) * (xt - m))
            log_down += math.log(1 - min(lam, policy.bet_cap / (1 - m)) * (xt - m))
        total += xt
        sq += (xt - (0.5 + total) / (t + 1)) ** 2
        if t < policy.min_tokens or not policy.early:
            continue
        if policy.boundary == "betting":
            if log_up >= thr:
                return True, t
            if log_down >= thr:
                return False, t
        else:
            assert policy.v is not None and policy.c is not None
            level = math.log(1 + math.log(t)) + math.log(2 / policy.delta)
            r = math.sqrt(2 * policy.v * level / t) + policy.c * level / t
            mean = total * b / t
            if mean - r > tau:
                return True, t
            if mean + r < tau:
                return False, t
    if not x:
        return False, 0
    final = policy.final_rule == "mean" and sum(x) / len(x) >= tau
    return final, len(x)


POLICIES = [
    StreamPolicy(),
    StreamPolicy(delta=0.3, min_tokens=3),
    StreamPolicy(delta=0.5, final_rule="block", bet_cap=0.3),
    StreamPolicy(boundary="paper", v=0.5, c=0.4, delta=0.2),
    StreamPolicy(delta=0.5, early=False),
    StreamPolicy(aggregate="min"),
    StreamPolicy(aggregate="min", min_tokens=3),
    StreamPolicy(aggregate="min", early=False),
    StreamPolicy(aggregate="lowest"),
    StreamPolicy(aggregate="lowest", lowest_k=3, min_tokens=2),
    StreamPolicy(aggregate="lowest", lowest_k=1),
    StreamPolicy(aggregate="lowest", early=False, final_rule="block"),
]
IDS = [
    "default", "min3", "failclosed", "paper", "final-only", "min", "min-min3", "min-final",
    "lowest2", "lowest3-min2", "lowest1", "lowest-final-block",
]  # fmt: skip


@pytest.mark.parametrize("policy", POLICIES, ids=IDS)
def test_replay_matches_token_by_token_reference(policy: StreamPolicy) -> None:
    rng = np.random.default_rng(5)
    taus = np.array([0.05, 0.3, 1.0, 2.5, 6.0, 11.0])
    for _ in range(60):
        n = int(rng.integers(0, 40))
        scale = rng.uniform(0.1, 6.0)
        x = np.clip(rng.exponential(scale, n) * (rng.random(n) < 0.7), 0, policy.clip)
        res = replay(policy, x, taus)
        for g, tau in enumerate(taus):
            answered, stop = _reference(policy, list(x), float(tau))
            assert bool(res.answered[g]) == answered, (list(x), tau)
            assert int(res.stop[g]) == stop, (list(x), tau)


@pytest.mark.parametrize("policy", POLICIES, ids=IDS)
def test_answer_set_is_monotone_in_tau(policy: StreamPolicy) -> None:
    rng = np.random.default_rng(6)
    grid = threshold_grid(policy.clip, 0.02)
    for _ in range(100):
        n = int(rng.integers(1, 30))
        x = np.clip(rng.gamma(0.6, rng.uniform(0.2, 5.0), n), 0, policy.clip)
        ans = replay(policy, x, grid).answered
        k = int(ans.sum())
        assert ans[:k].all() and not ans[k:].any()


def test_early_verdicts_happen_and_are_reported() -> None:
    policy = StreamPolicy(delta=0.2)
    high = np.full(40, 9.0)
    low = np.full(40, 0.0)
    r_high = replay(policy, high, [1.0])
    r_low = replay(policy, low, [6.0])
    assert r_high.answered[0] and r_high.early[0] and r_high.stop[0] < 40
    assert not r_low.answered[0] and r_low.early[0] and r_low.stop[0] < 40


def test_critical_thresholds_agree_with_replay() -> None:
    policy = StreamPolicy(delta=0.2)
    rng = np.random.default_rng(8)
    lifts = [np.clip(rng.exponential(1.5, int(rng.integers(0, 12))), 0, 12) for _ in range(30)]
    crit = critical_thresholds(policy, lifts)
    grid = threshold_grid(policy.clip)
    for x, c in zip(lifts, crit, strict=True):
        ans = replay(policy, x, grid).answered
        if x.size == 0:
            assert c == -math.inf
        else:
            np.testing.assert_array_equal(ans, grid <= c)


def test_policy_validation() -> None:
    with pytest.raises(ConfigError, match="boundary"):
        StreamPolicy(boundary="lil")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="delta"):
        StreamPolicy(delta=1.5)
    with pytest.raises(ConfigError, match="min_tokens"):
        StreamPolicy(min_tokens=0)
    with pytest.raises(ConfigError, match="sub-gamma"):
        StreamPolicy(boundary="paper")
    with pytest.raises(ConfigError, match="thresholds"):
        replay(StreamPolicy(), [1.0], [0.0])
    with pytest.raises(ConfigError, match="lifts"):
        replay(StreamPolicy(), [13.0], [1.0])
    assert StreamPolicy.from_dict(StreamPolicy(delta=0.2).to_dict()) == StreamPolicy(delta=0.2)


def test_lowest_aggregate_statistic_and_validation() -> None:
    from guardrail._policy import running_statistic

    pol = StreamPolicy(aggregate="lowest", lowest_k=2, clip=10.0)
    # missing lowest values count as the clip, so the statistic never rises
    np.testing.assert_allclose(running_statistic(pol, [6.0, 8.0, 2.0, 9.0, 4.0]), [8, 7, 4, 4, 3])
    np.testing.assert_allclose(
        running_statistic(StreamPolicy(aggregate="min"), [3.0, 5.0, 1.0]), [3, 3, 1]
    )
    np.testing.assert_allclose(running_statistic(StreamPolicy(), [3.0, 5.0, 1.0]), [3, 4, 3])
    assert running_statistic(pol, []).size == 0
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="lowest_k"):
            StreamPolicy(aggregate="lowest", lowest_k=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="aggregate"):
        StreamPolicy(aggregate="max")  # type: ignore[arg-type]
    assert StreamPolicy.from_dict(pol.to_dict()) == pol
    assert pol.order_based and pol.n_lowest == 2
    assert StreamPolicy(aggregate="min", lowest_k=5).n_lowest == 1


def test_min_aggregate_with_uniform_skeleton_ranks_like_min_logprob() -> None:
    """With a uniform skeleton the min-aggregate certificate is the min-logprob rule."""
    from pathlib import Path

    from guardrail._scores import trace_clipped_lifts
    from guardrail.traces import baseline_score, read_traces

    traces = read_traces(Path(__file__).parents[1] / "fixtures" / "traces_gemma3_sample.jsonl")
    policy = StreamPolicy(aggregate="min")
    lifts = [trace_clipped_lifts(t, "uniform", policy.clip) for t in traces]
    crit = critical_thresholds(policy, lifts)
    minlp = np.array([baseline_score(t, "min_logprob") for t in traces])
    # the critical threshold is the weakest token's lift, floored to the 0.01 grid
    expected = np.floor(np.clip(minlp + np.log(traces[0].vocab_size), 0, 12) * 100) / 100
    np.testing.assert_allclose(crit, expected, atol=0.0100001)
    order = np.argsort(minlp)
    assert (np.diff(crit[order]) >= -0.0100001).all()


def test_on_missing_logprobs_is_a_policy_field() -> None:
    assert StreamPolicy().on_missing_logprobs == "block"
    pol = StreamPolicy(on_missing_logprobs="pass")
    assert pol.to_dict()["on_missing_logprobs"] == "pass"
    assert StreamPolicy.from_dict(pol.to_dict()) == pol
    with pytest.raises(ConfigError, match="on_missing_logprobs"):
        StreamPolicy(on_missing_logprobs="skip")  # type: ignore[arg-type]
    # a policy recorded before the field existed loads with the default
    old = StreamPolicy(aggregate="min").to_dict()
    del old["on_missing_logprobs"], old["lowest_k"]
    assert StreamPolicy.from_dict(old) == StreamPolicy(aggregate="min")
    with pytest.raises(ConfigError, match="unknown policy field"):
        StreamPolicy.from_dict({**old, "on_missing": "pass"})


@pytest.mark.parametrize("policy", POLICIES, ids=IDS)
def test_shown_at_is_replay_inside_and_the_limits_outside(policy: StreamPolicy) -> None:
    rng = np.random.default_rng(9)
    lifts = [np.clip(rng.exponential(2.0, int(rng.integers(0, 15))), 0, 12) for _ in range(40)]
    taus = np.array([-1.0, 0.0, 0.3, 2.0, 5.5, 11.99, 12.0, 30.0])
    shown = shown_at(policy, lifts, taus)
    assert shown.shape == (len(lifts), taus.size) and shown.dtype == bool
    inside = taus[2:6]
    for x, row in zip(lifts, shown, strict=True):
        np.testing.assert_array_equal(row[2:6], replay(policy, x, inside).answered)
        assert list(row[:2]) == [x.size > 0] * 2  # tau <= 0: every non-empty answer
        assert not row[6:].any()  # tau >= clip: none
    crit = critical_thresholds(policy, lifts)
    grid = threshold_grid(policy.clip)
    np.testing.assert_array_equal(shown_at(policy, lifts, grid), grid[None, :] <= crit[:, None])
    assert shown_at(policy, [], taus).shape == (0, taus.size)
    with pytest.raises(ConfigError, match="thresholds"):
        shown_at(policy, lifts, [math.nan])
    with pytest.raises(ConfigError, match="lifts"):
        shown_at(policy, [np.array([13.0])], [1.0])


def test_missing_logprobs_follow_the_policy_unless_overridden() -> None:
    for mode in ("block", "pass", "error"):
        policy = StreamPolicy(on_missing_logprobs=mode)  # type: ignore[arg-type]
        mon = Monitor.lift(policy, 2.0)
        assert mon.policy is policy and mon.policy.on_missing_logprobs == mode
        if mode == "error":
            with pytest.raises(MissingLogprobsError, match="on_missing_logprobs='error'"):
                mon.update_evidence(math.nan)
        else:
            v = mon.update_evidence(math.nan)
            assert (v.state is State.BLOCKED) == (mode == "block")
    # None (the default) keeps the policy's; an explicit value overrides it and shows in .policy
    policy = StreamPolicy(on_missing_logprobs="pass", delta=0.2)
    same = Monitor.lift(policy, 2.0, on_missing_logprobs="pass")
    assert same.policy is policy
    mon = Monitor.lift(policy, 2.0, on_missing_logprobs="block")
    assert mon.policy == dataclasses.replace(policy, on_missing_logprobs="block")
    assert mon.update_evidence(math.inf).cause is Cause.MISSING_LOGPROBS
    assert Monitor.lift(StreamPolicy(), 2.0).update_evidence(math.nan).state is State.BLOCKED
