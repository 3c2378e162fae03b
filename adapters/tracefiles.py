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
- :func:`trace_digest`: the identity of trace data whatever its container (the same for
  a JSONL file and its Parquet twin), as a certificate's provenance records it.

What provenance compares and the path helpers are the command line's, in
:mod:`adapters._tracefiles`.
"""

from __future__ import annotations

from ._tracefiles._digest import trace_digest
from ._tracefiles._files import (
    TraceFileWriter,
    convert_traces,
    open_trace_objects,
)

__all__ = [
    "TraceFileWriter",
    "convert_traces",
    "open_trace_objects",
    "trace_digest",
]
