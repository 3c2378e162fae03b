"""Whether the guard proxy keeps serving while it reads the largest bodies it accepts.

``python -m benchmarks.bench_proxy_bodies [--concurrent N]`` writes
``benchmarks/results/proxy_bodies.json`` and ``docs/results/proxy_bodies.md``
(``--docs-only`` rewrites the page from the JSON).

Three processes: the loopback upstream (``benchmarks/loopback.py``), the proxy
(``liftguard serve``'s :func:`adapters.proxy.serve`, buffered mode, default limits) and
this client. ``--concurrent`` chat requests go to the proxy at once, each a body of
exactly the proxy's ``max_body_bytes`` (4 MiB by default), of one of two shapes:

- ``text``: a long prompt, one message of text (few values, one long string);
- ``values``: as many tiny values as the proxy accepts (content parts of a hundred
  messages, just under its ``MAX_CONTAINERS`` objects and ``MAX_VALUES`` values): the
  costliest body to decode that it still takes.

Each body is a valid request whose first message asks the loopback upstream for a short
answer, so that it is read, decoded, checked, forwarded and answered. Meanwhile a process
asks for ``/healthz`` every 10 ms on a connection of its own; the page gives its
latencies, and the proxy process's peak resident memory (``VmHWM``, reset before each
scenario) above its memory at rest. Each scenario runs twice in one process each: with
the proxy as it is, and with every body decoded on the event loop (the proxy's
off-loop threshold raised past the body size), the baseline that shows what decoding in
a worker thread buys.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from adapters.proxy import Limits
from benchmarks.bench_proxy import ProxyProcess, load_note
from benchmarks.bench_proxy_memory import proc_status, reset_peak
from benchmarks.loopback import LoopbackServer, Spec

MAX_VALUES, MAX_CONTAINERS = Limits().max_json_values, Limits().max_json_containers
"""The proxy's default limits on the values and the objects of a body."""
ROOT = Path(__file__).resolve().parents[1]
SAVED = ROOT / "benchmarks" / "results" / "proxy_bodies.json"
OUT = ROOT / "docs" / "results" / "proxy_bodies.md"
COMMAND = "python -m benchmarks.bench_proxy_bodies"
ON_LOOP = "import adapters._serving._request as r; r.OFF_LOOP_BYTES = 1 << 62\n"
"""Prepended to the baseline proxy's script: every body decoded on the event loop."""
ANSWER = Spec(tokens=20, top=5)


def _padded(head: dict[str, Any], pad_key: str, size: int) -> bytes:
    """``head`` as JSON with the string at ``pad_key`` (a placeholder) grown so that the
    whole is exactly ``size`` bytes."""
    raw = json.dumps(head, separators=(",", ":")).encode()
    marker = json.dumps(pad_key).encode()
    fill = b"x" * (size - len(raw) + len(marker) - 2)
    out = raw.replace(marker, b'"' + fill + b'"', 1)
    assert len(out) == size, (len(out), size)
    return out


def body(shape: str, size: int) -> bytes:
    """One request body of ``size`` bytes (see the module docstring)."""
    first = {"role": "user", "content": ANSWER.message()}
    if shape == "text":
        head = {"model": "bench", "messages": [first, {"role": "user", "content": "PAD"}]}
        return _padded(head, "PAD", size)
    part = {"type": "text", "text": "x"}
    # each part: 2 colons and 2 commas (values counted), one object (containers counted)
    parts = int(min(MAX_VALUES / 4, MAX_CONTAINERS) * 0.97)
    messages = [first]
    per_message = 1000  # (under MAX_CONTENT_PARTS)
    while parts > 0:
        messages.append({"role": "user", "content": [part] * min(parts, per_message)})
        parts -= per_message
    messages.append({"role": "user", "content": "PAD"})
    head = {"model": "bench", "messages": messages}
    return _padded(head, "PAD", size)


class HealthPoller:
    """``GET /healthz`` every ``interval_s`` on one kept-alive connection, from a process of
    its own (so that this client's own work never delays a poll), until :meth:`stop`; each
    answer's latency in seconds (a failed one as ``inf``)."""

    def __init__(self, base_url: str, interval_s: float = 0.01) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.bench_proxy_bodies", "--poll", base_url,
             "--interval", str(interval_s)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        self.proc.stdout.readline()  # (its first poll is answered)

    def stop(self) -> list[float]:
        out, _ = self.proc.communicate("", timeout=120)
        return [float(x) for x in json.loads(out)]


def poll(base_url: str, interval_s: float) -> None:
    """The poller's process: polls until its stdin closes, then prints the latencies."""
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    latencies: list[float] = []
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            conn.request("GET", "/healthz")
            resp = conn.getresponse()
            resp.read()
            ok = resp.status == 200
        except OSError:
            ok = False
            conn.close()
        latencies.append(time.perf_counter() - t0 if ok else float("inf"))
        if len(latencies) == 1:
            print("polling", flush=True)
        stop.wait(interval_s)
    print(json.dumps([str(x) for x in latencies]), flush=True)


async def _send(session: aiohttp.ClientSession, url: str, raw: bytes) -> int:
    headers = {"content-type": "application/json", "authorization": "Bearer k"}
    async with session.post(url, data=raw, headers=headers) as resp:
        await resp.read()
        return resp.status


async def _requests(base_url: str, raw: bytes, n: int) -> tuple[list[int], float]:
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        url = f"{base_url}/chat/completions"
        await _send(session, url, body("text", 64 * 1024))  # warm up: a connection, a thread
        t0 = time.perf_counter()
        statuses = await asyncio.gather(*[_send(session, url, raw) for _ in range(n)])
        return list(statuses), time.perf_counter() - t0


def _scenario(upstream: str, raw: bytes, n: int, prelude: str) -> dict[str, Any]:
    """``n`` bodies ``raw`` at once through a fresh proxy process (freed memory stays with a
    process), ``/healthz`` polled meanwhile."""
    proxy = ProxyProcess(upstream, "buffered", prelude=prelude)
    try:
        base = proxy.base_url.rsplit("/v1", 1)[0]
        asyncio.run(_requests(proxy.base_url, body("text", 64 * 1024), 1))
        pid = proxy.proc.pid
        rest = proc_status(pid, "VmRSS")
        reset_peak(pid)
        poller = HealthPoller(base)
        time.sleep(1.0)
        idle = sorted(poller.stop())  # the machine's own latency, no body in flight
        poller = HealthPoller(base)
        statuses, wall = asyncio.run(_requests(proxy.base_url, raw, n))
        lat = sorted(poller.stop())
        peak = proc_status(pid, "VmHWM")
    finally:
        proxy.close()
    return {
        "statuses": sorted(set(statuses)),
        "wall_s": round(wall, 3),
        "healthz_idle_median_s": round(statistics.median(idle), 4),
        "healthz_idle_max_s": round(idle[-1], 4),
        "healthz_polls": len(lat),
        "healthz_median_s": round(statistics.median(lat), 4),
        "healthz_p95_s": round(lat[int(0.95 * (len(lat) - 1))], 4),
        "healthz_max_s": round(lat[-1], 4),
        "rest_mib": round(rest, 1),
        "peak_mib": round(peak, 1),
        "held_mib": round(peak - rest, 1),
    }


def run(concurrent: int) -> dict[str, Any]:
    size = Limits().max_body_bytes
    out: dict[str, Any] = {
        "generated_by": COMMAND + (f" --concurrent {concurrent}" if concurrent != 8 else ""),
        "concurrent": concurrent,
        "body_bytes": size,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "platform": platform.platform(), "load": round(os.getloadavg()[0], 1)},
        "scenarios": {},
    }  # fmt: skip
    with LoopbackServer() as upstream:
        for shape in ("text", "values"):
            raw = body(shape, size)
            for path, prelude in (("on the event loop (baseline)", ON_LOOP), ("proxy", "")):
                row = _scenario(upstream.base_url, raw, concurrent, prelude)
                out["scenarios"][f"{shape}: {path}"] = row
                print(shape, path, row, flush=True)
    return out


def render(saved: dict[str, Any]) -> str:
    """The whole of ``docs/results/proxy_bodies.md``, from a saved run."""
    m = saved["machine"]
    lines = [
        f"<!-- generated by `{saved['generated_by']}` (or `--docs-only` from its JSON); "
        "do not edit -->",
        "",
        f"{saved['concurrent']} chat requests at once through `liftguard serve` (buffered, "
        f"default limits), each a body of {saved['body_bytes']} bytes (the proxy's "
        "`max_body_bytes`): one long text, or as many tiny values as the proxy accepts. "
        "Meanwhile `/healthz` is asked every 10 ms; its latencies (*idle*: for a second "
        "before, with no body in flight), and the proxy process's peak resident memory above "
        "its memory at rest. The baseline decodes (and encodes for the upstream) every body "
        f"on the event loop. Python {m['python']}, {m['cpus']} CPUs{load_note(m)}, one run.",
        "",
        "| body | decoded | HTTP statuses | wall (s) | `/healthz` idle median / max (s) "
        "| polls | median (s) | p95 (s) | max (s) | rest (MiB) | peak (MiB) | held (MiB) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in saved["scenarios"].items():
        shape, path = name.split(": ", 1)
        statuses = ", ".join(str(s) for s in r["statuses"])
        lines.append(
            f"| {shape} | {path} | {statuses} | {r['wall_s']} "
            f"| {r['healthz_idle_median_s']} / {r['healthz_idle_max_s']} | {r['healthz_polls']} "
            f"| {r['healthz_median_s']} | {r['healthz_p95_s']} | {r['healthz_max_s']} "
            f"| {r['rest_mib']} | {r['peak_mib']} | {r['held_mib']} |"
        )
    return "\n".join(lines) + "\n\n"  # (a blank line ends the table where a page includes it)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--concurrent", type=int, default=8)
    parser.add_argument("--docs-only", action="store_true", help="rewrite the page from the JSON")
    parser.add_argument("--poll", metavar="URL", help=argparse.SUPPRESS)  # (the poller's process)
    parser.add_argument("--interval", type=float, default=0.01, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.poll:
        poll(args.poll, args.interval)
        return
    if args.docs_only:
        saved = json.loads(SAVED.read_text(encoding="utf-8"))
    else:
        saved = run(args.concurrent)
        SAVED.write_text(json.dumps(saved, indent=2) + "\n", encoding="utf-8")
    OUT.write_text(render(saved), encoding="utf-8")
    print(render(saved), file=sys.stdout)


if __name__ == "__main__":
    main()
