"""Several replicas' risk watches on one real Valkey server: a label is taken once fleet-wide
wherever it arrives (also when two replicas get it at the same moment), every replica's
monitor is the monitor one process fed every label would be, and a Redis that dies, hangs
or loses its data never fails an answer, refuses labels with 503 and recovers by itself."""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

import pytest
from proxy_harness import calibrated_certificate
from valkey_process import ValkeyProcess

from adapters._risk._fleet import FleetStore, fleet_client
from adapters._risk._fleet_watch import FleetRiskWatch
from adapters._risk._risk_watch import FeedbackRefused, FinishedAnswer
from adapters._serving._certs import StaticCertificate
from guardrail import RiskMonitor

RISK, ALPHA = 0.1, 0.05
CERT = calibrated_certificate(RISK)


def replica(
    url: str, namespace: str, errors: list[str] | None = None, *, timeout_s: float = 2.0
) -> FleetRiskWatch:
    client = fleet_client(url, timeout_s=timeout_s)
    return FleetRiskWatch(
        {"*": StaticCertificate(CERT, "cal-cert")},
        FleetStore(client, namespace=namespace),
        risk_alpha=ALPHA,
        timeout_s=timeout_s,
        count_error=(errors.append if errors is not None else None),
    )


def finished(rid: str, *, certified: bool = True, cid: str | None = None) -> FinishedAnswer:
    return FinishedAnswer(
        rid, cid or f"chatcmpl-{rid}", "cal-cert", certified, True, True, False,
        "certified" if certified else "threshold",
    )  # fmt: skip


async def refused(call: Any) -> tuple[int, str]:
    with pytest.raises(FeedbackRefused) as info:
        await call
    return info.value.status, info.value.code


@pytest.fixture
def namespace() -> str:
    return uuid.uuid4().hex


async def test_a_label_is_taken_once_whichever_replica_gets_it(
    valkey: ValkeyProcess, namespace: str
) -> None:
    a, b = replica(valkey.url, namespace), replica(valkey.url, namespace)
    try:
        a.take("*", finished("r1"))
        a.take("*", finished("r2", certified=False))
        a.take("*", finished("r3", cid="shared"))
        a.take("*", finished("r4", cid="shared"))
        await a.drain()
        out = await b.alabel("r1", True)
        assert (out["request_id"], out["labels"], out["alarm"]) == ("r1", 1, False)
        assert await refused(a.alabel("r1", False)) == (409, "duplicate_feedback")
        assert await refused(a.alabel("chatcmpl-r1", False)) == (409, "duplicate_feedback")
        assert await refused(b.alabel("r2", True)) == (409, "answer_not_certified")
        assert await refused(b.alabel("nope", True)) == (404, "unknown_answer")
        assert await refused(b.alabel("shared", True)) == (409, "ambiguous_id")
        assert (await a.alabel("r4", False))["labels"] == 2
        assert b.states()[0].labels == 1  # b has not replayed a's label yet
        await b.refresh()
        assert a.states()[0].labels == b.states()[0].labels == 2
    finally:
        await a.aclose()
        await b.aclose()


async def test_concurrent_double_sends_are_taken_exactly_once(
    valkey: ValkeyProcess, namespace: str
) -> None:
    a, b = replica(valkey.url, namespace), replica(valkey.url, namespace)
    tries = 1000
    try:
        for i in range(tries):
            a.take("*", finished(f"q{i}"))
            if i % 100 == 99:
                await a.drain()  # at most a.max_pending writes wait at once
        accepted = duplicates = 0
        for i in range(tries):
            got = await asyncio.gather(
                a.alabel(f"q{i}", True), b.alabel(f"q{i}", True), return_exceptions=True
            )
            accepted += sum(isinstance(g, dict) for g in got)
            duplicates += sum(
                isinstance(g, FeedbackRefused) and g.code == "duplicate_feedback" for g in got
            )
        assert (accepted, duplicates) == (tries, tries)
        await a.refresh()
        await b.refresh()
        assert a.states()[0].labels == b.states()[0].labels == tries
    finally:
        await a.aclose()
        await b.aclose()


def _monitor_state(m: RiskMonitor) -> tuple[Any, ...]:
    return (m.n, m.errors, m.log_e_value, m.alarm_at, m.lower_bound, m.bounds, m.answers,
            m.shown, m.coverage_warning_at)  # fmt: skip


async def test_every_replica_holds_the_monitor_of_one_process_fed_every_label(
    valkey: ValkeyProcess, namespace: str
) -> None:
    replicas = [replica(valkey.url, namespace) for _ in range(3)]
    single = CERT.risk_monitor(RiskMonitor.restart_level(ALPHA, 0))  # one process's
    rng = random.Random(7)
    try:
        for i in range(600):
            shown = rng.random() < 0.6
            correct = rng.random() >= (0.05 if i < 300 else 0.35)  # a drift half-way
            served_by, labelled_by = replicas[i % 3], replicas[(i + 1) % 3]
            served_by.take("*", finished(f"d{i}", certified=shown))
            await served_by.drain()  # verdicts reach the log in this order
            single.update_shown(shown)
            if shown:
                await labelled_by.alabel(f"d{i}", correct)
                single.update(correct=correct)
        assert single.alarm
        for r in replicas:
            await r.refresh()
            watch = r._watches["*"]
            assert watch.monitor is not None
            assert _monitor_state(watch.monitor) == _monitor_state(single)
    finally:
        for r in replicas:
            await r.aclose()


async def test_a_dead_redis_fails_no_answer_refuses_labels_and_recovery_is_automatic(
    valkey: ValkeyProcess, namespace: str
) -> None:
    errors: list[str] = []
    a = replica(valkey.url, namespace, errors)
    try:
        a.take("*", finished("before"))
        await a.drain()
        assert (await a.alabel("before", True))["labels"] == 1
        valkey.kill()
        a.take("*", finished("while-down"))  # returns at once; the write fails off the path
        await a.drain()
        assert "keep" in errors and a.blind is not None
        assert await refused(a.alabel("before", False)) == (503, "fleet_unavailable")
        await a.refresh()
        assert a.health()["*"]["blind"]
        valkey.start()  # same port, no data: the fleet's state is lost
        await a.refresh()
        assert a.blind is None and not a.health()["*"]["blind"]
        assert await refused(a.alabel("before", True)) == (404, "unknown_answer")
        a.take("*", finished("after"))
        await a.drain()
        out = await a.alabel("after", False)
        assert out["labels"] == 1  # a fresh monitor on the new logs, not 2
    finally:
        await a.aclose()


async def test_a_hung_redis_costs_a_label_its_timeout_and_never_blocks_an_answer(
    valkey: ValkeyProcess, namespace: str
) -> None:
    errors: list[str] = []
    a = replica(valkey.url, namespace, errors, timeout_s=0.2)
    try:
        a.take("*", finished("x"))
        await a.drain()
        valkey.pause()
        a.take("*", finished("y"))  # nothing waits here
        assert not a._idle.is_set()  # the keep and verdict writes, in flight
        assert await refused(a.alabel("x", True)) == (503, "fleet_unavailable")
        await a.drain()
        assert errors.count("keep") == 1 and a.blind is not None
    finally:
        valkey.resume()
        await a.aclose()


async def test_a_label_right_after_its_answer_waits_for_the_answer_to_reach_redis(
    valkey: ValkeyProcess, namespace: str
) -> None:
    # a generous wait: the record's write must land within it on a busy machine too
    a, b = replica(valkey.url, namespace, timeout_s=30.0), replica(valkey.url, namespace)
    try:
        a.take("*", finished("soon"))  # its record is still queued: no drain here
        assert not a._idle.is_set()
        assert (await a.alabel("soon", True))["labels"] == 1
        assert await refused(b.alabel("soon", True)) == (409, "duplicate_feedback")
    finally:
        await a.aclose()
        await b.aclose()
