"""Three ``liftguard serve`` processes sharing one real Valkey server, asked in turn (a
round-robin front): every label is taken exactly once whichever replica receives it, also
when two replicas receive it at the same moment or the one receiving it is killed; every
replica reports the same fleet-wide monitor; with the server gone answers are still served
and labels get 503."""

from __future__ import annotations

import asyncio
import itertools
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fleet_wait import PATIENCE_S, until
from proxy_harness import GOOD, ROLE, STOP, Upstream, tokens
from sse_server import Reply
from test_proxy_cli import ServeProcess
from valkey_process import ValkeyProcess

CLEAN = [ROLE, *tokens([GOOD] * 5), STOP]
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


class Replica(ServeProcess):
    """``liftguard serve`` whose verdict lines (one per answer, on stderr) are read as they
    come, so that a thousand answers never fill the pipe and stall the process."""

    def __init__(self, argv: list[str]) -> None:
        super().__init__(argv)
        self.lines: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def stop(self) -> int:
        """SIGINT, then wait for the exit (bounded only for a stalled machine)."""
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(PATIENCE_S)


@pytest.fixture
def replicas(
    upstream: Upstream, cert_file: Path, valkey: ValkeyProcess
) -> Iterator[list[ServeProcess]]:
    namespace = uuid.uuid4().hex
    procs: list[ServeProcess] = []
    try:
        for _ in range(3):
            argv = [
                "--upstream", upstream.base_url, "--certificate", str(cert_file), "--port", "0",
                "--redis", valkey.url, "--fleet-namespace", namespace, "--fleet-timeout", "2",
            ]  # fmt: skip
            procs.append(Replica(argv))
        yield procs
    finally:
        for proc in procs:
            if proc.proc.poll() is None:
                proc.stop()


def root(proc: ServeProcess) -> str:
    return proc.base_url.removesuffix("/v1")


async def answer(client: httpx.AsyncClient, upstream: Upstream, proc: ServeProcess) -> str:
    upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    resp = await client.post(
        f"{proc.base_url}/chat/completions", json={"model": "test-model", "messages": MESSAGES}
    )
    assert resp.status_code == 200, resp.text
    return str(resp.headers["x-liftguard-request-id"])


async def label(
    client: httpx.AsyncClient, proc: ServeProcess, rid: str, correct: bool = True
) -> httpx.Response:
    """One label; sent again while the fleet has not got the answer's record yet (it is
    written off the request path: 404 ``unknown_answer`` or 503 ``answer_in_flight`` for a
    moment)."""
    replies = await until(
        lambda: client.post(
            f"{root(proc)}/v1/liftguard/feedback", json={"id": rid, "correct": correct}
        ),
        lambda r: r.status_code != 404 and not in_flight(r),
    )
    return replies[-1]


def in_flight(resp: httpx.Response) -> bool:
    return resp.status_code == 503 and resp.json()["error"]["code"] == "answer_in_flight"


async def served(
    client: httpx.AsyncClient, upstream: Upstream, procs: list[ServeProcess], n: int
) -> list[str]:
    front = itertools.cycle(procs)  # the round-robin front
    return [await answer(client, upstream, next(front)) for _ in range(n)]


def codes(responses: list[Any]) -> list[Any]:
    return [r.json()["error"]["code"] if r.status_code != 200 else "accepted" for r in responses]


async def test_labels_are_taken_once_fleet_wide_and_every_replica_reports_one_monitor(
    upstream: Upstream, replicas: list[ServeProcess]
) -> None:
    tries = 1000
    async with httpx.AsyncClient(timeout=30) as client:
        ids = await served(client, upstream, replicas, tries)
        accepted = duplicates = 0
        for i, rid in enumerate(ids):  # the same label to two replicas at the same moment
            a, b = replicas[i % 3], replicas[(i + 1) % 3]
            got = codes(list(await asyncio.gather(label(client, a, rid), label(client, b, rid))))
            accepted += got.count("accepted")
            duplicates += got.count("duplicate_feedback")
        assert (accepted, duplicates) == (tries, tries)
        health = [(await client.get(f"{root(p)}/healthz")).json()["risk"] for p in replicas]
        metrics = [(await client.get(f"{root(p)}/metrics")).text for p in replicas]
    assert all(h["*"]["blind"] is None for h in health)
    for text in metrics:
        assert 'liftguard_risk_labels{certificate="cert.json#' in text
        assert f"}} {float(tries)}" in text.split("liftguard_risk_labels{", 1)[1].split("\n")[0]
        assert "liftguard_fleet_blind 0.0" in text


async def test_a_replica_killed_mid_label_loses_no_label_and_takes_none_twice(
    upstream: Upstream, replicas: list[ServeProcess]
) -> None:
    n = 200
    async with httpx.AsyncClient(timeout=30) as client:
        ids = await served(client, upstream, replicas, n)
        doomed, survivor = replicas[0], replicas[1]
        sends = [asyncio.ensure_future(label(client, doomed, rid)) for rid in ids]
        await asyncio.sleep(0)  # the first sends are on their way
        doomed.proc.kill()
        doomed.proc.wait()
        first = await asyncio.gather(*sends, return_exceptions=True)
        taken_before = sum(isinstance(r, httpx.Response) and r.status_code == 200 for r in first)
        again = codes([await label(client, survivor, rid) for rid in ids])
        assert again.count("accepted") + taken_before == n
        assert again.count("duplicate_feedback") == taken_before
        metrics = (await client.get(f"{root(survivor)}/metrics")).text
    line = metrics.split("liftguard_risk_labels{", 1)[1].split("\n")[0]
    assert line.endswith(f" {float(n)}")


async def test_with_redis_gone_answers_are_served_and_labels_get_503(
    upstream: Upstream, replicas: list[ServeProcess], valkey: ValkeyProcess
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        before = await served(client, upstream, replicas, 3)
        valkey.kill()
        during = await served(client, upstream, replicas, 6)  # every answer still served
        refused = await label(client, replicas[0], before[0])
        assert (refused.status_code, refused.json()["error"]["code"]) == (
            503,
            "fleet_unavailable",
        )
        health = (await client.get(f"{root(replicas[1])}/healthz")).json()["risk"]
        assert health["*"]["blind"]
        valkey.start()  # back, empty: the answers kept before are gone
        after = await served(client, upstream, replicas, 3)
        ok = await label(client, replicas[2], after[0])
        assert ok.status_code == 200 and ok.json()["labels"] == 1
    assert len(during) == 6


async def test_redis_killed_and_restarted_mid_stream_changes_no_answer(
    upstream: Upstream, replicas: list[ServeProcess], valkey: ValkeyProcess
) -> None:
    upstream.replies.put(Reply(list(CLEAN), delay=0.05))
    body = {"model": "test-model", "messages": MESSAGES, "stream": True}
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream("POST", f"{replicas[0].base_url}/chat/completions", json=body) as resp,
    ):
        valkey.kill()  # while the answer streams
        valkey.start()
        text = (await resp.aread()).decode()
    assert resp.status_code == 200
    verdicts = [line for line in text.splitlines() if '"liftguard"' in line]
    assert len(verdicts) == 1 and '"state": "certified"' in verdicts[0].replace('":"', '": "')
