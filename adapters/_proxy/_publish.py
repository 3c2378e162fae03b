"""Publishing finished recording files whole: to object storage (``--record s3://bucket/prefix``)
or, for a Parquet recording, into the local recording directory.

The recorder's writer thread appends trace lines to a JSONL spool file, local and
private (:mod:`._recording`), and hands each spool file over once it is finished
(rotated at the size limit or the age limit, or at shutdown). A :class:`Publisher`
thread of its own, never the request path nor the writer, then

- converts it to Parquet if the recording's format is ``parquet``
  (:class:`adapters.tracefiles.TraceFileWriter`, a temporary file beside it);
- publishes it whole under the same name the local recorder would give it
  (``<dataset>-<start time>-<host>-<pid>-<n>.jsonl`` or ``.parquet``): one put of
  the finished object (``fs.put_file``) under an fsspec URL, or an atomic rename
  into a local directory; a reader never sees part of an object;
- deletes the spool file once published.

A publication that fails is tried again, ``attempts`` times in all with a doubling
pause (``sleep``: injectable), and then the spool file is **kept** where it is (its
path logged as a warning, counted in ``liftguard_record_objects_total{result=
"kept_locally"}`` and ``liftguard_record_lines_kept_locally_total``): nothing is
dropped silently, and an operator can upload it by hand. :meth:`Publisher.close`
publishes what is handed over before it returns (at shutdown).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._serving._metrics import ProxyMetrics
from .._tracefiles._files import TraceFileWriter, is_url, open_trace_objects

__all__ = ["Publisher", "SpoolFile"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SpoolFile:
    """A finished spool file: its path, its name without the suffix, its number of lines."""

    path: Path
    name: str
    lines: int


_STOP = object()


class Publisher:
    """One thread that publishes finished spool files (see the module docstring).

    ``target``: an fsspec URL (``s3://bucket/prefix``) or a local directory;
    ``fmt``: ``"jsonl"`` or ``"parquet"``.
    """

    def __init__(
        self,
        target: str,
        *,
        metrics: ProxyMetrics,
        fmt: str = "jsonl",
        storage_options: Mapping[str, Any] | None = None,
        attempts: int = 5,
        sleep: Callable[[float], None] = time.sleep,
        first_pause_s: float = 0.5,
    ) -> None:
        self.target = target.rstrip("/") if is_url(target) else target
        self.fmt = fmt
        self._metrics = metrics
        self._attempts = max(1, attempts)
        self._sleep, self._pause = sleep, first_pause_s
        self._fs: Any = None
        self._root = ""
        if is_url(target):
            import importlib

            from guardrail import MissingDependencyError

            try:
                url_to_fs = importlib.import_module("fsspec.core").url_to_fs
            except ImportError as exc:
                raise MissingDependencyError(
                    f"--record {target} needs fsspec (and s3fs for s3://): "
                    'pip install "liftguard[s3]"'
                ) from exc
            self._fs, root = url_to_fs(self.target, **dict(storage_options or {}))
            self._root = str(root).rstrip("/")
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.published = 0  # files
        self.kept: list[Path] = []  # spool files kept after every try failed

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="liftguard-record-publisher", daemon=True
            )
            self._thread.start()

    def submit(self, spool: SpoolFile) -> None:
        """Hand over a finished spool file (never blocks: the queue is unbounded, its
        items are files on disk)."""
        self._queue.put(spool)

    def flush(self) -> None:
        """Wait until every file handed over so far is published or kept."""
        self._queue.join()

    def close(self) -> None:
        """Publish what is handed over, then stop the thread."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join()
            self._thread = None
        else:  # never started: publish here
            while not self._queue.empty():
                item = self._queue.get()
                if item is not _STOP:
                    self._publish(item)
                self._queue.task_done()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                self._publish(item)
            finally:
                self._queue.task_done()

    # -- one file ----------------------------------------------------------------------------

    def _publish(self, spool: SpoolFile) -> None:
        name = f"{spool.name}.{self.fmt}"
        error: BaseException | None = None
        for attempt in range(self._attempts):
            if attempt:
                self._sleep(self._pause * 2 ** (attempt - 1))
            try:
                self._publish_once(spool.path, name)
            except Exception as exc:  # any failure of fsspec or the disk: try again
                error = exc
                logger.info("recording %s: publishing failed (try %d): %s", name, attempt + 1, exc)
                continue
            with contextlib.suppress(OSError):
                spool.path.unlink()
            with self._lock:
                self.published += 1
            self._metrics.record_objects.labels(result="published").inc()
            return
        with self._lock:
            self.kept.append(spool.path)
        self._metrics.record_objects.labels(result="kept_locally").inc()
        self._metrics.record_lines_kept.inc(spool.lines)
        logger.warning(
            "recording: could not publish %s to %s after %d tries (%s); its %d lines are "
            "kept in %s",
            name,
            self.target,
            self._attempts,
            error,
            spool.lines,
            spool.path,
        )

    def _publish_once(self, path: Path, name: str) -> None:
        source = path
        if self.fmt == "parquet":
            source = path.with_name(f"tmp-{name}")  # ends with .parquet, as its format
            _to_parquet(path, source)
        try:
            if self._fs is not None:
                self._fs.put_file(str(source), f"{self._root}/{name}")
            else:
                os.replace(source, Path(self.target) / name)
        finally:
            if source != path:
                with contextlib.suppress(OSError):
                    source.unlink()


def _to_parquet(spool: Path, out: Path) -> None:
    """The spool file's lines as a Parquet file (mode 0600, as the recordings)."""
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)
    with TraceFileWriter(out) as writer:
        for _, obj in open_trace_objects(spool):
            writer.write(obj)
