"""Round trip, immutability, aliases, list/show/diff and names, on both backends."""

from __future__ import annotations

import json
import logging
import math
import uuid
from pathlib import Path

import numpy as np
import pytest
from _store_support import Target

import guardrail
from guardrail import Calibration, StreamPolicy
from skeleton_store import SkeletonStore, StoreError, StoreNotFound
from skeleton_store._errors import InvalidName, InvalidRequest, VersionNotFound

P = np.array([0.5, 0.25, 0.25])
Q = np.array([0.4, 0.4, 0.2])


def _calibration() -> Calibration:
    return Calibration(
        method="ltt", tau=2.0, risk=0.1, delta=0.1, score="lift", n=100, n_answered=50,
        n_errors=2, coverage=0.5, empirical_risk=0.04, risk_upper=0.12,
        policy=StreamPolicy(min_tokens=3).to_dict(), seed=7,
    )  # fmt: skip


def test_round_trip_every_field(target: Target) -> None:
    store = target.store()
    be = np.arange(6, dtype=">f4").reshape(2, 3)  # big-endian input is stored little-endian
    arrays = {
        "probs": np.full(262, 1 / 262, dtype=np.float32),
        "counts": np.arange(5, dtype=np.int64),
        "mask": np.array([True, False]),
        "matrix": be,
        "scalar": np.float64(2.5),
    }
    trace = [{"iter": i, "objective": np.float64(1.0 / (i + 1))} for i in range(3)]
    v = store.put(
        "chat-en", arrays, kind="vsd", model_id="org/model", model_revision="abc123",
        tokenizer="org/model", vocab_size=262, logprob_mode="raw",
        params={"lambda": 0.5, "floor": 1e-8}, vsd_trace=trace, calibration=_calibration(),
        extra={"note": "ünïcode"},
    )  # fmt: skip
    assert (v.name, v.version, v.parent, v.tag) == ("chat-en", 1, None, "v1")
    assert arrays["probs"].flags.writeable is not False  # the caller's array is untouched
    got = store.get("chat-en", 1)
    assert got.created_at == v.created_at and got.created_at.endswith("Z")
    assert (got.model_id, got.model_revision, got.tokenizer) == ("org/model", "abc123", "org/model")
    assert (got.vocab_size, got.logprob_mode, got.kind) == (262, "raw", "vsd")
    assert got.params == {"lambda": 0.5, "floor": 1e-8}
    assert got.vsd_trace == [{"iter": i, "objective": 1.0 / (i + 1)} for i in range(3)]
    assert got.extra == {"note": "ünïcode"}
    assert got.to_calibration() == _calibration()
    assert set(got.arrays) == set(arrays)
    for key, a in arrays.items():
        b = got.arrays[key]
        np.testing.assert_array_equal(b, a)
        assert b.dtype == np.asarray(a).dtype.newbyteorder("=") and not b.flags.writeable
        assert got.array_sha256[key] == v.array_sha256[key]
    assert got.arrays["matrix"].dtype.byteorder in "=<"
    with pytest.raises(ValueError):
        got.arrays["probs"][0] = 1.0  # read-only


def test_put_never_overwrites_and_numbers_increase(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = target.store()
    v1 = store.put("s", {"probs": P}, kind="t")
    before = target.read_raw("s/versions/v00000001.json")
    v2 = store.put("s", {"probs": P}, kind="t")  # identical content: still a new version
    assert (v1.version, v2.version) == (1, 2)
    # a writer with a stale listing tries to publish v1 again: it must get v3 instead
    monkeypatch.setattr(SkeletonStore, "_version_numbers", lambda self, name: [])
    v3 = store.put("s", {"probs": Q}, kind="t")
    monkeypatch.undo()
    assert v3.version == 3
    assert target.read_raw("s/versions/v00000001.json") == before
    np.testing.assert_array_equal(store.get("s", 1).arrays["probs"], P)
    assert store.versions("s") == [1, 2, 3]


def test_parent_is_resolved_and_must_exist(target: Target) -> None:
    store = target.store()
    store.put("s", {"probs": P}, kind="t")
    store.set_alias("s", "production", 1)
    v2 = store.put("s", {"probs": Q}, kind="t", parent="production")
    assert v2.parent == 1 and store.get("s", "v2").parent == 1
    with pytest.raises(VersionNotFound):
        store.put("s", {"probs": Q}, kind="t", parent=9)
    with pytest.raises(VersionNotFound):
        store.put("s", {"probs": Q}, kind="t", parent="staging")
    assert store.versions("s") == [1, 2]


def test_aliases_promote_and_rollback_history(target: Target) -> None:
    store = target.store()
    for p in (P, Q, P):
        store.put("s", {"probs": p}, kind="t")
    with pytest.raises(VersionNotFound):
        store.get("s", "production")
    with pytest.raises(StoreError):
        store.rollback("s")
    store.promote("s", 1)
    store.promote("s", "v2")
    assert store.promote("s", 2).seq == 2  # already there: no new event
    store.promote("s", 3)
    assert store.aliases("s") == {"latest": 3, "production": 3}
    assert store.rollback("s").version == 2
    assert store.get("s", "production").version == 2
    assert store.rollback("s").version == 1
    with pytest.raises(StoreError, match="no earlier target"):
        store.rollback("s")
    store.set_alias("s", "staging", "latest")
    hist = store.alias_history("s", "production")
    assert [(e.seq, e.version, e.action) for e in hist] == [
        (1, 1, "set"), (2, 2, "set"), (3, 3, "set"), (4, 2, "rollback"), (5, 1, "rollback"),
    ]  # fmt: skip
    assert [e.previous for e in hist] == [(), (1,), (1, 2), (1,), ()]
    assert store.aliases("s") == {"latest": 3, "production": 1, "staging": 3}
    with pytest.raises(VersionNotFound):
        store.set_alias("s", "production", 7)
    with pytest.raises(InvalidName):
        store.set_alias("s", "latest", 1)


def test_list_show_and_diff_by_hand(target: Target) -> None:
    store = target.store()
    store.put("a", {"probs": P}, kind="t", model_id="m1", vocab_size=3)
    assert store.list("b") == [] and store.names() == ["a"]
    store.put("a", {"probs": Q}, kind="t", model_id="m2", vocab_size=3, parent=1)
    store.put("b", {"log_probs": np.log(P).astype(np.float32)}, kind="unigram")
    store.promote("a", 1)
    rows = [r.to_dict() for r in store.list()]
    assert [(r["name"], r["version"], r["parent"], r["aliases"]) for r in rows] == [
        ("a", 1, None, ["production"]), ("a", 2, 1, ["latest"]), ("b", 1, None, ["latest"]),
    ]  # fmt: skip
    assert [r.tag for r in store.list("a")] == ["v1", "v2"]
    shown = store.show("a", "production")
    assert shown["version"] == 1 and shown["tag"] == "v1" and shown["aliases"] == ["production"]
    assert shown["arrays"]["probs"]["shape"] == [3] and shown["model_id"] == "m1"
    json.dumps(shown)  # plain JSON data, ready for a CLI

    d = store.diff("a", 1, 2)
    # TV = 0.5 * (|0.5-0.4| + |0.25-0.4| + |0.25-0.2|) = 0.15; alpha = 0.2; 2*0.15/0.2 = 1.5
    assert d["tv_distance"] == pytest.approx(0.15, abs=1e-12)
    assert d["alpha"] == pytest.approx(0.2) and d["clip"] == 12.0
    assert d["budget_shift_bound"] == pytest.approx(1.5)
    assert d["arrays"]["probs"]["status"] == "changed"
    assert d["arrays"]["probs"]["max_abs_diff"] == pytest.approx(0.15)
    assert d["fields"] == {"model_id": ["m1", "m2"]}
    assert store.diff("a", 1, 2, clip=1.0)["budget_shift_bound"] == 1.0  # min(B, 2 eta/alpha)
    same = store.diff("a", 1, 1)
    assert same["tv_distance"] == 0.0 and same["budget_shift_bound"] == 0.0
    # log_probs stored as float32 are a distribution too (renormalised within 1e-4)
    store.put("b", {"log_probs": np.log(Q).astype(np.float32)}, kind="unigram")
    assert store.diff("b", 1, 2)["tv_distance"] == pytest.approx(0.15, abs=1e-6)


def test_diff_without_distribution_or_floor(target: Target) -> None:
    store = target.store()
    store.put("c", {"counts": np.arange(3)}, kind="ngram")
    store.put("c", {"counts": np.arange(4)}, kind="ngram")
    d = store.diff("c", 1, 2)
    assert d["tv_distance"] is None and "probs" in d["note"]
    assert d["arrays"]["counts"]["status"] == "changed"
    store.put("z", {"probs": np.array([0.5, 0.5, 0.0])}, kind="t")
    store.put("z", {"probs": np.array([0.5, 0.25, 0.25])}, kind="t")
    d = store.diff("z", 1, 2)
    assert d["tv_distance"] == pytest.approx(0.25) and d["budget_shift_bound"] == 12.0


@pytest.mark.parametrize(
    "bad",
    ["", "a/b", "a\\b", "..", "a..b", "../etc", ".hidden", "-x", "x" * 129, "a b", "a\x00b"],
)
def test_names_are_validated(target: Target, bad: str) -> None:
    store = target.store()
    with pytest.raises(InvalidName):
        store.put(bad, {"probs": P}, kind="t")
    with pytest.raises(InvalidName):
        store.get(bad)
    store.put("ok", {"probs": P}, kind="t")
    with pytest.raises(InvalidName):
        store.set_alias("ok", bad, 1)
    assert store.names() == ["ok"]


def test_name_rules_and_error_types(tmp_path: Path) -> None:
    store = SkeletonStore(str(tmp_path))
    assert store.put("x" * 128, {"p": P}, kind="t").version == 1
    assert issubclass(InvalidName, ValueError) and issubclass(InvalidName, guardrail.GuardrailError)
    assert issubclass(VersionNotFound, LookupError)
    for alias in ("3", "v3", "V12"):
        with pytest.raises(InvalidName, match="version"):
            store.set_alias("x" * 128, alias, 1)
    with pytest.raises(InvalidName):
        store.get(5)  # type: ignore[arg-type]
    with pytest.raises(VersionNotFound):
        store.get("missing")
    with pytest.raises(VersionNotFound):
        store.get("x" * 128, 2)
    with pytest.raises(InvalidName):
        store.get("x" * 128, 0)


def test_bad_arrays_and_fields_are_refused(tmp_path: Path) -> None:
    store = SkeletonStore(str(tmp_path))
    with pytest.raises(InvalidRequest, match="dtype"):
        store.put("s", {"x": np.array(["a"], dtype=object)}, kind="t")
    with pytest.raises(InvalidRequest, match="dtype"):
        store.put("s", {"x": np.array([1 + 2j])}, kind="t")
    with pytest.raises(InvalidRequest):
        store.put("s", {"": P}, kind="t")
    with pytest.raises(InvalidRequest, match="vocab_size"):
        store.put("s", {"probs": P}, kind="t", vocab_size=4)
    with pytest.raises(InvalidRequest, match="JSON"):
        store.put("s", {"probs": P}, kind="t", params={"f": object()})
    with pytest.raises(InvalidRequest, match="Calibration"):
        store.put("s", {"probs": P}, kind="t", calibration={"tau": 1.0})
    with pytest.raises(InvalidRequest):
        store.put("s", {"probs": P}, kind="")
    with pytest.raises(InvalidRequest):
        SkeletonStore(str(tmp_path), storage_options={"anon": True})
    assert store.versions("s") == []


def test_skeleton_without_arrays_and_default_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "default"
    monkeypatch.setenv("LIFTGUARD_STORE", str(root))
    store = SkeletonStore()
    assert store.url == str(root)
    with pytest.raises(StoreNotFound, match="does not exist"):
        store.list()
    assert not root.exists()  # nothing is created before the first write
    v = store.put("temp", {}, kind="temperature", params={"T": 1.5})
    assert store.get("temp").arrays == {} and v.params == {"T": 1.5}
    with pytest.raises(StoreError):
        store.get("temp").probs()


def test_version_builds_a_monitor(tmp_path: Path) -> None:
    store = SkeletonStore(str(tmp_path))
    v = store.put("s", {"probs": P}, kind="t", calibration=_calibration())
    mon = v.monitor()
    ev = guardrail.TokenEvent(text="x", logprob=math.log(0.9), token_id=2)
    verdict = mon.update(ev)
    assert verdict.t == 1 and verdict.mean == pytest.approx(math.log(0.9) - math.log(0.25))
    with pytest.raises(guardrail.ConfigError):
        v.as_skeleton().log_prob(guardrail.TokenEvent(text="x", logprob=-1.0))
    bare = store.put("s", {"probs": P}, kind="t")
    with pytest.raises(StoreError, match="tau"):
        bare.monitor()
    assert bare.monitor(tau=1.0).update(ev).t == 1


def test_file_url_is_the_local_backend(tmp_path: Path) -> None:
    SkeletonStore(tmp_path).put("s", {"probs": P}, kind="t")
    store = SkeletonStore(f"file://{tmp_path}")
    assert store.get("s").version == 1 and repr(store) == f"SkeletonStore({str(tmp_path)!r})"


def test_other_fsspec_filesystems_work_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("fsspec")
    with caplog.at_level(logging.WARNING):
        store = SkeletonStore(f"memory://liftguard-{uuid.uuid4().hex}")
    assert "not atomic" in caplog.text
    assert store.put("s", {"probs": P}, kind="t").version == 1
    assert store.put("s", {"probs": Q}, kind="t").version == 2
    store.promote("s", 1)
    assert store.get("s", "production").version == 1 and store.verify() == []
