"""The in-process fleet replicas of ``python -m benchmarks.bench_fleet``: the alarm part's
three replicas and the start-up part's, and the start-up part's fleet state written as
the replicas write it.

A replica is :meth:`adapters.proxy.FleetSettings.replica` (what ``liftguard serve
--redis`` runs), fed :class:`adapters.proxy.FinishedAnswer` records: the measurements
need the replicas in-process (some 70,000 labels a default alarm run, the alarm read
from every replica's monitor and compared with one process's to the bit). The start-up
part's state of ten million labels is a fleet record exported by a replica, its counts
advanced, and imported where the replicas will read it (``import_record``), with the
keys around it (history, audit stream, answers) written where the docs' "Several
replicas" says they live.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from adapters.proxy import FinishedAnswer, FleetSettings, StaticCertificate
from guardrail import Certificate, RiskMonitor

__all__ = ["Fill", "advanced", "fill", "finished", "key", "monitor_of", "replica"]

LABEL = "bench"
"""The certificate's label (its version's name in the answers and the records)."""
RECENT, HISTORY, AUDIT = 64, 16_384, 100_000
"""What the fleet keeps of a version (docs/fleet.md): the chain values of a record's last
64 changes, its history's last 16,384 changes, an audit stream of about 100,000 labels."""


def replica(
    url: str, namespace: str, cert: Certificate, alpha: float,
    count_error: Callable[[str], object] | None = None,
) -> Any:  # fmt: skip
    """A replica (:meth:`FleetSettings.replica`, what ``liftguard serve --redis`` runs) on
    the server at ``url``, in ``namespace``, guarding every entry (``*``) with ``cert`` at
    level ``alpha``, every call to Redis waiting up to 5 s; failed calls go to
    ``count_error``."""
    fleet = FleetSettings(url, namespace=namespace, timeout_s=5.0)
    return fleet.replica(
        {"*": StaticCertificate(cert, LABEL)}, risk_alpha=alpha, count_error=count_error
    )


def monitor_of(replica: Any) -> RiskMonitor:
    """The replica's own copy of the fleet's monitor (its ``*`` entry's)."""
    held: RiskMonitor | None = replica.monitor("*")
    assert held is not None
    return held


def finished(rid: str) -> FinishedAnswer:
    """Answer ``rid``: certified (shown), decided, under the calibrated context."""
    return FinishedAnswer(rid, f"chatcmpl-{rid}", LABEL, True, True, True, False, "certified")


def key(namespace: str, kind: str, name: str) -> str:
    """The fleet's key of kind ``kind`` (``a``, ``m``, ``h``, ``x``: docs/fleet.md's table)
    named ``name`` in ``namespace``."""
    return f"liftguard:{{{namespace}}}:{kind}:{name}"


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


async def _first_record(url: str, cert: Certificate, alpha: float, client: Any) -> bytes:
    """A version's first record (one verdict counted) as a replica exports it, written in a
    namespace of its own that is then removed."""
    scratch = f"bench-first-{uuid.uuid4().hex}"
    first = replica(url, scratch, cert, alpha)
    try:
        first.take("*", finished("first"))
        await first.drain()
        record: bytes | None = await first.export_record("*")
    finally:
        await first.aclose()
    async for name in client.scan_iter(match=key(scratch, "*", "*")):
        await client.delete(name)
    assert record is not None
    return record


async def fill(url: str, namespace: str, cert: Certificate, n: int, how: Fill) -> str:
    """A fleet's state after ``n`` labels in ``namespace`` (see ``fleet_startup.py``);
    the record's key."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(url)
    writer = replica(url, namespace, cert, how.alpha)
    try:
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
        raw, _ = (await _first_record(url, cert, how.alpha, client)).split(b"\n", 1)
        head = json.loads(raw)  # the record's head: its version, test, change count, chain
        chains = [secrets.token_hex(8) for _ in range(min(n, RECENT))]
        head.update(seq=n, chain=chains[-1], recent=chains)
        raw = json.dumps(head, separators=(",", ":")).encode("utf-8")
        await writer.import_record("*", raw + b"\n" + state)
        version, test = head["version"], head["test"]
        history = key(namespace, "h", version)
        for start in range(max(0, n - HISTORY), n - 1, how.chunk):
            seqs = range(start + 1, min(n, start + 1 + how.chunk))
            await client.zadd(history, {f"{i}:{secrets.token_hex(8)}": i for i in seqs})
        ttl = FleetSettings(url).feedback_ttl_s
        for start in range(max(0, n - max(how.kept, AUDIT)), n, how.chunk):
            pipe = client.pipeline(transaction=False)
            for i in range(start, min(n, start + how.chunk)):
                rid = f"old{i}"
                if i >= n - how.kept:
                    pipe.hset(key(namespace, "a", rid), mapping={
                        "entry": "*", "label": LABEL, "version": version, "status": "shown",
                        "cause": "certified", "completion": f"chatcmpl-{rid}", "test": test,
                        "labelled": "1",
                    })  # fmt: skip
                    pipe.expire(key(namespace, "a", rid), ttl)
                if i >= n - AUDIT:
                    pipe.xadd(key(namespace, "x", version), {"id": rid, "correct": "1"},
                              maxlen=AUDIT, approximate=True)  # fmt: skip
            await pipe.execute()
    finally:
        await client.aclose()
        await writer.aclose()
    return key(namespace, "m", version)
