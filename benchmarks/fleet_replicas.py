"""The in-process fleet replicas of ``python -m benchmarks.bench_fleet``: the alarm part's
three replicas and the start-up part's, and the start-up part's fleet state written as
the replicas write it.

The only module of ``benchmarks/`` that reaches the fleet's private modules: the replica
(``FleetRiskWatch``), its store and its record have no public name, and the measurements
need them in-process (some 70,000 labels a default alarm run, the alarm read from every
replica's monitor and compared with one process's to the bit; a start-up record written
with ten million labels' counts). They stay gathered here until a public way to build a
replica exists (``PENDING`` in ``tests/studies/test_layout.py``).
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections.abc import Callable

import numpy as np

from adapters._risk._fleet import RECENT, FleetRecord, FleetStore, fleet_client
from adapters._risk._fleet_watch import FleetRiskWatch
from adapters._risk._risk_watch import FinishedAnswer
from adapters.proxy import StaticCertificate
from guardrail import Certificate, RiskMonitor

__all__ = ["Fill", "FleetRiskWatch", "advanced", "fill", "finished", "monitor_of", "replica"]


def replica(
    url: str, namespace: str, cert: Certificate, alpha: float,
    count_error: Callable[[str], object] | None = None,
) -> FleetRiskWatch:  # fmt: skip
    """A replica's risk watch (what ``liftguard serve --redis`` runs) on the server at
    ``url``, in ``namespace``, guarding every entry (``*``) with ``cert`` at level
    ``alpha``; failed calls to Redis go to ``count_error``."""
    return FleetRiskWatch(
        {"*": StaticCertificate(cert, "bench")},
        FleetStore(fleet_client(url, timeout_s=5.0), namespace=namespace),
        risk_alpha=alpha,
        timeout_s=5.0,
        count_error=count_error,
    )


def monitor_of(replica: FleetRiskWatch) -> RiskMonitor:
    """The replica's own copy of the fleet's monitor (its ``*`` entry's)."""
    held = replica._watches["*"].monitor
    assert held is not None
    return held


def finished(rid: str) -> FinishedAnswer:
    """Answer ``rid``: certified (shown), decided, under the calibrated context."""
    return FinishedAnswer(rid, f"chatcmpl-{rid}", "bench", True, True, True, False, "certified")


def advanced(state: bytes, by: int, errors: int, answers: int, shown: int) -> bytes:
    """The serialised monitor ``state`` with ``by`` more labels (``errors`` of them wrong)
    and ``answers`` more verdicts (``shown`` shown) counted, as after that many updates in
    the same state (``by`` and ``answers`` multiples of the monitor's spacing, so its
    restarts fall where they would have)."""
    raw, body = state.split(b"\n", 1)
    head = json.loads(raw)
    assert by % head["spacing"] == 0 and answers % head["spacing"] == 0
    head["n"] += by
    head["errors"] += errors
    head["answers"] += answers
    head["shown"] += shown
    head["shown_n"] = None if head["shown_n"] is None else head["shown_n"] + answers
    head["starts"] = [[s + by, e + errors] for s, e in head["starts"]]
    out = json.dumps(head, separators=(",", ":")).encode("ascii") + b"\n" + body
    RiskMonitor.from_bytes(out)  # a state a replica reads
    return out


@dataclasses.dataclass(frozen=True)
class Fill:
    """How :func:`fill` writes ``n`` labels' state: at most ``fed`` labels fed one by one
    (error rate ``before``, a ``shown`` share of verdicts shown, seeded by ``seed``), at
    most ``kept`` answers' hashes, ``chunk`` keys a pipeline."""

    alpha: float
    seed: int
    before: float
    fed: int
    kept: int
    shown: float
    chunk: int


async def fill(url: str, namespace: str, cert: Certificate, n: int, how: Fill) -> str:
    """A fleet's state after ``n`` labels in ``namespace`` (see ``fleet_startup.py``);
    the record's key."""
    import redis.asyncio as aioredis

    writer = replica(url, namespace, cert, how.alpha)
    watch = writer._watches["*"]
    monitor = writer.new_monitor(cert, 0)
    fed = min(n, how.fed)
    rng = np.random.default_rng([how.seed, 3, n])
    for wrong, shown in zip(rng.random(fed) < how.before, rng.random(fed) < how.shown,
                            strict=True):  # fmt: skip
        monitor.update_shown(bool(shown))
        monitor.update(correct=not bool(wrong))
    state = monitor.to_bytes()
    if n > fed:
        by = (n - fed) // monitor.spacing * monitor.spacing
        state = advanced(state, by, round(by * how.before), by, round(by * how.shown))
    store = writer.store
    chains = tuple(secrets.token_hex(8) for _ in range(min(n, RECENT)))
    record = dataclasses.replace(
        FleetRecord.first(watch.version, state), seq=n, chain=chains[-1], recent=chains
    )
    assert await store.commit(None, record) == "ok"
    client = aioredis.from_url(url)
    try:
        history = store.key("h", watch.version)
        for start in range(max(0, n - store.history_len), n - 1, how.chunk):
            seqs = range(start + 1, min(n, start + 1 + how.chunk))
            await client.zadd(history, {f"{i}:{secrets.token_hex(8)}": i for i in seqs})
        for start in range(max(0, n - max(how.kept, store.audit_len)), n, how.chunk):
            pipe = client.pipeline(transaction=False)
            for i in range(start, min(n, start + how.chunk)):
                rid = f"old{i}"
                if i >= n - how.kept:
                    pipe.hset(store.key("a", rid), mapping={
                        "entry": "*", "label": "bench", "version": watch.version,
                        "status": "shown", "cause": "certified",
                        "completion": f"chatcmpl-{rid}", "test": record.test, "labelled": "1",
                    })  # fmt: skip
                    pipe.expire(store.key("a", rid), store.answer_ttl_s)
                if i >= n - store.audit_len:
                    pipe.xadd(store.key("x", watch.version), {"id": rid, "correct": "1"},
                              maxlen=store.audit_len, approximate=True)  # fmt: skip
            await pipe.execute()
    finally:
        await client.aclose()
        await writer.aclose()
    return store.key("m", watch.version)
