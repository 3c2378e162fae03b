"""Per-token features and running aggregates: each incremental object against its batch
twin at every token, the compensated entropy against guardrail.topk, and the bounds
of every aggregate against brute-force continuations."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from guardrail import ConfigError, TokenEvent
from guardrail._aggregates import AGGREGATES, Feature, RunningAggregates, aggregate_path
from guardrail._features import BASES, TokenFeaturizer, TopKTables, base_range
from guardrail._features_batch import base_features_batch
from guardrail.topk import estimate_entropy_batch, estimate_logz_batch
from guardrail.traces import read_traces

FIXTURES = Path(__file__).parents[1] / "fixtures"
SAMPLES = ("traces_smollm2_sample.jsonl", "traces_gemma3_sample.jsonl")


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("k", [20, 5, 2, 1])
def test_token_featurizer_equals_its_batch_twin_at_every_token(sample: str, k: int) -> None:
    traces = [t.truncate_top(k) for t in read_traces(FIXTURES / sample)]
    vocab = traces[0].vocab_size
    tables = TopKTables(vocab)
    feat = TokenFeaturizer(BASES, vocab, tables=tables)
    assert feat.bases == BASES
    compared = 0
    for t in traces:
        batch = base_features_batch(
            BASES, vocab, t.logprobs, t.top_logprobs, skeleton_logprobs=t.prompt_free_logprobs,
            exact_entropy=t.entropy, tables=tables,
        )  # fmt: skip
        for i in range(t.n_tokens):
            row = feat.values(
                float(t.logprobs[i]), t.top_logprobs[i].tolist(),
                float(t.prompt_free_logprobs[i]), float(t.entropy[i]),
            )  # fmt: skip
            for j, base in enumerate(BASES):
                lo, hi = base_range(base, vocab)
                assert lo <= row[j] <= hi
                assert row[j] == pytest.approx(batch[base][i], rel=1e-11, abs=1e-11), base
                compared += 1
    assert compared > 200


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("k", [20, 5, 2])
def test_tabulated_compensation_is_within_a_thousandth_of_the_topk_estimates(
    sample: str, k: int
) -> None:
    """The tail tables (interpolated in the slope) against guardrail.topk's closed form."""
    traces = [t.truncate_top(k) for t in read_traces(FIXTURES / sample) if t.n_tokens]
    vocab = traces[0].vocab_size
    for t in traces:
        got = base_features_batch(("entropy", "temperature_lift"), vocab, t.logprobs,
                                  t.top_logprobs)  # fmt: skip
        want_h = np.clip(estimate_entropy_batch(t.top_logprobs, vocab), 0, math.log(vocab))
        logz = estimate_logz_batch(t.top_logprobs, vocab, 1.5)
        want_t = np.clip(t.logprobs - (t.logprobs / 1.5 - logz), -12, 12)
        np.testing.assert_allclose(got["entropy"], want_h, atol=1e-3)
        np.testing.assert_allclose(got["temperature_lift"], want_t, atol=1e-3)


def test_featurizer_edge_cases() -> None:
    feat = TokenFeaturizer(("logprob", "margin", "entropy", "rank", "lift"), 10)
    # the alternatives are the whole vocabulary: no tail
    top = sorted(np.log(np.full(10, 0.1)).tolist(), reverse=True)
    lp, margin, ent, rank, lift = feat.values(math.log(0.1), top, -30.0, None)
    assert lp == pytest.approx(math.log(0.1)) and margin == pytest.approx(0.0)
    assert ent == pytest.approx(math.log(10)) and rank == 0.0 and lift == 12.0  # clamped
    # a sampled token below the alternatives has rank k; a floor on the logprob
    lp, _, _, rank, lift = feat.values(-50.0, [-0.1, -2.5], 0.0, None)
    assert lp == -20.0 and rank == 2.0 and lift == -12.0
    # one alternative: the second probability comes from the compensated tail
    (margin,) = TokenFeaturizer(("margin",), 1000).values(-0.5, [-0.5], None, None)
    assert 0.0 < margin < math.exp(-0.5)
    with pytest.raises(ConfigError, match="unknown base feature"):
        TokenFeaturizer(("nope",), 10)
    with pytest.raises(ConfigError, match="temperature"):
        TokenFeaturizer(("logprob",), 10, temperature=1.0)
    with pytest.raises(ConfigError, match="another vocabulary"):
        TokenFeaturizer(("entropy",), 10, tables=TopKTables(11))


# --- running aggregates ----------------------------------------------------------------------

RANGE = (-3.0, 2.0)
LEVELS = (-1.0, 0.5)


def _feature_set() -> list[Feature]:
    out = []
    for agg in AGGREGATES:
        if agg in ("count_below", "frac_below"):
            out += [Feature("lift", agg, lvl) for lvl in LEVELS]
        else:
            out.append(Feature("lift", agg))
    return out


def _sequences(seed: int, n: int = 80) -> list[list[float]]:
    """Seeded answers of 1..30 values in RANGE with ties and values at the range's ends."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.uniform(*RANGE, int(rng.integers(1, 31)))
        x[rng.random(x.size) < 0.15] = RANGE[0]
        x[rng.random(x.size) < 0.15] = RANGE[1]
        if rng.random() < 0.4:
            x = np.round(x * 2) / 2
        out.append(np.clip(x, *RANGE).tolist())
    return out


def _value(agg: RunningAggregates, f: Feature) -> float:
    li = -1 if f.level is None else LEVELS.index(f.level)
    return agg.value(f.aggregate, li)


def test_running_aggregates_equal_their_batch_twins_at_every_token() -> None:
    feats = _feature_set()
    for x in _sequences(1):
        agg = RunningAggregates(*RANGE, LEVELS)
        paths = {f.name: aggregate_path(x, f, RANGE[1]) for f in feats}
        for t, v in enumerate(x):
            agg.update(v)
            assert agg.t == t + 1
            for f in feats:
                assert _value(agg, f) == pytest.approx(paths[f.name][t], rel=1e-12, abs=1e-12)
    np.testing.assert_array_equal(aggregate_path([], Feature("length", "count"), 0.0), [])
    np.testing.assert_allclose(aggregate_path([1.0] * 3, Feature("length", "log"), 0.0),
                               np.log1p([1, 2, 3]))  # fmt: skip


def test_lowest2_counts_a_missing_value_as_the_top_of_the_range() -> None:
    agg = RunningAggregates(*RANGE)
    agg.update(-1.0)
    assert agg.value("lowest2") == (-1.0 + RANGE[1]) / 2
    agg.update(-2.0)
    agg.update(1.0)
    assert agg.value("lowest2") == -1.5


@pytest.mark.parametrize("m", [0, 1, 2, 5, math.inf])
def test_aggregate_bounds_contain_every_continuation(m: float) -> None:
    """Whatever the next (at most m) values in the range, the aggregate ends inside
    bounds(m); extreme and random continuations of every length are tried."""
    feats = _feature_set()
    rng = np.random.default_rng(7)
    ends = [RANGE[0], RANGE[1], *LEVELS, LEVELS[0] - 1e-9]
    for x in _sequences(2, 40):
        base = RunningAggregates(*RANGE, LEVELS)
        for v in x:
            base.update(v)
        bounds = {f.name: base.bounds(f.aggregate, m, -1 if f.level is None else
                                      LEVELS.index(f.level)) for f in feats}  # fmt: skip
        lengths = range(0, int(min(m, 12)) + 1)
        conts: list[list[float]] = []
        for n in lengths:
            conts += [[e] * n for e in ends]
            conts += [rng.uniform(*RANGE, n).tolist() for _ in range(3)]
        for cont in conts:
            agg = RunningAggregates(*RANGE, LEVELS)
            for v in x + cont:
                agg.update(v)
            for f in feats:
                lo, hi = bounds[f.name]
                got = _value(agg, f)
                assert lo - 1e-12 <= got <= hi + 1e-12, (f.name, m, len(cont))
        for f in feats:  # stopping now is a continuation: the current value is inside
            lo, hi = bounds[f.name]
            assert lo <= _value(base, f) <= hi


def test_feature_names_round_trip_and_directions() -> None:
    for f in [*_feature_set(), Feature("length", "count"), Feature("length", "log")]:
        assert Feature.parse(f.name) == f
    assert Feature.parse("logprob.count_below@-0.5").level == -0.5
    assert Feature("logprob", "sum").direction(-20.0, 0.0) == -1
    assert Feature("entropy", "sum").direction(0.0, 5.0) == 1
    assert Feature("lift", "sum").direction(-12.0, 12.0) is None
    assert Feature("lift", "mean").direction(-1.0, 1.0) is None
    assert Feature("lift", "first").direction(-1.0, 1.0) == 0
    dirs = {a: Feature("lift", a, 0.0 if "below" in a else None).direction(-1, 1)
            for a in ("min", "lowest2", "max", "count_below", "frac_below")}  # fmt: skip
    assert dirs == {"min": -1, "lowest2": -1, "max": 1, "count_below": 1, "frac_below": None}
    for bad, match in (
        ("logprob", "expected 'base.aggregate"),
        ("logprob.median", "unknown aggregate"),
        ("nope.mean", "unknown base feature"),
        ("logprob.count_below", "only counts take a level"),
        ("logprob.mean@1", "only counts take a level"),
        ("logprob.count_below@x", "not a number"),
        ("length.mean", "length takes"),
    ):
        with pytest.raises(ConfigError, match=match):
            Feature.parse(bad)
    with pytest.raises(ConfigError, match="empty range"):
        RunningAggregates(1.0, 0.0)


def test_events_with_unsorted_alternatives_give_the_sorted_features() -> None:
    from guardrail._fitted import FittedStatistic
    from guardrail._fitted_state import EventReader

    feats = tuple(Feature.parse(n) for n in ("entropy.mean", "margin.min", "logprob.min"))
    stat = FittedStatistic(feats, (1.0, 1.0, 1.0), 0.0, (0.0,) * 3, (1.0,) * 3, 1000)
    reader = EventReader(stat, None)
    top = [("a", -0.3), ("b", -1.9), ("c", -2.5), ("d", -4.0)]
    for perm in itertools.islice(itertools.permutations(top), 0, None, 5):
        ev = TokenEvent("a", -0.3, top_logprobs=tuple(perm))
        assert reader.read(ev) == reader.read(TokenEvent("a", -0.3, top_logprobs=tuple(top)))
    assert reader.read(TokenEvent("a", -0.3)) == ("alternatives", None)
    assert reader.read(TokenEvent("a", None, top_logprobs=tuple(top))) == ("logprob", None)
    bad = TokenEvent("a", -0.3, top_logprobs=(("a", -0.3), ("b", -9999.0)))
    assert reader.read(bad) == ("alternatives", -9999.0)
    nan = TokenEvent("a", -0.3, top_logprobs=(("a", -0.3), ("b", math.nan)))
    assert reader.read(nan)[0] == "alternatives"
