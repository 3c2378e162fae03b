"""Scoped features: the streaming scope trackers against their batch twin at every token, the
scoped aggregates against theirs, and a fitted statistic with scoped features streamed
exactly as the batch features score it, its bounds holding."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from guardrail import ConfigError, Monitor, State, StreamPolicy
from guardrail._aggregate_kinds import aggregate_of
from guardrail._aggregates import Feature, scoped_path
from guardrail._scopes import SCOPES, scope_mask, scope_tracker
from guardrail.fitting import (
    FittedState,
    FittedStatistic,
    RecordedSkeleton,
    answer_features,
    critical_score,
    fit_statistic,
    replay_fitted,
    stop_at,
    trace_events,
)
from guardrail.traces import parse_trace, read_traces

FIXTURES = Path(__file__).parents[1] / "fixtures"

TEXTS = [
    "Step 1: 16 - 3 - 4 = 9 eggs.\nStep 2: 9 * 2 = 18.\nAnswer: 18",
    "The total is \\boxed{42}. So the answer: 42",
    "**Answer:** $1,234.",
    "ANSWER  : 7 (the answer is 7)",
    "xanswer: 3, then answer   : 4",  # not inside a word
    "answer    : 5",  # four spaces: no marker
    "Here is the code:\n```python\ndef f(x):\n    return x\n```\nDone.",
    "  ```py\nx = 1\n  ```\ntext\n```\ny = 2",  # indented fences; an unclosed block
    "```\n``` \n```python",
    "no markers at all",
    "",
]


def _cuts(text: str, rng: np.random.Generator) -> list[str]:
    """``text`` cut into tokens at random places (empty tokens included)."""
    if not text:
        return ["", ""]
    cuts = sorted(rng.integers(0, len(text) + 1, size=int(rng.integers(1, len(text) + 2))))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize("scope", SCOPES)
def test_trackers_equal_their_batch_twin_at_every_token(scope: str) -> None:
    rng = np.random.default_rng(0)
    for text in TEXTS:
        for tokens in [list(text), [text], *(_cuts(text, rng) for _ in range(30))]:
            tracker = scope_tracker(scope)
            streamed = [tracker.update(t) for t in tokens]
            assert streamed == scope_mask(tokens, scope).tolist(), (scope, tokens)


def test_what_each_scope_holds() -> None:
    tokens = ["Step", " 1", ".\n", "Answer", ":", " ", "1", "8"]
    assert scope_mask(tokens, "final").tolist() == [False] * 5 + [True] * 3
    assert scope_mask(["so \\boxed{", "4", "2", "}"], "final").tolist() == [False, True, True, True]
    assert not scope_mask(["the answer is 42"], "final").any()
    tokens = ["Here", ":\n", "```", "python", "\n", "def", " f", "\n", "```", "\n", "Done"]
    assert scope_mask(tokens, "code").tolist() == [False] * 5 + [True] * 5 + [False]
    tokens = [" 1", "6", " -", " 3", " =", "", " ", "1", "3", ".\n", " twelve", "x2", "٣"]
    expected = [True, True, False, True, False, False, False, True, True, False, False, True]
    assert scope_mask(tokens, "number").tolist() == [*expected, False]  # ASCII digits only
    with pytest.raises(ConfigError, match="unknown scope"):
        scope_tracker("prose")
    with pytest.raises(ConfigError, match="unknown scope"):
        scope_mask(["a"], "prose")


def test_scoped_feature_names() -> None:
    f = Feature.parse("final:logprob.count_below@-0.5")
    assert (f.scope, f.base, f.aggregate, f.level) == ("final", "logprob", "count_below", -0.5)
    assert Feature.parse(f.name) == f
    assert Feature.parse("code:length.count").name == "code:length.count"
    for bad in ("final:logprob.first", "code:logprob.frac_below@-1.0", "prose:logprob.min"):
        with pytest.raises(ConfigError, match="scope"):
            Feature.parse(bad)


SCOPED = ["mean", "sum", "min", "max", "lowest2", "count_below@-0.7"]


@pytest.mark.parametrize("agg", SCOPED)
@pytest.mark.parametrize("bounds", [(-6.0, 0.0), (-2.0, 3.0), (0.5, 4.0)])
def test_scoped_aggregates_equal_their_batch_twin_and_bound_every_continuation(
    agg: str, bounds: tuple[float, float]
) -> None:
    """Updated with the scope's tokens only, each running aggregate equals
    :func:`scoped_path` after every token; its reachable ends after ``m`` more tokens
    (each in the scope or not) hold every such continuation, brute-forced over values at
    the range's ends and middle."""
    lo, hi = bounds
    f = Feature.parse(f"final:logprob.{agg}")
    rng = np.random.default_rng(1)
    grid = [lo, (lo + hi) / 2, hi]
    for _ in range(40):
        n = int(rng.integers(1, 8))
        x = rng.choice(grid, size=n) if rng.random() < 0.5 else rng.uniform(lo, hi, size=n)
        mask = rng.random(n) < 0.5
        run = aggregate_of(f, lo, hi)
        assert run.value == f.empty(lo, hi)
        batch = scoped_path(x, mask, f, lo, hi)
        for t in range(n):
            if mask[t]:
                run.update(float(x[t]))
            assert run.value == pytest.approx(batch[t], abs=1e-12)
        for m in (1, 2):
            up, down = run.upper_end(m), run.lower_end(m)
            for extra in itertools.product([None, *grid], repeat=m):
                xs = [*x, *(v if v is not None else 0.0 for v in extra)]
                ms = [*mask, *(v is not None for v in extra)]
                end = scoped_path(xs, ms, f, lo, hi)[-1]
                assert down - 1e-12 <= end <= up + 1e-12


def _trace(texts: list[str], logprobs: list[float], i: int, correct: bool) -> Any:
    tokens = [
        {"id": j, "text": t, "logprob": lp, "top": [[j, lp], [j + 1, lp - 1.5]], "entropy": 0.4,
         "logz": {"1.5": 0.1, "2.0": 0.2}, "prompt_free_logprob": lp - 1.0}
        for j, (t, lp) in enumerate(zip(texts, map(float, logprobs), strict=True))
    ]  # fmt: skip
    return parse_trace({"id": f"g-{i}", "dataset": "gsm8k", "model": "m", "question": "q",
                        "references": ["1"], "prompt": "p", "answer": "".join(texts),
                        "correct": correct, "vocab_size": 1000, "top_k": 2,
                        "tokens": tokens})  # fmt: skip


def _worked(rng: np.random.Generator, n: int) -> list[Any]:
    """Synthetic worked answers: some steps, often an ``Answer:`` line, logprobs that are
    lower on the final number of the wrong ones."""
    out = []
    for i in range(n):
        correct = bool(rng.random() < 0.5)
        steps = ["Step", " ", "1", ":", " 3", " +", " 4", ".\n"] * int(rng.integers(1, 4))
        tail = ["Answer", ":", " ", "7"] if rng.random() < 0.8 else ["\\boxed{", "7", "}"]
        texts = steps + tail
        lps = list(rng.uniform(-1.5, 0.0, size=len(texts)))
        if not correct:
            lps[-1] -= 2.0
        out.append(_trace(texts, lps, i, correct))
    return out


SCOPED_FEATURES = ("logprob.mean", "final:logprob.min", "final:logprob.mean",
                   "final:entropy.sum", "final:length.count", "code:logprob.max",
                   "final:logprob.lowest2", "final:lift.count_below@-0.5")  # fmt: skip


def _scoped_stat(traces: list[Any]) -> FittedStatistic:
    feats = tuple(Feature.parse(n) for n in SCOPED_FEATURES)
    x = answer_features(traces, feats, skeleton="prompt-free")
    return fit_statistic(x, [bool(t.correct) for t in traces], feats, vocab_size=1000, l2=1.0)


def test_a_scoped_statistic_streams_as_its_batch_twin_scores_every_prefix() -> None:
    traces = _worked(np.random.default_rng(2), 40)
    stat = _scoped_stat(traces)
    assert stat.score(answer_features(traces, stat.features, skeleton="prompt-free")).std() > 0
    for t in traces[:10]:
        path = replay_fitted(stat, t, skeleton="prompt-free", max_tokens=t.n_tokens + 2)
        for k in range(1, t.n_tokens + 1):
            prefix = _trace(list(t.token_texts[:k]), list(t.logprobs[:k]), 0, True)
            want = stat.score(answer_features([prefix], stat.features, skeleton="prompt-free"))
            assert path.scores[k - 1] == pytest.approx(float(want[0]), abs=1e-9)
        final = path.scores[-1]
        assert (path.lowers <= final + 1e-12).all() and (path.uppers >= final - 1e-12).all()
        assert critical_score(path, StreamPolicy(on_length="answer")) == final


def test_the_monitor_reads_the_scope_from_the_events_text() -> None:
    """The monitor as adapters drive it, token events in: the same scores as the replay, bit
    for bit, and at every threshold the verdict and the tokens read that calibration
    replays (early verdicts included)."""
    traces = _worked(np.random.default_rng(4), 40)
    stat = _scoped_stat(traces)
    policy = StreamPolicy(on_length="answer")
    for t in traces[:8]:
        path = replay_fitted(stat, t, skeleton="prompt-free", max_tokens=t.n_tokens)
        crit = critical_score(path, policy)
        for tau in (crit - 1.0, crit, crit + 1e-9, float(path.scores.min()) - 5.0, 50.0):
            mon = Monitor.fitted(stat, policy, tau, max_tokens=t.n_tokens,
                                 skeleton=RecordedSkeleton(t.prompt_free_logprobs))  # fmt: skip
            decided = None
            for i, ev in enumerate(trace_events(t)):
                v = mon.update(ev)
                if decided is None:
                    assert v.mean == path.scores[i]
                    if v.final:
                        decided = i + 1
            final = mon.finish("stop")
            assert (final.state is State.CERTIFIED) == (crit >= tau)
            assert (decided or t.n_tokens) == stop_at(path, policy, tau)
    # without the text a scope is never entered: the same logprobs score otherwise
    blind = [replace(ev, text="") for ev in trace_events(traces[0])]
    mon = Monitor.fitted(stat, policy, 0.0, skeleton=RecordedSkeleton(
        traces[0].prompt_free_logprobs))  # fmt: skip
    for ev in blind:
        v = mon.update(ev)
    assert v.mean != replay_fitted(stat, traces[0], skeleton="prompt-free").scores[-1]


def test_score_bounds_hold_with_scoped_features() -> None:
    feats = tuple(Feature.parse(n) for n in ("final:logprob.sum", "final:length.count",
                                             "final:logprob.min", "code:logprob.max"))  # fmt: skip
    rng = np.random.default_rng(5)
    limit = 6
    for _ in range(20):
        w, center = tuple(rng.normal(size=4)), tuple(rng.normal(size=4))
        stat = FittedStatistic(feats, w, 0.1, center, (1.0,) * 4, vocab_size=100,
                               ranges={"logprob": (-3.0, -0.5)})  # fmt: skip
        lo, hi = stat.score_bounds(limit)
        for _ in range(100):
            state = FittedState(stat, limit)
            texts = ["Answer:", " ", "```\n", "x", "y"]
            for _ in range(int(rng.integers(1, limit + 1))):
                s = state.update([float(rng.uniform(-3.0, -0.5))], str(rng.choice(texts)))
                assert lo - 1e-9 <= s <= hi + 1e-9


def test_fitting_on_real_code_answers_reads_the_code_scope() -> None:
    traces = list(read_traces(FIXTURES / "traces_qwen_mbpp_sample.jsonl"))
    feats = (Feature.parse("code:logprob.mean"), Feature.parse("logprob.mean"))
    x = answer_features(traces, feats, skeleton="prompt-free")
    for t, row in zip(traces, x, strict=True):
        inside = scope_mask(t.token_texts, "code")
        assert inside.any() and not inside.all()  # the opening fence is outside
        assert row[0] == pytest.approx(float(np.clip(t.logprobs, -20, 0)[inside].mean()))
