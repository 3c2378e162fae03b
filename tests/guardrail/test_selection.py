"""Selecting a fitted statistic by cross-validated coverage at the target risk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from guardrail import ConfigError, StreamPolicy
from guardrail._fit._cv_coverage import select_statistic
from guardrail.evaluate import auroc
from guardrail.fitting import (
    Candidate,
    Deployment,
    Feature,
    answer_features,
    cv_coverage,
    preset_features,
)
from guardrail.traces import Trace, read_traces

SHARP, BROAD = Feature.parse("logprob.min"), Feature.parse("logprob.mean")
VOCAB = 1000


def _sharp_at_the_top(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Column 0 ranks half of the correct answers far above everything and is noise
    elsewhere; column 1 separates every answer moderately (the larger AUROC)."""
    rng = np.random.default_rng(seed)
    n = 1200
    y = rng.random(n) < 0.3
    sure = y & (rng.random(n) < 0.5)
    sharp = np.where(sure, 6.0 + rng.random(n), rng.normal(0.0, 1.0, n))
    broad = y + rng.normal(0.0, 0.8, n)
    return np.column_stack([sharp, broad]), y


def test_the_candidate_sharp_at_the_top_wins_at_a_strict_target_though_its_auroc_is_lower() -> None:
    x, y = _sharp_at_the_top(3)
    assert auroc(x[:, 0], y) < auroc(x[:, 1], y)  # by AUROC the broad score would win
    cands = [Candidate("sharp", (SHARP,), 1.0), Candidate("broad", (BROAD,), 1.0)]
    best, scored = select_statistic(x, y, cands, [SHARP, BROAD], vocab_size=VOCAB,
                                    risk=0.2, delta=0.05)  # fmt: skip
    assert best.name == "sharp"
    assert [s.candidate.name for s in scored] == ["sharp", "broad"]
    by_name = {s.candidate.name: s for s in scored}
    assert by_name["sharp"].coverage > by_name["broad"].coverage + 0.05
    assert by_name["sharp"].auroc < by_name["broad"].auroc


def test_cross_validated_coverage_is_deterministic_and_counts_refusals() -> None:
    x, y = _sharp_at_the_top(5)
    cand = Candidate("broad", (BROAD,), 1.0)
    a = cv_coverage(x, y, cand, [SHARP, BROAD], vocab_size=VOCAB, risk=0.1, delta=0.05, seed=1)
    b = cv_coverage(x, y, cand, [SHARP, BROAD], vocab_size=VOCAB, risk=0.1, delta=0.05, seed=1)
    assert a == b
    # an impossible target: every split refuses and nothing is covered
    none = cv_coverage(x, y, cand, [SHARP, BROAD], vocab_size=VOCAB, risk=0.001, delta=0.05,
                       splits=7)  # fmt: skip
    assert (none.coverage, none.refused) == (0.0, 7)
    # repeated with new folds and splits: every split counts, and the estimate moves
    again = cv_coverage(x, y, cand, [SHARP, BROAD], vocab_size=VOCAB, risk=0.001, delta=0.05,
                        splits=7, repeats=3)  # fmt: skip
    assert again.refused == 21
    thrice = cv_coverage(x, y, cand, [SHARP, BROAD], vocab_size=VOCAB, risk=0.1, delta=0.05,
                         seed=1, repeats=3)  # fmt: skip
    assert thrice.auroc != a.auroc  # new folds: other out-of-fold scores


def test_bad_candidates_are_config_errors() -> None:
    x, y = _sharp_at_the_top(1)
    with pytest.raises(ConfigError, match="not in columns"):
        cv_coverage(x, y, Candidate("c", (Feature.parse("margin.min"),), 1.0), [SHARP, BROAD],
                    vocab_size=VOCAB, risk=0.3, delta=0.05)  # fmt: skip
    with pytest.raises(ConfigError, match="at least one candidate"):
        select_statistic(x, y, [], [SHARP, BROAD], vocab_size=VOCAB, risk=0.3, delta=0.05)
    with pytest.raises(ConfigError, match="repeats"):
        cv_coverage(x, y, Candidate("c", (SHARP,), 1.0), [SHARP, BROAD], vocab_size=VOCAB,
                    risk=0.3, delta=0.05, repeats=0)  # fmt: skip
    with pytest.raises(ConfigError, match="folds"):
        cv_coverage(x, y, Candidate("c", (SHARP,), 1.0), [SHARP, BROAD], vocab_size=VOCAB,
                    risk=0.3, delta=0.05, folds=1)  # fmt: skip


# --- the rule as deployed: replayed, early blocks and margins included -----------------------

FIXTURE = Path(__file__).parents[1] / "fixtures" / "traces_gemma3_sample.jsonl"


def _fixture(copies: int = 1) -> tuple[list[Trace], np.ndarray, np.ndarray, tuple[Feature, ...]]:
    """The committed Gemma 3 sample (``copies`` times over: enough correct answers per
    fold for early-block margins), its answer features and labels."""
    traces = read_traces(FIXTURE) * copies
    feats = preset_features("lift")
    x = answer_features(traces, feats, skeleton="prompt-free")
    return traces, x, np.array([bool(t.correct) for t in traces]), feats


def test_the_replayed_rule_without_margins_measures_what_the_final_scores_do() -> None:
    traces, x, y, feats = _fixture()
    longest = max(t.n_tokens for t in traces)
    cand = Candidate("lift", feats, 1.0)
    kw = {"vocab_size": traces[0].vocab_size, "risk": 0.7, "delta": 0.5, "seed": 4}
    final = cv_coverage(x, y, cand, feats, **kw)  # type: ignore[arg-type]
    deployed = Deployment(traces, StreamPolicy(), skeleton="prompt-free", max_tokens=longest)
    replayed = cv_coverage(x, y, cand, feats, deployment=deployed, **kw)  # type: ignore[arg-type]
    assert final.coverage > 0  # a target some splits reach: the comparison means something
    # within the token limit the exact early verdicts change when, not what, is shown
    assert (replayed.coverage, replayed.refused) == (final.coverage, final.refused)
    assert replayed.auroc == pytest.approx(final.auroc)
    # a limit shorter than some answers blocks them: the replay prices that in
    short = Deployment(traces, StreamPolicy(), skeleton="prompt-free", max_tokens=3)
    cut = cv_coverage(x, y, cand, feats, deployment=short, **kw)  # type: ignore[arg-type]
    assert cut.auroc != pytest.approx(final.auroc)


def test_early_block_margins_are_scored_by_the_coverage_of_the_rule_they_make() -> None:
    traces, x, y, feats = _fixture(copies=8)
    longest = max(t.n_tokens for t in traces)
    deployed = Deployment(traces, StreamPolicy(), skeleton="prompt-free", max_tokens=longest)
    cands = [Candidate(f"q {q}", feats, 1.0, early_block=q) for q in (None, 0.9, 0.5)]
    best, scored = select_statistic(x, y, cands, feats, vocab_size=traces[0].vocab_size,
                                    risk=0.5, delta=0.3, deployment=deployed)  # fmt: skip
    exact, high, half = scored
    # margins only ever block sooner: the ranking changes, and the lower the quantile the more
    assert len({exact.auroc, high.auroc, half.auroc}) == 3
    assert best is max(scored, key=lambda s: (s.coverage, -s.refused, s.auroc)).candidate
    # scored together (one fit and one replay per fold for all three) as each alone
    for c, s in zip(cands, scored, strict=True):
        alone = cv_coverage(x, y, c, feats, vocab_size=traces[0].vocab_size, risk=0.5,
                            delta=0.3, deployment=deployed)  # fmt: skip
        assert (alone.coverage, alone.refused, alone.auroc) == (s.coverage, s.refused, s.auroc)
    # without a deployment the margins are not read: every candidate scores alike
    _, plain = select_statistic(x, y, cands, feats, vocab_size=traces[0].vocab_size,
                                risk=0.5, delta=0.3)  # fmt: skip
    assert len({(s.coverage, s.refused, s.auroc) for s in plain}) == 1


def test_a_deployment_needs_one_trace_per_answer() -> None:
    traces, x, y, feats = _fixture()
    deployed = Deployment(traces[:-1], StreamPolicy(), skeleton="prompt-free")
    with pytest.raises(ConfigError, match="one trace per answer"):
        cv_coverage(x, y, Candidate("lift", feats, 1.0), feats, vocab_size=traces[0].vocab_size,
                    risk=0.5, delta=0.3, deployment=deployed)  # fmt: skip
