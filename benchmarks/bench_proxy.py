"""What the guard proxy costs: the same answers read directly and through the proxy, in one run.

``python -m benchmarks.bench_proxy [--quick]`` (writes ``benchmarks/results/bench_proxy.json``
and, with that default ``--out``, ``docs/results/proxy_overhead.md``; ``--docs-only``
rewrites the page from the JSON, running nothing).

Three processes: the loopback upstream (``benchmarks/loopback.py``: one token
per chunk, ``--top`` alternatives per token, tokens ``--delay-ms`` apart or all
at once), the proxy (``adapters.proxy.serve`` with a uniform-skeleton
certificate whose lifts never decide before the end, so every token takes the
monitor's full path and every answer is certified by the final rule), and this
client (``openai.AsyncOpenAI``). Each round reads the same answers ``direct``
(client -> upstream) and ``proxy`` (client -> proxy -> upstream), the order
alternating by round; the table keeps the best round of each.

Scenarios:

- ``paced``: tokens ``--delay-ms`` apart (a model generating), ``--streams``
  answers 4 at a time. The wall-time ratio proxy/direct is the latency a user
  sees; the aim is at most 1.01.
- ``burst``: every answer written at once, so the client and the proxy work as
  fast as they can: the ratio is the proxy's throughput cost on this machine.
  The proxy process's own CPU per token over the direct client's
  (``ratio_proxy_process_cpu``) is the proxy's own cost against what a client
  spends reading the same answers; the aim is at most 0.15.

CPU per token: ``direct`` is the client's CPU; ``proxy`` is the client's plus the
proxy process's (from ``/proc``); the upstream's is left out of both. Through
the proxy the client parses fewer and smaller chunks (the proxy strips the
logprobs the client did not ask for, and releases a held answer's text as one
chunk), so part of the proxy's CPU is offset; ``proxy_process_cpu_us_per_token``
is the proxy process's own.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import openai

from benchmarks.loopback import VOCAB, LoopbackServer, Spec, answer_text

RESULTS = Path(__file__).resolve().parent / "results" / "bench_proxy.json"
PAGE = Path(__file__).resolve().parents[1] / "docs" / "results" / "proxy_overhead.md"

_PROXY = """
import sys
from adapters.proxy import ProxyConfig, StaticCertificate, serve
from guardrail import Certificate, ModelIdentity, SkeletonSpec, StreamPolicy
cert = Certificate(StreamPolicy(aggregate="min"), 2.5,
                   SkeletonSpec("uniform", {"vocab_size": VOCAB}), ModelIdentity("bench"))
config = ProxyConfig(upstream=sys.argv[1], certificate=StaticCertificate(cert, "bench"),
                     mode=sys.argv[2], refresh_interval_s=0)
serve(config, port=0, on_listen=lambda url: print(url, flush=True))
""".replace("VOCAB", str(VOCAB))


class ProxyProcess:
    """The proxy in a child process (its CPU time read from ``/proc``)."""

    def __init__(self, upstream: str, mode: str, *, prelude: str = "") -> None:
        """``prelude``: Python run in the proxy's process before it starts (a benchmark's
        baseline)."""
        root = Path(__file__).resolve().parents[1]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", prelude + _PROXY, upstream, mode],
            stdout=subprocess.PIPE, text=True, cwd=root,
        )  # fmt: skip
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().strip()
        if not self.base_url.startswith("http://"):
            self.close()
            raise RuntimeError(f"the proxy did not start: {self.base_url!r}")

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def read_answer(client: openai.AsyncOpenAI, spec: Spec, via_proxy: bool) -> str | None:
    """Read one answer; its request id (through the proxy: the answer must be certified)."""
    stream = await client.chat.completions.create(
        model="bench", messages=[{"role": "user", "content": spec.message()}], stream=True
    )
    parts, verdict = [], None
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        verdict = (chunk.model_extra or {}).get("liftguard", verdict)
    if "".join(parts) != answer_text(spec.tokens):
        raise AssertionError("wrong text")
    if not via_proxy:
        return None
    if verdict is None or verdict["state"] != "certified":
        raise AssertionError(f"expected a certified answer, got {verdict}")
    return str(verdict["request_id"])


@dataclass
class Best:
    wall: float = math.inf
    cpu: float = math.inf
    proxy_cpu: float = math.inf


async def _round(
    client: openai.AsyncOpenAI, spec: Spec, streams: int, concurrency: int,
    proxy: ProxyProcess | None,
) -> tuple[float, float, float]:  # fmt: skip
    """Wall time, CPU time (the client's and the proxy's) and the proxy's alone."""
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with sem:
            await read_answer(client, spec, proxy is not None)

    gc.collect()
    p0 = proxy.cpu() if proxy else 0.0
    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one() for _ in range(streams)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    proxy_cpu = (proxy.cpu() - p0) if proxy else 0.0
    return wall, cpu + proxy_cpu, proxy_cpu


async def scenario(
    upstream: str, proxy: ProxyProcess, spec: Spec, streams: int, concurrency: int, repeat: int
) -> dict[str, Best]:
    best = {"direct": Best(), "proxy": Best()}
    clients = {
        "direct": openai.AsyncOpenAI(base_url=upstream, api_key="b", max_retries=0),
        "proxy": openai.AsyncOpenAI(base_url=proxy.base_url, api_key="b", max_retries=0),
    }
    try:
        for name, client in clients.items():  # warm-up: connections, caches
            await _round(client, spec, concurrency, concurrency, proxy if name == "proxy" else None)
        for r in range(repeat):
            for name in ("direct", "proxy") if r % 2 == 0 else ("proxy", "direct"):
                p = proxy if name == "proxy" else None
                wall, cpu, proxy_cpu = await _round(clients[name], spec, streams, concurrency, p)
                b = best[name]
                b.wall, b.cpu = min(b.wall, wall), min(b.cpu, cpu)
                b.proxy_cpu = min(b.proxy_cpu, proxy_cpu)
    finally:
        for client in clients.values():
            await client.close()
    return best


def load_note(machine: dict[str, Any]) -> str:
    """The machine's load when the run began, if it was recorded (other work on the same
    CPUs slows both paths, the proxy's more: it shares them with the client)."""
    load = machine.get("load")
    return "" if load is None else f", load average {load} when the run began"


def render(out: dict[str, Any]) -> str:
    """The whole of ``docs/results/proxy_overhead.md``, from a saved run."""
    m = out["machine"]
    lines = [
        f"<!-- generated by `{out['command']}` (or `--docs-only` from its JSON); do not edit -->",
        "",
        f"The same answers read directly from the loopback upstream and through `liftguard "
        f"serve` ({out['mode']} mode) in one run, the order alternating by round, the best "
        f"round of each kept; Python {m['python']}, {m['cpus']} CPUs{load_note(m)}. *CPU* is the "
        "client's "
        "own, plus the proxy process's through the proxy; the last two columns are the proxy "
        "process's alone, as a share of the direct client's CPU per token and per token.",
        "",
        "| scenario | tokens per answer | alternatives | answers (at once) | path | "
        "wall µs/token | CPU µs/token | proxy / direct wall | proxy / direct CPU | "
        "proxy process / direct CPU | proxy process CPU µs/token |",
        "|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in out["scenarios"].items():
        spec = row["spec"]
        pace = f"{name} ({1000 * spec['delay']:g} ms apart)" if spec["delay"] else name
        for path in ("direct", "proxy"):
            r = row[path]
            own = row["proxy_process_cpu_us_per_token"]
            tail = (f"{row['ratio_wall']:.3f} | {row['ratio_cpu']:.2f} | "
                    f"{own / row['direct']['cpu_us_per_token']:.3f} | {own:.1f}"
                    if path == "proxy" else "| | |")  # fmt: skip
            lines.append(
                f"| {pace} | {spec['tokens']} | {spec['top']} | {row['streams']} "
                f"({row['concurrency']}) | {path} | {r['wall_us_per_token']:.1f} | "
                f"{r['cpu_us_per_token']:.1f} | {tail} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer streams and rounds")
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--top", type=int, default=0, help="alternatives per token upstream")
    parser.add_argument("--mode", default="buffered", choices=("buffered", "passthrough"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--docs-only", action="store_true", help="rewrite the page from the saved results"
    )
    args = parser.parse_args()
    if args.docs_only:
        PAGE.write_text(render(json.loads(RESULTS.read_text(encoding="utf-8"))), encoding="utf-8")
        print(f"wrote {PAGE}")
        return
    repeat = 2 if args.quick else 4
    scenarios = {
        "paced": (Spec(args.tokens, args.top, args.delay_ms / 1000), 8 if args.quick else 16, 4),
        # (480 answers: the proxy's CPU comes from /proc in clock ticks, 10 ms, and a burst
        # of 120 took it 20 of them, a 5% step)
        "burst": (Spec(args.tokens, args.top, 0.0), 80 if args.quick else 480, 4),
    }
    out: dict[str, Any] = {
        "command": " ".join(["python", "-m", "benchmarks.bench_proxy", *sys.argv[1:]]),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "platform": platform.platform(), "load": round(os.getloadavg()[0], 1)},
        "mode": args.mode,
        "scenarios": {},
    }  # fmt: skip
    print(f"{'scenario':8} {'path':7} {'wall/token':>12} {'CPU/token':>12} {'ratio wall':>11}"
          f" {'ratio CPU':>10} {'proxy process CPU/token':>24} {'/ direct CPU':>12}")  # fmt: skip
    with LoopbackServer() as upstream:
        proxy = ProxyProcess(upstream.base_url, args.mode)
        try:
            for name, (spec, streams, concurrency) in scenarios.items():
                best = asyncio.run(
                    scenario(upstream.base_url, proxy, spec, streams, concurrency, repeat)
                )
                n = spec.tokens * streams
                row: dict[str, Any] = {"spec": asdict(spec), "streams": streams,
                                       "concurrency": concurrency, "tokens": n}  # fmt: skip
                for path, b in best.items():
                    row[path] = {"wall_s": b.wall, "cpu_s": b.cpu,
                                 "wall_us_per_token": 1e6 * b.wall / n,
                                 "cpu_us_per_token": 1e6 * b.cpu / n}  # fmt: skip
                row["ratio_wall"] = best["proxy"].wall / best["direct"].wall
                row["ratio_cpu"] = best["proxy"].cpu / best["direct"].cpu
                added = best["proxy"].cpu - best["direct"].cpu
                row["proxy_added_cpu_us_per_token"] = 1e6 * added / n
                row["proxy_process_cpu_us_per_token"] = 1e6 * best["proxy"].proxy_cpu / n
                row["ratio_proxy_process_cpu"] = best["proxy"].proxy_cpu / best["direct"].cpu
                out["scenarios"][name] = row
                for path in ("direct", "proxy"):
                    r = row[path]
                    ratios = (f"{row['ratio_wall']:11.3f} {row['ratio_cpu']:10.2f}"
                              f" {row['proxy_process_cpu_us_per_token']:22.1f}us"
                              f" {row['ratio_proxy_process_cpu']:12.3f}"
                              if path == "proxy" else "")  # fmt: skip
                    print(f"{name:8} {path:7} {r['wall_us_per_token']:10.1f}us"
                          f" {r['cpu_us_per_token']:10.1f}us {ratios}")  # fmt: skip
        finally:
            proxy.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    if args.out.resolve() == RESULTS:  # (a run written elsewhere leaves the page alone)
        PAGE.write_text(render(out), encoding="utf-8")
        print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
