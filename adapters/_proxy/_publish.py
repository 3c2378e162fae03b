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
"kept_locally"}`` and ``liftguard_record_lines_kept_locally_total``), its lock still
held: nothing is dropped silently. Each kept file gets one more try whenever a later
file is published (the store answers again), and a file still kept at shutdown is
published by the next start. :meth:`Publisher.close` publishes what is handed over
before it returns (at shutdown).

**Files an earlier run left.** :meth:`Publisher.recover` (called when the recorder
starts) publishes, from the same thread, every spool file of the directory that no
live process owns (:mod:`._spool`: a run that crashed or was killed, or files kept
at its shutdown), each whole and under its own name, so an object that was in fact
uploaded just before a crash is overwritten by the same object, never duplicated. A
torn last line is cut off first; a file that cannot be read back, or a Parquet
conversion without its spool file, is never published: it is moved to the spool's
``set-aside/`` directory (``result="set_aside"``). Each recovered file is one
warning line and counts in ``result="recovered"`` and
``liftguard_record_lines_recovered_total``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from guardrail._errors import TraceFormatError

from .._serving._metrics import ProxyMetrics
from .._tracefiles._files import TraceFileWriter, is_url, open_trace_objects
from ._spool import (
    conversion_path,
    give_up,
    left_files,
    orphan_conversions,
    prepare,
    set_aside,
    unpublishable,
)

__all__ = ["Publisher", "SpoolFile"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SpoolFile:
    """A finished spool file: its path, its name without the suffix, its number of lines,
    the descriptor that holds its lock (:mod:`._spool`; closed once the file is
    published or set aside) and, for a file an earlier run left, what recovery did to it."""

    path: Path
    name: str
    lines: int
    fd: int | None = None
    note: str = ""


_STOP = object()


@dataclass(frozen=True)
class _Recover:
    directory: Path


_LEFT = "left in the spool by an earlier run"
_KEPT = "kept after failed tries"


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

            from guardrail._errors import MissingDependencyError

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
        self.published = 0  # files of this run
        self.recovered = 0  # files left by an earlier run, or kept and published later
        self.kept: list[Path] = []  # spool files kept after every try failed
        self.set_aside: list[Path] = []  # spool files that cannot be published, moved aside
        self._kept: list[SpoolFile] = []

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

    def recover(self, directory: str | os.PathLike[str]) -> None:
        """Publish, from the publisher's thread, the spool files in ``directory`` that no
        live process owns (left by a run that ended: :mod:`._spool`)."""
        self._queue.put(_Recover(Path(directory)))

    def flush(self) -> None:
        """Wait until every file handed over so far is published or kept."""
        self._queue.join()

    def close(self) -> None:
        """Publish what is handed over, then stop the thread (the kept files' locks are
        released: the next start publishes them)."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join()
            self._thread = None
        else:  # never started: publish here
            while not self._queue.empty():
                item = self._queue.get()
                if item is not _STOP:
                    self._handle(item)
                self._queue.task_done()
        with self._lock:
            kept, self._kept = self._kept, []
        for spool in kept:
            _release(spool)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                self._handle(item)
            except Exception:  # the thread never dies: what it was doing stays in the spool
                logger.exception("recording: publishing failed")
            finally:
                self._queue.task_done()

    def _handle(self, item: Any) -> None:
        if isinstance(item, _Recover):
            self._recover(item.directory)
        elif self._publish(item) and self._kept:  # the store answers again: retry the kept
            self._retry_kept()

    # -- one file ----------------------------------------------------------------------------

    def _publish(self, spool: SpoolFile, late: str = "") -> bool:
        """Publish ``spool`` (``late``: why it is published only now), trying again with
        pauses; keep it where it is if every try fails. True once published."""
        error = self._tries(spool, self._attempts)
        if error is None:
            self._published(spool, late)
            return True
        if error is not _ASIDE:
            self._keep(spool, error)
        return False

    def _tries(self, spool: SpoolFile, attempts: int) -> BaseException | None:
        """None once ``spool`` is published; else the last error (``_ASIDE``: the file
        itself cannot be published, and is set aside)."""
        name = f"{spool.name}.{self.fmt}"
        error: BaseException | None = None
        for attempt in range(attempts):
            if attempt:
                self._sleep(self._pause * 2 ** (attempt - 1))
            try:
                self._publish_once(spool.path, name)
            except Exception as exc:  # any failure of fsspec or the disk: try again
                if unpublishable(exc):
                    self._set_aside(spool, exc)
                    return _ASIDE
                error = exc
                logger.info("recording %s: publishing failed (try %d): %s", name, attempt + 1, exc)
                continue
            return None
        return error

    def _published(self, spool: SpoolFile, late: str) -> None:
        with contextlib.suppress(OSError):
            spool.path.unlink()
        _release(spool)
        if not late:
            with self._lock:
                self.published += 1
            self._metrics.record_objects.labels(result="published").inc()
            return
        with self._lock:
            self.recovered += 1
        self._metrics.record_objects.labels(result="recovered").inc()
        self._metrics.record_lines_recovered.inc(spool.lines)
        logger.warning(
            "recording: published %s.%s to %s, %s (%d line%s%s)",
            spool.name,
            self.fmt,
            self.target,
            late,
            spool.lines,
            "" if spool.lines == 1 else "s",
            f"; {spool.note}" if spool.note else "",
        )

    def _keep(self, spool: SpoolFile, error: BaseException) -> None:
        with self._lock:
            self.kept.append(spool.path)
            self._kept.append(spool)
        self._metrics.record_objects.labels(result="kept_locally").inc()
        self._metrics.record_lines_kept.inc(spool.lines)
        logger.warning(
            "recording: could not publish %s.%s to %s after %d tries (%s); its %d lines are "
            "kept in %s (tried again after the next file is published, and at the next start)",
            spool.name,
            self.fmt,
            self.target,
            self._attempts,
            error,
            spool.lines,
            spool.path,
        )

    def _retry_kept(self) -> None:
        """One more try for each kept file, its lock still held."""
        with self._lock:
            kept = list(self._kept)
        for spool in kept:
            error = self._tries(spool, 1)
            if error is not None and error is not _ASIDE:
                continue
            with self._lock:
                self._kept.remove(spool)
                self.kept.remove(spool.path)
            if error is None:
                self._published(spool, _KEPT)

    def _set_aside(self, spool: SpoolFile, error: BaseException) -> None:
        where = spool.path
        try:
            where = set_aside(spool.path)
        except OSError as exc:  # left in the spool: set aside again at the next start
            logger.warning("recording: could not move %s aside: %s", spool.path, exc)
        _release(spool)
        self._aside(where, error)

    def _aside(self, where: Path, why: object) -> None:
        with self._lock:
            self.set_aside.append(where)
        self._metrics.record_objects.labels(result="set_aside").inc()
        logger.warning("recording: %s cannot be published (%s); it is kept aside, never "
                       "published", where, why)  # fmt: skip

    # -- what an earlier run left ----------------------------------------------------------------

    def _recover(self, directory: Path) -> None:
        for orphan in orphan_conversions(directory):
            try:
                moved = set_aside(orphan)
            except FileNotFoundError:  # its spool file was published meanwhile
                continue
            except OSError as exc:
                logger.warning("recording: could not move %s aside: %s", orphan, exc)
                continue
            self._aside(moved, "a Parquet conversion whose spool file is gone")
        for path, fd in left_files(directory):
            spool = SpoolFile(path, path.stem, 0, fd)
            with contextlib.suppress(OSError):  # a conversion cut off: made again
                conversion_path(path, f"{path.stem}.parquet").unlink()
            torn: list[int] = []
            try:
                lines = prepare(path, fd, torn.append)
            except TraceFormatError as exc:
                self._set_aside(spool, exc)
                continue
            except OSError as exc:
                logger.warning("recording: could not read %s back: %s", path, exc)
                _release(spool)
                continue
            if not lines:  # nothing to publish
                with contextlib.suppress(OSError):
                    path.unlink()
                _release(spool)
                continue
            note = f"its torn last line {torn[0]} cut off" if torn else ""
            self._publish(replace(spool, lines=lines, note=note), _LEFT)

    def _publish_once(self, path: Path, name: str) -> None:
        source = path
        if self.fmt == "parquet":
            source = conversion_path(path, name)  # ends with .parquet, as its format
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


_ASIDE = RuntimeError("set aside")  # the outcome of a file that cannot be published


def _release(spool: SpoolFile) -> None:
    """Close the descriptor that holds ``spool``'s lock; the file is no longer this
    process's."""
    if spool.fd is not None:
        with contextlib.suppress(OSError):
            os.close(spool.fd)
    give_up(spool.path)


def _to_parquet(spool: Path, out: Path) -> None:
    """The spool file's lines as a Parquet file (mode 0600, as the recordings)."""
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)
    with TraceFileWriter(out) as writer:
        for _, obj in open_trace_objects(spool):
            writer.write(obj)
