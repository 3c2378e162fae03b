"""Labelled answer traces: the strict JSONL format (``guardrail/traces/_read.py`` documents
it), reading and writing (one writer for every trace line: of a :class:`Trace`, of an API
recording, of a line relabelled), answer labels (the contains and token-F1 rules against
references), and the scores computed from a trace (lifts against a skeleton, the peers'
single-pass baselines)."""

from __future__ import annotations

from .._labels import DEFAULT_F1_THRESHOLD, is_correct, is_correct_f1, token_f1
from .._scores import BASELINES, baseline_score, vector_clipped_lifts
from ._read import Trace, parse_trace, parse_trace_lines, read_traces
from ._write import dump_trace_line

__all__ = [
    "BASELINES",
    "DEFAULT_F1_THRESHOLD",
    "Trace",
    "baseline_score",
    "dump_trace_line",
    "is_correct",
    "is_correct_f1",
    "parse_trace",
    "parse_trace_lines",
    "read_traces",
    "token_f1",
    "vector_clipped_lifts",
]
