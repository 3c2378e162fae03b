"""The fitted statistic: fitting, its JSON form inside a Certificate, and the streaming
monitor against the replay calibration uses, token by token at many thresholds."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from guardrail import (
    Cause,
    Certificate,
    ConfigError,
    FittedRule,
    GenerationContext,
    MissingLogprobsError,
    ModelIdentity,
    Monitor,
    SkeletonSpec,
    State,
    StreamPolicy,
    TextGate,
    TokenEvent,
    UniformSkeleton,
)
from guardrail._aggregates import Feature
from guardrail._fit._logistic import answer_features, fit_statistic, token_ranges
from guardrail._fit._replay import (
    block_margins,
    calibrate_fitted,
    critical_score,
    margin_cost,
    margins_from_scores,
    replay_fitted,
    stop_at,
    with_margins,
)
from guardrail._fit._state import FittedState, RecordedSkeleton, trace_events
from guardrail._fit._statistic import FEATURE_PRESETS, FittedStatistic, preset_features
from guardrail._reads import Reads, skeleton_reads
from guardrail.evaluate import ltt_threshold
from guardrail.traces import Trace, read_traces

FIXTURES = Path(__file__).parents[1] / "fixtures"
SAMPLES = ("traces_smollm2_sample.jsonl", "traces_gemma3_sample.jsonl")


@cache
def _traces(sample: str) -> tuple[Trace, ...]:
    return tuple(read_traces(FIXTURES / sample))


@cache
def _fitted(
    sample: str, group: str = "lift", form: str = "answer", short: bool = False
) -> FittedStatistic:
    """The sample's statistic; with ``short``, fitted on its shorter half only, so that its
    clamps bind on the longer answers."""
    traces = _traces(sample)
    if short:
        traces = _shorter_half(sample)
    feats = preset_features(group, form)  # type: ignore[arg-type]
    bases = [f.base for f in feats if f.base != "length"]
    ranges = token_ranges(traces, bases, skeleton="prompt-free")
    x = answer_features(traces, feats, skeleton="prompt-free", ranges=ranges)
    correct = [bool(t.correct) for t in traces]
    return fit_statistic(x, correct, feats, vocab_size=traces[0].vocab_size, form=form,  # type: ignore[arg-type]
                         ranges=ranges, l2=1.0)  # fmt: skip


def _shorter_half(sample: str) -> tuple[Trace, ...]:
    traces = sorted(_traces(sample), key=lambda t: t.n_tokens)
    return tuple(traces[: len(traces) // 2])


def _certificate(stat: FittedStatistic, tau: float = 0.0, **context: Any) -> Certificate:
    return Certificate(
        StreamPolicy(on_length="answer"), tau, SkeletonSpec("prompt_free"),
        ModelIdentity("m", vocab_size=stat.vocab_size), GenerationContext(**context),
        statistic=stat,
    )  # fmt: skip


# --- fitting and the JSON form ---------------------------------------------------------------


def test_fit_recovers_the_direction_of_a_signal_and_standardises() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 3)) * [1.0, 5.0, 1.0] + [0.0, 3.0, 0.0]
    x[:, 2] = 1.0  # constant: weight 0, scale 1
    y = rng.random(400) < 1 / (1 + np.exp(-(2.0 * x[:, 0] - 0.5 * (x[:, 1] - 3.0) / 5.0)))
    feats = [Feature("logprob", "mean"), Feature("entropy", "mean"), Feature("logprob", "first")]
    stat = fit_statistic(x, y, feats, vocab_size=100, l2=1.0)
    assert stat.weights[0] > 1.0 and stat.weights[1] < 0 and stat.weights[2] == 0.0
    assert stat.scale[2] == 1.0 and stat.center[1] == pytest.approx(x[:, 1].mean())
    b0, c = stat.coefficients()
    np.testing.assert_allclose(stat.score(x), b0 + x @ np.asarray(c), atol=1e-9)
    with pytest.raises(ConfigError, match="both kinds"):
        fit_statistic(x, np.zeros(400, dtype=bool), feats, vocab_size=100)
    with pytest.raises(ConfigError, match="one row per answer"):
        fit_statistic(x[:, :2], y, feats, vocab_size=100)


def test_the_monotone_form_signs_every_weight_so_the_score_only_falls() -> None:
    stat = _fitted(SAMPLES[0], "lift", "monotone")
    assert stat.form == "monotone"
    for f, w in zip(stat.features, stat.weights, strict=True):
        d = 1 if f.base == "length" else f.direction(*stat.range_of(f.base))
        assert d is not None and d * w <= 0
    bad = replace(stat, tables=None)  # re-validated
    weights = list(bad.weights)
    i = next(i for i, f in enumerate(stat.features) if f.aggregate == "min")
    weights[i] = -1.0
    with pytest.raises(ConfigError, match="can rise as tokens arrive"):
        replace(stat, weights=tuple(weights))
    for t in _traces(SAMPLES[0])[:15]:  # the upper bound is the score itself
        state = FittedState(stat, 24)
        reader_path = replay_fitted(stat, t, skeleton="prompt-free", max_tokens=24)
        np.testing.assert_array_equal(reader_path.uppers, reader_path.scores)
        assert (np.diff(reader_path.scores) <= 1e-12).all()
        del state


def test_statistic_json_round_trips_inside_a_certificate(tmp_path: Path) -> None:
    stat = _fitted(SAMPLES[1], "lift")
    cert = _certificate(stat, 0.25, max_tokens=24)
    path = tmp_path / "cert.json"
    cert.save(path)
    again = Certificate.load(path)
    assert again == cert and again.statistic == stat
    data = json.loads(path.read_text())
    assert data["statistic"]["group"] == "lift" and data["statistic"]["kind"] == "logistic"
    assert data["statistic"]["features"] == list(FEATURE_PRESETS["lift"])
    assert "block_margins" not in data["statistic"]  # none: the JSON is as before
    assert data["statistic"]["clamps"] == [list(r) for r in stat.clamps]
    unclamped = replace(stat, clamps=())
    cert = _certificate(unclamped, 0.25, max_tokens=24)
    assert "clamps" not in cert.to_dict()["statistic"]  # a statistic fitted before clamps
    assert Certificate.from_dict(cert.to_dict()).statistic == unclamped
    gated = replace(stat, block_margins=(3.0, 1.5, 0.25))
    cert = _certificate(gated, 0.25, max_tokens=24)
    cert.save(path)
    again = Certificate.load(path)
    assert again.statistic == gated and again.statistic.block_margins == (3.0, 1.5, 0.25)
    # a lift certificate's JSON has no statistic key at all
    plain = Certificate(StreamPolicy(), 5.0, SkeletonSpec("uniform", {"vocab_size": 10}),
                        ModelIdentity("m"))  # fmt: skip
    assert "statistic" not in plain.to_dict()


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"weights": [1.0]}, "statistic.weights: expected"),
        ({"features": ["logprob.median"]}, "unknown aggregate"),
        ({"scale": None}, "statistic.scale"),
        ({"kind": "tree"}, "statistic.kind"),
        ({"group": "api"}, "statistic.group"),
        ({"ranges": {"nope": [0, 1]}}, "statistic.ranges"),
        ({"ranges": {"logprob": [-30.0, 0.0]}}, "statistic.ranges.logprob"),
        ({"alternatives": 0}, "statistic.alternatives"),
        ({"extra": 1}, "unknown field"),
        ({"intercept": math.inf}, "statistic.intercept"),
        ({"block_margins": [1.0, math.nan]}, "statistic.block_margins"),
        ({"block_margins": 2.0}, "statistic.block_margins"),
        ({"block_margins": [1.0, -0.5]}, "every margin must be >= 0"),
        ({"clamps": [[0.0, 1.0]]}, r"statistic.clamps: expected \d+ pairs"),
        ({"clamps": {"a": 1}}, "statistic.clamps: expected a list"),
        ({"clamps": [[1.0, 0.0]] * 8}, r"statistic.clamps\[0\]: expected lo <= hi"),
        ({"clamps": [[0.0, math.inf]] * 8}, r"statistic.clamps\[0\]: expected finite"),
    ],
)
def test_invalid_statistics_are_config_errors_naming_the_field(
    change: dict[str, Any], match: str
) -> None:
    data = {**_certificate(_fitted(SAMPLES[0])).to_dict()}
    data["statistic"] = {**data["statistic"], **change}
    with pytest.raises(ConfigError, match=match):
        Certificate.from_dict(data)


def test_certificate_checks_tau_and_vocabulary_for_a_statistic() -> None:
    stat = _fitted(SAMPLES[0])
    assert _certificate(stat, -7.5).tau == -7.5  # log-odds: any finite number
    with pytest.raises(ConfigError, match="tau: must be a finite number"):
        _certificate(stat, math.nan)
    model = ModelIdentity("m", vocab_size=7)
    with pytest.raises(ConfigError, match=r"statistic\.vocab_size"):
        Certificate(StreamPolicy(), 0.0, SkeletonSpec("prompt_free"), model, statistic=stat)


# --- the monitor against the replay ----------------------------------------------------------


def _taus(crit: list[float], paths: list[Any]) -> list[float]:
    finals = [float(p.scores[-1]) for p in paths if p.scores.size]
    finite = sorted({c for c in [*crit, *finals] if math.isfinite(c)})
    some = finite[::6]  # every answer's critical score; around it for a sixth
    out = [-50.0, 50.0, *finite]
    out += [math.nextafter(c, math.inf) for c in some] + [math.nextafter(c, -math.inf)
                                                          for c in some]  # fmt: skip
    out += np.linspace(min(finite) - 1, max(finite) + 1, 9).tolist()
    return out


def _expected(path: Any, policy: StreamPolicy, tau: float) -> tuple[State, int]:
    """The verdict replay implies: (state after a clean finish, tokens read)."""
    n = path.scores.size
    start = policy.min_tokens - 1
    if policy.early:
        # an answer longer than the limit is blocked by its first token past it, unless an
        # early block came first (an early certification there is overturned)
        over = path.limit is not None and n > path.limit
        for t in range(start, n):
            if over and t + 1 > path.limit:
                break
            if path.uppers[t] < tau:
                return State.BLOCKED, t + 1
            if path.lowers[t] >= tau:
                if over:
                    break
                return State.CERTIFIED, t + 1
        if over:
            return State.BLOCKED, path.limit + 1
    if n == 0 or policy.final_rule == "block":
        return State.BLOCKED, n
    return (State.CERTIFIED if path.scores[-1] >= tau else State.BLOCKED), n


POLICIES = [
    StreamPolicy(on_length="answer"),
    StreamPolicy(on_length="answer", min_tokens=3),
    StreamPolicy(on_length="answer", early=False),
    StreamPolicy(on_length="answer", final_rule="block"),
]


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize(("group", "form", "margins", "short"), [
    ("lift", "answer", False, False), ("api", "answer", False, False),
    ("lift", "monotone", False, False),
    ("lift", "answer", True, False),  # with early-block margins
    ("lift", "answer", False, True), ("lift", "monotone", False, True),  # clamps that bind
])  # fmt: skip
@pytest.mark.parametrize("limit", [None, 24, 3])
def test_monitor_equals_replay_token_by_token_at_many_thresholds(
    sample: str, group: str, form: str, margins: bool, short: bool, limit: int | None
) -> None:
    stat = _fitted(sample, group, form, short)
    traces = _traces(sample)
    if margins:  # early blocks by position, from the sample's own correct answers
        got = block_margins(stat, traces, 0.5, skeleton="prompt-free", max_tokens=limit,
                            min_answers=3)  # fmt: skip
        assert got
        stat = replace(stat, block_margins=got)
    paths = [replay_fitted(stat, t, skeleton="prompt-free", max_tokens=limit) for t in traces]
    events = [trace_events(t) for t in traces]
    early_seen = 0
    for policy in POLICIES:
        crit = [critical_score(p, policy) for p in paths]
        for tau in _taus(crit, paths):
            for t, evs, path, c in zip(traces, events, paths, crit, strict=True):
                mon = Monitor.fitted(stat, policy, tau, max_tokens=limit,
                                    skeleton=RecordedSkeleton(t.prompt_free_logprobs))  # fmt: skip
                state, read = _expected(path, policy, tau)
                decided_at, last = None, None
                for i, ev in enumerate(evs):
                    v = mon.update(ev)
                    if decided_at is None:
                        assert v.mean == path.scores[i]  # the same arithmetic, bit for bit
                    if v.final and v.state is not last:  # the verdict, or its overturning
                        decided_at, last = i + 1, v.state
                final = mon.finish("stop")
                assert final.state is state
                assert (decided_at or t.n_tokens) == read
                assert (final.state is State.CERTIFIED) == (c >= tau)
                if policy.early:
                    assert read == (stop_at(path, policy, tau) if t.n_tokens else 0)
                early_seen += decided_at is not None and decided_at < t.n_tokens
    if limit == 3 or form == "monotone" or margins:
        assert early_seen > 0


@pytest.mark.parametrize("sample", SAMPLES)
def test_block_margins_are_quantiles_of_the_correct_answers_later_rises(sample: str) -> None:
    stat, traces = _fitted(sample), _traces(sample)
    right = [replay_fitted(stat, t, skeleton="prompt-free").scores
             for t in traces if t.correct and t.n_tokens]  # fmt: skip
    got = block_margins(stat, traces, 0.9, skeleton="prompt-free", min_answers=4)
    assert got and len(got) == sum(1 for i in range(100)
                                   if sum(s.size > i for s in right) >= 4)  # fmt: skip
    for i, m in enumerate(got):
        rises = [s[-1] - s[i] for s in right if s.size > i]
        assert m == pytest.approx(max(0.0, float(np.quantile(rises, 0.9))))
        assert sum(r > m for r in rises) <= 0.1 * len(rises) + 1
    assert margins_from_scores(right, 0.9, min_answers=4) == got  # the same, from the replays
    # the statistic's own margins do not feed back into new ones
    again = block_margins(replace(stat, block_margins=got), traces, 0.9,
                          skeleton="prompt-free", min_answers=4)  # fmt: skip
    assert again == got
    assert block_margins(stat, traces, 0.9, skeleton="prompt-free", min_answers=10**6) == ()


@pytest.mark.parametrize("sample", SAMPLES)
def test_block_margins_from_every_answer_read_no_label(sample: str) -> None:
    stat, traces = _fitted(sample), _traces(sample)
    every = [replay_fitted(stat, t, skeleton="prompt-free").scores for t in traces if t.n_tokens]
    got = block_margins(stat, traces, 0.9, skeleton="prompt-free", min_answers=4, answers="all")
    assert got and got == margins_from_scores(every, 0.9, min_answers=4)
    # unlabelled traffic gives the same margins: the labels are not read
    unlabelled = [replace(t, correct=None) for t in traces]
    assert block_margins(stat, unlabelled, 0.9, skeleton="prompt-free", min_answers=4,
                         answers="all") == got  # fmt: skip
    assert got != block_margins(stat, traces, 0.9, skeleton="prompt-free", min_answers=4)
    with pytest.raises(ConfigError, match="answers must be"):
        block_margins(stat, traces, 0.9, skeleton="prompt-free", answers="wrong")  # type: ignore[arg-type]


@pytest.mark.parametrize(("quantile", "min_answers"), [(0.0, 20), (1.5, 20), (True, 20),
                                                       (0.9, 0)])  # fmt: skip
def test_block_margins_refuse_bad_arguments(quantile: Any, min_answers: int) -> None:
    with pytest.raises(ConfigError):
        block_margins(_fitted(SAMPLES[0]), _traces(SAMPLES[0]), quantile,
                      skeleton="prompt-free", min_answers=min_answers)  # fmt: skip
    with pytest.raises(ConfigError):
        margins_from_scores([np.zeros(3)], quantile, min_answers=min_answers)


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("limit", [None, 3])
def test_margins_applied_to_a_plain_replay_equal_the_replay_with_them(
    sample: str, limit: int | None
) -> None:
    # the selection replays each answer once and applies every quantile's margins after
    stat, traces = _fitted(sample), _traces(sample)
    longest = max(t.n_tokens for t in traces)
    fitted = block_margins(stat, traces, 0.5, skeleton="prompt-free", min_answers=3)
    rng = np.random.default_rng(0)
    for margins in (fitted, (), tuple(rng.uniform(0.0, 2.0, longest + 5)), (0.0,)):
        gated = replace(stat, block_margins=margins)
        for t in traces:
            plain = replay_fitted(stat, t, skeleton="prompt-free", max_tokens=limit)
            want = replay_fitted(gated, t, skeleton="prompt-free", max_tokens=limit)
            got = with_margins(plain, margins)
            for a, b in ((got.scores, want.scores), (got.lowers, want.lowers),
                         (got.uppers, want.uppers)):  # fmt: skip
                assert np.array_equal(a, b)  # bit for bit
            assert got.limit == want.limit
    plain = replay_fitted(stat, traces[0], skeleton="prompt-free")
    for bad in ((1.0, -0.5), (math.nan,), ((1.0,),)):
        with pytest.raises(ConfigError, match="margins"):
            with_margins(plain, bad)  # type: ignore[arg-type]


def test_a_margin_blocks_early_and_calibration_sees_the_same_block() -> None:
    # a margin of 0 after the first token blocks an answer whose first score is below tau,
    # though its final score passes; the replay's critical score says so, so calibration
    # prices the block in
    stat, traces = _fitted(SAMPLES[0]), _traces(SAMPLES[0])
    gated = replace(stat, block_margins=(0.0,))
    policy = StreamPolicy(on_length="answer")
    plain_paths = [replay_fitted(stat, t, skeleton="prompt-free") for t in traces]
    t, plain = next((t, p) for t, p in zip(traces, plain_paths, strict=True)
                    if t.n_tokens > 2 and p.scores[0] < p.scores[-1])  # fmt: skip
    path = replay_fitted(gated, t, skeleton="prompt-free")
    tau = float(plain.scores[0] + plain.scores[-1]) / 2  # between the first and final score
    assert critical_score(plain, policy) >= tau > critical_score(path, policy)
    mon = Monitor.fitted(gated, policy, tau, skeleton=RecordedSkeleton(t.prompt_free_logprobs))
    v = mon.update(trace_events(t)[0])
    assert v.state is State.BLOCKED and v.final and "early-block margin" in v.reason
    assert stop_at(path, policy, tau) == 1


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("short", [False, True])
def test_within_the_limit_the_bounds_hold_and_early_verdicts_change_nothing(
    sample: str, short: bool
) -> None:
    stat = _fitted(sample, short=short)
    policy = StreamPolicy(on_length="answer")
    for t in _traces(sample):
        if not t.n_tokens:
            continue
        path = replay_fitted(stat, t, skeleton="prompt-free", max_tokens=t.n_tokens + 3)
        final = path.scores[-1]
        assert (path.lowers <= final + 1e-12).all() and (path.uppers >= final - 1e-12).all()
        assert critical_score(path, policy) == final


def test_score_bounds_hold_every_score_any_answer_within_the_limit_reaches() -> None:
    """Random answers whose token values sit at the clamp ends or anywhere between, for a
    statistic of every aggregate kind with weights of both signs, its answer-level
    features held to random intervals or not: every running score lies within
    ``score_bounds``, and the extremes come close to them."""
    names = ["logprob.mean", "logprob.sum", "logprob.min", "logprob.max", "logprob.first",
             "logprob.lowest2", "logprob.count_below@-0.7", "logprob.frac_below@-0.1",
             "lift.sum", "lift.mean", "length.count", "length.log"]  # fmt: skip
    feats = tuple(Feature.parse(n) for n in names)
    rng = np.random.default_rng(3)
    ranges = {"logprob": (-6.0, 0.0), "lift": (-2.0, 3.0)}
    limit = 7
    for trial in range(30):
        w = rng.normal(size=len(feats))
        ends = np.sort(rng.uniform(-8.0, 4.0, (len(feats), 2)))  # binding ones, mostly
        clamps = () if trial % 3 == 0 else tuple((float(a), float(b)) for a, b in ends)
        stat = FittedStatistic(feats, tuple(w), 0.3, tuple(rng.normal(size=len(feats))),
                               tuple(rng.uniform(0.5, 2.0, size=len(feats))), vocab_size=100,
                               ranges=ranges, clamps=clamps)  # fmt: skip
        lo, hi = stat.score_bounds(limit)
        for _ in range(200):
            state = FittedState(stat, limit)
            for _ in range(int(rng.integers(1, limit + 1))):
                ends = rng.random() < 0.7
                vals = [float(rng.choice(r) if ends else rng.uniform(*r))
                        for r in (ranges["logprob"], ranges["lift"])]  # fmt: skip
                assert lo - 1e-9 <= state.update(vals) <= hi + 1e-9
    # tight: one feature alone reaches both ends with every token at one clamp end
    for f in feats:
        for sign in (1.0, -1.0):
            own = {k: v for k, v in ranges.items() if k == f.base}
            one = FittedStatistic((f,), (sign,), 0.0, (0.0,), (1.0,), 100, ranges=own)
            scores = []
            for end in (0, 1):
                state = FittedState(one, limit)
                for _ in range(limit):
                    vals = [ranges[b][end] for b in one.bases]
                    scores.append(state.update(vals))
            assert (min(scores), max(scores)) == pytest.approx(one.score_bounds(limit)), f.name
    with pytest.raises(ConfigError, match="max_tokens"):
        stat.score_bounds(0)


@pytest.mark.parametrize("short", [False, True])
def test_answers_are_scored_as_the_batch_twins_score_them(short: bool) -> None:
    stat = _fitted(SAMPLES[0], short=short)
    traces = _traces(SAMPLES[0])
    x = answer_features(traces, stat.features, skeleton="prompt-free", ranges=stat.ranges)
    batch = stat.score(x)
    lo, hi = np.asarray(stat.clamps).T
    outside = np.isfinite(x).all(axis=1) & ((x < lo) | (x > hi)).any(axis=1)
    assert outside.any() == short  # fitted on the shorter half, the longer answers exceed it
    if short:  # and there the clamps change the score
        assert not np.allclose(batch[outside], replace(stat, clamps=()).score(x[outside]))
    for t, want in zip(traces, batch, strict=True):
        path = replay_fitted(stat, t, skeleton="prompt-free", max_tokens=24)
        if t.n_tokens:
            assert path.scores[-1] == pytest.approx(want, abs=1e-9)


# --- the monitor as adapters use it ----------------------------------------------------------


def test_certificate_monitor_gives_a_fitted_monitor_or_refuses_at_construction() -> None:
    cert = _certificate(_fitted(SAMPLES[0]), max_tokens=24)
    with pytest.raises(ConfigError, match="PromptFreeSkeleton"):
        cert.monitor()
    t = _traces(SAMPLES[0])[0]
    mon = cert.monitor(skeleton=RecordedSkeleton(t.prompt_free_logprobs))
    assert isinstance(mon, Monitor) and isinstance(mon.rule, FittedRule)
    assert mon.policy == cert.policy and mon.tau == cert.tau and mon.t == 0
    api = _certificate(_fitted(SAMPLES[0], "api"))
    assert isinstance(api.monitor().rule, FittedRule)  # needs no skeleton
    local = _certificate(_fitted(SAMPLES[0], "local"))
    with pytest.raises(ConfigError, match="exact entropies"):
        local.monitor()
    mon = local.monitor(exact_entropy=True)
    ev = trace_events(t)[0]
    assert ev.entropy == float(t.entropy[0])
    no_entropy = replace(ev, entropy=None)
    assert mon.update(no_entropy).cause is Cause.MISSING_LOGPROBS  # no entropy given: blocked
    assert "missing exact entropy at token 0" in mon.verdict.reason
    mon = local.monitor(exact_entropy=True)
    assert mon.update(ev).cause is not Cause.MISSING_LOGPROBS


def test_missing_inputs_follow_the_policy_and_streams_end_like_certificate_monitors() -> None:
    stat = _fitted(SAMPLES[1], "api")
    no_top = TokenEvent("x", -0.5)
    good = trace_events(_traces(SAMPLES[1])[0])[0]
    mon = Monitor.fitted(stat, StreamPolicy(), 0.0)
    v = mon.update(no_top)
    assert v.state is State.BLOCKED and v.cause is Cause.MISSING_LOGPROBS
    assert "top_logprobs" in v.reason
    mon = Monitor.fitted(stat, StreamPolicy(on_missing_logprobs="pass"), 0.0)
    assert mon.update(no_top).state is State.CONTINUE and mon.t == 0
    with pytest.raises(MissingLogprobsError):
        Monitor.fitted(stat, StreamPolicy(), 0.0, on_missing_logprobs="error").update(no_top)
    mon = Monitor.fitted(stat, StreamPolicy(), -50.0, max_tokens=None)
    mon.update(replace(good, index=None))
    assert mon.finish("length").cause is Cause.LENGTH  # on_length='block' by default
    mon = Monitor.fitted(stat, StreamPolicy(), -50.0, max_tokens=None)
    mon.update(replace(good, index=None))
    assert mon.finish(None).cause is Cause.TRUNCATED
    empty = Monitor.fitted(stat, StreamPolicy(), 0.0)
    assert empty.finish().cause is Cause.EMPTY_ANSWER
    mon = Monitor.fitted(stat, StreamPolicy(), 0.0)
    assert mon.abort(Cause.REFUSAL, "refused").cause is Cause.REFUSAL
    with pytest.raises(ConfigError, match="blocking Cause"):
        mon.abort(Cause.CERTIFIED, "x")
    with pytest.raises(ConfigError, match="finite number"):
        Monitor.fitted(stat, StreamPolicy(), math.inf)
    mon = Monitor.fitted(stat, StreamPolicy(), 0.0)
    with pytest.raises(Exception, match="out of order"):
        mon.update(replace(good, index=3))


def test_the_text_gate_and_the_stream_step_accept_a_fitted_monitor() -> None:
    from adapters._guard._stream import StreamStep

    t = next(t for t in _traces(SAMPLES[1]) if t.correct)
    stat = _fitted(SAMPLES[1], "api")
    events = trace_events(t)
    text = TextGate(Monitor.fitted(stat, StreamPolicy(on_length="answer"), -50.0), "buffered")
    assert text.mode == "buffered"

    def parse(item: TokenEvent) -> tuple[list[TokenEvent], str, str | None, bool]:
        return [item], item.text, ("stop" if item.index == t.n_tokens - 1 else None), False

    step = StreamStep(Monitor.fitted(stat, StreamPolicy(on_length="answer"), -50.0), "buffered",
                     "raise", parse)  # type: ignore[arg-type]  # fmt: skip
    shown = "".join(piece for e in events for piece in step.feed(e)) + "".join(step.end())
    assert shown == "".join(t.token_texts) and step.blocked is None


def test_calibrate_fitted_is_ltt_on_the_critical_scores() -> None:
    stat = _fitted(SAMPLES[1])
    traces = _traces(SAMPLES[1])
    policy = StreamPolicy(on_length="answer")
    cal, crit = calibrate_fitted(stat, traces, policy=policy, risk=0.9, delta=0.2,
                                 skeleton="prompt-free", max_tokens=24)  # fmt: skip
    errors = ~np.array([bool(t.correct) for t in traces])
    assert cal.tau == ltt_threshold(crit, errors, 0.9, 0.2).tau
    assert cal.score == "fitted[lift, answer]" and cal.policy == policy.to_dict()
    assert "calibration draw" in cal.guarantee
    # the caller's own replays give the same calibration; a count that does not match is refused
    paths = [replay_fitted(stat, t, skeleton="prompt-free", max_tokens=24) for t in traces]
    again, crit2 = calibrate_fitted(stat, traces, policy=policy, risk=0.9, delta=0.2,
                                    skeleton="prompt-free", max_tokens=24, paths=paths)  # fmt: skip
    assert again == cal and (crit2 == crit).all()
    with pytest.raises(ConfigError, match="paths: expected one per trace"):
        calibrate_fitted(stat, traces, policy=policy, risk=0.9, delta=0.2, paths=paths[:-1])


def test_other_skeletons_are_evaluated_on_the_events() -> None:
    """A lift against a core skeleton (uniform) streams through the skeleton object."""
    traces = _traces(SAMPLES[0])
    skel = UniformSkeleton(traces[0].vocab_size)
    feats = (Feature("lift", "mean"), Feature("lift", "min"), Feature("length", "count"))
    x = answer_features(traces, feats, skeleton=skel)
    stat = fit_statistic(x, [bool(t.correct) for t in traces], feats,
                         vocab_size=traces[0].vocab_size)  # fmt: skip
    for t in traces[:5]:
        path = replay_fitted(stat, t, skeleton=skel, max_tokens=24)
        if t.n_tokens:
            assert path.scores[-1] == pytest.approx(stat.score(answer_features([t], feats,
                                                    skeleton=skel))[0], abs=1e-9)  # fmt: skip
    with pytest.raises(ConfigError, match="prompt-free"):
        replay_fitted(stat, traces[0], skeleton="uniform")


def test_adapters_see_what_the_rule_and_its_skeleton_read() -> None:
    """Adapters parse the alternatives by ``monitor.reads``: a monitor whose statistic
    reads them says so, whatever its skeleton reads itself, and the skeleton's own needs
    (token ids) come on top; the skeleton is the one given."""

    class IdSkeleton(RecordedSkeleton):
        reads = Reads(token_ids=True)

    t = _traces(SAMPLES[0])[0]
    skel = IdSkeleton(t.prompt_free_logprobs)
    lift_only = _certificate(_fitted(SAMPLES[0]), max_tokens=24).monitor(skeleton=skel)
    assert lift_only.skeleton is skel
    assert lift_only.reads == Reads(5, token_ids=True, skeleton=True, group="lift")
    api = _certificate(_fitted(SAMPLES[0], "api")).monitor()
    assert api.skeleton is None and api.reads.uses_alternatives and api.reads.alternatives == 5
    assert skeleton_reads(object()) == Reads(uses_alternatives=True)  # unknown: parse them


SHIPPED = Path(__file__).parents[2] / "guardrail" / "data" / "smollm2_fitted_certificate.json"


def _confident(i: int) -> TokenEvent:
    alts = (("a", -0.01), *((f"b{j}", -3.01 - j) for j in range(5)))
    return TokenEvent("a", -0.01, top_logprobs=alts, index=i)


def test_a_token_past_the_limit_overturns_an_early_certification() -> None:
    """The shipped certificate (token limit 24) certifies these confident tokens once no
    continuation within 24 tokens can pull the score below tau. A stream that goes on
    anyway was not held to that limit: its 25th token blocks the answer."""
    cert = Certificate.load(SHIPPED)
    assert cert.context.max_tokens == 24
    mon = cert.monitor(skeleton=RecordedSkeleton([-1.0] * 40))
    assert isinstance(mon.rule, FittedRule) and mon.max_tokens == 24
    states = [mon.update(_confident(i)).state for i in range(30)]
    first = states.index(State.CERTIFIED)
    assert first < 24 and set(states[first:24]) == {State.CERTIFIED}
    assert set(states[24:]) == {State.BLOCKED}
    assert mon.verdict.cause is Cause.OVER_TOKEN_LIMIT and "token 25 is past" in mon.verdict.reason
    assert mon.finish("stop").state is State.BLOCKED
    # told the request's real limit (or none), it judges the whole answer
    for limit in (40, None):
        mon = cert.monitor(skeleton=RecordedSkeleton([-1.0] * 40), max_tokens=limit)
        assert isinstance(mon.rule, FittedRule) and mon.max_tokens == limit
        assert {mon.update(_confident(i)).state for i in range(30)} == {State.CONTINUE}
        assert mon.finish("stop").state is State.CERTIFIED
    # without early verdicts nothing assumes the limit
    late = replace(cert, policy=replace(cert.policy, early=False))
    mon = late.monitor(skeleton=RecordedSkeleton([-1.0] * 40))
    assert {mon.update(_confident(i)).state for i in range(30)} == {State.CONTINUE}
    assert mon.finish("stop").state is State.CERTIFIED
    # in buffered mode the text released at certification stays shown; nothing after it
    mon = cert.monitor(skeleton=RecordedSkeleton([-1.0] * 40))
    text = TextGate(mon, "buffered")
    shown = "".join(text.push(f"<{i}>", mon.update(_confident(i))) for i in range(30))
    assert shown == "".join(f"<{i}>" for i in range(24)) and text.blocked


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "24"])
def test_monitor_max_tokens_must_be_a_limit(bad: Any) -> None:
    with pytest.raises(ConfigError, match="max_tokens must be an integer >= 1, None or"):
        Certificate.load(SHIPPED).monitor(skeleton=RecordedSkeleton([0.0]), max_tokens=bad)


def test_replay_of_an_answer_past_the_limit_is_never_shown() -> None:
    stat = _fitted(SAMPLES[0])
    policy = StreamPolicy(on_length="answer")
    longest = max(_traces(SAMPLES[0]), key=lambda t: t.n_tokens)
    n = longest.n_tokens
    within = replay_fitted(stat, longest, skeleton="prompt-free", max_tokens=n)
    past = replay_fitted(stat, longest, skeleton="prompt-free", max_tokens=n - 1)
    assert not within.over_limit and past.over_limit and past.limit == n - 1
    assert critical_score(within, policy) > -math.inf == critical_score(past, policy)
    assert stop_at(past, policy, critical_score(within, policy)) <= n


@pytest.mark.parametrize("sample", SAMPLES)
def test_margin_cost_counts_the_correct_answers_only_the_margins_block(sample: str) -> None:
    stat, traces = _fitted(sample), _traces(sample)
    margins = block_margins(stat, traces, 0.5, skeleton="prompt-free", min_answers=3)
    gated = replace(stat, block_margins=margins)
    policy = StreamPolicy(on_length="answer")
    plain = [replay_fitted(stat, t, skeleton="prompt-free") for t in traces]
    with_them = [critical_score(replay_fitted(gated, t, skeleton="prompt-free"), policy)
                 for t in traces]  # fmt: skip
    without = [critical_score(p, policy) for p in plain]
    correct = [bool(t.correct) for t in traces]
    seen_block = False
    # the labels are the traces' own, or every answer counted correct (so that answers
    # whose score rises late, which the margins block, are among them)
    for labels in (correct, [True] * len(traces)):
        for tau in sorted(set(without)):
            shown = [c and w >= tau for c, w in zip(labels, without, strict=True)]
            blocked = [s and g < tau for s, g in zip(shown, with_them, strict=True)]
            assert margin_cost(plain, margins, labels, policy, tau) == (sum(blocked), sum(shown))
            seen_block |= any(blocked)
    assert seen_block  # the margins block some shown answers: the test can fail
    assert margin_cost(plain, (), correct, policy, min(without)) == (0, sum(correct))
    with pytest.raises(ConfigError, match="one label per path"):
        margin_cost(plain, margins, correct[:-1], policy, 0.0)
