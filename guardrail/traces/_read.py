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
and the format's constants in :mod:`guardrail.traces._format`, the field checks
in :mod:`guardrail.traces._checks`, the strict parser of objects in
:mod:`guardrail.traces._parse` and the one writer of trace lines (of a
:class:`Trace`, of an API recording, of a line relabelled) in
:mod:`guardrail.traces._write`; the readers of lines and files are here.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

from .._errors import TraceFormatError
from .._trace_format import CENSORED_LOGPROB, DEFAULT_LOGZ_TEMPERATURES, Trace
from ._parse import parse_trace
from ._write import dump_trace_line, trace_to_dict

__all__ = [
    "CENSORED_LOGPROB",
    "DEFAULT_LOGZ_TEMPERATURES",
    "Trace",
    "dump_trace_line",
    "file_sha256",
    "iter_trace_objects",
    "iter_traces",
    "parse_trace",
    "parse_trace_lines",
    "read_traces",
    "trace_objects",
    "trace_to_dict",
]

# A byte-order mark some editors put at the start of a UTF-8 file; it is skipped.
_BOM = "\ufeff"


# --------------------------------------------------------------------------- #
# Reading lines
# --------------------------------------------------------------------------- #


def _check_limit(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be None or a non-negative integer, got {limit!r}")


def parse_trace_lines(
    lines: Iterable[str],
    *,
    source: str = "<traces>",
    limit: int | None = None,
    require_label: bool = True,
) -> Iterator[Trace]:
    """Parse JSONL text, one trace per line, lazily.

    ``lines`` is an iterable of lines (trailing newlines allowed); a single
    ``str`` is taken as the whole text and split on ``"\\n"``. A UTF-8
    byte-order mark at the start of the first line is skipped. Blank lines are
    skipped but still counted, so error line numbers (1-based) match the
    source. At most ``limit`` traces are produced. Invalid arguments raise
    at once; format errors are raised when the offending line is reached.
    """
    _check_limit(limit)
    if isinstance(lines, str):
        lines = lines.split("\n")
    return _parse_lines(lines, source, limit, require_label)


def _objects(lines: Iterable[str], source: str) -> Iterator[tuple[int, Any]]:
    """``(1-based line number, decoded value)`` of each non-blank line (a BOM skipped)."""
    for lineno, text in enumerate(lines, start=1):
        if lineno == 1 and text.startswith(_BOM):
            text = text[1:]
        if not text or text.isspace():
            continue
        try:
            obj = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            why = (
                f"{exc.msg} (column {exc.colno})"
                if isinstance(exc, json.JSONDecodeError)
                else "nested too deeply"
            )
            raise TraceFormatError(f"invalid JSON: {why}", source=source, line=lineno) from None
        yield lineno, obj


def _parse_lines(
    lines: Iterable[str], source: str, limit: int | None, require_label: bool
) -> Iterator[Trace]:
    if limit == 0:
        return
    for count, (lineno, obj) in enumerate(_objects(lines, source), start=1):
        yield parse_trace(obj, source=source, line=lineno, require_label=require_label)
        if limit is not None and count >= limit:
            return


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


def trace_objects(raw_lines: Iterable[bytes], *, source: str) -> Iterator[tuple[int, Any]]:
    """``(1-based line number, decoded JSON value)`` of each non-blank line of UTF-8 JSONL
    given as raw lines (an open binary file, say, local or not), with the errors of
    :func:`iter_trace_objects`, which reads a path through it; ``source`` names the file
    in them.

    >>> list(trace_objects([b'{"id": "a"}\\n', b"\\n", b"[1]"], source="mem"))
    [(1, {'id': 'a'}), (3, [1])]
    """
    return _objects(_decoded_lines(raw_lines, source), source)


def iter_trace_objects(path: str | os.PathLike[str]) -> Iterator[tuple[int, Any]]:
    """``(1-based line number, decoded JSON value)`` of each non-blank line of a trace
    file, read as :func:`iter_traces` reads it (same errors), each left to the caller
    to pass to :func:`parse_trace`: for a reader that looks first at keys the format
    leaves to the writer, such as a recording's ``complete`` and ``verdict``.

    >>> import json, tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "t.jsonl"
    >>> _ = f.write_text(json.dumps({"id": "a", "complete": False}) + "\\n\\n")
    >>> next(iter_trace_objects(f))
    (1, {'id': 'a', 'complete': False})
    """
    return _iter_objects(os.fspath(path))


def _iter_objects(path: str) -> Iterator[tuple[int, Any]]:
    with open(path, "rb") as fh:
        yield from trace_objects(fh, source=path)


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
