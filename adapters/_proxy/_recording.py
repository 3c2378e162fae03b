"""Recording (``--record DIR``): every guarded answer as one trace line, written off the
request path.

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

The lines hold users' prompts and answers, so they are private to the user the
proxy runs as, whatever the umask: the directories the recorder creates are
mode 0700 and its files mode 0600 (a directory that already exists keeps its
mode).

The line is the project's trace format (``guardrail/traces/_read.py``) for what an
API stream carries, without a label, plus what the request was, written by the
format's one writer (:mod:`guardrail.traces`: key order, nulls, encoding):

- ``id`` (the request id), ``dataset``, ``model`` (the certificate's model id),
  ``question`` (the last user message), ``references`` (``[]``), ``prompt``
  (``""``: the server applies its own template; see ``messages``), ``answer``,
  ``vocab_size``, ``top_k``, ``tokens``;
- each token: ``text``, ``logprob``, ``top`` (``[null, logprob]`` pairs, the same
  number for every token, most likely first) with ``top_text`` (their texts),
  ``bytes``; ``id``, ``entropy`` and ``prompt_free_logprob`` are ``null`` and
  ``logz`` is ``{}`` (an API stream does not carry them);
- ``messages`` and ``request`` (the settings sent upstream), ``finish_reason``,
  ``complete`` (the upstream finished the answer and it was read to its end; a
  blocked or cut-off answer is a prefix), ``verdict`` (the ``liftguard`` field),
  ``created``.

``guardrail.read_traces(path, require_label=False)`` reads these lines (the extra
keys are ignored; ``Trace.missing`` names what the stream did not carry), and
``liftguard traces label`` adds the label that ``calibrate``, ``fit`` and ``eval``
need (with ``--vocab-size N`` when ``vocab_size`` is null).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import queue
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardrail import ConfigError
from guardrail.traces import token_object, trace_line, trace_object

from .._serving._metrics import ProxyMetrics

__all__ = ["AnswerRecord", "Recorder", "check_dataset_name", "record_line"]

logger = logging.getLogger(__name__)


@dataclass
class AnswerRecord:
    """What :func:`record_line` needs of one answer (built on the request path, cheaply)."""

    request_id: str
    model_id: str
    vocab_size: int | None
    top_k: int
    messages: list[Any]
    settings: dict[str, Any]
    text: list[str]
    entries: list[Any]
    finish_reason: str | None
    complete: bool
    verdict: dict[str, Any]
    created: float = field(default_factory=time.time)


def _question(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):  # content parts: the text ones
                return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _alternatives(entry: dict[str, Any]) -> list[tuple[str, float]]:
    out = []
    for alt in entry.get("top_logprobs") or ():
        if isinstance(alt, dict) and isinstance(alt.get("logprob"), int | float):
            out.append((str(alt.get("token", "")), float(alt["logprob"])))
    out.sort(key=lambda pair: -pair[1])
    return out


def record_line(record: AnswerRecord, dataset: str) -> str:
    """One JSONL line (no newline) for ``record`` (see the module docstring)."""
    entries = [e for e in record.entries if isinstance(e, dict)]
    alts = [_alternatives(e) for e in entries]
    k = min((len(a) for a in alts), default=0)
    tokens = []
    for entry, alt in zip(entries, alts, strict=True):
        lp, raw = entry.get("logprob"), entry.get("bytes")
        tokens.append(
            token_object(
                str(entry.get("token", "")),
                float(lp) if isinstance(lp, int | float) else None,
                [(None, v) for _, v in alt[:k]],
                extra={
                    "top_text": [t for t, _ in alt[:k]],
                    "bytes": raw if isinstance(raw, list) else None,
                },
            )
        )
    extra = {
        "messages": record.messages,
        "request": record.settings,
        "finish_reason": record.finish_reason,
        "complete": record.complete,
        "verdict": record.verdict,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created)),
    }
    return trace_line(
        trace_object(
            id=record.request_id,
            dataset=dataset,
            model=record.model_id,
            question=_question(record.messages),
            references=[],
            prompt="",
            answer="".join(record.text).strip(),
            correct=None,
            vocab_size=record.vocab_size,
            top_k=k,
            tokens=tokens,
            extra=extra,
        )
    )


_DATASET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_dataset_name(name: object) -> str:
    """``name`` if it is a simple dataset name (it starts the recording files' names, so
    it must keep them inside the recording directory): 1 to 64 letters, digits, ``_``,
    ``.`` and ``-``, starting with a letter or digit, without ``..``; else a ConfigError."""
    if not isinstance(name, str) or not _DATASET_NAME.fullmatch(name) or ".." in name:
        raise ConfigError(
            f"record_dataset must be a simple name (1 to 64 letters, digits, '_', '.' or '-', "
            f"starting with a letter or digit, no '..'), got {name!r}"
        )
    return name


_STOP = object()


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
    ) -> None:
        self.directory = Path(directory)
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

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record submitted so far is written or dropped."""
        with self._done:
            target = self._submitted
            return self._done.wait_for(lambda: self._handled >= target, timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued, then stop the thread and close the file."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join(timeout)
            self._thread = None
        self._close_file()

    # -- the writer thread -----------------------------------------------------------------

    def _drop(self, reason: str) -> None:
        with self._done:
            self.dropped += 1
        self._metrics.records_dropped.labels(reason=reason).inc()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            try:
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

    def _cut(self, fd: int) -> None:
        """Truncate the file back to its whole lines (or remember to, if that fails too)."""
        try:
            os.ftruncate(fd, self._size)
        except OSError:
            self._torn = True

    def _open_file(self) -> int:
        """A new file (mode 0600) of this recorder's own: nothing else writes to it."""
        self._make_directory()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
        while True:
            name = f"{self.dataset}-{self._stamp}-{self._host}-{os.getpid()}-{self._seq + 1:05d}"
            try:
                fd = os.open(self.directory / f"{name}.jsonl", flags, 0o600)
            except FileExistsError:  # left by a process of the same pid, started that second
                self._seq += 1
                continue
            self._seq += 1
            break
        with contextlib.suppress(OSError):  # created 0600 less the umask: never more
            os.fchmod(fd, 0o600)  # the owner's bits too, whatever the umask
        self._fd, self._size, self._torn = fd, 0, False
        return fd

    def _make_directory(self) -> None:
        """Create the missing directories of ``self.directory``, each mode 0700."""
        missing = []
        path = self.directory
        while not path.is_dir() and path.parent != path:
            missing.append(path)
            path = path.parent
        for path in reversed(missing):
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:  # another replica made it (or it is a file: next mkdir says so)
                continue
            with contextlib.suppress(OSError):  # made 0700 less the umask: never more
                os.chmod(path, 0o700)  # the owner's bits too, whatever the umask

    def _close_file(self) -> None:
        if self._fd is not None:
            if self._torn:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, self._size)
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
            self._torn = False
