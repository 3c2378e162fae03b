"""Concurrent writers (real processes) and runtime refresh (threads)."""

from __future__ import annotations

import itertools
import json
import logging
import math
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from _store_support import Target
from _store_worker import put_worker

from guardrail import TokenEvent
from skeleton_store import open_skeleton
from skeleton_store._aliases import MAX_HISTORY
from skeleton_store._handle import SkeletonHandle

WRITERS, EACH = 4, 5


def test_concurrent_writers_of_one_name(target: Target, tmp_path: Path) -> None:
    go = tmp_path / "go"
    outs = [tmp_path / f"writer-{w}.json" for w in range(WRITERS)]
    procs = [
        target.start(put_worker, "shared", w, EACH, str(go), str(outs[w])) for w in range(WRITERS)
    ]
    go.touch()
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0
    results = {w: json.loads(out.read_text()) for w, out in enumerate(outs)}
    store = target.store()
    claimed = [v for rows in results.values() for v, _ in rows]
    n = WRITERS * EACH
    assert sorted(claimed) == list(range(1, n + 1))  # distinct, none lost, no gaps
    assert store.versions("shared") == list(range(1, n + 1))
    for w, rows in results.items():
        for v, i in rows:
            got = store.get("shared", v)  # verifies every hash
            assert got.extra == {"writer": w, "i": i}  # nobody overwrote anybody
    assert store.verify() == []
    assert store.get("shared", "latest").version == n
    # every alias move survived too: one event per put, each on top of the one before
    hist = store.alias_history("shared", "production")
    assert [e.seq for e in hist] == list(range(1, n + 1))
    assert sorted(e.version for e in hist) == list(range(1, n + 1))
    for before, after in itertools.pairwise(hist):
        assert after.previous == (*before.previous, before.version)[-MAX_HISTORY:]
    assert store.resolve("shared", "production") == hist[-1].version


def _dist(k: int, size: int = 8) -> np.ndarray:
    p = np.arange(1, size + 1, dtype=np.float64) ** k
    return p / p.sum()


def test_handle_refresh_picks_up_promotions(target: Target) -> None:
    store = target.store()
    for k in range(3):
        store.put("live", {"probs": _dist(k)}, kind="t")
    store.promote("live", 1)
    handle = open_skeleton(target.url, "live", storage_options=target.storage_options)
    assert handle.current.version == 1 and handle.refresh() is False
    ev = TokenEvent(text="t", logprob=-0.1, token_id=7)
    assert handle.log_prob(ev) == pytest.approx(math.log(_dist(0)[7]))
    store.promote("live", 3)
    assert handle.current.version == 1  # nothing changes until asked
    assert handle.refresh() is True and handle.current.version == 3
    assert handle.log_prob(ev) == pytest.approx(math.log(_dist(2)[7]))
    store.rollback("live")
    assert handle.refresh() is True and handle.current.version == 1
    pinned = SkeletonHandle(store, "live", "v2")
    store.promote("live", 3)
    assert pinned.refresh() is False and pinned.current.version == 2
    assert "live" in repr(handle) and "v1" in repr(handle)


def test_handle_swaps_are_safe_under_concurrent_readers(tmp_path: Path) -> None:
    target = Target("local", str(tmp_path))
    store = target.store()
    expected = {}
    for k in range(1, 4):
        v = store.put("hot", {"probs": _dist(k)}, kind="t")
        expected[v.version] = math.log(_dist(k)[5])
    store.promote("hot", 1)
    handle = open_skeleton(target.url, "hot")
    stop = threading.Event()
    errors: list[BaseException] = []
    seen: set[int] = set()
    ev = TokenEvent(text="t", logprob=-0.1, token_id=5)

    def reader() -> None:
        try:
            while not stop.is_set():
                time.sleep(0.0002)  # let the writer thread run
                cur = handle.current
                seen.add(cur.version)
                assert cur.as_skeleton().log_prob(ev) == pytest.approx(expected[cur.version])
                lp = handle.log_prob(ev)
                assert any(lp == pytest.approx(x) for x in expected.values())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(30):
            store.set_alias("hot", "production", i % 3 + 1)
            handle.refresh()
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    assert seen <= set(expected) and len(seen) >= 2


def test_a_server_that_ignores_if_none_match_is_detected(
    s3_target: Target, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = s3_target
    store = target.store()
    fs = store._backend.fs  # type: ignore[union-attr]
    real_pipe = fs.pipe_file

    def ignore_condition(path: str, data: bytes, mode: str = "overwrite", **kw: object) -> None:
        real_pipe(path, data, **kw)  # like a server that drops If-None-Match

    monkeypatch.setattr(fs, "pipe_file", ignore_condition)
    with caplog.at_level(logging.WARNING):
        assert store.put("s", {"probs": _dist(1)}, kind="t").version == 1
    assert "ignores If-None-Match" in caplog.text
    # it falls back to check-then-write: still no overwrite by a sequential writer
    assert store.put("s", {"probs": _dist(2)}, kind="t").version == 2
    assert target.listdir_raw(".probe") == []
    monkeypatch.undo()
    assert [store.get("s", v).version for v in (1, 2)] == [1, 2]
