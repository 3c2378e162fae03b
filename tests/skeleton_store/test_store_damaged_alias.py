"""A damaged alias event: detected, contained to that alias, and repairable, on both backends."""

from __future__ import annotations

import logging
import threading

import numpy as np
import pytest
from _store_support import Target

from skeleton_store import IntegrityError, SkeletonStore, StoreError

P = np.array([0.5, 0.25, 0.25])
HEAD = "s/aliases/production/e00000002.json"
FIRST = "s/aliases/production/e00000001.json"
MARK = "s/aliases/production/e00000002.corrupt.json"


def _three_versions_production_at_2(target: Target) -> SkeletonStore:
    store = target.store()
    for _ in range(3):
        store.put("s", {"probs": P}, kind="t")
    store.promote("s", 1)
    store.promote("s", 2)  # production: e1 -> v1, e2 -> v2 (previous (1,))
    store.set_alias("s", "staging", 3)
    return store


def test_damaged_head_fails_only_the_reads_that_need_it(
    target: Target, caplog: pytest.LogCaptureFixture
) -> None:
    store = _three_versions_production_at_2(target)
    target.flip_byte(HEAD)
    full = f"{target.url}/{HEAD}"
    for read in (lambda: store.resolve("s", "production"), lambda: store.get("s", "production")):
        with pytest.raises(IntegrityError) as err:
            read()
        assert full in str(err.value) and err.value.path == full  # names the whole path
        assert "\n" not in str(err.value)
    with pytest.raises(IntegrityError, match="e00000002"):
        store.show("s", "production")
    # everything that does not need the production alias keeps working
    with caplog.at_level(logging.WARNING):
        rows = store.list("s")
    assert [(r.version, r.aliases) for r in rows] == [
        (1, ()), (2, ()), (3, ("latest", "staging")),
    ]  # fmt: skip
    assert full in caplog.text  # the alias left out of the listing is named
    assert store.aliases("s") == {"latest": 3, "staging": 3}
    assert store.show("s", 2)["tag"] == "v2" and store.show("s")["tag"] == "v3"
    assert store.get("s", "staging").version == 3 and store.versions("s") == [1, 2, 3]
    assert [i.name for i in store.list()] == ["s"] * 3
    problems = store.verify()
    assert len(problems) == 1 and full in problems[0] and "newest event" in problems[0]


def test_promote_writes_a_new_head_over_a_damaged_one(
    target: Target, caplog: pytest.LogCaptureFixture
) -> None:
    store = _three_versions_production_at_2(target)
    damaged = target.flip_byte(HEAD)
    with caplog.at_level(logging.WARNING):
        ev = store.promote("s", 3)
    # e3 continues from e1, the newest event that verifies (e2's target is unknown)
    assert (ev.seq, ev.version, ev.action, ev.previous) == (3, 3, "set", (1,))
    assert f"{target.url}/{HEAD}" in caplog.text and "kept in place" in caplog.text
    assert target.read_raw(HEAD) == damaged  # kept byte for byte, never deleted
    assert MARK.rsplit("/", 1)[1] in target.listdir_raw("s/aliases/production")
    assert store.resolve("s", "production") == 3
    assert [(e.seq, e.version) for e in store.alias_history("s", "production")] == [(1, 1), (3, 3)]
    assert store.verify() == []
    assert store.rollback("s").version == 1


def test_rollback_over_a_damaged_head_restores_the_newest_good_event(target: Target) -> None:
    store = _three_versions_production_at_2(target)
    store.promote("s", 3)  # e3 -> v3, previous (1, 2)
    target.flip_byte("s/aliases/production/e00000003.json")
    ev = store.rollback("s")
    assert (ev.seq, ev.version, ev.action, ev.previous) == (4, 2, "rollback", (1,))
    assert store.rollback("s").version == 1
    assert store.verify() == []


def test_verify_repair_restores_the_head_and_marks_damaged_events(target: Target) -> None:
    store = _three_versions_production_at_2(target)
    damaged = target.flip_byte(HEAD)
    assert len(store.verify()) == 1
    done = store.repair()
    assert any("restored v1" in line for line in done), done
    assert any(f"{target.url}/{HEAD}" in line and "kept in place" in line for line in done)
    assert store.verify() == [] and store.repair() == []  # repaired once, then nothing to do
    assert store.resolve("s", "production") == 1
    hist = store.alias_history("s", "production")
    assert [(e.seq, e.version, e.action) for e in hist] == [(1, 1, "set"), (3, 1, "repair")]
    assert target.read_raw(HEAD) == damaged
    # an earlier event damaged later: reported, then marked (the head stays as it is)
    target.flip_byte(FIRST)
    problems = store.verify()
    assert len(problems) == 1 and f"{target.url}/{FIRST}" in problems[0]
    with pytest.raises(IntegrityError, match="e00000001"):
        store.alias_history("s", "production")
    assert store.resolve("s", "production") == 1  # the head does not depend on it
    assert len(store.repair("s")) == 1
    assert store.verify() == [] and [e.seq for e in store.alias_history("s", "production")] == [3]


def test_an_alias_with_no_good_event_needs_a_promote(target: Target) -> None:
    store = target.store()
    store.put("s", {"probs": P}, kind="t")
    store.promote("s", 1)
    target.flip_byte(FIRST)
    assert store.repair() == []  # nothing to restore: reported, not guessed
    [problem] = store.verify()
    assert f"{target.url}/{FIRST}" in problem and "promote" in problem
    with pytest.raises(StoreError, match="no event that verifies"):
        store.rollback("s")
    assert store.promote("s", 1).seq == 2 and store.verify() == []


def test_concurrent_moves_over_a_damaged_head_each_land_once(target: Target) -> None:
    store = _three_versions_production_at_2(target)
    target.flip_byte(HEAD)
    results: list[int] = []
    errors: list[BaseException] = []

    def mover(version: int) -> None:
        try:
            results.append(target.store().set_alias("s", "production", version).seq)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=mover, args=(1 + i % 3,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    hist = store.alias_history("s", "production")
    assert hist[0].seq == 1 and hist[1].seq == 3  # e2 stays damaged and skipped
    seqs = [e.seq for e in hist]
    assert seqs == sorted(set(seqs)) and set(results) <= set(seqs)
    assert store.verify() == []
