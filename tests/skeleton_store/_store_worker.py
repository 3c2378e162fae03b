"""Store clients run as separate processes by the concurrency and crash tests.

They are started through a multiprocessing *forkserver* that has imported
numpy, guardrail, skeleton_store and s3fs once, so each worker is a real, new
OS process that does not pay those imports again.

``put_worker``: waits until ``go`` exists (all workers start together), puts
``count`` versions of ``name``, points ``production`` at each, and writes
``[[version, i], ...]`` as JSON to ``out``.

``crash_worker``: puts a large version of ``name`` but stops at ``stage``
(``blob``: half-way through writing the arrays file; ``publish``: arrays
written, manifest not yet), touches ``ready`` and sleeps until the test kills
it with SIGKILL.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from skeleton_store import SkeletonStore, _backends


def _stall(ready: str) -> None:
    Path(ready).touch()
    time.sleep(120)
    raise SystemExit("not killed")


def crash_worker(
    url: str, options: dict[str, Any] | None, name: str, stage: str, ready: str
) -> None:
    store = SkeletonStore(url, storage_options=options)
    if stage == "blob":
        original_write_all = _backends._write_all

        def half_then_stall(fd: int, data: bytes) -> None:
            if len(data) > 1_000_000:  # the arrays file, not a manifest
                original_write_all(fd, data[: len(data) // 2])
                os.fsync(fd)
                _stall(ready)
            original_write_all(fd, data)

        _backends._write_all = half_then_stall
    elif stage == "publish":
        for cls in (_backends.LocalBackend, _backends.FsspecBackend):
            original_create = cls.create

            def stall_on_manifest(self: Any, path: str, data: bytes, _orig: Any = original_create):
                if "/versions/" in path:
                    _stall(ready)
                return _orig(self, path, data)

            cls.create = stall_on_manifest  # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown stage {stage}")
    big = np.random.default_rng(0).random(1_000_000)
    store.put(name, {"probs": big / big.sum()}, kind="crash-test")
    raise SystemExit("put finished without stalling")


def put_worker(
    url: str,
    options: dict[str, Any] | None,
    name: str,
    writer: int,
    count: int,
    go: str,
    out: str,
) -> None:
    store = SkeletonStore(url, storage_options=options)
    deadline = time.monotonic() + 60
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise SystemExit("no go signal")
        time.sleep(0.002)
    rng = np.random.default_rng(writer)
    done = []
    for i in range(count):
        p = rng.random(64)
        v = store.put(name, {"probs": p / p.sum()}, kind="test", extra={"writer": writer, "i": i})
        store.set_alias(name, "production", v.version)
        done.append([v.version, i])
    Path(out).write_text(json.dumps(done))
