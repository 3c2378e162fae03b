"""Recording (``--record DIR`` or ``--record URL``): every guarded answer as one trace line,
written off the request path.

A request hands its finished answer to :meth:`Recorder.submit`, which never
blocks: the record goes into a bounded queue, or, when the queue is full, is
dropped and counted (``liftguard_records_dropped_total{reason="queue_full"}``). One
writer thread turns records into lines and appends them to
``DIR/<dataset>-<start time>-<host>-<pid>-<n>.jsonl``, starting a new file only
when the current one would pass ``max_bytes``. Each line is written whole or not
at all: one ``write`` on a descriptor opened for appending, and a write that fails
or comes up short (a full disk) is cut back off the file (truncated to its size
before), so a file never holds part of a line; that line is dropped and counted
(``reason="disk"``) and the next one goes to the same file. Replicas can share a
directory: the file names differ by host and process.

Recording to object storage (``--record s3://bucket/prefix``, any fsspec URL) or in
Parquet (``--record-format parquet``): the same writer appends the same lines to a
local spool file (in the destination's spool directory, the same at every start:
:mod:`adapters._proxy._spool`; ``DIR/.spool`` for a local Parquet recording), locked
while it is written and until it is published, and each finished spool file is handed
to a :class:`~adapters._proxy._publish.Publisher`, which publishes it whole, under the
same name, from a thread of its own; at start the publisher first publishes the
spool files an earlier run left. A spool file is finished when the next line
would pass ``max_bytes``, when it is ``max_age_s`` old (so that a quiet proxy's
answers still arrive; the writer checks the age at least every second and on
:meth:`Recorder.tick`, against its ``clock``), and at :meth:`Recorder.close`, which
waits for the publisher: an answer that was written is published or kept in the
spool, never lost, across rotations and shutdown.

The lines hold users' prompts and answers, so they are private to the user the
proxy runs as, whatever the umask: the directories the recorder creates are
mode 0700 and its files mode 0600 (a directory that already exists keeps its
mode).

The line itself (what :func:`record_line` writes) is documented in
:mod:`adapters._proxy._record_line`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .._serving._metrics import ProxyMetrics
from .._tracefiles._files import is_url
from ._publish import Publisher, SpoolFile
from ._record_line import AnswerRecord, check_dataset_name, record_line
from ._spool import give_up, lock_new, make_private_dirs, spool_directory, take

__all__ = ["AnswerRecord", "Recorder", "check_dataset_name", "open_recorder", "record_line"]

logger = logging.getLogger(__name__)


def open_recorder(
    target: str,
    *,
    metrics: ProxyMetrics,
    dataset: str = "proxy",
    fmt: str = "jsonl",
    max_bytes: int = 64 * 1024 * 1024,
    max_age_s: float | None = 300.0,
    queue_size: int = 10_000,
    storage_options: Mapping[str, Any] | None = None,
    spool: str | None = None,
) -> Recorder:
    """The recorder of ``--record target``: a local JSONL recording writes its files in
    place; a URL (spooled in ``spool``, by default a directory of the destination's:
    :func:`~adapters._proxy._spool.spool_directory`) or a Parquet recording (spooled in
    ``target/.spool``) publishes each finished file whole, the age limit ``max_age_s``
    applying to these (see the module docstring)."""
    if not is_url(target) and fmt == "jsonl":
        return Recorder(
            target, metrics=metrics, dataset=dataset, max_bytes=max_bytes, queue_size=queue_size
        )
    publisher = Publisher(target, metrics=metrics, fmt=fmt, storage_options=storage_options)
    if is_url(target):
        where = spool_directory(target, storage_options, spool)
    else:
        where = Path(target) / ".spool"
    return Recorder(
        where,
        metrics=metrics,
        dataset=dataset,
        max_bytes=max_bytes,
        queue_size=queue_size,
        publisher=publisher,
        max_age_s=max_age_s,
    )


_STOP = object()
_TICK = object()


class Recorder:
    """Bounded queue + one writer thread (see the module docstring)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        metrics: ProxyMetrics,
        dataset: str = "proxy",
        max_bytes: int = 64 * 1024 * 1024,
        queue_size: int = 10_000,
        publisher: Publisher | None = None,
        max_age_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = Path(directory)  # the files', or the spool files' with a publisher
        self.publisher = publisher
        self.max_age_s = max_age_s
        self._clock = clock
        self._path: Path | None = None
        self._opened_at = 0.0
        self._lines = 0  # whole lines in the current file
        self.dataset = check_dataset_name(dataset)
        self.max_bytes = max_bytes
        self._metrics = metrics
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        self._thread: threading.Thread | None = None
        self._fd: int | None = None
        self._size = 0  # of the current file: whole lines only
        self._torn = False  # a failed write left bytes past _size that are not cut off yet
        self._seq = 0
        self._stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        self._host = socket.gethostname().replace(os.sep, "_") or "host"
        self._done = threading.Condition()
        self._submitted = self._handled = 0
        self.written = 0
        self.dropped = 0
        self._errors = 0

    def start(self) -> None:
        if self.publisher is not None:
            self.publisher.recover(self.directory)  # what an earlier run left, first
            self.publisher.start()
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="liftguard-recorder", daemon=True
            )
            self._thread.start()

    def submit(self, record: AnswerRecord) -> bool:
        """Queue ``record`` without blocking; False (dropped, counted) if the queue is full."""
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self._drop("queue_full")
            return False
        with self._done:
            self._submitted += 1
        return True

    def health(self, target: str | None = None) -> dict[str, Any]:
        """What ``/healthz`` says of the recording (``target``: where it goes, as configured;
        a URL is shown without its query)."""
        out: dict[str, Any] = {
            "dir": str(target or self.directory).split("?")[0],
            "written": self.written,
            "dropped": self.dropped,
        }
        if self.publisher is not None:
            out["published"] = self.publisher.published
            out["recovered"] = self.publisher.recovered
            out["kept_locally"] = [str(p) for p in self.publisher.kept]
            out["set_aside"] = [str(p) for p in self.publisher.set_aside]
        return out

    def tick(self) -> None:
        """Have the writer check the current file's age now (as it does at least every
        second); :meth:`flush` waits for the check."""
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(_TICK)
            with self._done:
                self._submitted += 1

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record submitted so far is written or dropped."""
        with self._done:
            target = self._submitted
            return self._done.wait_for(lambda: self._handled >= target, timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued, then stop the thread and close the file; with a publisher,
        wait until every finished file is published (or kept)."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join(timeout)
            self._thread = None
        self._close_file()
        if self.publisher is not None:
            self.publisher.close()

    # -- the writer thread -----------------------------------------------------------------

    def _drop(self, reason: str) -> None:
        with self._done:
            self.dropped += 1
        self._metrics.records_dropped.labels(reason=reason).inc()

    def _next(self) -> Any:
        """The next queued item; None after a second without one when files age."""
        if self.max_age_s is None or self.publisher is None:
            return self._queue.get()
        try:
            return self._queue.get(timeout=min(1.0, self.max_age_s))
        except queue.Empty:
            return None

    def _run(self) -> None:
        while True:
            item = self._next()
            if item is _STOP:
                return
            if item is None or item is _TICK:
                self._rotate_if_old()
                if item is None:
                    continue
            try:
                if item is not _TICK:
                    self._write(record_line(item, self.dataset).encode("utf-8") + b"\n")
                    self.written += 1
                    self._metrics.records_written.inc()
            except Exception as exc:  # the writer never dies: the record is dropped, counted
                self._drop("disk" if isinstance(exc, OSError) else "error")
                self._errors += 1
                if self._errors == 1 or self._errors % 1000 == 0:
                    logger.warning("recording failed (%d so far): %s", self._errors, exc)
            finally:
                with self._done:
                    self._handled += 1
                    self._done.notify_all()

    def _rotate_if_old(self) -> None:
        if (
            self.max_age_s is not None
            and self._fd is not None
            and self._size
            and self._clock() - self._opened_at >= self.max_age_s
        ):
            self._close_file()

    def _write(self, data: bytes) -> None:
        """Append ``data`` (one whole line) to the current file, or leave the file as it
        was and raise ``OSError``."""
        if self._fd is not None and self._size and self._size + len(data) > self.max_bytes:
            self._close_file()
        fd = self._fd if self._fd is not None else self._open_file()
        if self._torn:  # the tail of an earlier failed write: cut it before appending
            os.ftruncate(fd, self._size)
            self._torn = False
        done = 0
        try:
            while done < len(data):  # one write; the rest of a short one says why it was
                n = os.write(fd, data[done:])
                if n <= 0:
                    raise OSError(errno.ENOSPC, f"wrote {done} of {len(data)} bytes of a line")
                done += n
        except BaseException:
            self._cut(fd)
            raise
        self._size += done
        self._lines += 1

    def _cut(self, fd: int) -> None:
        """Truncate the file back to its whole lines (or remember to, if that fails too)."""
        try:
            os.ftruncate(fd, self._size)
        except OSError:
            self._torn = True

    def _open_file(self) -> int:
        """A new file (mode 0600) of this recorder's own: nothing else writes to it (a
        spool file is locked until it is published: :mod:`._spool`)."""
        make_private_dirs(self.directory)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
        while True:
            name = f"{self.dataset}-{self._stamp}-{self._host}-{os.getpid()}-{self._seq + 1:05d}"
            path = self.directory / f"{name}.jsonl"
            self._seq += 1
            if not take(path):  # another recorder of this process's
                continue
            try:
                fd = os.open(path, flags, 0o600)
            except FileExistsError:  # left by a process of the same pid, started that second
                give_up(path)
                continue
            except BaseException:
                give_up(path)
                raise
            if self.publisher is not None and not lock_new(fd):  # a recoverer's: it removes it
                os.close(fd)
                give_up(path)
                continue
            break
        with contextlib.suppress(OSError):  # created 0600 less the umask: never more
            os.fchmod(fd, 0o600)  # the owner's bits too, whatever the umask
        self._fd, self._size, self._torn = fd, 0, False
        self._path, self._opened_at, self._lines = path, self._clock(), 0
        return fd

    def _close_file(self) -> None:
        fd = self._fd
        if fd is not None:
            if self._torn:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self._size)
            self._fd = None
            self._torn = False
            if self.publisher is not None and self._path is not None and self._lines:
                # the descriptor goes with the file: its lock is held until it is published
                self.publisher.submit(SpoolFile(self._path, self._path.stem, self._lines, fd))
            else:
                if self.publisher is not None and self._path is not None:  # nothing to publish
                    with contextlib.suppress(OSError):
                        self._path.unlink()
                with contextlib.suppress(OSError):
                    os.close(fd)
                if self._path is not None:
                    give_up(self._path)
            self._path = None
