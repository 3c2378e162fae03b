"""Validating reader and writer for JSONL answer traces.

A trace file holds one JSON object per line (UTF-8), one generated answer per
line, with the full-vocabulary log-probability information of every answer
token. The format (documented with the shared trace data) is::

    {"id": str, "dataset": str, "model": str, "question": str,
     "references": [str, ...], "prompt": str, "answer": str, "correct": bool,
     "vocab_size": int, "top_k": int,
     "tokens": [{"id": int, "text": str, "logprob": float,
                 "top": [[int, float], ...], "entropy": float,
                 "logz": {"1.5": float, "2.0": float},
                 "prompt_free_logprob": float}, ...]}

A trace recorded from an API stream (``liftguard serve --record``) gives
``null`` (or nothing) where the stream carries nothing: ``vocab_size``, and
per token ``id``, ``entropy``, ``logz`` (also ``{}``), ``prompt_free_logprob``
and the ids of the ``top`` pairs; :attr:`Trace.missing` names what is absent
and the writer puts ``null`` back (``{}`` for ``logz``).

:func:`parse_trace` turns one decoded object into a :class:`Trace`, whose
per-token data are read-only numpy arrays; :func:`iter_traces`,
:func:`read_traces` and :func:`parse_trace_lines` read whole files or
in-memory text. Anything that does not follow the format raises
:class:`~guardrail._errors.TraceFormatError` naming the source, the 1-based
line and the field path (e.g. ``tokens[3].logprob``).
:func:`trace_to_dict` and :func:`dump_trace_line` write the documented object
back, so that read -> write -> read round-trips exactly.

The code lies in private modules, re-exported here: the :class:`Trace` record
and the format's constants in :mod:`guardrail._trace_format`, the field checks
in :mod:`guardrail._trace_checks`, the strict parser of objects and lines
in :mod:`guardrail._trace_parse` and the one writer of trace lines (of a
:class:`Trace`, of an API recording, of a line relabelled) in
:mod:`guardrail._trace_write`; the file reader is here.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator

from ._errors import TraceFormatError
from ._trace_format import CENSORED_LOGPROB, DEFAULT_LOGZ_TEMPERATURES, Trace
from ._trace_parse import _check_limit, _parse_lines, parse_trace, parse_trace_lines
from ._trace_write import dump_trace_line, trace_to_dict

__all__ = [
    "CENSORED_LOGPROB",
    "DEFAULT_LOGZ_TEMPERATURES",
    "Trace",
    "dump_trace_line",
    "file_sha256",
    "iter_traces",
    "parse_trace",
    "parse_trace_lines",
    "read_traces",
    "trace_to_dict",
]


# --------------------------------------------------------------------------- #
# Reading files
# --------------------------------------------------------------------------- #


def _decoded_lines(raw_lines: Iterable[bytes], source: str) -> Iterator[str]:
    for lineno, raw in enumerate(raw_lines, start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TraceFormatError(
                f"invalid UTF-8 at byte {exc.start} of the line", source=source, line=lineno
            ) from None


def iter_traces(
    path: str | os.PathLike[str],
    *,
    limit: int | None = None,
    require_label: bool = True,
) -> Iterator[Trace]:
    """Lazily read the traces of a UTF-8 JSONL file (see :func:`parse_trace_lines`).

    The file is opened when iteration starts and closed when it ends. A
    path that cannot be read raises :class:`OSError` (``FileNotFoundError``
    for a missing file, ``IsADirectoryError`` for a directory on POSIX);
    malformed content raises :class:`~guardrail._errors.TraceFormatError`
    naming the file and line. A UTF-8 byte-order mark at the start of the
    file is accepted. Lines are split on ``"\\n"`` only, as JSONL requires.
    """
    _check_limit(limit)
    return _iter_file(os.fspath(path), limit, require_label)


def _iter_file(path: str, limit: int | None, require_label: bool) -> Iterator[Trace]:
    with open(path, "rb") as fh:
        yield from _parse_lines(_decoded_lines(fh, path), path, limit, require_label)


def read_traces(
    path: str | os.PathLike[str],
    *,
    limit: int | None = None,
    require_label: bool = True,
) -> list[Trace]:
    """Read the traces of a UTF-8 JSONL file into a list (see :func:`iter_traces`)."""
    return list(iter_traces(path, limit=limit, require_label=require_label))


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file's bytes, read in 1 MiB blocks (a trace file's or a model's, as
    certificates record them)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
