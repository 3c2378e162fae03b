"""A Redis 150 ms away (a relay adding 75 ms each way in front of a real server), two real
``liftguard serve`` replicas with the default fleet timeouts (``--fleet-timeout 0.5``,
``--fleet-connect-timeout 5``): every label sent to the replica that did not serve the
answer is accepted, once, and the alarm of every replica sees the wrong labels.

A label refused with 503 ``fleet_unavailable`` (the machine stalled past a timeout) is sent
again, as a client following ``Retry-After`` would, a few times at most: a fleet that
cannot take labels at this distance (every call timing out) fails the test, and so does
any label taken twice or lost."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from proxy_harness import Upstream
from tcp_relay import Relay
from test_fleet_serve import Replica, answer, label, root
from test_proxy_cli import ServeProcess
from valkey_process import ValkeyProcess

HOP_S = 0.075
"""The relay's delay each way: a round trip 150 ms longer."""
RESENDS = 5


@pytest.fixture
def far(
    upstream: Upstream, cert_file: Path, valkey: ValkeyProcess
) -> Iterator[tuple[Relay, list[ServeProcess]]]:
    relay = Relay(valkey.port, delay_s=HOP_S).start()
    namespace = uuid.uuid4().hex
    procs: list[ServeProcess] = []
    try:
        for _ in range(2):  # no --fleet-timeout, no --fleet-connect-timeout: the defaults
            argv = [
                "--upstream", upstream.base_url, "--certificate", str(cert_file), "--port", "0",
                "--redis", relay.url, "--fleet-namespace", namespace,
            ]  # fmt: skip
            procs.append(Replica(argv))
        yield relay, procs
    finally:
        for proc in procs:
            if proc.proc.poll() is None:
                proc.stop()
        relay.close()


async def sent(client: httpx.AsyncClient, proc: ServeProcess, rid: str) -> httpx.Response:
    """A wrong label, sent again after a 503 ``fleet_unavailable`` (at most RESENDS times)."""
    for _ in range(RESENDS):
        resp = await label(client, proc, rid, correct=False)
        if resp.status_code != 503 or resp.json()["error"]["code"] != "fleet_unavailable":
            break
    return resp


async def test_at_150_ms_labels_are_accepted_and_the_alarm_sees(
    upstream: Upstream, far: tuple[Relay, list[ServeProcess]]
) -> None:
    relay, (a, b) = far
    async with httpx.AsyncClient(timeout=60) as client:
        ids = [await answer(client, upstream, a) for _ in range(80)]
        labels = 0
        for rid in ids:  # each label at the replica that did not serve the answer
            resp = await sent(client, b, rid)
            assert resp.status_code == 200, resp.text
            labels += 1
            assert resp.json()["labels"] == labels  # counted once, in the fleet's test
            if resp.json()["alarm"]:
                break
        again = await label(client, a, ids[0], correct=False)
        assert (again.status_code, again.json()["error"]["code"]) == (409, "duplicate_feedback")
        health = [(await client.get(f"{root(p)}/healthz")).json()["risk"]["*"] for p in (a, b)]
        metrics = (await client.get(f"{root(a)}/metrics")).text
    assert relay.delay_s == HOP_S
    assert labels < len(ids)  # the alarm fired before the wrong labels ran out
    for state in health:  # both replicas see it, neither is blind
        assert state["alarm"] is True and state["blind"] is None
    line = metrics.split("liftguard_risk_labels{", 1)[1].split("\n")[0]
    assert line.endswith(f" {float(labels)}")
