"""The spool of a recording that publishes whole files (``--record URL``, or
``--record-format parquet``): where it lives, which process owns which spool file, and
what a run that ended without publishing left there.

**Where.** A local Parquet recording spools in ``DIR/.spool``; a URL recording in
``--record-spool DIR``, else in ``$XDG_STATE_HOME/liftguard/record-spool/<name>``
(``~/.local/state`` without the variable), where ``<name>`` is the URL's readable part
and a digest of the destination (the URL and the storage endpoint): the same
destination always spools in the same directory, so the next start finds what the last
run left, and two destinations never share one. If that directory cannot be made, a
private temporary directory is used, with a warning that files left there by a crash
will not be found again.

**Who owns a file.** The process that writes a spool file holds an exclusive lock on it
(``flock``) from the moment it creates it until the file is published: the writer thread
hands the locked descriptor to the publisher with the file. The kernel releases the lock
when the process ends, however it ends (a crash, ``SIGKILL``), so a spool file that
another process can lock is one that nobody is writing or publishing: left by a run
that ended, or kept after failed uploads by a replica that has since stopped. Replicas
that share a spool directory therefore never take each other's files. Within one
process the spool files it owns are also named in a set (:func:`take`, :func:`give_up`),
checked before any lock is tried: the recorders of one process never take each other's
files either, even where locks are per process rather than per descriptor (``flock``
emulated over a network file system).

**What is left.** :func:`left_files` locks every such file (the lock is then the
recoverer's until it publishes the file). :func:`prepare` reads one back with the trace
readers' own rule (:func:`adapters.tracefiles.open_trace_objects`): a torn last line,
cut off by a crash in the middle of a write, is cut off the file (so the object
published holds whole lines only); a last line that lacks only its newline gets it;
any other bad line makes the file unpublishable, and it is moved aside
(:func:`set_aside`, into ``set-aside/`` in the spool) rather than published. A
``tmp-<name>.parquet`` file is a conversion in progress: it is never published itself;
while its spool file is there it is made again from it, and one without its spool file
is moved aside.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from guardrail._errors import TraceFormatError

from .._tracefiles._files import open_trace_objects

__all__ = [
    "SET_ASIDE",
    "claim",
    "conversion_path",
    "give_up",
    "left_files",
    "lock_new",
    "make_private_dirs",
    "orphan_conversions",
    "prepare",
    "set_aside",
    "spool_directory",
    "take",
    "unpublishable",
]

logger = logging.getLogger(__name__)

SET_ASIDE = "set-aside"
"""The spool's subdirectory of files that cannot be published (never published, kept)."""
_CONVERSION = "tmp-"  # the prefix of a spool file's Parquet conversion in progress
_owned: set[str] = set()  # the spool files this process writes, publishes, keeps or recovers
_owned_lock = threading.Lock()


def take(path: Path) -> bool:
    """Name ``path`` as this process's (False: it already is)."""
    key = os.path.abspath(path)
    with _owned_lock:
        if key in _owned:
            return False
        _owned.add(key)
        return True


def give_up(path: Path) -> None:
    """``path`` is no longer this process's (published, moved aside or closed)."""
    with _owned_lock:
        _owned.discard(os.path.abspath(path))


def spool_directory(
    target: str, storage_options: Mapping[str, Any] | None, configured: str | None = None
) -> Path:
    """The spool directory of a URL recording to ``target`` (see the module docstring),
    made (mode 0700) if missing."""
    if configured is not None:
        return Path(configured)
    endpoint = _endpoint(storage_options)
    key = json.dumps({"url": target.rstrip("/"), "endpoint": endpoint}, sort_keys=True)
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", target.split("?")[0].rstrip("/"))[:80]
    home = os.path.expanduser("~")
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state")
    path = Path(state) / "liftguard" / "record-spool" / f"{readable.strip('-')}-{digest}"
    try:
        make_private_dirs(path)
    except OSError as exc:
        fallback = Path(tempfile.mkdtemp(prefix="liftguard-record-"))  # mode 0700
        logger.warning(
            "recording: cannot use the spool directory %s (%s); spooling in %s instead, "
            "where files left by a crash will not be found by the next start (give "
            "--record-spool DIR)",
            path,
            exc,
            fallback,
        )
        return fallback
    return path


def _endpoint(options: Mapping[str, Any] | None) -> str:
    """The storage endpoint of a URL (its options', else the environment's), as part of
    the destination: one bucket name on two servers is two destinations."""
    opts = dict(options or {})
    kwargs = opts.get("client_kwargs")
    inner = kwargs.get("endpoint_url") if isinstance(kwargs, Mapping) else None
    return str(opts.get("endpoint_url") or inner or os.environ.get("AWS_ENDPOINT_URL") or "")


def make_private_dirs(path: Path) -> None:
    """Create the missing directories of ``path``, each mode 0700 (whatever the umask)."""
    missing = []
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


def lock_new(fd: int) -> bool:
    """Lock a spool file just created (False: a recoverer locked it first, found it empty
    and removes it; the writer takes another name). On a file system without locks the
    file is written unlocked, as it was before there were locks; no start then takes a
    spool file there (:func:`claim` needs the lock), and the files stay for an operator."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # no locks here (ENOLCK, EOPNOTSUPP)
        return True
    return True


def claim(path: Path) -> int | None:
    """A descriptor of ``path`` holding its lock (and ``path`` taken: :func:`take`), or
    None if a live process owns it (or the file is gone, or is not ours to open)."""
    if not take(path):
        return None
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        give_up(path)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if not os.path.samestat(os.fstat(fd), os.stat(path)):  # published and replaced
            raise FileNotFoundError(path)
    except OSError:
        os.close(fd)
        give_up(path)
        return None
    return fd


def left_files(directory: Path) -> Iterator[tuple[Path, int]]:
    """``(path, locked descriptor)`` of each spool file in ``directory`` that no live
    process owns, oldest name first, each claimed (:func:`claim`) when it is reached; the
    caller closes each descriptor and gives the path up."""
    try:
        names = sorted(p.name for p in directory.iterdir() if p.suffix == ".jsonl")
    except OSError:  # no spool yet
        return
    for name in names:
        path = directory / name
        if not path.is_file() or path.is_symlink():
            continue
        fd = claim(path)
        if fd is not None:
            yield path, fd


def orphan_conversions(directory: Path) -> list[Path]:
    """The Parquet conversions in ``directory`` whose spool file is gone (not to be
    published: moved aside by the caller)."""
    try:
        found = sorted(directory.glob(f"{_CONVERSION}*.parquet"))
    except OSError:
        return []
    orphans = []
    for path in found:
        name = path.name[len(_CONVERSION) :].removesuffix(".parquet")
        if not (directory / f"{name}.jsonl").exists():
            orphans.append(path)
    return orphans


def conversion_path(spool: Path, name: str) -> Path:
    """Where the Parquet conversion of ``spool`` (published as ``name``) is written."""
    return spool.with_name(f"{_CONVERSION}{name}")


def prepare(path: Path, fd: int, on_torn: Callable[[int], None]) -> int:
    """Make the left spool file ``path`` (locked by ``fd``) whole lines only and return
    how many traces it holds; raises :class:`~guardrail._errors.TraceFormatError` if a line other
    than a torn last one is bad (``on_torn(line number)``: the torn line is cut off)."""
    torn: list[int] = []
    count = sum(1 for _ in open_trace_objects(path, torn=torn.append))
    size = os.fstat(fd).st_size
    if torn:
        os.ftruncate(fd, _end_of_last_line(fd, size))
        on_torn(torn[0])
    elif size and os.pread(fd, 1, size - 1) != b"\n":  # whole, only its newline missing
        os.pwrite(fd, b"\n", size)
    return count


def _end_of_last_line(fd: int, size: int) -> int:
    """The offset just after the last newline of the file (0 if it has none)."""
    end = size
    while end > 0:
        start = max(0, end - (1 << 16))
        at = os.pread(fd, end - start, start).rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0


def set_aside(path: Path) -> Path:
    """Move ``path`` into the spool's ``set-aside/`` directory (never published); its new
    path."""
    aside = path.parent / SET_ASIDE
    make_private_dirs(aside)
    moved = aside / path.name
    os.replace(path, moved)
    return moved


def unpublishable(exc: BaseException) -> bool:
    """Whether a failed publication is the file's fault (never retried: set aside)."""
    return isinstance(exc, TraceFormatError)
