"""A starting replica builds no fresh risk monitor before it needs one (its Clopper-Pearson
coverage bound imports scipy, which would delay the replica's first request): until it
holds its version's record it reports what a fresh monitor reports, and the first test it
starts carries the certificate's own fresh monitor, expected coverage included."""

from __future__ import annotations

import uuid

from test_fleet_watch import ALPHA, CERT, finished, replica
from valkey_process import ValkeyProcess

from adapters._risk._risk_watch import RiskWatch
from adapters._serving._certs import StaticCertificate
from guardrail import RiskMonitor


async def test_a_replica_reports_a_fresh_monitor_until_it_holds_the_record(
    valkey: ValkeyProcess,
) -> None:
    one = RiskWatch({"*": StaticCertificate(CERT, "cal-cert")}, risk_alpha=ALPHA, feedback_ids=8)
    a = replica(valkey.url, uuid.uuid4().hex)
    try:
        assert a.states() == one.states()
        health = a.health()["*"]
        assert {key: health[key] for key in one.health()["*"]} == one.health()["*"]
        a.take("*", finished("r1"))  # its verdict starts the fleet's first test
        await a.drain()
        fresh = CERT.risk_monitor(RiskMonitor.restart_level(ALPHA, 0))
        assert fresh.coverage is not None
        watch = a._watches["*"]
        found = await a.store.read(watch.version, None)
        assert found is not None and found.record is not None
        kept = found.record.monitor()
        assert (kept.coverage, kept.answers, kept.shown) == (fresh.coverage, 1, 1)
        assert watch.monitor is not None and watch.monitor.coverage == fresh.coverage
    finally:
        await a.aclose()
