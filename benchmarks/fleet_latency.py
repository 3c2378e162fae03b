"""The latency part of ``python -m benchmarks.bench_fleet``: guarded answers through replicas
on one Redis or Valkey server, with the server up, stopped and hung, against the direct
path; and the certificate both parts use."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import openai

from benchmarks.bench_proxy import read_answer
from benchmarks.fleet_page import FLEET_TIMEOUT_S, LABELS_CHECKED, PATHS, TARGET, WARM_UP
from benchmarks.loopback import VOCAB, LoopbackServer, Spec
from benchmarks.valkey_server import ValkeyServer, free_port
from guardrail import Calibration, Certificate, ModelIdentity, SkeletonSpec, StreamPolicy
from studies.tables import ROOT, Progress


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
    """Send one label (again while the fleet has not got the answer's record: 404, or 503
    ``answer_in_flight``, for a moment); ``accepted`` or the refusal's code, and how long
    the last try took."""
    for _ in range(100):
        t0 = time.perf_counter()
        resp = await client.post(f"{proc.root}/v1/liftguard/feedback",
                                 json={"id": rid, "correct": True})  # fmt: skip
        took = time.perf_counter() - t0
        if not coming(resp):
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


def coming(resp: httpx.Response) -> bool:
    """The label's answer has not reached the fleet store yet: send it again."""
    if resp.status_code == 404:
        return True
    return resp.status_code == 503 and resp.json()["error"]["code"] == "answer_in_flight"


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
