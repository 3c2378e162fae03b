"""What a second burst of streams costs through ``liftguard serve``, and sent directly.

``python -m benchmarks.bench_proxy_burst [--streams N] [--runs R] [--certs single,uniform,fitted]
[--record off,on] [--max-keepalive K] [--probe]`` writes
``benchmarks/results/proxy_burst.json`` (``--out`` elsewhere).

Three processes: the loopback upstream (``benchmarks/loopback.py``: the OpenAI
streaming wire format, one token per chunk, ``--top`` alternatives per token),
``liftguard serve`` in front of it (the real command, started as a subprocess on
a free port, its verdict lines going to a file; with the shipped single-score
certificate, the shipped fitted one, whose prompt-free lift runs the bundled model
through llama.cpp, or ``uniform``, which certifies every loopback answer; without
and/or with ``--record DIR``), and this client (``openai.AsyncOpenAI`` on an
``httpx.AsyncClient`` with the same pool limits for both targets, by default the
openai SDK's: 1,000 connections, 100 kept alive; or raw ``httpx`` with
``--client httpx``).

One run of one target: a fresh client, a warm-up (a few streams through another
client) ``--settle`` seconds before burst 1 (by default long enough that no idle
connection from the warm-up is left anywhere), then burst 1 (``--streams``
streamed chat completions started at once), a wait (``--gaps``, default 1 s,
from the end of one burst to the next), then burst 2 (more bursts if ``--gaps``
lists more waits). For each stream the time from the burst's start to its first
body event (its first byte) is kept; each burst reports p50/p90/max. The same
runs go ``direct`` (client -> upstream) and ``proxy`` (client -> proxy ->
upstream), the order alternating by run, and the result is the ratio burst 2 /
burst 1 of each, never an absolute time (the machine is shared and small). Each
configuration runs ``--runs`` times (a fresh proxy process each time); the JSON
keeps every run and the median and range of the ratios.

What a second burst meets that the first did not is idle kept-alive connections,
in the client's pool and in the proxy's pool to the upstream: httpcore 1.0 hands
one idle connection to every request that arrives before the first one given it
starts on it, and queues the others again, each time with a pass over every
connection. ``--probe`` counts it in the proxy (``pool_requeued``, and the calls
and time of those passes) together with the cyclic GC's collections;
``--max-keepalive 0`` takes the client's share out (nothing is kept alive on the
client side, so ``direct`` stays level). ``--prelude CODE`` runs ``CODE`` in the
proxy process first, to change one factor at a time (e.g. ``import gc;
gc.freeze()``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import openai

from benchmarks.bench_proxy import ProxyProcess
from benchmarks.loopback import VOCAB, LoopbackServer, Spec
from studies.tables import liftguard_executable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "proxy_burst.json"
CERTIFICATES = {
    "single": "guardrail/data/smollm2_certificate.json",
    "fitted": "guardrail/data/smollm2_fitted_certificate.json",
    "uniform": None,
}
"""The shipped certificates: single-score (logprobs only; the loopback's logprobs are far
below its threshold, so every answer is blocked) and fitted (prompt-free lift: the bundled
model scores every answer token through llama.cpp); ``uniform``: the certificate of
``bench_proxy.py`` (uniform skeleton, threshold 2.5), which certifies every loopback
answer at its end, so that each upstream connection goes back to the proxy's pool."""


def _certificate(name: str, tmp: Path) -> str:
    path = CERTIFICATES[name]
    if path is not None:
        return path
    from guardrail import Certificate, ModelIdentity, SkeletonSpec, StreamPolicy

    skeleton = SkeletonSpec("uniform", {"vocab_size": VOCAB})
    cert = Certificate(StreamPolicy(aggregate="min"), 2.5, skeleton, ModelIdentity("bench"))
    out = tmp / "uniform_certificate.json"
    cert.save(out)
    return str(out)


_PROBE = """
import gc, json, signal, sys, time
import httpcore._async.connection_pool as _pool
_probe = {"gc_collections": [0, 0, 0], "gc_s": [0.0, 0.0, 0.0], "pool_assign_calls": 0,
          "pool_assign_s": 0.0, "pool_requeued": 0}
_gc_t0 = [0.0]
def _gc(phase, info):
    if phase == "start":
        _gc_t0[0] = time.perf_counter()
    else:
        g = info["generation"]
        _probe["gc_collections"][g] += 1
        _probe["gc_s"][g] += time.perf_counter() - _gc_t0[0]
gc.callbacks.append(_gc)
_pools = [_pool.AsyncConnectionPool]
try:  # the proxy's own pool, where it has one
    from adapters._proxy._upstream import OneRequestPerIdleConnection
    _pools.append(OneRequestPerIdleConnection)
except ImportError:
    pass
def _timed(assign):
    def timed(self):
        t0 = time.perf_counter()
        try:
            return assign(self)
        finally:
            _probe["pool_assign_calls"] += 1
            _probe["pool_assign_s"] += time.perf_counter() - t0
    return timed
for _cls in _pools:
    _cls._assign_requests_to_connections = _timed(_cls.__dict__["_assign_requests_to_connections"])
_clear = _pool.AsyncPoolRequest.clear_connection
def _requeued(self):
    _probe["pool_requeued"] += 1
    return _clear(self)
_pool.AsyncPoolRequest.clear_connection = _requeued
def _report(*_):
    sys.stderr.write("PROBE " + json.dumps({**_probe, "cpu_s": time.process_time()}) + "\\n")
    sys.stderr.flush()
signal.signal(signal.SIGUSR1, _report)
"""
"""What ``--probe`` runs in the proxy process: counts of cyclic-GC collections and their
time by generation, the calls and time of the upstream connection pool's bookkeeping
(``_assign_requests_to_connections``, run on every request and every response close) and
the requests it queued again after handing them a connection another request took
(``pool_requeued``), printed on SIGUSR1."""

_CLI = "import sys\nfrom guardrail.cli import main\nsys.argv[0] = 'liftguard'\nsys.exit(main())"


class ServeProcess(ProxyProcess):
    """``liftguard serve`` in a child process on a free port (``cpu()``, ``close()`` as
    :class:`bench_proxy.ProxyProcess`); its stderr (start-up line, verdict lines) goes
    to a file, so that nothing blocks on a pipe."""

    def __init__(
        self, upstream: str, certificate: str, *, record: str | None, extra: Sequence[str] = (),
        prelude: str | None = None, log: Path,
    ) -> None:  # fmt: skip
        args = ["serve", "--upstream", upstream, "--certificate", certificate, "--port", "0",
                "--refresh-interval", "0", *extra]  # fmt: skip
        if record is not None:
            args += ["--record", record]
        command = [liftguard_executable(), *args]
        if prelude:
            command = [sys.executable, "-c", f"{prelude}\n{_CLI}", *args]
        self.log = log
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                command, stderr=err, stdout=subprocess.DEVNULL, cwd=ROOT, env=env
            )
        self.base_url = self._wait_for_url()

    def _wait_for_url(self, timeout: float = 120.0) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for line in self.log.read_text("utf-8", "replace").splitlines():
                if line.startswith("liftguard serve: http://"):
                    return line.split()[2]
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.close()
        raise RuntimeError(f"liftguard serve did not start:\n{self.log.read_text()[-2000:]}")

    def probe(self, timeout: float = 10.0) -> dict[str, Any]:
        """The ``--probe`` counters now (see :data:`_PROBE`)."""

        def lines() -> list[str]:
            text = self.log.read_text("utf-8", "replace")
            return [ln for ln in text.splitlines() if ln.startswith("PROBE ")]

        before = len(lines())
        self.proc.send_signal(signal.SIGUSR1)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            found = lines()
            if len(found) > before:
                data: dict[str, Any] = json.loads(found[-1][6:])
                return data
            time.sleep(0.01)
        raise RuntimeError("the proxy did not answer the probe")


def _delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in after.items():
        if isinstance(value, list):
            out[key] = [round(a - b, 4) for a, b in zip(value, before[key], strict=True)]
        else:
            out[key] = round(value - before[key], 4)
    return out


def _body(spec: Spec) -> dict[str, Any]:
    """The request: the loopback reads its spec from the first message, and the shipped
    certificates' context would put their system prompt first, so the spec is the system
    message (the proxy forwards it and counts a ``system prompt`` context mismatch)."""
    messages = [{"role": "system", "content": spec.message()},
                {"role": "user", "content": "What is the capital of France?"}]  # fmt: skip
    return {"model": "bench", "messages": messages, "stream": True}


async def _stream_openai(
    client: openai.AsyncOpenAI, spec: Spec, t0: float
) -> tuple[float | None, str]:
    """Read one streamed answer: (seconds from ``t0`` to its first event, the verdict's
    state); a connection that fails is ``(None, "error:...")``, left out of the latencies."""
    first, state = None, "none"
    try:
        stream = await client.chat.completions.create(**_body(spec))
        async for chunk in stream:
            if first is None:
                first = time.perf_counter() - t0
            verdict = (chunk.model_extra or {}).get("liftguard")
            if verdict:
                state = verdict["state"]
    except openai.APIConnectionError as exc:
        return None, f"error:{type(exc).__name__}"
    except openai.APIError as exc:
        if first is None:
            first = time.perf_counter() - t0
        body = exc.body if isinstance(exc.body, dict) else {}
        state = (body.get("liftguard") or {}).get("state", f"error:{type(exc).__name__}")
    return first, state


async def _stream_httpx(
    client: httpx.AsyncClient, spec: Spec, t0: float
) -> tuple[float | None, str]:
    first, state = None, "none"
    try:
        async with client.stream("POST", "/chat/completions", json=_body(spec)) as resp:
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                if first is None:
                    first = time.perf_counter() - t0
                if '"liftguard"' in line:
                    data = json.loads(line[5:])
                    verdict = data.get("liftguard") or (data.get("error") or {}).get("liftguard")
                    state = (verdict or {}).get("state", state)
    except httpx.TransportError as exc:
        return None, f"error:{type(exc).__name__}"
    return first, state


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"p50": at(0.5), "p90": at(0.9), "max": ordered[-1]}


class Target:
    """One client (pool ``limits``) against ``base_url``; :meth:`burst` reads N streams."""

    def __init__(self, base_url: str, limits: httpx.Limits, kind: str) -> None:
        self.http = httpx.AsyncClient(base_url=base_url, limits=limits, timeout=600)
        self.kind = kind
        self.client = openai.AsyncOpenAI(
            base_url=base_url, api_key="bench", max_retries=0, http_client=self.http
        )

    async def burst(self, spec: Spec, n: int) -> tuple[list[float], dict[str, int]]:
        t0 = time.perf_counter()
        if self.kind == "openai":
            jobs = [_stream_openai(self.client, spec, t0) for _ in range(n)]
        else:
            jobs = [_stream_httpx(self.http, spec, t0) for _ in range(n)]
        results = await asyncio.gather(*jobs)
        states: dict[str, int] = {}
        for _, state in results:
            states[state] = states.get(state, 0) + 1
        return [first for first, _ in results if first is not None], states

    async def aclose(self) -> None:
        await self.client.close()
        await self.http.aclose()


async def _run_target(
    base_url: str, spec: Spec, args: argparse.Namespace, proxy: ServeProcess | None
) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=args.max_connections,
                          max_keepalive_connections=args.max_keepalive)  # fmt: skip
    warm = Target(base_url, limits, args.client)
    try:
        await warm.burst(spec, args.warmup)
    finally:
        await warm.aclose()
    await asyncio.sleep(args.settle)
    target = Target(base_url, limits, args.client)
    bursts = []
    try:
        for gap in [None, *args.gaps]:
            if gap is not None:
                await asyncio.sleep(gap)
            c0 = proxy.cpu() if proxy else 0.0
            p0 = proxy.probe() if proxy and args.probe else None
            t0 = time.perf_counter()
            firsts, states = await target.burst(spec, args.streams)
            row: dict[str, Any] = {"gap_s": gap, "wall_s": time.perf_counter() - t0,
                                   **_percentiles(firsts), "states": states}  # fmt: skip
            if proxy:
                row["proxy_cpu_s"] = proxy.cpu() - c0
            if proxy and p0 is not None:
                row["probe"] = _delta(proxy.probe(), p0)
            bursts.append(row)
    finally:
        await target.aclose()
    out: dict[str, Any] = {"bursts": bursts}
    for q in ("p50", "p90", "max"):
        out[f"ratio_{q}"] = bursts[1][q] / bursts[0][q]
    return out


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _configuration(
    upstream: str, cert: str, record: bool, spec: Spec, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for r in range(args.runs):
        rec = str(tmp / f"rec-{cert}-{r}") if record else None
        proxy = ServeProcess(
            upstream, _certificate(cert, tmp), record=rec, extra=args.serve_arg or (),
            prelude="\n".join(filter(None, [args.prelude, _PROBE if args.probe else ""])),
            log=tmp / f"serve-{cert}-{record}-{r}.log",
        )  # fmt: skip
        try:
            row: dict[str, Any] = {}
            for name in ("direct", "proxy") if r % 2 == 0 else ("proxy", "direct"):
                via = proxy if name == "proxy" else None
                url = proxy.base_url if via else upstream
                row[name] = asyncio.run(_run_target(url, spec, args, via))
        finally:
            proxy.close()
        if args.show_log:
            tail = [ln for ln in proxy.log.read_text().splitlines() if '"event"' not in ln]
            row["serve_log"] = tail[-20:]
        runs.append(row)
        line = "  ".join(
            f"{n}: p50 {row[n]['bursts'][0]['p50']:.3f}->{row[n]['bursts'][1]['p50']:.3f}s "
            f"(x{row[n]['ratio_p50']:.2f}) p90 x{row[n]['ratio_p90']:.2f}"
            for n in ("direct", "proxy")
        )
        print(f"{cert:6} record={'on' if record else 'off':3} run {r + 1}: {line}", flush=True)
    summary = {
        f"{n}_ratio_{q}": _summary([run[n][f"ratio_{q}"] for run in runs])
        for n in ("direct", "proxy")
        for q in ("p50", "p90", "max")
    }
    return {"certificate": cert, "record": record, "runs": runs, "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=500, help="streams per burst")
    parser.add_argument(
        "--gaps",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[1.0],
        help="seconds between the end of one burst and the next (comma list)",
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per configuration")
    parser.add_argument(
        "--tokens",
        type=int,
        default=20,
        help="tokens per answer (the shipped context caps answers at 24)",
    )
    parser.add_argument("--top", type=int, default=20, help="alternatives per token upstream")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="between token chunks")
    parser.add_argument(
        "--certs", default="single,uniform", help="single, uniform and/or fitted (comma list)"
    )
    parser.add_argument("--record", default="off", help="off and/or on (comma list)")
    parser.add_argument("--client", default="openai", choices=("openai", "httpx"))
    parser.add_argument(
        "--max-connections",
        type=int,
        default=1000,
        help="client pool limit (the openai SDK's default)",
    )
    parser.add_argument(
        "--max-keepalive",
        type=int,
        default=100,
        help="client pool keep-alive limit (the openai SDK's default)",
    )
    parser.add_argument("--warmup", type=int, default=8, help="streams before the bursts")
    parser.add_argument(
        "--settle",
        type=float,
        default=6.0,
        help="seconds from the warm-up to burst 1: past the 5 s for which httpx and "
        "uvicorn keep an idle connection, so that burst 1 meets none",
    )
    parser.add_argument("--serve-arg", action="append", help="one more liftguard serve argument")
    parser.add_argument("--prelude", default=None, help="code run in the proxy process first")
    parser.add_argument(
        "--probe",
        action="store_true",
        help="count GC collections and connection-pool time in the proxy",
    )
    parser.add_argument("--show-log", action="store_true", help="keep the proxy's non-verdict log")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    spec = Spec(tokens=args.tokens, top=args.top, delay=args.delay_ms / 1000)
    certs = [c for c in args.certs.split(",") if c]
    records = [r == "on" for r in args.record.split(",") if r]
    out: dict[str, Any] = {
        "command": " ".join(["python", "-m", "benchmarks.bench_proxy_burst", *sys.argv[1:]]),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "platform": platform.platform()},
        "spec": {"tokens": spec.tokens, "top": spec.top, "delay_s": spec.delay},
        "streams": args.streams, "gaps_s": args.gaps, "client": args.client,
        "client_limits": {"max_connections": args.max_connections,
                          "max_keepalive_connections": args.max_keepalive},
        "serve_args": args.serve_arg or [], "prelude": args.prelude, "probe": args.probe,
        "configurations": [],
    }  # fmt: skip
    with LoopbackServer() as upstream, tempfile.TemporaryDirectory() as tmp:
        for cert in certs:
            for record in records:
                out["configurations"].append(
                    _configuration(upstream.base_url, cert, record, spec, args, Path(tmp))
                )
    for conf in out["configurations"]:
        s = conf["summary"]
        print(f"{conf['certificate']:6} record={'on' if conf['record'] else 'off':3} "
              + "  ".join(f"{n} burst2/burst1 p50 x{s[f'{n}_ratio_p50']['median']:.2f} "
                          f"[{s[f'{n}_ratio_p50']['min']:.2f}-{s[f'{n}_ratio_p50']['max']:.2f}]"
                          f" p90 x{s[f'{n}_ratio_p90']['median']:.2f}"
                          for n in ("direct", "proxy")))  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
