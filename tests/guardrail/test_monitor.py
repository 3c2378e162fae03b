"""The streaming monitor: token by token against replay(), bounds, bad input, streaming modes."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from guardrail import (
    Cause,
    ConfigError,
    GuardrailError,
    MissingLogprobsError,
    Monitor,
    State,
    StreamPolicy,
    TextGate,
    TokenEvent,
    UniformSkeleton,
    Verdict,
)
from guardrail._boundaries import betting_confidence_sequence, paper_radius
from guardrail._lift import clipped_lift
from guardrail._policy import replay
from guardrail._verdict import make_verdict as _verdict

POLICIES = {
    "default": StreamPolicy(),
    "min3": StreamPolicy(delta=0.3, min_tokens=3),
    "failclosed": StreamPolicy(delta=0.5, final_rule="block", bet_cap=0.3),
    "paper": StreamPolicy(boundary="paper", v=0.5, c=0.4, delta=0.2),
    "paper-min3": StreamPolicy(boundary="paper", v=0.5, c=0.4, delta=0.3, min_tokens=3),
    "final-only": StreamPolicy(delta=0.5, early=False),
    "min": StreamPolicy(aggregate="min"),
    "min-min3": StreamPolicy(aggregate="min", min_tokens=3),
    "min-failclosed": StreamPolicy(aggregate="min", final_rule="block"),
    "lowest2": StreamPolicy(aggregate="lowest"),
    "lowest3-min3": StreamPolicy(aggregate="lowest", lowest_k=3, min_tokens=3),
}
TAUS = [0.05, 0.3, 1.0, 2.5, 6.0, 11.0]
VOCAB = 32_000


def _lifts(rng: np.random.Generator, clip: float = 12.0) -> np.ndarray:
    n = int(rng.integers(0, 41))
    scale = rng.uniform(0.1, 6.0)
    return np.clip(rng.exponential(scale, n) * (rng.random(n) < 0.7), 0, clip)


def _v(state: State, final: bool = False) -> Verdict:
    return Verdict(state, 1, 1.0, 0.0, 12.0, 1.0, "betting", "scripted", final)


# --- the monitor is replay(), one token at a time --------------------------------------------


@pytest.mark.parametrize("policy", POLICIES.values(), ids=POLICIES.keys())
def test_monitor_matches_replay_after_every_token(policy: StreamPolicy) -> None:
    rng = np.random.default_rng(11)
    decided = 0
    for _ in range(50):
        x = _lifts(rng, policy.clip)
        full = replay(policy, x, TAUS)
        mons = [Monitor.lift(policy, tau) for tau in TAUS]
        first: list[Verdict | None] = [None] * len(TAUS)
        for t in range(1, x.size + 1):
            # one extra token cannot change a decision at <= t (bets are predictable):
            # replay stops at <= t on the padded prefix iff the rule decides by token t
            pre = replay(policy, np.append(x[:t], 0.0), TAUS)
            for g, mon in enumerate(mons):
                v = mon.update_evidence(float(x[t - 1]))
                if first[g] is None and v.decided:
                    first[g] = v
                    assert v.t == t and v.final
                if first[g] is None:
                    assert v.state is State.CONTINUE and not v.final and v.t == t
                    assert int(pre.stop[g]) > t
                    assert abs(v.mean - float(np.mean(x[:t]))) <= 1e-12
                else:
                    assert v is first[g]
                    assert int(pre.stop[g]) == v.t
                    assert bool(pre.answered[g]) == (v.state is State.CERTIFIED)
        for g, mon in enumerate(mons):
            end = mon.finish()
            assert bool(full.answered[g]) == (end.state is State.CERTIFIED), (list(x), TAUS[g])
            assert int(full.stop[g]) == end.t
            if first[g] is not None:
                decided += 1
                assert end is first[g]
                assert bool(full.early[g]) == (end.t < x.size)
            elif x.size:
                assert end.final and end.t == x.size and "final" in end.reason
    if policy.early:
        assert decided > 20  # the comparison exercised early verdicts
    else:
        assert decided == 0


def test_update_with_events_equals_update_evidence_of_clipped_lifts() -> None:
    rng = np.random.default_rng(12)
    skel = UniformSkeleton(VOCAB)
    policy = StreamPolicy(delta=0.2)
    for _ in range(30):
        lps = -rng.exponential(3.0, int(rng.integers(1, 30)))
        a = Monitor.lift(policy, 2.0, skeleton=skel)
        b = Monitor.lift(policy, 2.0)
        for i, lp in enumerate(lps):
            va = a.update(TokenEvent(f"w{i}", float(lp), token_id=i, index=i))
            vb = b.update_evidence(clipped_lift(float(lp), -math.log(VOCAB)))
            assert va == vb
        assert a.finish() == b.finish()


def test_decided_monitor_keeps_returning_its_verdict() -> None:
    mon = Monitor.lift(StreamPolicy(delta=0.2), 1.0, skeleton=UniformSkeleton(VOCAB))
    for _ in range(40):
        v = mon.update_evidence(9.0)
        if v.decided:
            break
    assert v.state is State.CERTIFIED and v.final and v.decided
    assert "certified" in v.reason and f"after {v.t} tokens" in v.reason
    assert mon.update_evidence(0.0) is v
    assert mon.update(TokenEvent("x", None, index=999)) is v  # input is not read any more
    assert mon.t == v.t
    assert mon.finish() is v


# --- bounds ----------------------------------------------------------------------------------


def test_tracked_bounds_equal_the_batch_confidence_sequence() -> None:
    rng = np.random.default_rng(13)
    policy = StreamPolicy(delta=0.1, early=False)
    compared = 0
    for _ in range(40):
        x = np.clip(rng.gamma(0.8, rng.uniform(0.2, 4.0), int(rng.integers(1, 80))), 0, 12)
        lo, hi = betting_confidence_sequence(x / 12, 0.1, grid_size=49)
        mon = Monitor.lift(policy, 1.0, track_bounds=True)
        for t, xi in enumerate(x):
            v = mon.update_evidence(float(xi))
            if lo[t] <= hi[t]:  # the batch hull may cross when the data drift; ours stays a cell
                compared += 1
                assert (v.lower, v.upper) == (lo[t] * 12, hi[t] * 12)
    assert compared > 1000


def test_tracked_bounds_are_monotone_and_cover_the_true_mean() -> None:
    # i.i.d. lifts 12 * Beta(0.5, 2.5): mean 2.0. Anytime coverage: P(ever excluded) <= delta.
    rng = np.random.default_rng(14)
    delta, n_sim, true_mean = 0.2, 300, 2.0
    policy = StreamPolicy(delta=delta, early=False)
    misses = 0
    for _ in range(n_sim):
        mon = Monitor.lift(policy, 1.0, track_bounds=True)
        lower, upper, missed = 0.0, 12.0, False
        for xi in 12.0 * rng.beta(0.5, 2.5, 100):
            v = mon.update_evidence(float(xi))
            assert v.lower >= lower and v.upper <= upper  # running intersection
            assert 0.0 <= v.lower < v.upper <= 12.0
            lower, upper = v.lower, v.upper
            missed |= not (v.lower <= true_mean <= v.upper)
        misses += missed
    assert stats.binomtest(misses, n_sim, delta, alternative="greater").pvalue > 1e-3


def test_tracked_bounds_need_not_contain_the_running_mean() -> None:
    # documented: the sequence bounds a mean shared by the tokens, not the empirical mean,
    # which a drifting stream leaves behind (the true mean of the new regime is what matters)
    mon = Monitor.lift(StreamPolicy(delta=0.1, early=False), 1.0, track_bounds=True)
    for xi in [10.0] * 40 + [0.0] * 40:
        v = mon.update_evidence(xi)
    assert v.lower > v.mean


def test_bounds_contain_the_running_mean_for_stationary_lifts_and_paper() -> None:
    rng = np.random.default_rng(15)
    pol = StreamPolicy(boundary="paper", v=0.5, c=0.4, delta=0.2, early=False)
    mon = Monitor.lift(pol, 1.0)
    bet = Monitor.lift(StreamPolicy(delta=0.1, early=False), 1.0, track_bounds=True)
    x = np.clip(rng.gamma(2.0, 1.0, 60), 0, 12)
    for t, xi in enumerate(x, start=1):
        v = mon.update_evidence(float(xi))
        r = float(paper_radius(t, 0.5, 0.4, 0.1))
        mean = float(np.mean(x[:t]))
        assert v.lower == pytest.approx(max(mean - r, 0.0), abs=1e-12)
        assert v.upper == pytest.approx(min(mean + r, 12.0), abs=1e-12)
        assert v.lower <= v.mean <= v.upper
        w = bet.update_evidence(float(xi))
        assert w.lower <= w.mean <= w.upper


def test_betting_bounds_without_tracking_narrow_to_tau_on_decision() -> None:
    mon = Monitor.lift(StreamPolicy(delta=0.2), 3.0)
    assert (mon.verdict.lower, mon.verdict.upper) == (0.0, 12.0)
    v = mon.update_evidence(0.0)
    assert (v.lower, v.upper) == (0.0, 12.0)
    while not v.decided:
        v = mon.update_evidence(0.0)
    assert v.state is State.BLOCKED and (v.lower, v.upper) == (0.0, 3.0)
    tracked = Monitor.lift(StreamPolicy(delta=0.2), 3.0, track_bounds=True)
    while not (w := tracked.update_evidence(11.0)).decided:
        pass
    assert w.state is State.CERTIFIED and 3.0 <= w.lower <= w.mean <= w.upper


# --- bad input -------------------------------------------------------------------------------

BAD = {"nan": math.nan, "+inf": math.inf, "-inf": -math.inf, "censored": -9999.0,
       "none": None, "positive": 0.5}  # fmt: skip


def _two_good_tokens(mode: str) -> Monitor:
    mon = Monitor.lift(
        StreamPolicy(),
        2.0,
        skeleton=UniformSkeleton(VOCAB),
        on_missing_logprobs=mode,  # type: ignore[arg-type]
    )
    mon.update(TokenEvent("a", -1.0, index=0))
    mon.update(TokenEvent("b", -2.0, index=1))
    return mon


@pytest.mark.parametrize("value", BAD.values(), ids=BAD.keys())
def test_bad_logprob_blocks(value: float | None) -> None:
    mon = _two_good_tokens("block")
    v = mon.update(TokenEvent("c", value, index=2))
    assert v.state is State.BLOCKED and v.final and v.t == 2
    assert "token 2" in v.reason and "on_missing_logprobs='block'" in v.reason
    assert v.reason.startswith("blocked:")
    assert mon.update(TokenEvent("d", -1.0, index=3)) is v
    assert mon.finish() is v


@pytest.mark.parametrize("value", BAD.values(), ids=BAD.keys())
def test_bad_logprob_passes(value: float | None) -> None:
    mon = _two_good_tokens("pass")
    before = mon.verdict
    v = mon.update(TokenEvent("c", value, index=2))
    assert v is before and v.state is State.CONTINUE and mon.t == 2
    after = mon.update(TokenEvent("d", -1.0, index=3))  # the skipped token was counted
    assert after.t == 3


@pytest.mark.parametrize("value", BAD.values(), ids=BAD.keys())
def test_bad_logprob_raises(value: float | None) -> None:
    mon = _two_good_tokens("error")
    with pytest.raises(MissingLogprobsError, match=r"token 2 \(value ") as info:
        mon.update(TokenEvent("c", value, index=2))
    assert repr(value) in str(info.value)
    assert mon.t == 2


def test_bad_lift_values() -> None:
    for mode in ("block", "pass", "error"):
        mon = Monitor.lift(StreamPolicy(), 2.0, on_missing_logprobs=mode)
        for bad in (-0.1, 12.5):  # a finite out-of-range lift is a caller bug
            with pytest.raises(ConfigError, match="clipped lift"):
                mon.update_evidence(bad)
    mon = Monitor.lift(StreamPolicy(), 2.0, on_missing_logprobs="block")
    assert mon.update_evidence(math.nan).state is State.BLOCKED
    mon = Monitor.lift(StreamPolicy(), 2.0, on_missing_logprobs="pass")
    assert mon.update_evidence(math.inf).t == 0
    mon = Monitor.lift(StreamPolicy(), 2.0, on_missing_logprobs="error")
    with pytest.raises(MissingLogprobsError, match="lift at token 0"):
        mon.update_evidence(-math.inf)


def test_tokens_out_of_order() -> None:
    mon = Monitor.lift(StreamPolicy(), 2.0, skeleton=UniformSkeleton(VOCAB))
    mon.update(TokenEvent("a", -1.0, index=0))
    with pytest.raises(GuardrailError, match="token out of order: expected index 1, got 2"):
        mon.update(TokenEvent("c", -1.0, index=2))
    assert mon.update(TokenEvent("b", -1.0, index=1)).t == 2
    assert mon.update(TokenEvent("c", -1.0)).t == 3  # no index: not checked


def test_update_after_finish_and_finish_twice() -> None:
    mon = Monitor.lift(StreamPolicy(delta=0.01), 2.0, skeleton=UniformSkeleton(VOCAB))
    mon.update_evidence(2.5)
    end = mon.finish()
    assert end.state is State.CERTIFIED and end.final and "final_rule='mean'" in end.reason
    assert mon.finish() is end
    with pytest.raises(GuardrailError, match="update after the verdict"):
        mon.update_evidence(1.0)
    with pytest.raises(GuardrailError, match="update after the verdict"):
        mon.update(TokenEvent("x", -1.0))


def test_empty_stream_is_blocked() -> None:
    for policy in POLICIES.values():
        end = Monitor.lift(policy, 1.0).finish()
        assert end.state is State.BLOCKED and end.t == 0 and "empty answer" in end.reason
        assert not replay(policy, [], [1.0]).answered[0]
    mon = Monitor.lift(StreamPolicy(), 1.0, on_missing_logprobs="pass")
    mon.update_evidence(math.nan)
    assert "empty answer" in mon.finish().reason


def test_final_rule_block_fails_closed() -> None:
    mon = Monitor.lift(POLICIES["failclosed"], 2.0)
    mon.update_evidence(2.1)
    end = mon.finish()
    assert end.state is State.BLOCKED and "final_rule='block'" in end.reason


def test_update_without_skeleton() -> None:
    mon = Monitor.lift(StreamPolicy(), 2.0)
    with pytest.raises(ConfigError, match="needs a skeleton"):
        mon.update(TokenEvent("a", -1.0))


def test_invalid_configuration() -> None:
    for tau in (0.0, 12.0, -1.0, 13.0, math.nan, math.inf, True, "1"):
        with pytest.raises(ConfigError, match="tau"):
            Monitor.lift(StreamPolicy(), tau)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="on_missing_logprobs"):
        Monitor.lift(StreamPolicy(), 1.0, on_missing_logprobs="skip")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="skeleton"):
        Monitor.lift(StreamPolicy(), 1.0, skeleton=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="policy"):
        Monitor.lift({"delta": 0.1}, 1.0)  # type: ignore[arg-type]
    for size in (0, -3, 2.5, True):
        with pytest.raises(ConfigError, match="vocab_size"):
            UniformSkeleton(size)  # type: ignore[arg-type]

    class Broken:
        def log_prob(self, event: TokenEvent) -> float:
            return math.nan

    with pytest.raises(ConfigError, match="skeleton returned"):
        Monitor.lift(StreamPolicy(), 1.0, skeleton=Broken()).update(TokenEvent("a", -1.0))


def test_verdict_fast_constructor_equals_the_dataclass() -> None:
    args = (State.CONTINUE, 3, 1.5, 0.2, 4.0, 1.0, "betting", "why", False, Cause.UNDECIDED)
    fast, slow = _verdict(*args), Verdict(*args)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.t = 4  # type: ignore[misc]
    assert not fast.decided and _verdict(State.BLOCKED, *args[1:]).decided
    assert State("certified") is State.CERTIFIED and isinstance(State.BLOCKED, str)


# --- streaming modes -------------------------------------------------------------------------

SCRIPT = [State.CONTINUE, State.CONTINUE, State.CERTIFIED, State.CERTIFIED]
TEXT = ["The ", "answer ", "is ", "42."]


def test_passthrough_shows_tokens_at_once_until_blocked() -> None:
    mon = Monitor.lift(StreamPolicy(), 1.0)
    g = TextGate(mon, "passthrough")
    assert [g.push(s, _v(st)) for s, st in zip(TEXT, SCRIPT, strict=True)] == TEXT
    assert g.close(_v(State.CERTIFIED, final=True)) == ""
    g = TextGate(mon, "passthrough")
    out = [
        g.push(s, _v(st)) for s, st in zip(TEXT, [State.CONTINUE, State.BLOCKED] * 2, strict=True)
    ]
    assert out == ["The ", "", "", ""] and g.blocked
    assert g.close(_v(State.BLOCKED, final=True)) == ""


def test_buffered_releases_on_certification_then_flows() -> None:
    g = TextGate(Monitor.lift(StreamPolicy(), 1.0), "buffered")
    out = [g.push(s, _v(st)) for s, st in zip(TEXT, SCRIPT, strict=True)]
    assert out == ["", "", "The answer is ", "42."]
    assert g.close(_v(State.CERTIFIED, final=True)) == "" and g.pending == ""


def test_buffered_never_leaks_after_block() -> None:
    script = [State.CONTINUE, State.CONTINUE, State.BLOCKED, State.CERTIFIED]
    g = TextGate(Monitor.lift(StreamPolicy(), 1.0))
    assert g.mode == "buffered"
    assert [g.push(s, _v(st)) for s, st in zip(TEXT, script, strict=True)] == [""] * 4
    assert g.blocked and g.pending == ""
    assert g.close(_v(State.CERTIFIED, final=True)) == ""


def test_buffered_undecided_stream_is_released_by_the_final_verdict() -> None:
    for final, expected in ((State.CERTIFIED, "The answer is 42."), (State.BLOCKED, "")):
        g = TextGate(Monitor.lift(StreamPolicy(), 1.0), "buffered")
        assert [g.push(s, _v(State.CONTINUE)) for s in TEXT] == [""] * 4
        assert g.pending == "The answer is 42."
        with pytest.raises(GuardrailError, match="final verdict"):
            g.close(_v(State.CONTINUE))
        assert g.close(_v(final, final=True)) == expected
        assert g.close() == ""
        with pytest.raises(GuardrailError, match="after close"):
            g.push("more", _v(State.CONTINUE))


def test_final_mode_holds_everything_and_needs_a_final_only_policy() -> None:
    with pytest.raises(ConfigError, match=r"StreamPolicy\(early=False\)"):
        TextGate(Monitor.lift(StreamPolicy(), 1.0), "final")
    with pytest.raises(ConfigError, match="mode"):
        TextGate(Monitor.lift(StreamPolicy(), 1.0), "eager")  # type: ignore[arg-type]
    policy = StreamPolicy(early=False)
    for lift, expected in ((5.0, "The answer is 42."), (0.2, "")):
        mon = Monitor.lift(policy, 1.0)
        g = TextGate(mon, "final")
        assert [g.push(s, mon.update_evidence(lift)) for s in TEXT] == [""] * 4
        assert g.close() == expected  # close() finishes the monitor
        assert mon.verdict.final


@pytest.mark.parametrize("mode", ["passthrough", "buffered", "final"])
def test_modes_on_real_monitor_runs(mode: str) -> None:
    rng = np.random.default_rng(16)
    policy = StreamPolicy(delta=0.2, early=mode != "final")
    kinds = set()
    for _ in range(100):
        x = _lifts(rng)
        words = [f"w{i} " for i in range(x.size)]
        mon = Monitor.lift(policy, float(rng.choice([1.0, 4.0])))
        g = TextGate(mon, mode)  # type: ignore[arg-type]
        shown = "".join(
            g.push(w, mon.update_evidence(float(xi))) for w, xi in zip(words, x, strict=True)
        )
        shown += g.close()
        end = mon.verdict
        full = "".join(words)
        if mode == "passthrough":
            assert full.startswith(shown)  # a prefix: everything before the blocking token
            if end.state is State.CERTIFIED:
                assert shown == full
        else:  # all or nothing
            assert shown == (full if end.state is State.CERTIFIED else "")
        kinds.add((end.state, end.t < x.size))
    assert (State.CERTIFIED, False) in kinds and (State.BLOCKED, False) in kinds
    if mode != "final":
        assert (State.CERTIFIED, True) in kinds and (State.BLOCKED, True) in kinds
