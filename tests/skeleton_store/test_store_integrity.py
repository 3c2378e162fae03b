"""Integrity checks on load, and crash safety with real processes killed by SIGKILL."""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from _store_support import Target
from _store_worker import crash_worker

from skeleton_store import IntegrityError
from skeleton_store._errors import VersionNotFound
from skeleton_store._handle import SkeletonHandle

P = np.linspace(1.0, 2.0, 1000)
P = P / P.sum()


def _blob(target: Target, name: str, version: int) -> str:
    return f"{name}/{target.store().show(name, version)['blob']['path']}"


def test_flipped_byte_in_an_array_names_the_array(target: Target) -> None:
    store = target.store()
    store.put("s", {"aux": np.arange(10), "probs": P}, kind="t")
    rel = _blob(target, "s", 1)
    raw = bytearray(target.read_raw(rel))
    # safetensors puts tensors in sorted order after the header: the last byte is in 'probs'
    raw[-3] ^= 0x01
    target.write_raw(rel, bytes(raw))
    with pytest.raises(IntegrityError, match="'probs'") as err:
        store.get("s", 1)
    assert err.value.array == "probs"
    assert any("'probs'" in p for p in store.verify())


def test_corrupt_header_or_missing_blob(target: Target) -> None:
    store = target.store()
    store.put("s", {"probs": P}, kind="t")
    store.put("s", {"probs": P}, kind="t")
    rel = _blob(target, "s", 1)
    raw = bytearray(target.read_raw(rel))
    raw[9] = ord("{") if raw[9] != ord("{") else ord("[")  # break the safetensors header
    target.write_raw(rel, bytes(raw))
    with pytest.raises(IntegrityError):
        store.get("s", 1)
    target.delete_raw(_blob(target, "s", 2))
    with pytest.raises(IntegrityError, match="missing"):
        store.get("s", 2)


def test_corrupt_or_edited_manifest(target: Target, caplog: pytest.LogCaptureFixture) -> None:
    store = target.store()
    store.put("s", {"probs": P}, kind="t")
    store.put("s", {"probs": P}, kind="t")
    rel = "s/versions/v00000002.json"
    good = target.read_raw(rel)
    target.write_raw(rel, good[: len(good) // 2])  # truncated JSON
    with pytest.raises(IntegrityError, match="not valid JSON"):
        store.get("s", 2)
    with caplog.at_level(logging.WARNING):
        assert [i.version for i in store.list("s")] == [1]  # skipped, with a warning
    assert "v00000002" in caplog.text
    assert store.get("s").version == 1  # latest = newest version that verifies
    assert store.put("s", {"probs": P}, kind="t").version == 3  # number 2 is never reused
    edited = json.loads(good)
    edited["kind"] = "tampered"
    target.write_raw(rel, json.dumps(edited).encode())
    with pytest.raises(IntegrityError, match="manifest_sha256"):
        store.get("s", 2)
    problems = store.verify()
    assert len(problems) == 1 and "v00000002" in problems[0]


def _kill_when_ready(target: Target, stage: str, tmp_path: Path) -> None:
    ready = tmp_path / f"ready-{stage}"
    proc = target.start(crash_worker, "s", stage, str(ready))
    deadline = time.monotonic() + 60
    while not ready.exists():
        if not proc.is_alive() or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"worker did not reach {stage}: exit code {proc.exitcode}")
        time.sleep(0.005)
    assert proc.pid is not None
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(timeout=30)
    assert proc.exitcode == -signal.SIGKILL


def _crash_then_check(target: Target, stage: str, tmp_path: Path) -> None:
    store = target.store()
    store.put("s", {"probs": P}, kind="t")
    _kill_when_ready(target, stage, tmp_path)
    # the killed writer left bytes behind, but no version
    if stage == "blob":
        assert target.listdir_raw(".tmp") != []
    else:
        assert len(target.listdir_raw("s/blobs")) == 2
    assert store.versions("s") == [1]
    assert [i.version for i in store.list()] == [1]
    assert store.get("s", "latest").version == 1
    assert store.verify() == []
    # the store still works, and gc removes the leftovers of the dead writer
    assert store.put("s", {"probs": P[::-1].copy()}, kind="t", parent=1).version == 2
    assert store.gc(older_than_s=3600) == 0  # too recent: could be a live writer's
    assert store.gc(older_than_s=0) == 1
    assert store.verify() == []
    assert len(target.listdir_raw("s/blobs")) == 2
    if target.kind == "local":
        assert target.listdir_raw(".tmp") == []
    np.testing.assert_array_equal(store.get("s", 2).arrays["probs"], P[::-1])


def test_writer_killed_before_publishing_leaves_no_visible_version(
    target: Target, tmp_path: Path
) -> None:
    _crash_then_check(target, "publish", tmp_path)


def test_writer_killed_mid_array_write_leaves_no_visible_version(tmp_path: Path) -> None:
    # local only: an S3 PUT is all-or-nothing, there is no half-written object to kill
    _crash_then_check(Target("local", str(tmp_path / "store")), "blob", tmp_path)


def test_promote_refuses_and_refresh_survives_a_corrupt_version(target: Target) -> None:
    store = target.store()
    store.put("s", {"probs": P}, kind="t")
    store.put("s", {"probs": P[::-1].copy()}, kind="t")
    store.promote("s", 1)
    handle = SkeletonHandle(store, "s")
    rel = _blob(target, "s", 2)
    raw = bytearray(target.read_raw(rel))
    raw[-1] ^= 0xFF
    target.write_raw(rel, bytes(raw))
    with pytest.raises(IntegrityError):
        store.promote("s", 2)  # promote loads and verifies every array first
    assert store.resolve("s", "production") == 1
    store.set_alias("s", "production", 2)  # set_alias checks the manifest only
    with pytest.raises(IntegrityError):
        handle.refresh()
    assert handle.current.version == 1  # the running service keeps its verified version


@pytest.mark.parametrize("damage", ["missing", "flipped", "manifest"])
def test_latest_skips_an_unhealthy_newest_version_and_says_why(
    target: Target, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = target.store()
    store.put("s", {"probs": P}, kind="t")
    store.put("s", {"probs": P[::-1].copy()}, kind="t")
    rel = _blob(target, "s", 2) if damage != "manifest" else "s/versions/v00000002.json"
    if damage == "missing":
        target.delete_raw(rel)
    else:
        target.flip_byte(rel, at=-1 if damage == "flipped" else None)
    with caplog.at_level(logging.WARNING):
        got = store.get("s")  # latest
    assert got.version == 1
    np.testing.assert_array_equal(got.arrays["probs"], P)
    assert "latest of 's' skips v2" in caplog.text and f"{target.url}/{rel}" in caplog.text
    assert store.resolve("s", "latest") == 1 and store.show("s")["tag"] == "v1"
    assert store.aliases("s") == {"latest": 1}
    assert SkeletonHandle(store, "s", "latest").current.version == 1
    with pytest.raises(IntegrityError) as err:
        store.get("s", 2)  # asked for by number: never skipped
    assert f"{target.url}/{rel}" in str(err.value)
    # every version damaged: latest is an error that says what was skipped
    target.delete_raw(_blob(target, "s", 1))
    with pytest.raises(VersionNotFound, match=r"no version that verifies.*skipped v2, v1"):
        store.get("s")
