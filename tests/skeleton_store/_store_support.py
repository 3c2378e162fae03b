"""Test support for the store suite: where a store lives and raw access to its bytes."""

from __future__ import annotations

import functools
import json
import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from skeleton_store import SkeletonStore

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}


def storage_option_flags(options: dict[str, Any] | None, prefix: str = "") -> list[str]:
    """``{"a": {"b": 1}}`` -> ``["--storage-option", "a.b=1"]`` (values as JSON)."""
    flags: list[str] = []
    for key, value in (options or {}).items():
        if isinstance(value, dict):
            flags += storage_option_flags(value, f"{prefix}{key}.")
        else:
            text = value if isinstance(value, str) else json.dumps(value)
            flags += ["--storage-option", f"{prefix}{key}={text}"]
    return flags


@dataclass
class Target:
    """Where a test's store lives, plus raw access to its bytes for corruption tests."""

    kind: str
    url: str
    storage_options: dict[str, Any] | None = None
    _fs: Any = field(default=None, repr=False)

    def store(self) -> SkeletonStore:
        return SkeletonStore(self.url, storage_options=self.storage_options)

    def cli(self, *args: str) -> list[str]:
        """``liftguard`` arguments for ``skeleton <args>`` on this store (options as flags)."""
        return ["skeleton", "--store", self.url, *storage_option_flags(self.storage_options), *args]

    def flip_byte(self, rel: str, at: int | None = None) -> bytes:
        """Flip one bit of one byte (the middle one by default); returns the new bytes."""
        raw = bytearray(self.read_raw(rel))
        raw[len(raw) // 2 if at is None else at] ^= 0x01
        self.write_raw(rel, bytes(raw))
        return bytes(raw)

    def _full(self, rel: str) -> str:
        return f"{self.url.removeprefix('s3://')}/{rel}"

    def read_raw(self, rel: str) -> bytes:
        if self.kind == "local":
            return Path(self.url, rel).read_bytes()
        return bytes(self._fs.cat_file(self._full(rel)))

    def write_raw(self, rel: str, data: bytes) -> None:
        if self.kind == "local":
            Path(self.url, rel).write_bytes(data)
        else:
            self._fs.pipe_file(self._full(rel), data)

    def delete_raw(self, rel: str) -> None:
        if self.kind == "local":
            Path(self.url, rel).unlink()
        else:
            self._fs.rm_file(self._full(rel))

    def listdir_raw(self, rel: str) -> list[str]:
        if self.kind == "local":
            p = Path(self.url, rel)
            return sorted(x.name for x in p.iterdir()) if p.exists() else []
        try:
            entries = self._fs.ls(self._full(rel), detail=False, refresh=True)
        except FileNotFoundError:
            return []
        return sorted(str(e).rsplit("/", 1)[-1] for e in entries)

    def start(self, func: Callable[..., None], *args: Any) -> BaseProcess:
        """Run ``func(url, storage_options, *args)`` in a new process (see _store_worker)."""
        proc = _context().Process(target=func, args=(self.url, self.storage_options, *args))
        proc.start()
        return proc


@functools.cache
def _context() -> BaseContext:
    """A forkserver that imported the workers' heavy modules once; spawn where there is none.

    The forkserver of Python 3.11 ignores the parent's sys.path, so it preloads installed
    packages only; each child then imports the small ``_store_worker`` itself.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():  # pragma: no cover
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["numpy", "skeleton_store", "s3fs", "fsspec.core", "pytest"])
    return ctx
