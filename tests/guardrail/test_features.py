"""Per-token features: the incremental featurizer against its batch twin at every token,
the compensated entropy against guardrail.topk, and the feature names (the running
aggregates are in test_aggregates.py)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from guardrail import ConfigError, TokenEvent
from guardrail._aggregates import AGGREGATES, Feature
from guardrail._features import BASES, TokenFeaturizer, TopKTables, base_range
from guardrail._fit._features_batch import base_features_batch
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


# --- feature names ---------------------------------------------------------------------------


def _feature_set() -> list[Feature]:
    out = []
    for agg in AGGREGATES:
        if agg in ("count_below", "frac_below"):
            out += [Feature("lift", agg, lvl) for lvl in (-1.0, 0.5)]
        else:
            out.append(Feature("lift", agg))
    return out


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


def test_events_with_unsorted_alternatives_give_the_sorted_features() -> None:
    from guardrail._fit._state import EventReader
    from guardrail._fit._statistic import FittedStatistic

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
