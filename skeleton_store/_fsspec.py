"""The fsspec backend: any fsspec filesystem; create-only writes are atomic on S3.

See :mod:`skeleton_store._backends` for the operations and their guarantees.
Every call into fsspec runs under :func:`unavailable`, which turns whatever
the filesystem raises (botocore and aiohttp errors, timeouts, ``OSError``)
into one-line :class:`StoreUnavailable` naming the store, except the
``FileNotFoundError`` / ``FileExistsError`` answers the store relies on.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import logging
import time
import uuid
from collections.abc import Mapping, Sequence

from ._errors import InvalidRequest, StoreError
from ._transport import first_line, unavailable

__all__ = ["PROBE_DIR", "FsspecBackend"]

logger = logging.getLogger(__name__)

_ATOMIC_CREATE_PROTOCOLS = frozenset({"s3", "s3a"})
PROBE_DIR = ".probe"
_ANY: tuple[type[Exception], ...] = (Exception,)


class FsspecBackend:
    """Any fsspec filesystem; create-only writes are atomic on S3 (``If-None-Match``)."""

    def __init__(self, url: str, storage_options: Mapping[str, object] | None = None) -> None:
        try:
            url_to_fs = importlib.import_module("fsspec.core").url_to_fs
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise StoreError(
                f"the store URL {url!r} needs fsspec (and s3fs for s3://): "
                f"pip install 'liftguard[s3]'"
            ) from exc
        self.url = url.rstrip("/")
        try:
            # a deep copy: s3fs edits nested options (config_kwargs) in place
            self.fs, root = url_to_fs(url, **copy.deepcopy(dict(storage_options or {})))
        except ImportError as exc:
            raise StoreError(f"store {self.url}: {first_line(exc)}") from exc
        except Exception as exc:  # bad protocol or storage option: fsspec raises anything
            raise InvalidRequest(f"cannot open store {self.url}: {first_line(exc)}") from exc
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
        with unavailable(self.url, f"read {path}", catch=_ANY, keep=(FileNotFoundError,)):
            data = self.fs.cat_file(self._p(path))
        return bytes(data)

    def read_many(self, paths: Sequence[str]) -> dict[str, bytes | None]:
        if not paths:
            return {}
        full = {self._p(p): p for p in paths}
        out: dict[str, bytes | None] = {}
        with unavailable(self.url, f"read {paths[0]} (and {len(paths) - 1} more)", catch=_ANY):
            got = self.fs.cat(list(full), on_error="return")
            if not isinstance(got, dict):  # a single path may come back unwrapped
                got = {next(iter(full)): got}
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
        with unavailable(self.url, f"write {path}", catch=_ANY):
            self.fs.pipe_file(self._p(path), data)

    def create(self, path: str, data: bytes) -> bool:
        with unavailable(self.url, f"write {path}", catch=_ANY):
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
        with unavailable(self.url, f"list {path or 'the store root'}", catch=_ANY):
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
        with (
            unavailable(self.url, f"delete {path}", catch=_ANY),
            contextlib.suppress(FileNotFoundError),
        ):
            self.fs.rm_file(self._p(path))

    def age_s(self, path: str) -> float | None:
        with unavailable(self.url, f"stat {path}", catch=_ANY):
            try:
                modified = self.fs.modified(self._p(path))
            except FileNotFoundError:
                return None
            except NotImplementedError:  # pragma: no cover - filesystems without mtimes
                return None
        return time.time() - float(modified.timestamp())

    def exists(self) -> bool:
        with unavailable(self.url, "stat the store root", catch=_ANY):
            self.fs.invalidate_cache(self.root)
            return bool(self.fs.exists(self.root))

    def clean_temp(self, older_than_s: float) -> int:
        # Nothing is staged outside the final keys: an S3 PUT is invisible until it
        # completes, and unfinished multipart uploads are best aborted by a bucket
        # lifecycle rule (AbortIncompleteMultipartUpload).
        return 0
