"""Trace files, JSONL or Parquet (by the ``.parquet`` suffix), local or behind an fsspec URL:
the one opener every reader uses, and the one writer of whole files.

:func:`open_trace_objects` yields ``(number, decoded value)`` for each trace of a file:

- JSONL (any other suffix; ``.gz``, ``.xz`` or ``.bz2`` after it: compressed so, and
  read through the standard library): the line number and the line's value, read by
  :func:`guardrail.traces._read.trace_objects` (its errors name ``file:line``: invalid
  UTF-8 or JSON); with ``torn`` given, a last line without its newline that is not
  JSON (or not UTF-8) is a record an interrupted write cut off: it is skipped and
  ``torn(line number)`` is called, where any other bad line is still an error;
- Parquet (:mod:`._columnar`): the 1-based row number and the row's object, read a
  batch at a time, one row group after the other (never the whole file); a file that
  is not Parquet, is damaged or has another schema is a
  :class:`~guardrail._errors.TraceFormatError` in one line naming the file.

A path with ``://`` (other than ``file://``) is opened with fsspec
(``pip install "liftguard[s3]"`` for ``s3://``), with ``storage_options`` or
fsspec's defaults and environment (``AWS_ENDPOINT_URL``, credentials...).

:class:`TraceFileWriter` writes decoded trace objects as JSONL (by the format's one
writer, :func:`guardrail.traces._write.label_line`, so that a line read is written back as
it was) or as Parquet row groups; :func:`convert_traces` copies a file from one
format to the other.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import IO, Any

from guardrail._errors import MissingDependencyError, TraceFormatError
from guardrail.traces._read import trace_objects
from guardrail.traces._write import label_line

__all__ = [
    "PARQUET_SUFFIX",
    "TraceFileWriter",
    "convert_traces",
    "is_parquet",
    "is_url",
    "open_binary",
    "open_trace_objects",
    "trace_file_sha256",
]

PARQUET_SUFFIX = ".parquet"
_BOM = b"\xef\xbb\xbf"
#: Rows per Parquet row group written, and per batch read.
ROW_GROUP_ROWS = 512
_BATCH_ROWS = 64
_COLUMNAR_HINT = 'the Parquet trace format needs pyarrow: pip install "liftguard[columnar]"'
_URL_HINT = 'needs fsspec (and s3fs for s3://): pip install "liftguard[s3]"'

Options = Mapping[str, Any] | None


def is_parquet(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a Parquet trace file (its suffix is ``.parquet``)."""
    return os.fspath(path).lower().endswith(PARQUET_SUFFIX)


def is_url(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an fsspec URL (``s3://...``) rather than a local path."""
    text = os.fspath(path)
    return "://" in text and not text.startswith("file://")


def _local(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


def _fs(url: str, options: Options) -> tuple[Any, str]:
    try:
        url_to_fs = importlib.import_module("fsspec.core").url_to_fs
    except ImportError as exc:
        raise MissingDependencyError(f"{url}: {_URL_HINT}") from exc
    try:
        fs, where = url_to_fs(url, **dict(options or {}))
    except ImportError as exc:
        raise MissingDependencyError(f"{url}: {_URL_HINT} ({exc})") from exc
    return fs, str(where)


def open_binary(path: str, mode: str, storage_options: Options = None) -> IO[bytes]:
    """``path`` opened in binary ``mode`` (``"rb"``, ``"wb"``), a local file or an fsspec
    URL's object."""
    if not is_url(path):
        return open(_local(path), mode)
    fs, where = _fs(path, storage_options)
    return fs.open(where, mode)  # type: ignore[no-any-return]


def _pyarrow() -> tuple[Any, Any]:
    try:
        return importlib.import_module("pyarrow"), importlib.import_module("pyarrow.parquet")
    except ImportError as exc:
        raise MissingDependencyError(_COLUMNAR_HINT) from exc


# --------------------------------------------------------------------------- #
# Reading
# --------------------------------------------------------------------------- #


def open_trace_objects(
    path: str | os.PathLike[str],
    *,
    storage_options: Options = None,
    torn: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, Any]]:
    """``(line or row number, decoded value)`` of each trace of a JSONL or Parquet file
    (see the module docstring); the file is opened when iteration starts.

    >>> import json, tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "t.jsonl"
    >>> _ = f.write_text(json.dumps({"id": "a"}) + "\\n" + '{"id": "b", "ans')
    >>> list(open_trace_objects(f, torn=lambda n: print("torn line", n)))
    torn line 2
    [(1, {'id': 'a'})]
    """
    text = os.fspath(path)
    if is_parquet(text):
        return _parquet_objects(text, storage_options)
    return _jsonl_objects(text, storage_options, torn)


_COMPRESSED = {".gz": "gzip", ".xz": "lzma", ".bz2": "bz2"}
"""A JSONL file's compressed suffixes, read through the standard library's module."""


def _jsonl_objects(
    path: str, options: Options, torn: Callable[[int], None] | None
) -> Iterator[tuple[int, Any]]:
    with open_binary(path, "rb", options) as raw:
        module = next((m for sfx, m in _COMPRESSED.items() if path.endswith(sfx)), None)
        fh: IO[bytes] = raw if module is None else importlib.import_module(module).open(raw)
        try:
            if torn is None:
                yield from trace_objects(fh, source=path)
            else:
                yield from _tolerant_lines(fh, path, torn)
        finally:
            fh.close()


def _tolerant_lines(
    raw_lines: IO[bytes], path: str, torn: Callable[[int], None]
) -> Iterator[tuple[int, Any]]:
    """The lines of a recording, a torn last line skipped (``torn(line)``)."""
    import json

    for lineno, line in enumerate(raw_lines, start=1):
        raw = line[len(_BOM) :] if lineno == 1 and line.startswith(_BOM) else line
        last = not raw.endswith(b"\n")  # only the end of the file lacks one
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            if last:
                torn(lineno)
                return
            raise TraceFormatError(
                f"invalid UTF-8 (byte {exc.start + 1} of the line)", source=path, line=lineno
            ) from exc
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            if last:
                torn(lineno)
                return
            raise TraceFormatError(
                f"invalid JSON: {exc.msg} (column {exc.colno})", source=path, line=lineno
            ) from exc
        yield lineno, value


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _parquet_objects(path: str, options: Options) -> Iterator[tuple[int, Any]]:
    from ._columnar import FORMAT_KEY, FORMAT_VERSION, SCHEMA, batch_objects

    pa, pq = _pyarrow()
    with open_binary(path, "rb", options) as fh:
        try:
            pf = pq.ParquetFile(fh)
        except (pa.ArrowException, OSError) as exc:  # pyarrow raises OSError for bad data
            raise TraceFormatError(
                f"not a readable Parquet file ({_first_line(exc)})", source=path
            ) from exc
        schema = pf.schema_arrow
        version = (schema.metadata or {}).get(FORMAT_KEY)
        if version != FORMAT_VERSION or not schema.remove_metadata().equals(
            SCHEMA.remove_metadata()
        ):
            why = "no liftguard.traces mark" if version is None else "another schema"
            raise TraceFormatError(
                f"a Parquet file, but not a trace file in liftguard's format ({why})",
                source=path,
            )
        row = 0
        batches = _row_group_batches(pf)
        while True:
            try:
                batch = next(batches, None)
            except (pa.ArrowException, OSError) as exc:  # damaged pages, or a failed read
                raise TraceFormatError(
                    f"unreadable Parquet data after row {row} ({_first_line(exc)})", source=path
                ) from exc
            if batch is None:
                return
            for obj in batch_objects(batch):
                row += 1
                yield row, obj


def _row_group_batches(pf: Any) -> Iterator[Any]:
    """The record batches of a Parquet file, one row group read at a time on this thread:
    what is decoded at once is one row group, not the row groups that pyarrow's
    read-ahead over a whole file keeps in flight (measured: about 100 MiB more at the
    peak over a 20,000-trace file)."""
    for group in range(pf.num_row_groups):
        yield from pf.iter_batches(batch_size=_BATCH_ROWS, row_groups=[group], use_threads=False)


def trace_file_sha256(path: str | os.PathLike[str], *, storage_options: Options = None) -> str:
    """The sha256 of a trace file's bytes (local or a URL's object), read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open_binary(os.fspath(path), "rb", storage_options) as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --------------------------------------------------------------------------- #
# Writing
# --------------------------------------------------------------------------- #


class TraceFileWriter:
    """Writes decoded trace objects to ``path``: JSONL, or Parquet if it ends with
    ``.parquet`` (row groups of ``row_group_rows`` traces, zstd-compressed), local or
    an fsspec URL. Use it as a context manager; the file is complete once closed.

    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "t.jsonl"
    >>> with TraceFileWriter(out) as w:
    ...     w.write({"id": "a", "answer": "Paris"})
    >>> out.read_text()
    '{"id": "a", "answer": "Paris"}\\n'
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        storage_options: Options = None,
        row_group_rows: int = ROW_GROUP_ROWS,
    ) -> None:
        self.path = os.fspath(path)
        self.parquet = is_parquet(self.path)
        self.written = 0
        self._rows: list[Any] = []
        self._group = max(1, int(row_group_rows))
        self._writer: Any = None
        if self.parquet:
            _, pq = _pyarrow()
            from ._columnar import SCHEMA

            self._fh = open_binary(self.path, "wb", storage_options)
            try:
                self._writer = pq.ParquetWriter(self._fh, SCHEMA, compression="zstd")
            except BaseException:
                self._fh.close()
                raise
        else:
            self._fh = open_binary(self.path, "wb", storage_options)

    def write(self, obj: Any) -> None:
        """Add one trace (a decoded JSON object)."""
        if self.parquet:
            self._rows.append(obj)
            if len(self._rows) >= self._group:
                self._flush()
        else:
            self._fh.write(label_line(obj, None).encode("utf-8") + b"\n")
        self.written += 1

    def _flush(self) -> None:
        from ._columnar import objects_batch

        if self._rows:
            self._writer.write_batch(objects_batch(self._rows))
            self._rows = []

    def close(self) -> None:
        """Write what is held and close the file."""
        try:
            if self._writer is not None:
                self._flush()
                self._writer.close()
                self._writer = None
        finally:
            self._fh.close()

    def __enter__(self) -> TraceFileWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def convert_traces(
    source: str,
    target: str,
    *,
    storage_options: Options = None,
    torn: Callable[[int], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Copy the traces of ``source`` to ``target``, each file JSONL or Parquet by its
    suffix; returns how many. ``progress(done, total)`` is told how far the source is
    read (bytes of a JSONL file, rows of a Parquet file)."""
    total = _source_size(source, storage_options) if progress is not None else 0
    done = 0
    with TraceFileWriter(target, storage_options=storage_options) as out:
        for number, obj in open_trace_objects(source, storage_options=storage_options, torn=torn):
            out.write(obj)
            if progress is not None:
                done = number if is_parquet(source) else done + len(label_line(obj, None)) + 1
                progress(min(done, total), total)
        return out.written


def _source_size(path: str, options: Options) -> int:
    """Rows of a Parquet file, bytes of a JSONL file (for progress)."""
    if is_parquet(path):
        _, pq = _pyarrow()
        with open_binary(path, "rb", options) as fh, contextlib.suppress(Exception):
            return int(pq.ParquetFile(fh).metadata.num_rows)
        return 0
    if not is_url(path):
        return os.path.getsize(_local(path))
    fs, where = _fs(path, options)
    return int(fs.size(where))
