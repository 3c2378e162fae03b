"""The public way to a fleet replica in-process (``FleetSettings.replica``, fed
``FinishedAnswer`` records, its monitor read with ``monitor``) and to move a fleet's test
(``export_record``, ``import_record``), on a real Valkey server; and the benchmark's fill,
which writes a fleet's state of ten million labels through them."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis.asyncio
from markdown_blocks import block
from proxy_harness import calibrated_certificate
from valkey_process import ValkeyProcess

from adapters._risk._fleet import RECENT, FleetStore, fleet_client
from adapters._risk._fleet_watch import FleetRiskWatch
from adapters.proxy import FinishedAnswer, FleetSettings, StaticCertificate
from benchmarks import fleet_replicas
from guardrail import Certificate, ConfigError, ModelIdentity, SkeletonSpec, StreamPolicy

RISK, ALPHA = 0.1, 0.05
CERT = calibrated_certificate(RISK)
LABEL = "cal-cert"


def answer(rid: str) -> FinishedAnswer:
    return FinishedAnswer(rid, f"chatcmpl-{rid}", LABEL, True, True, True, False, "certified")


def replica(url: str, namespace: str, alpha: float = ALPHA) -> FleetRiskWatch:
    fleet = FleetSettings(url, namespace=namespace, timeout_s=2.0)
    return fleet.replica({"*": StaticCertificate(CERT, LABEL)}, risk_alpha=alpha)


async def test_public_replicas_take_a_label_once_fleet_wide(valkey: ValkeyProcess) -> None:
    namespace = uuid.uuid4().hex
    a, b = replica(valkey.url, namespace), replica(valkey.url, namespace)
    try:
        for i in range(6):
            a.take("*", answer(f"r{i}"))
        await a.drain()
        for i in range(6):  # every label to the replica that did not serve the answer
            reply = await b.alabel(f"r{i}", i % 3 != 0)
        assert reply["labels"] == 6
        await a.refresh()
        mine, theirs = a.monitor("*"), b.monitor("*")
        assert mine is not None and theirs is not None
        assert mine.to_bytes() == theirs.to_bytes() and mine.n == 6 and mine.errors == 2
        assert mine.answers == 6  # the verdicts, counted once
        mine.update(correct=False)  # a copy: the replica's own is not changed
        assert a.monitor("*").n == 6
        with pytest.raises(KeyError):
            a.monitor("other")
    finally:
        await a.aclose()
        await b.aclose()


def test_a_replica_of_an_uncalibrated_certificate_has_no_monitor() -> None:
    cert = Certificate(StreamPolicy(), tau=2.0, model=ModelIdentity("m"),
                       skeleton=SkeletonSpec("uniform", {"vocab_size": 1000}))  # fmt: skip
    fleet = FleetSettings("redis://127.0.0.1:1/0", namespace="n")
    assert fleet.replica({"*": StaticCertificate(cert)}).monitor("*") is None
    with pytest.raises(ConfigError, match="risk_alpha"):
        fleet.replica({"*": StaticCertificate(cert)}, risk_alpha=1.5)


async def test_a_fleets_test_moves_to_another_namespace(valkey: ValkeyProcess) -> None:
    old, new = uuid.uuid4().hex, uuid.uuid4().hex
    source, target = replica(valkey.url, old), replica(valkey.url, new)
    try:
        assert await target.export_record("*") is None
        for i in range(5):
            source.take("*", answer(f"r{i}"))
        await source.drain()
        for i in range(5):
            await source.alabel(f"r{i}", i != 2)
        record = await source.export_record("*")
        assert isinstance(record, bytes)
        await target.import_record("*", record)
        await target.refresh()
        moved, kept = target.monitor("*"), source.monitor("*")
        assert moved is not None and kept is not None
        assert moved.to_bytes() == kept.to_bytes() and moved.n == 5 and moved.errors == 1
        assert await target.export_record("*") == record
        # the test goes on there: a new answer's label counts on top of the five
        target.take("*", answer("after"))
        await target.drain()
        reply = await target.alabel("after", True)
        assert reply["labels"] == 6
        assert target.health()["*"]["restarts"] == 0  # no loss
        with pytest.raises(ConfigError, match="already"):  # never over a record
            await target.import_record("*", record)
    finally:
        await source.aclose()
        await target.aclose()


async def test_an_import_refuses_another_versions_record(valkey: ValkeyProcess) -> None:
    source = replica(valkey.url, uuid.uuid4().hex)
    other = replica(valkey.url, uuid.uuid4().hex, alpha=0.1)  # another level: another test
    try:
        source.take("*", answer("r0"))
        await source.drain()
        record = await source.export_record("*")
        assert record is not None
        with pytest.raises(ConfigError, match="another version"):
            await other.import_record("*", record)
        head, state = record.split(b"\n", 1)
        for bad in (b"not a record", head + b"\n" + state[:-8]):
            with pytest.raises(ConfigError, match="unreadable"):
                await source.import_record("*", bad)
        assert await other.export_record("*") is None
    finally:
        await source.aclose()
        await other.aclose()


async def test_the_benchmarks_fill_writes_a_state_a_replica_reads(valkey: ValkeyProcess) -> None:
    """``benchmarks/fleet_replicas.py`` writes ten million labels' state where the fleet
    keeps it (docs/fleet.md's keys and lengths, checked against the store's own); a new
    replica reads it and counts its next label on top."""
    store = FleetStore(fleet_client(valkey.url), namespace="ns")
    try:
        assert fleet_replicas.RECENT == RECENT
        assert store.history_len == fleet_replicas.HISTORY
        assert store.audit_len == fleet_replicas.AUDIT
        assert fleet_replicas.key("ns", "m", "v") == store.key("m", "v")
        assert FleetSettings(valkey.url).feedback_ttl_s == store.answer_ttl_s
    finally:
        await store.aclose()
    namespace, n = uuid.uuid4().hex, 10_000_000
    how = fleet_replicas.Fill(alpha=ALPHA, seed=1, before=0.05, fed=2_000, kept=50,
                              shown=0.9, chunk=10_000)  # fmt: skip
    key = await fleet_replicas.fill(valkey.url, namespace, CERT, n, how)
    client = redis.asyncio.from_url(valkey.url)
    try:
        version = key.rsplit(":", 1)[1]
        assert await client.exists(key) == 1
        assert await client.zcard(fleet_replicas.key(namespace, "h", version)) == (
            fleet_replicas.HISTORY)  # fmt: skip
        assert await client.xlen(fleet_replicas.key(namespace, "x", version)) >= (
            fleet_replicas.AUDIT)  # fmt: skip
        assert await client.dbsize() == 3 + how.kept  # the scratch namespace is gone
    finally:
        await client.aclose()
    reader = fleet_replicas.replica(valkey.url, namespace, CERT, ALPHA)
    try:
        await reader.refresh()
        monitor = fleet_replicas.monitor_of(reader)
        assert monitor.n >= n - monitor.spacing and monitor.answers == monitor.n
        reader.take("*", fleet_replicas.finished("new"))
        await reader.drain()
        reply = await reader.alabel("new", True)
        assert reply["labels"] == monitor.n + 1
        assert reader.health()["*"]["restarts"] == 0  # its record is one a replica wrote
    finally:
        await reader.aclose()


def test_the_fleet_page_host_example(valkey: ValkeyProcess, tmp_path: Path) -> None:
    code = block("docs/fleet.md", "import asyncio").text
    assert "redis://redis:6379/0" in code
    code = code.replace("redis://redis:6379/0", valkey.url)
    CERT.save(tmp_path / "cert.json")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "1 False 1\n"
