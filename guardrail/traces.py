"""Labelled answer traces: the strict JSONL format (``guardrail/_traces.py`` documents
it), reading and writing, answer labels, and the scores computed from a trace (lifts
against a skeleton, the peers' single-pass baselines)."""

from __future__ import annotations

from ._labels import is_correct, normalize_answer
from ._scores import (
    BASELINES,
    TRACE_SKELETONS,
    baseline_score,
    trace_clipped_lifts,
    trace_skeleton_logprobs,
    unigram_log_probs,
    vector_clipped_lifts,
)
from ._skeletons import select_skeleton_kind, type_token_ratio
from ._trace_format import OPTIONAL_FIELDS
from ._traces import (
    Trace,
    dump_trace_line,
    file_sha256,
    iter_traces,
    parse_trace,
    parse_trace_lines,
    read_traces,
    trace_to_dict,
)

__all__ = [
    "BASELINES",
    "OPTIONAL_FIELDS",
    "TRACE_SKELETONS",
    "Trace",
    "baseline_score",
    "dump_trace_line",
    "file_sha256",
    "is_correct",
    "iter_traces",
    "normalize_answer",
    "parse_trace",
    "parse_trace_lines",
    "read_traces",
    "select_skeleton_kind",
    "trace_clipped_lifts",
    "trace_skeleton_logprobs",
    "trace_to_dict",
    "type_token_ratio",
    "unigram_log_probs",
    "vector_clipped_lifts",
]
