"""Labelled answer traces: the strict JSONL format (``guardrail/traces/_read.py`` documents
it), reading and writing (one writer for every trace line: of a :class:`Trace`, of an API
recording, of a line relabelled), answer labels (the contains and token-F1 rules against
references), and the scores computed from a trace (lifts against a skeleton, the peers'
single-pass baselines)."""

from __future__ import annotations

from .._labels import DEFAULT_F1_THRESHOLD, is_correct, is_correct_f1, normalize_answer, token_f1
from .._scores import (
    BASELINES,
    TRACE_SKELETONS,
    baseline_score,
    trace_clipped_lifts,
    trace_skeleton_logprobs,
    unigram_log_probs,
    vector_clipped_lifts,
)
from .._skeletons import select_skeleton_kind, type_token_ratio
from .._trace_format import OPTIONAL_FIELDS
from ._read import (
    Trace,
    file_sha256,
    iter_trace_objects,
    iter_traces,
    parse_trace,
    parse_trace_lines,
    read_traces,
    trace_objects,
)
from ._write import (
    dump_trace_line,
    label_line,
    token_object,
    trace_line,
    trace_object,
    trace_to_dict,
)

__all__ = [
    "BASELINES",
    "DEFAULT_F1_THRESHOLD",
    "OPTIONAL_FIELDS",
    "TRACE_SKELETONS",
    "Trace",
    "baseline_score",
    "dump_trace_line",
    "file_sha256",
    "is_correct",
    "is_correct_f1",
    "iter_trace_objects",
    "iter_traces",
    "label_line",
    "normalize_answer",
    "parse_trace",
    "parse_trace_lines",
    "read_traces",
    "select_skeleton_kind",
    "token_f1",
    "token_object",
    "trace_clipped_lifts",
    "trace_line",
    "trace_object",
    "trace_objects",
    "trace_skeleton_logprobs",
    "trace_to_dict",
    "type_token_ratio",
    "unigram_log_probs",
    "vector_clipped_lifts",
]
