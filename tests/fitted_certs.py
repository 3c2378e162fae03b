"""Fitted certificates for adapter tests, fitted on the committed NQ-Open sample of SmolLM2
answers (``tests/fixtures/traces_smollm2_nq_sample.jsonl``; see its README)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from guardrail import Certificate, ModelIdentity, SkeletonSpec, StreamPolicy
from guardrail.fitting import (
    FittedStatistic,
    answer_features,
    fit_statistic,
    preset_features,
    token_ranges,
)
from guardrail.traces import read_traces

__all__ = ["SAMPLE", "certificate", "fitted"]

SAMPLE = Path(__file__).parent / "fixtures" / "traces_smollm2_nq_sample.jsonl"


@cache
def fitted(group: str) -> FittedStatistic:
    """The statistic of a preset feature group (``api``, ``local``, ``lift``) on the sample,
    unclamped: its sums can fall without bound, so no answer is certified before its end
    (clamped, a score bounded on both sides would clear a tau of -50 at the first token)."""
    traces = read_traces(SAMPLE)
    feats = preset_features(group)
    ranges = token_ranges(traces, [f.base for f in feats if f.base != "length"])
    x = answer_features(traces, feats, ranges=ranges)
    correct = [bool(t.correct) for t in traces]
    return fit_statistic(x, correct, feats, vocab_size=traces[0].vocab_size, ranges=ranges,
                         clamp=False)  # fmt: skip


def certificate(
    group: str, tau: float = -50.0, *, model_id: str = "smollm2", api_model: str | None = None
) -> Certificate:
    """A certificate of :func:`fitted` whose ``tau`` (log-odds) every complete answer
    clears: certified at its end, unless the stream cannot feed the statistic."""
    stat = fitted(group)
    return Certificate(
        StreamPolicy(), tau, SkeletonSpec("uniform", {"vocab_size": stat.vocab_size}),
        ModelIdentity(model_id, api_model=api_model, vocab_size=stat.vocab_size),
        statistic=stat,
    )  # fmt: skip
