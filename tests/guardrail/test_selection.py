"""Selecting a fitted statistic by cross-validated coverage at the target risk."""

from __future__ import annotations

import numpy as np
import pytest

from guardrail import ConfigError
from guardrail.evaluate import auroc
from guardrail.fitting import Candidate, Feature, cv_coverage, select_statistic

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


def test_bad_candidates_are_config_errors() -> None:
    x, y = _sharp_at_the_top(1)
    with pytest.raises(ConfigError, match="not in columns"):
        cv_coverage(x, y, Candidate("c", (Feature.parse("margin.min"),), 1.0), [SHARP, BROAD],
                    vocab_size=VOCAB, risk=0.3, delta=0.05)  # fmt: skip
    with pytest.raises(ConfigError, match="at least one candidate"):
        select_statistic(x, y, [], [SHARP, BROAD], vocab_size=VOCAB, risk=0.3, delta=0.05)
    with pytest.raises(ConfigError, match="folds"):
        cv_coverage(x, y, Candidate("c", (SHARP,), 1.0), [SHARP, BROAD], vocab_size=VOCAB,
                    risk=0.3, delta=0.05, folds=1)  # fmt: skip
