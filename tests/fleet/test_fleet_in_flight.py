"""A label for an answer still being served gets its own retryable refusal, HTTP 503
``answer_in_flight`` with ``Retry-After``, at whichever replica it arrives (the answer's
in-flight mark reaches Redis when it starts), not ``404 unknown_answer``; once the
answer's record is kept the same label is taken."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import httpx
from fleet_wait import PATIENCE_S, until
from proxy_harness import Upstream
from sse_server import Reply
from test_fleet_serve import CLEAN, MESSAGES, Replica, root
from test_fleet_watch import CERT, finished, refused, replica
from test_proxy_cli import ServeProcess
from valkey_process import ValkeyProcess

from adapters._risk._risk_watch import FeedbackRefused, RiskWatch
from adapters._serving._certs import StaticCertificate


async def test_a_label_for_an_answer_in_flight_is_told_to_come_back(
    valkey: ValkeyProcess,
) -> None:
    namespace = uuid.uuid4().hex
    a, b = replica(valkey.url, namespace), replica(valkey.url, namespace)
    try:
        a.begin("*", "r1")  # the answer starts at a; its id is the client's already
        await a.drain()
        for watch in (a, b):  # at the replica serving it, and at another
            with_retry = await refused_with_retry(watch.alabel("r1", True))
            assert with_retry == (503, "answer_in_flight", 1)
        assert await refused(b.alabel("r2", True)) == (404, "unknown_answer")  # no mark
        a.take("*", finished("r1"))
        await a.drain()
        assert (await b.alabel("r1", True))["labels"] == 1
        a.take("*", finished("r3"))  # a record kept without a mark: not in flight
        await a.drain()
        assert (await b.alabel("r3", False))["labels"] == 2
    finally:
        await a.aclose()
        await b.aclose()


def test_one_process_refuses_a_label_in_flight_the_same_way() -> None:
    watch = RiskWatch({"*": StaticCertificate(CERT, "cal-cert")}, risk_alpha=0.05, feedback_ids=8)
    watch.begin("*", "r1")
    try:
        watch.label("r1", True)
    except FeedbackRefused as exc:
        assert (exc.status, exc.code, exc.retry_after) == (503, "answer_in_flight", 1)
    else:
        raise AssertionError("a label in flight was taken")
    watch.take("*", finished("r1"))
    assert watch.label("r1", True)["labels"] == 1


async def refused_with_retry(call: Awaitable[Any]) -> tuple[int, str, int | None]:
    try:
        await call
    except FeedbackRefused as exc:
        return exc.status, exc.code, exc.retry_after
    raise AssertionError("the label was taken")


async def test_serve_answers_a_label_in_flight_with_503_and_retry_after(
    upstream: Upstream, cert_file: Path, valkey: ValkeyProcess
) -> None:
    """Two real replicas; an answer held by its upstream mid-stream at replica a: its label
    at replica b gets 503 ``answer_in_flight`` with ``Retry-After`` (never 200 nor 404 once
    the mark is there), and is taken once the answer has ended. The upstream holds the
    answer until the proxy closes its request (the client went away), however long that
    takes: nothing is in flight when the replicas are stopped."""
    namespace = uuid.uuid4().hex
    argv = [
        "--upstream", upstream.base_url, "--certificate", str(cert_file), "--port", "0",
        "--redis", valkey.url, "--fleet-namespace", namespace, "--fleet-timeout", "2",
    ]  # fmt: skip
    procs = [Replica(argv) for _ in range(2)]
    a, b = procs
    held = Reply(list(CLEAN), delay=0.0, hold_after=2, hold_timeout=PATIENCE_S)
    upstream.replies.put(held)
    body = {"model": "test-model", "messages": MESSAGES, "stream": True}
    try:
        async with httpx.AsyncClient(timeout=60) as client:
            async with client.stream("POST", f"{a.base_url}/chat/completions", json=body) as resp:
                rid = resp.headers["x-liftguard-request-id"]
                replies = await until(  # until the mark is in Redis (404 before it)
                    lambda: feedback(client, b, rid), lambda r: r.status_code != 404
                )
                got, codes = replies[-1], [r.status_code for r in replies]
                assert got.status_code == 503, got.text
                assert got.json()["error"]["code"] == "answer_in_flight"
                assert got.headers["retry-after"] == "1"
                assert set(codes[:-1]) <= {404}
                mine = await feedback(client, a, rid)  # at the replica serving it
                assert (mine.status_code, mine.json()["error"]["code"]) == (
                    503,
                    "answer_in_flight",
                )
            # the client went away mid-answer: the answer ends, cut off (its label says
            # nothing about the certificate), and its record replaces the mark
            got = (
                await until(
                    lambda: feedback(client, b, rid),
                    lambda r: r.json()["error"]["code"] != "answer_in_flight",
                )
            )[-1]
            assert (got.status_code, got.json()["error"]["code"]) == (409, "answer_not_certified")
            record = upstream.records[0]  # the held request: closed by the proxy, not ended
            ended = await until(lambda: asyncio.sleep(0, record.done.is_set()), bool)
            assert ended[-1] and record.client_closed and record.sent == 2
            upstream.replies.put(Reply(list(CLEAN), delay=0.0))
            done = await client.post(
                f"{a.base_url}/chat/completions", json={**body, "stream": False}
            )
            rid = done.headers["x-liftguard-request-id"]
            got = (
                await until(
                    lambda: feedback(client, b, rid), lambda r: r.status_code not in (404, 503)
                )
            )[-1]
            assert got.status_code == 200 and got.json()["labels"] == 1
    finally:
        for proc in procs:
            proc.stop()


async def feedback(client: httpx.AsyncClient, proc: ServeProcess, rid: str) -> httpx.Response:
    return await client.post(
        f"{root(proc)}/v1/liftguard/feedback", json={"id": rid, "correct": True}
    )
