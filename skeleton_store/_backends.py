"""Storage backends: a local directory and any fsspec filesystem.

Both expose the same few operations on ``/``-separated paths relative to the
store root, and the store is written only in terms of them:

``write(path, data)``
    Atomic overwrite: readers see the old bytes or the new bytes, never a mix.
    Local: temp file in ``<root>/.tmp``, fsync, ``os.replace``. fsspec: one
    ``pipe_file`` (on S3 a single PUT, or a multipart upload above 100 MB that
    becomes visible only when completed).
``create(path, data) -> bool``
    Atomic *create-only* write; ``False`` if ``path`` already exists (the
    existing object is left untouched). Local: temp file, fsync, ``os.link``
    to the final name, which fails with ``EEXIST`` if the name is taken and
    never exposes a partial file. S3: ``PutObject`` with ``If-None-Match: *``
    (``pipe_file(mode="create")`` in s3fs), answered 412 when the key exists.
    Before its first create-only write an S3 backend checks once that the
    server refuses a second conditional PUT of a probe key under ``.probe/``
    (some S3-compatible servers ignore ``If-None-Match``), then deletes it.
    Other fsspec filesystems, and servers that fail the probe, fall back to
    check-then-write, which is **not** atomic between concurrent writers (a
    warning is logged).
``read``, ``read_many``, ``listdir``, ``delete``, ``age_s``
    Plain reads; listings bypass fsspec's listing cache.
``exists()``
    Whether the store root exists (a directory; on S3 an object under the prefix,
    or the bucket for a bucket-root URL). Asked only after a read found nothing.

Failures of the storage itself (a local ``OSError``; anything an fsspec
filesystem raises: botocore, aiohttp, timeouts) leave a backend as
:class:`StoreUnavailable`, one line naming the store and the object, with the
original exception chained. ``FileNotFoundError`` from ``read`` stays as is:
the store turns it into :class:`VersionNotFound` or :class:`StoreNotFound`.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from ._errors import InvalidRequest, StoreUnavailable
from ._fsspec import FsspecBackend
from ._transport import first_line, unavailable

__all__ = [
    "Backend",
    "FsspecBackend",
    "LocalBackend",
    "default_store_url",
    "open_backend",
]

TMP_DIR = ".tmp"


class Backend(Protocol):
    """What the store needs from a storage location (paths relative to the root)."""

    url: str
    atomic_create: bool

    def read(self, path: str) -> bytes: ...

    def read_many(self, paths: Sequence[str]) -> dict[str, bytes | None]: ...

    def write(self, path: str, data: bytes) -> None: ...

    def create(self, path: str, data: bytes) -> bool: ...

    def listdir(self, path: str) -> list[str]: ...

    def delete(self, path: str) -> None: ...

    def age_s(self, path: str) -> float | None: ...

    def clean_temp(self, older_than_s: float) -> int: ...

    def exists(self) -> bool: ...


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (module level so tests can interrupt it)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view[: 1 << 24])
        view = view[n:]


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


class LocalBackend:
    """A directory on a POSIX-like local filesystem (needs hard links for ``create``)."""

    atomic_create = True

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(os.path.expanduser(os.fspath(root))).absolute()
        self.url = str(self.root)

    def _p(self, path: str) -> Path:
        return self.root.joinpath(*path.split("/"))

    def _temp_file(self, data: bytes) -> Path:
        tmp_dir = self.root / TMP_DIR
        tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = tmp_dir / f"{uuid.uuid4().hex}.part"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        return tmp

    def read(self, path: str) -> bytes:
        with unavailable(self.url, f"read {path}", keep=(FileNotFoundError,)):
            return self._p(path).read_bytes()

    def read_many(self, paths: Sequence[str]) -> dict[str, bytes | None]:
        out: dict[str, bytes | None] = {}
        for p in paths:
            try:
                out[p] = self.read(p)
            except FileNotFoundError:
                out[p] = None
        return out

    def write(self, path: str, data: bytes) -> None:
        final = self._p(path)
        with unavailable(self.url, f"write {path}"):
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._temp_file(data)
            try:
                os.replace(tmp, final)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            _fsync_dir(final.parent)

    def create(self, path: str, data: bytes) -> bool:
        final = self._p(path)
        with unavailable(self.url, f"write {path}"):
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._temp_file(data)
        try:
            os.link(tmp, final)
        except FileExistsError:
            return False
        except OSError as exc:
            raise StoreUnavailable(
                f"store {self.url}: cannot create {path}: the local store needs a filesystem "
                f"with hard links for create-only writes ({first_line(exc)})",
                url=self.url,
            ) from exc
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(final.parent)
        return True

    def listdir(self, path: str) -> list[str]:
        with unavailable(self.url, f"list {path or 'the store root'}"):
            try:
                return sorted(os.listdir(self._p(path) if path else self.root))
            except (FileNotFoundError, NotADirectoryError):
                return []

    def delete(self, path: str) -> None:
        with unavailable(self.url, f"delete {path}"):
            self._p(path).unlink(missing_ok=True)

    def age_s(self, path: str) -> float | None:
        with unavailable(self.url, f"stat {path}"):
            try:
                return time.time() - self._p(path).stat().st_mtime
            except FileNotFoundError:
                return None

    def exists(self) -> bool:
        with unavailable(self.url, "stat the store root"):
            return self.root.is_dir()

    def clean_temp(self, older_than_s: float) -> int:
        """Remove temp files of writers that died (older than ``older_than_s``)."""
        n = 0
        for entry in self.listdir(TMP_DIR):
            rel = f"{TMP_DIR}/{entry}"
            age = self.age_s(rel)
            if age is not None and age >= older_than_s:
                self.delete(rel)
                n += 1
        return n


def default_store_url() -> str:
    """``$LIFTGUARD_STORE``, else ``$XDG_DATA_HOME/liftguard/skeletons``
    (``~/.local/share/liftguard/skeletons``)."""
    env = os.environ.get("LIFTGUARD_STORE")
    if env:
        return env
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return os.path.join(base, "liftguard", "skeletons")


def open_backend(
    url: str | os.PathLike[str], storage_options: Mapping[str, object] | None = None
) -> LocalBackend | FsspecBackend:
    """A local path or ``file://`` URL -> :class:`LocalBackend`; other URLs -> fsspec."""
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str) or not url:
        raise InvalidRequest(f"store URL must be a non-empty string or path, got {url!r}")
    if url.startswith("file://"):
        url = url[len("file://") :]
    if "://" not in url:
        if storage_options:
            raise InvalidRequest("storage_options apply to fsspec URLs, not to a local path")
        return LocalBackend(url)
    return FsspecBackend(url, storage_options)
