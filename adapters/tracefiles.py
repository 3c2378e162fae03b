"""Trace files, JSONL or Parquet, local or in object storage.

Every command that reads traces (``liftguard traces label``, ``fit``, ``calibrate``,
``eval``, ``monitor``) opens them with :func:`open_trace_objects`: a file whose name
ends with ``.parquet`` is read in the columnar format (one row per trace, per-token
list columns; ``pip install "liftguard[columnar]"``), any other as JSONL; a path
with ``://`` is opened with fsspec (``s3://bucket/key``; ``pip install
"liftguard[s3]"``). Reading a Parquet file converted from a JSONL file gives the
same decoded objects as reading the JSONL (:mod:`adapters._tracefiles._columnar`
documents the schema).

- :func:`open_trace_objects`: ``(line or row, decoded object)`` of each trace.
- :class:`TraceFileWriter`: writes decoded objects as JSONL or Parquet row groups.
- :func:`convert_traces`: JSONL to Parquet or back (``liftguard traces convert``).
- :func:`trace_digest`, :class:`TraceDigest`, :func:`trace_identity`,
  :func:`same_traces`: the identity of trace data whatever its container (the same for
  a JSONL file and its Parquet twin), what provenance records of it, and the rule that
  says a certificate's provenance names a file's data.
- :func:`trace_file_sha256`, :func:`is_parquet`, :func:`is_url`.
"""

from __future__ import annotations

from ._tracefiles._digest import TraceDigest, same_traces, trace_digest, trace_identity
from ._tracefiles._files import (
    PARQUET_SUFFIX,
    TraceFileWriter,
    convert_traces,
    is_parquet,
    is_url,
    open_binary,
    open_trace_objects,
    trace_file_sha256,
)

__all__ = [
    "PARQUET_SUFFIX",
    "TraceDigest",
    "TraceFileWriter",
    "convert_traces",
    "is_parquet",
    "is_url",
    "open_binary",
    "open_trace_objects",
    "same_traces",
    "trace_digest",
    "trace_file_sha256",
    "trace_identity",
]
