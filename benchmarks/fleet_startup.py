"""The start-up part of ``python -m benchmarks.bench_fleet``: what a replica that starts, and
a fleet that lost its state, cost with few labels and with many (up to ten million).

For each label count ``n``, in a fresh namespace of the script's own Valkey server, the
state of a fleet that took ``n`` labels, written as the replicas write it:

- the version's record: a monitor fed ``min(n, FED)`` seeded labels and verdicts; for a
  larger ``n`` its counts (labels, errors, answers, shown, the window's starts) are then
  advanced to ``n`` in its serialised state, so the record holds what one fed ``n`` labels
  holds, in the same bytes (the state is constant in size: feeding ten million labels one
  by one would take hours and change nothing a start reads); its change count is ``n``,
  with its last 64 chain values (a replica's exported record, so edited, and imported:
  ``export_record``, ``import_record``);
- the record's history (the last ``history_len`` changes), the audit stream of labels
  (trimmed to ``audit_len``) and the answers kept for their labels (the latest
  ``min(n, KEPT)``: older ones' hashes expire after ``--feedback-ttl``), each as full as
  ``n`` labels leave it.

Then, ``REPEATS`` times:

- **start**: a new replica (``FleetSettings.replica``) reads the record (``refresh()``),
  keeps a new answer and takes its label: the time from its construction to that label's
  reply;
- **loss**: the record is deleted (an eviction) and the replica's next ``refresh()``
  detects it and starts the next test: that call's time.

During both, a ticker on the replica's event loop wakes every millisecond: the longest
gap between two ticks (less the millisecond) is the longest any request on that loop
would have waited. A first repeat warms up and is not counted; the medians of the others
are kept, with the record's size (``MEMORY USAGE``) and the server's memory.

And once per count, a real ``liftguard serve`` replica started on that state: the time
from its launch to its listening line (its socket bound: the interpreter and the command
line's imports), and from there to its first answer served (the proxy built meanwhile:
its imports, the certificate, the monitors, the fleet's record read) and labelled (the
label counted on top of the ``n`` the record holds); and how long the two heaviest imports
a replica makes after it listens take in a fresh interpreter that has imported what the
replica had by then (:data:`LATE_IMPORTS`).
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import openai

from benchmarks.bench_proxy import read_answer
from benchmarks.fleet_latency import ServeProcess, label
from benchmarks.fleet_page import ALPHA, BEFORE, SEED
from benchmarks.fleet_replicas import Fill, fill, finished, replica
from benchmarks.loopback import LoopbackServer, Spec
from guardrail import Certificate
from studies.tables import Progress

REPEATS = 5
CHUNK = 10_000
"""Keys written in one pipeline while filling a namespace."""
FED = 20_000
"""Labels fed to the record's monitor one by one at most (its counts advanced beyond)."""
KEPT = 100_000
"""Answers' hashes written at most (the latest: older ones have expired)."""
SHOWN = 0.9
"""The share of answers shown in the seeded verdicts."""
FILL = Fill(alpha=ALPHA, seed=SEED, before=BEFORE, fed=FED, kept=KEPT, shown=SHOWN,
            chunk=CHUNK)  # fmt: skip
"""How each namespace is filled (:func:`benchmarks.fleet_replicas.fill`)."""
LATE_IMPORTS = {
    "redis.asyncio": ("asyncio", "the fleet's client, before the replica serves"),
    "scipy.special": ("numpy", "a fresh monitor's coverage bound, in a worker thread once "
                               "the replica serves"),
}  # fmt: skip
"""Module a replica imports after it listens -> what it had imported before, what for."""


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
        started_replica = replica(url, namespace, cert, ALPHA)
        await started_replica.refresh()
        started_replica.take("*", finished(f"new{i}"))
        await started_replica.drain()
        reply = await started_replica.alabel(f"new{i}", True)
        start_s = time.perf_counter() - started
    assert reply["labels"] >= 1, reply
    client = aioredis.from_url(url)
    try:
        record: dict[Any, Any] = await client.hgetall(key)  # kept, to put back after the loss
        await client.delete(key)
        with _Ticker() as loss_ticks:
            started = time.perf_counter()
            await started_replica.refresh()
            loss_s = time.perf_counter() - started
        assert started_replica.health()["*"]["restarts"] >= 1
        await client.delete(key)
        await client.hset(key, mapping=record)  # the next repeat starts from the n labels
    finally:
        await client.aclose()
        await started_replica.aclose()
    return {
        "start_s": start_s,
        "start_stall_s": start_ticks.worst,
        "loss_s": loss_s,
        "loss_stall_s": loss_ticks.worst,
    }


async def _served(
    upstream: str, cert_file: Path, url: str, namespace: str, n: int
) -> dict[str, float]:
    """A real ``liftguard serve`` replica started on the state of ``n`` labels: the time to
    its listening line, then to its first answer served and labelled. The client's own
    set-up (its HTTP client, the SDK's modules) is done before the launch: not timed."""
    async with httpx.AsyncClient(timeout=30) as http:
        sdk = {"api_key": "b", "max_retries": 0, "http_client": http}
        _ = openai.AsyncOpenAI(base_url="http://127.0.0.1/v1", **sdk).chat.completions
        started = time.perf_counter()
        proc = await asyncio.to_thread(ServeProcess, upstream, cert_file, url, namespace)
        try:
            listening = time.perf_counter()
            client = openai.AsyncOpenAI(base_url=proc.base_url, **sdk)
            rid = await read_answer(client, Spec(tokens=5, top=0, delay=0.0), True)
            answered = time.perf_counter()
            code, _ = await label(http, proc, str(rid))
            labelled = time.perf_counter()
            risk = (await http.get(f"{proc.root}/healthz")).json()["risk"]["*"]
            metrics = (await http.get(f"{proc.root}/metrics")).text
        finally:
            await asyncio.to_thread(proc.close)
    assert code == "accepted", code
    assert risk["blind"] is None, risk
    line = metrics.split("liftguard_risk_labels{", 1)[1].split("\n", 1)[0]
    assert float(line.split()[-1]) == n + 1, line  # counted on the record's n labels
    return {
        "launch_to_listening_s": listening - started,
        "listening_to_first_answer_s": answered - listening,
        "listening_to_first_label_s": labelled - listening,
    }


async def run_startup(
    url: str, counts: list[int], cert: Certificate, progress: Progress
) -> dict[str, Any]:
    import redis.asyncio as aioredis

    rows: list[dict[str, Any]] = []
    logging.getLogger("adapters").setLevel(logging.ERROR)  # each loss is logged: not wanted
    client = aioredis.from_url(url)
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp, LoopbackServer() as upstream:
        cert_file = Path(tmp) / "cert.json"
        cert.save(cert_file)
        try:
            await _rows(url, counts, cert, cert_file, upstream.base_url, client, rows, progress)
        finally:
            await client.aclose()
    return {"repeats": REPEATS, "fed": FED, "kept": KEPT, "rows": rows,
            "late_imports": [{"module": name, "s": _import_s(name, before), "what": what}
                             for name, (before, what) in LATE_IMPORTS.items()]}  # fmt: skip


def _import_s(name: str, before: str) -> float:
    """How long a fresh interpreter that imported ``before`` takes to import ``name``: the
    median of three."""
    code = (
        f"import {before}, time; t = time.perf_counter(); import {name}; "
        "print(time.perf_counter() - t)"
    )
    runs = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout)
        for _ in range(3)
    ]  # fmt: skip
    return statistics.median(runs)


async def _rows(
    url: str, counts: list[int], cert: Certificate, cert_file: Path, upstream: str,
    client: Any, rows: list[dict[str, Any]], progress: Progress,
) -> None:  # fmt: skip
    for n in counts:
        progress.show(f"start-up: filling {n:,} labels")
        namespace = f"bench-{uuid.uuid4().hex}"
        key = await fill(url, namespace, cert, n, FILL)
        progress.show(f"start-up: {n:,} labels, liftguard serve")
        served = await _served(upstream, cert_file, url, namespace, n)
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
            **served, "record_bytes": usage, "server_memory_bytes": memory,
        })  # fmt: skip
        await client.flushdb()
        progress.advance()
