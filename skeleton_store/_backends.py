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
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ._errors import InvalidRequest, StoreError

__all__ = ["Backend", "FsspecBackend", "LocalBackend", "default_store_url", "open_backend"]

logger = logging.getLogger(__name__)

_ATOMIC_CREATE_PROTOCOLS = frozenset({"s3", "s3a"})
TMP_DIR = ".tmp"
PROBE_DIR = ".probe"


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
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._temp_file(data)
        try:
            os.link(tmp, final)
        except FileExistsError:
            return False
        except OSError as exc:
            raise StoreError(
                f"cannot create {final}: the local store needs a filesystem with hard links "
                f"for create-only writes ({exc})"
            ) from exc
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(final.parent)
        return True

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(self._p(path) if path else self.root))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def delete(self, path: str) -> None:
        self._p(path).unlink(missing_ok=True)

    def age_s(self, path: str) -> float | None:
        try:
            return time.time() - self._p(path).stat().st_mtime
        except FileNotFoundError:
            return None

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


class FsspecBackend:
    """Any fsspec filesystem; create-only writes are atomic on S3 (``If-None-Match``)."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        try:
            url_to_fs = importlib.import_module("fsspec.core").url_to_fs
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise StoreError(
                f"the store URL {url!r} needs fsspec (and s3fs for s3://): "
                f"pip install 'liftguard[s3]'"
            ) from exc
        self.url = url.rstrip("/")
        self.fs, root = url_to_fs(url, **dict(storage_options or {}))
        self.root = str(root).rstrip("/")
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        self.atomic_create = bool(_ATOMIC_CREATE_PROTOCOLS.intersection(protocols))
        self._probed = not self.atomic_create
        if not self.atomic_create:
            logger.warning(
                "store %s: create-only writes on protocol %s are check-then-write, not "
                "atomic; concurrent writers of one name may collide",
                self.url,
                protocols[0],
            )

    def _probe_conditional_writes(self) -> None:
        """Once per instance: check that the server refuses a second ``If-None-Match`` PUT.

        Some S3-compatible servers ignore the header and overwrite; then create-only
        writes are not exclusive and a warning says so.
        """
        self._probed = True
        probe = f"{PROBE_DIR}/{uuid.uuid4().hex}"
        self.fs.pipe_file(self._p(probe), b"1", mode="create")
        try:
            self.fs.pipe_file(self._p(probe), b"2", mode="create")
        except FileExistsError:
            pass
        else:
            self.atomic_create = False
            logger.warning(
                "store %s: the server ignores If-None-Match (conditional PUT); create-only "
                "writes are not exclusive and concurrent writers of one name may collide",
                self.url,
            )
        finally:
            try:
                self.delete(probe)
            except OSError as exc:  # the probe is harmless; a store may deny deletes
                logger.debug("could not delete probe %s: %s", probe, exc)

    def _p(self, path: str) -> str:
        return f"{self.root}/{path}" if path else self.root

    def read(self, path: str) -> bytes:
        data = self.fs.cat_file(self._p(path))
        return bytes(data)

    def read_many(self, paths: Sequence[str]) -> dict[str, bytes | None]:
        if not paths:
            return {}
        full = {self._p(p): p for p in paths}
        got = self.fs.cat(list(full), on_error="return")
        if not isinstance(got, dict):  # a single path may come back unwrapped
            got = {next(iter(full)): got}
        out: dict[str, bytes | None] = {}
        for fp, rel in full.items():
            val = got.get(fp, FileNotFoundError(fp))
            if isinstance(val, FileNotFoundError):
                out[rel] = None
            elif isinstance(val, BaseException):
                raise val
            else:
                out[rel] = bytes(val)
        return out

    def write(self, path: str, data: bytes) -> None:
        self.fs.pipe_file(self._p(path), data)

    def create(self, path: str, data: bytes) -> bool:
        if not self._probed:
            self._probe_conditional_writes()
        full = self._p(path)
        if not self.atomic_create:  # best effort: check, then write (racy)
            self.fs.invalidate_cache(full)
            try:
                self.fs.info(full)
                return False
            except FileNotFoundError:
                pass
            self.fs.pipe_file(full, data)
            return True
        try:
            self.fs.pipe_file(full, data, mode="create")
        except FileExistsError:
            return False
        return True

    def listdir(self, path: str) -> list[str]:
        full = self._p(path)
        try:
            entries = self.fs.ls(full, detail=False, refresh=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        base = full.rstrip("/")
        return sorted(
            {
                str(e).rstrip("/").rsplit("/", 1)[-1]
                for e in entries
                if str(e).rstrip("/") != base  # ls of a file lists the file itself
            }
        )

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._p(path))

    def age_s(self, path: str) -> float | None:
        try:
            modified = self.fs.modified(self._p(path))
        except FileNotFoundError:
            return None
        except NotImplementedError:  # pragma: no cover - filesystems without mtimes
            return None
        return time.time() - float(modified.timestamp())

    def clean_temp(self, older_than_s: float) -> int:
        # Nothing is staged outside the final keys: an S3 PUT is invisible until it
        # completes, and unfinished multipart uploads are best aborted by a bucket
        # lifecycle rule (AbortIncompleteMultipartUpload).
        return 0


def default_store_url() -> str:
    """``$LIFTGUARD_STORE``, else ``$XDG_DATA_HOME/liftguard/skeletons``
    (``~/.local/share/liftguard/skeletons``)."""
    env = os.environ.get("LIFTGUARD_STORE")
    if env:
        return env
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return os.path.join(base, "liftguard", "skeletons")


def open_backend(
    url: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None
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
