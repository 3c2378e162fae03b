"""``guardrail.evaluate.ranking_check``: a fitted statistic's AUROC on labelled answers
beside the best single score's, on the committed MBPP answers of Qwen2.5-Coder."""

from __future__ import annotations

import lzma
from pathlib import Path

import numpy as np
import pytest

from guardrail import ConfigError
from guardrail.evaluate import auroc, ranking_check
from guardrail.traces import BASELINES, Trace, baseline_score, parse_trace_lines

COMMITTED = Path(__file__).parents[2] / "benchmarks" / "traces" / "mbpp_qwen25coder.jsonl.xz"


@pytest.fixture(scope="module")
def traces() -> list[Trace]:
    with lzma.open(COMMITTED, "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(150)]
    return list(parse_trace_lines(lines, source=str(COMMITTED)))


def _score(traces: list[Trace], name: str) -> np.ndarray:
    return np.array([baseline_score(t, name) for t in traces])


def test_the_best_single_score_is_the_one_with_the_highest_auroc(traces: list[Trace]) -> None:
    ok = np.array([bool(t.correct) for t in traces])
    aucs = {name: auroc(_score(traces, name), ok) for name in BASELINES}
    best = max(aucs, key=lambda n: aucs[n])
    check = ranking_check(_score(traces, best), traces, replicates=200)
    assert check is not None and check.best_single == best
    assert check.statistic_auroc == check.single_auroc == aucs[best]
    assert not check.weaker and check.answers == len(traces)
    lo, hi = check.difference  # the best is chosen anew in each resample: never above it
    assert lo <= hi <= 0.0


def test_a_statistic_that_ranks_worse_is_reported_with_what_to_do(traces: list[Trace]) -> None:
    reversed_nll = -_score(traces, "nll")  # the longest, least likely answers first
    check = ranking_check(reversed_nll, traces, replicates=200)
    assert check is not None and check.weaker
    assert check.difference[1] < 0.0  # far outside what resampling explains
    warning = check.warning()
    assert f"AUROC {check.statistic_auroc:.3f} against {check.single_auroc:.3f}" in warning
    assert f"liftguard calibrate --score {check.best_single}" in warning
    assert check.to_dict()["weaker"] is True and "\n" not in warning


def test_it_is_deterministic_and_refuses_what_it_cannot_check(traces: list[Trace]) -> None:
    final = _score(traces, "mean_margin") + _score(traces, "entropy")
    assert ranking_check(final, traces, replicates=50) == ranking_check(
        final, traces, replicates=50
    )
    right = [t for t in traces if t.correct]
    assert ranking_check(final[: len(right)], right) is None  # one class: no AUROC
    with pytest.raises(ConfigError, match="3 final scores for 150 answers"):
        ranking_check([0.0, 1.0, 2.0], traces)
    with pytest.raises(ConfigError, match="replicates"):
        ranking_check(final, traces, replicates=1)
