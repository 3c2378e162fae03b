"""The start-up part of ``benchmarks/bench_fleet.py``: what a replica that starts, and a fleet
that lost its state, cost with few labels and with many.

For each label count ``n``, in a fresh namespace of the script's own Valkey server, the
state of a fleet that took ``n`` labels: the version's record (a monitor fed ``n`` seeded
labels and verdicts, written as the replicas write it), the ``n`` answers kept for their
labels (a hash each) and the audit stream of their labels (``n`` entries, trimmed to the
store's ``audit_len``). Then, ``REPEATS`` times:

- **start**: a new replica (``FleetRiskWatch``) reads the record (``refresh()``), keeps a
  new answer and takes its label: the time from its construction to that label's reply;
- **loss**: the record is deleted (an eviction) and the replica's next ``refresh()``
  detects it and starts the next test: that call's time.

During both, a ticker on the replica's event loop wakes every millisecond: the longest
gap between two ticks (less the millisecond) is the longest any request on that loop
would have waited. A first repeat warms up and is not counted; the medians of the others
are kept, with the record's size (``MEMORY USAGE``) and the server's memory.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
import uuid
from typing import Any

import numpy as np
from _fleet_page import ALPHA, BEFORE, SEED
from _tables import Progress

from adapters._serving._certs import StaticCertificate
from adapters._serving._fleet import FleetRecord, FleetStore, fleet_client
from adapters._serving._fleet_watch import FleetRiskWatch
from adapters._serving._risk_watch import FinishedAnswer
from guardrail import Certificate

REPEATS = 5
CHUNK = 10_000
"""Keys written in one pipeline while filling a namespace."""


def _replica(url: str, namespace: str, cert: Certificate) -> FleetRiskWatch:
    return FleetRiskWatch(
        {"*": StaticCertificate(cert, "bench")},
        FleetStore(fleet_client(url, timeout_s=5.0), namespace=namespace),
        risk_alpha=ALPHA,
        timeout_s=5.0,
    )


async def _fill(url: str, namespace: str, cert: Certificate, n: int) -> str:
    """A fleet's state after ``n`` labels in ``namespace``; the record's key."""
    import redis.asyncio as aioredis

    writer = _replica(url, namespace, cert)
    watch = writer._watches["*"]
    monitor = writer.new_monitor(cert, 0)
    rng = np.random.default_rng([SEED, 3, n])
    for wrong, shown in zip(rng.random(n) < BEFORE, rng.random(n) < 0.9, strict=True):
        monitor.update_shown(bool(shown))
        monitor.update(correct=not bool(wrong))
    store = writer.store
    assert await store.commit(None, FleetRecord.first(watch.version, monitor.to_bytes())) == "ok"
    client = aioredis.from_url(url)
    try:
        for start in range(0, n, CHUNK):
            pipe = client.pipeline(transaction=False)
            for i in range(start, min(n, start + CHUNK)):
                rid = f"old{i}"
                pipe.hset(store.key("a", rid), mapping={
                    "entry": "*", "label": "bench", "version": watch.version, "status": "shown",
                    "cause": "certified", "completion": f"chatcmpl-{rid}", "test": "old",
                    "labelled": "1",
                })  # fmt: skip
                pipe.expire(store.key("a", rid), store.answer_ttl_s)
                pipe.xadd(store.key("x", watch.version), {"id": rid, "correct": "1"},
                          maxlen=store.audit_len, approximate=True)  # fmt: skip
            await pipe.execute()
    finally:
        await client.aclose()
        await writer.aclose()
    return store.key("m", watch.version)


class _Ticker:
    """The longest wait of a task that wants the event loop every millisecond."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            self.worst = max(self.worst, now - last - 0.001)
            last = now

    def __enter__(self) -> _Ticker:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def _once(url: str, namespace: str, cert: Certificate, key: str, i: int) -> dict[str, float]:
    import redis.asyncio as aioredis

    with _Ticker() as start_ticks:
        started = time.perf_counter()
        replica = _replica(url, namespace, cert)
        await replica.refresh()
        replica.take("*", FinishedAnswer(f"new{i}", f"chatcmpl-new{i}", "bench", True, True,
                                         True, False, "certified"))  # fmt: skip
        await replica.drain()
        reply = await replica.alabel(f"new{i}", True)
        start_s = time.perf_counter() - started
    assert reply["labels"] >= 1, reply
    client = aioredis.from_url(url)
    try:
        record = await client.hgetall(key)  # kept, to put back after the loss
        await client.delete(key)
        with _Ticker() as loss_ticks:
            started = time.perf_counter()
            await replica.refresh()
            loss_s = time.perf_counter() - started
        assert replica.health()["*"]["restarts"] >= 1
        await client.delete(key)
        await client.hset(key, mapping=record)  # the next repeat starts from the n labels
    finally:
        await client.aclose()
        await replica.aclose()
    return {
        "start_s": start_s,
        "start_stall_s": start_ticks.worst,
        "loss_s": loss_s,
        "loss_stall_s": loss_ticks.worst,
    }


async def run_startup(
    url: str, counts: list[int], cert: Certificate, progress: Progress
) -> dict[str, Any]:
    import redis.asyncio as aioredis

    rows = []
    logging.getLogger("adapters").setLevel(logging.ERROR)  # each loss is logged: not wanted
    client = aioredis.from_url(url)
    try:
        for n in counts:
            progress.show(f"start-up: filling {n:,} labels")
            namespace = f"bench-{uuid.uuid4().hex}"
            key = await _fill(url, namespace, cert, n)
            await _once(url, namespace, cert, key, -1)  # a warm-up, not counted
            runs = []
            for i in range(REPEATS):
                progress.show(f"start-up: {n:,} labels, repeat {i + 1} of {REPEATS}")
                runs.append(await _once(url, namespace, cert, key, i))
            usage = await client.memory_usage(key)
            memory = (await client.info("memory"))["used_memory"]
            rows.append({
                "labels": n,
                **{k: statistics.median(r[k] for r in runs) for k in runs[0]},
                "record_bytes": usage, "server_memory_bytes": memory,
            })  # fmt: skip
            await client.flushdb()
            progress.advance()
    finally:
        await client.aclose()
    return {"repeats": REPEATS, "rows": rows}
