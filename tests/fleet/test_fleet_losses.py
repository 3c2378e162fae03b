"""What a real Redis does in production, case by case, with a real server the test starts,
kills, restarts empty, restores from an older snapshot, deletes keys of, fails over to a
lagging replica and puts far away: every loss of the fleet's state is detected (the label
that meets it gets 503 with the cause, ``/healthz`` and a counter say so), no label is
taken twice, the replicas agree on the next test, an alarm that fired stays on, and the
state a replica starts from is one small record, whatever the number of labels."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tcp_relay import Relay
from test_fleet_watch import ALPHA, CERT, finished, refused
from valkey_process import ValkeyProcess

from adapters._risk._fleet import RECENT, FleetStore, fleet_client
from adapters._risk._fleet_watch import FleetRiskWatch
from adapters._serving._certs import StaticCertificate
from guardrail import RiskMonitor


class Replica(FleetRiskWatch):
    """A replica's watch that records the losses and timeouts it counts."""

    def __init__(self, url: str, namespace: str, *, timeout_s: float = 2.0) -> None:
        self.losses: list[str] = []
        self.timeouts: list[str] = []
        super().__init__(
            {"*": StaticCertificate(CERT, "cal-cert")},
            FleetStore(fleet_client(url, timeout_s=timeout_s), namespace=namespace),
            risk_alpha=ALPHA,
            timeout_s=timeout_s,
            count_loss=self.losses.append,
            count_timeout=self.timeouts.append,
        )

    @property
    def key(self) -> str:
        return self.store.key("m", self._watches["*"].version)

    def state(self) -> tuple[Any, ...]:
        watch = self._watches["*"]
        record, m = watch.record, watch.monitor
        assert record is not None and m is not None
        return (record.test, record.seq, record.restarts, record.latched, m.n, m.alpha, m.alarm)


@pytest.fixture
def namespace() -> str:
    return uuid.uuid4().hex


@pytest.fixture
def second() -> Iterator[ValkeyProcess]:
    server = ValkeyProcess().start()
    try:
        yield server
    finally:
        server.close()


async def served(replica: FleetRiskWatch, *ids: str) -> None:
    for rid in ids:
        replica.take("*", finished(rid))
    await replica.drain()


async def labelled(replica: FleetRiskWatch, *ids: str, correct: bool = True) -> int:
    out: dict[str, Any] = {}
    for rid in ids:
        out = await replica.alabel(rid, correct)
    return int(out["labels"])


async def test_a_restart_empty_is_detected_and_the_next_test_spends_less_alpha(
    valkey: ValkeyProcess, namespace: str
) -> None:
    a, b = Replica(valkey.url, namespace), Replica(valkey.url, namespace)
    try:
        await served(a, "r1", "r2", "r3")
        assert await labelled(b, "r1", "r2") == 2
        await a.refresh()
        valkey.restart_from(None)  # no persistence: everything is gone
        await served(b, "r4")  # kept before anyone noticed; b's verdict write notices
        await a.refresh()  # a follows the test b started
        assert b.losses == ["missing"] and a.losses == []
        assert a.state() == b.state()
        assert a.state()[2:] == (1, False, 0, RiskMonitor.restart_level(ALPHA, 1), False)
        health = a.health()["*"]
        assert (health["restarts"], health["losses"]) == (1, 1)
        assert health["last_loss"].startswith("missing:")
        assert await refused(b.alabel("r3", True)) == (404, "unknown_answer")
        await served(a, "r5")
        assert await labelled(a, "r4", "r5") == 2  # both kept under the new test
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_stale_snapshot_is_detected_and_no_label_is_taken_twice(
    valkey: ValkeyProcess, namespace: str
) -> None:
    a, b = Replica(valkey.url, namespace), Replica(valkey.url, namespace)
    ids = [f"s{i}" for i in range(10)]
    try:
        await served(a, *ids)
        assert await labelled(a, *ids[:5]) == 5
        old = valkey.snapshot()
        assert await labelled(b, *ids[5:8]) == 8
        await a.refresh()
        valkey.restart_from(old)  # the record at 5 labels, s5..s7 not labelled there
        # s6 looks unlabelled in the restored data: the label meets the regressed record
        status, code = await refused(a.alabel("s6", True))
        assert (status, code) == (503, "fleet_state_lost")
        assert a.losses == ["regressed"]
        for rid in ids[5:]:  # kept under the lost test: none counts again, none silently
            assert await refused(b.alabel(rid, True)) == (409, "answer_before_loss")
        await b.refresh()
        assert b.losses == [] and a.state() == b.state()
        assert a.state()[2] == 1 and a.health()["*"]["last_loss"].startswith("regressed:")
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_branch_off_a_stale_snapshot_is_detected_by_a_replica_that_saw_more(
    valkey: ValkeyProcess, namespace: str
) -> None:
    a, b = Replica(valkey.url, namespace), Replica(valkey.url, namespace)
    try:
        await served(a, *[f"t{i}" for i in range(8)])
        assert await labelled(a, "t0", "t1") == 2
        old = valkey.snapshot()
        assert await labelled(a, "t2", "t3") == 4
        valkey.restart_from(old)
        late = Replica(valkey.url, namespace)  # started after the restore: it cannot know
        try:
            await late.refresh()
            assert await labelled(late, "t4", "t5") == 4  # the record is at a's count again
            await a.refresh()  # same test, same count, another history: a loss
            assert a.losses == ["diverged"]
            await late.refresh()
            assert a.state() == late.state() and a.state()[2] == 1
        finally:
            await late.aclose()
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.parametrize("kind", ["m", "a", "c", "x"])
async def test_the_eviction_of_each_key(valkey: ValkeyProcess, namespace: str, kind: str) -> None:
    a, b = Replica(valkey.url, namespace), Replica(valkey.url, namespace)
    try:
        await served(a, "e1", "e2", "e3")
        assert await labelled(a, "e1") == 1
        await b.refresh()
        version = a._watches["*"].version
        name = {"m": version, "a": "e2", "c": "chatcmpl-e2", "x": version}[kind]
        assert valkey.command("DEL", a.store.key(kind, name)).startswith(b":1")
        if kind == "m":  # the record: a loss, found by whichever replica reads first
            await b.refresh()
            assert b.losses == ["missing"] and b.state()[2] == 1
            await a.refresh()
            assert a.state() == b.state()
            assert await refused(a.alabel("e2", True)) == (409, "answer_before_loss")
        elif kind == "a":  # one answer: its label is refused as unknown, never taken twice
            assert await refused(a.alabel("e2", True)) == (404, "unknown_answer")
            assert await labelled(b, "e3") == 2
        elif kind == "c":  # a completion id: the request id still names the answer
            assert await refused(a.alabel("chatcmpl-e2", True)) == (404, "unknown_answer")
            assert await labelled(b, "e2") == 2
        else:  # the audit stream: nothing on the request path reads it
            assert await labelled(b, "e2", "e3") == 3
        assert kind == "m" or (a.losses, b.losses) == ([], [])
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.parametrize("value", [("HSET", "sum", "x", "body", "y"), ("SET", "x")])
async def test_a_foreign_value_is_a_loss(
    valkey: ValkeyProcess, namespace: str, value: tuple[str, ...]
) -> None:
    a = Replica(valkey.url, namespace)
    try:
        await served(a, "f1", "f2")
        assert await labelled(a, "f1") == 1
        valkey.command("DEL", a.key)
        valkey.command(value[0], a.key, *value[1:])
        assert await refused(a.alabel("f2", True)) == (503, "fleet_state_lost")
        assert a.losses == ["foreign"] and a.state()[2] == 1
    finally:
        await a.aclose()


async def test_a_failover_to_a_lagging_replica_is_detected_and_to_a_current_one_is_not(
    valkey: ValkeyProcess, second: ValkeyProcess, namespace: str
) -> None:
    relay = Relay(valkey.port).start()  # one address, a failover behind it
    a, b = Replica(relay.url, namespace), Replica(relay.url, namespace)
    try:
        assert second.command("REPLICAOF", "127.0.0.1", str(valkey.port)).startswith(b"+OK")
        await served(a, *[f"f{i}" for i in range(6)])
        assert await labelled(a, "f0", "f1") == 2
        assert valkey.command("WAIT", "1", "10000").startswith(b":1")
        relay.switch(second.port)  # failover to the replica, which had everything
        assert second.command("REPLICAOF", "NO", "ONE").startswith(b"+OK")
        assert await labelled(b, "f2") == 3
        await a.refresh()
        assert (a.losses, b.losses) == ([], [])
        assert valkey.command("REPLICAOF", "127.0.0.1", str(second.port)).startswith(b"+OK")
        assert second.command("WAIT", "1", "10000").startswith(b":1")
        assert valkey.command("REPLICAOF", "NO", "ONE").startswith(b"+OK")  # it lags now
        assert await labelled(b, "f3") == 4
        relay.switch(valkey.port)  # failover to the lagging one
        assert await refused(b.alabel("f4", True)) == (503, "fleet_state_lost")
        assert b.losses == ["regressed"]
        await a.refresh()
        assert a.state() == b.state() and a.state()[2] == 1
    finally:
        await a.aclose()
        await b.aclose()
        relay.close()


async def test_an_alarm_that_fired_stays_on_after_a_loss_until_an_operator_clears_it(
    valkey: ValkeyProcess, namespace: str
) -> None:
    a, b = Replica(valkey.url, namespace), Replica(valkey.url, namespace)
    ids = [f"w{i}" for i in range(60)]
    try:
        await served(a, *ids)
        for rid in ids:
            if (await a.alabel(rid, False))["alarm"]:
                break
        assert a.health()["*"]["alarm"]
        await b.refresh()
        valkey.command("DEL", a.key)
        await b.refresh()  # b starts the next test, the alarm kept on
        await a.refresh()
        for replica in (a, b):
            assert replica.state()[2:4] == (1, True) and replica.health()["*"]["alarm"]
            assert replica.states()[0].alarm and replica.states()[0].labels == 0
        assert await a.clear_alarm("*") is True
        await b.refresh()
        assert not b.health()["*"]["alarm"] and not a.health()["*"]["alarm"]
        assert await b.clear_alarm("*") is False
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_starting_replica_reads_one_record_whatever_the_labels(
    valkey: ValkeyProcess, namespace: str
) -> None:
    a = Replica(valkey.url, namespace)
    ids = [f"n{i}" for i in range(400)]
    try:
        await served(a, *ids[:100])
        await labelled(a, *ids[:100])
        small = int(valkey.command("MEMORY", "USAGE", a.key).split(b"\r\n")[0][1:])
        await served(a, *ids[100:])
        await labelled(a, *ids[100:])
        large = int(valkey.command("MEMORY", "USAGE", a.key).split(b"\r\n")[0][1:])
        assert abs(large - small) < 1024  # constant in size (a few JSON digits apart)
        late = Replica(valkey.url, namespace)
        try:
            await late.refresh()
            assert late.state() == a.state()
        finally:
            await late.aclose()
    finally:
        await a.aclose()


async def test_a_far_away_redis_takes_labels_and_a_slow_one_times_out_clearly(
    valkey: ValkeyProcess, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    relay = Relay(valkey.port, delay_s=0.075).start()  # a 150 ms round trip
    a = Replica(relay.url, namespace, timeout_s=0.5)
    try:
        await served(a, "p1", "p2", "p3")
        assert a.blind is None
        assert await labelled(a, "p1", "p2") == 2
        relay.delay_s = 0.6  # far slower than the command timeout
        assert await refused(a.alabel("p3", True)) == (503, "fleet_unavailable")
        assert a.timeouts and "timed out" in caplog.text
        relay.delay_s = 0.075
        await a.refresh()  # a new connection, under the connect timeout
        assert a.blind is None and await labelled(a, "p3") == 3
    finally:
        await a.aclose()
        relay.close()


async def test_a_replica_far_behind_checks_the_record_against_its_history(
    valkey: ValkeyProcess, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """More than ``RECENT`` changes behind, the record's own chain values no longer reach
    the change a replica saw: the record's history does. A record that descends from it
    is followed; one that went back and was changed again since is a loss; a history that
    no longer reaches back (evicted) is followed unchecked, logged and counted."""
    far = RECENT + 6
    a, b, c = (Replica(valkey.url, namespace) for _ in range(3))
    ids = [f"h{i}" for i in range(3 * far + 10)]
    try:
        await served(a, *ids)
        assert await labelled(a, *ids[:2]) == 2
        await b.refresh()
        await c.refresh()
        assert await labelled(a, *ids[2 : 2 + far]) == 2 + far  # b and c far behind now
        await b.refresh()
        assert b.losses == [] and b.state() == a.state()
        valkey.command("DEL", a.store.key("h", a._watches["*"].version))
        assert await labelled(a, ids[2 + far]) == 3 + far
        await c.refresh()  # nothing to check against: followed, not restarted
        assert c.losses == ["unverified"] and c.state() == a.state()
        assert "further back than the record's history keeps" in caplog.text
        old = valkey.snapshot()
        assert await labelled(a, *ids[3 + far : 6 + far]) == 6 + far  # a saw these
        valkey.restart_from(old)  # back 3 changes, then far more on another branch
        late = Replica(valkey.url, namespace)
        try:
            await late.refresh()
            assert await labelled(late, *ids[6 + far : 6 + 2 * far]) == 3 + 2 * far
            await a.refresh()
            assert a.losses == ["diverged"]
            await late.refresh()
            assert a.state() == late.state() and a.state()[2] == 1
        finally:
            await late.aclose()
    finally:
        for replica in (a, b, c):
            await replica.aclose()
