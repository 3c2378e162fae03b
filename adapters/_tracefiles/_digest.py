"""The identity of trace data, whatever its container: one digest for the same traces in
JSONL, compressed JSONL or Parquet, and the one rule that says two trace files hold the
same data.

A file's sha256 (:func:`~adapters._tracefiles._files.trace_file_sha256`) names its
bytes: a JSONL file and its Parquet twin (``liftguard traces convert``) differ, though
every reader reads the same traces from both. The **traces digest** names what is read:
the sha256 of the traces in their order, each decoded object written as one canonical
JSON line (keys sorted, no spaces, non-ASCII text as is, floats as their shortest
round-trip text, NaN and infinities as the decoder reads them) and a newline. A JSONL
file, the same file compressed, and its Parquet conversion have one digest, because
the readers give the same objects (floats bit for bit, integers kept apart from
floats); two files that differ in one trace, one value or the order of their traces
have different digests.

Certificates record both in their provenance (``traces_sha256`` and
``traces_digest``; ``liftguard calibrate --certificate`` also ``fitted_on_sha256`` and
``fitted_on_digest``): :func:`trace_identity`. :func:`same_traces` compares a
recorded provenance with a file's identity: the same data when the digests match,
or, for a certificate made before the digest was recorded, when the file sha256
matches, as before.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

from ._files import Options, open_trace_objects, trace_file_sha256

__all__ = ["TraceDigest", "same_traces", "trace_digest", "trace_identity"]


class TraceDigest:
    """The traces digest, fed one decoded trace at a time (as a reader reads them), so
    that a command computes it in the pass that reads the traces.

    >>> a, b = TraceDigest(), TraceDigest()
    >>> a.add({"id": "q1", "answer": "Paris", "logprobs": [-0.5]})
    >>> b.add({"logprobs": [-0.5], "answer": "Paris", "id": "q1"})
    >>> a.hexdigest() == b.hexdigest(), a.count
    (True, 1)
    """

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self.count = 0

    def add(self, obj: Any) -> None:
        """Add the next trace (a decoded JSON value)."""
        line = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        self._sha.update(line.encode("utf-8") + b"\n")
        self.count += 1

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def trace_digest(path: str | os.PathLike[str], *, storage_options: Options = None) -> str:
    """The traces digest of a trace file (JSONL, compressed or not, or Parquet; local or
    a URL), read as every reader reads it."""
    digest = TraceDigest()
    for _, obj in open_trace_objects(path, storage_options=storage_options):
        digest.add(obj)
    return digest.hexdigest()


def trace_identity(
    path: str | os.PathLike[str], *, digest: str | None = None, storage_options: Options = None
) -> dict[str, str]:
    """What a certificate's provenance records of the trace file ``path``:
    ``{"traces_sha256": its bytes' sha256, "traces_digest": its traces digest}``
    (``digest``: the digest already computed while the traces were read, by a
    :class:`TraceDigest`; else the file is read again for it)."""
    if digest is None:
        digest = trace_digest(path, storage_options=storage_options)
    sha = trace_file_sha256(path, storage_options=storage_options)
    return {"traces_sha256": sha, "traces_digest": digest}


def same_traces(recorded: Mapping[str, Any], identity: Mapping[str, Any]) -> bool:
    """Whether the provenance ``recorded`` names the data of the file whose
    :func:`trace_identity` is ``identity``: their traces digests match or, for a
    provenance that records no digest (made before there was one), their sha256 do, as
    they were compared before."""
    new, digest = recorded.get("traces_digest"), identity.get("traces_digest")
    if isinstance(new, str) and isinstance(digest, str):
        return new == digest
    old, sha = recorded.get("traces_sha256"), identity.get("traces_sha256")
    return isinstance(old, str) and isinstance(sha, str) and old == sha
