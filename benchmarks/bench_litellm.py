"""What the LiteLLM guardrail costs: the same answers read directly, through LiteLLM, and
through LiteLLM with the liftguard guardrail, in one run.

``PYTHONPATH=tests/adapters python -m benchmarks.bench_litellm [--quick]`` (needs
``pip install -e ".[litellm]"``, and the tests' LiteLLM harness on the path; writes its
JSON and page under ``out/bench_litellm/`` (ignored by git), or with ``--write-docs``
``benchmarks/results/bench_litellm.json`` and ``docs/results/litellm_overhead.md``;
``--docs-only`` rewrites the committed page from the saved JSON).

Three processes: the loopback upstream (``benchmarks/loopback.py``: one token per chunk),
one ``litellm --config`` process (started as the tests start it,
``tests/litellm_harness.py``) serving the model ``plain`` (no guardrail) and the
models ``buffered`` and ``passthrough`` (the guardrail in that ``guard_mode``, with a
uniform-skeleton certificate whose lifts never decide before the end, so every token takes
the monitor's full path and every answer is certified by the final rule), and this client
(``openai.AsyncOpenAI``). Each round reads the same answers on the four paths (``direct``:
client -> upstream), in an order that rotates by round; the table keeps the best round of
each path.

Scenarios (as ``benchmarks/bench_proxy.py``): ``paced``, tokens ``--delay-ms`` apart (a
model generating: the wall-time ratio is the latency a user sees), and ``burst``, every
answer written at once (the ratio is the throughput cost on this machine).

What the upstream sends differs as it would in use: the guardrail asks it for logprobs (and
the alternatives its certificate reads), which LiteLLM then parses on every chunk; the other
paths ask for none, and get each token's logprob only (the loopback always sends one).

CPU per token: ``direct`` is the client's CPU; the other paths add the LiteLLM process's
(from ``/proc``); the upstream's is left out of all of them. Where the client did not ask
for logprobs the guardrail strips them, so LiteLLM writes and the client parses less: its
CPU can come out below LiteLLM's own.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results" / "bench_litellm.json"
PAGE = ROOT / "docs" / "results" / "litellm_overhead.md"
SCRATCH = ROOT / "out" / "bench_litellm"
"""Where a plain run writes (``/out/`` is ignored by git)."""
COMMAND = "python -m benchmarks.bench_litellm"
PATHS = ("direct", "litellm", "buffered", "passthrough")
MODELS = {"litellm": "plain", "buffered": "buffered", "passthrough": "passthrough"}
GUARDED = ("buffered", "passthrough")


@dataclass
class Best:
    wall: float = math.inf
    cpu: float = math.inf


def _process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _read(client: Any, spec: Any, path: str) -> None:
    from benchmarks.loopback import answer_text

    stream = await client.chat.completions.create(
        model=MODELS.get(path, "bench"),
        messages=[{"role": "user", "content": spec.message()}],
        stream=True,
    )
    parts, verdict = [], None
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        verdict = (chunk.model_extra or {}).get("liftguard", verdict)
    if "".join(parts) != answer_text(spec.tokens):
        raise AssertionError(f"{path}: wrong text")
    if path in GUARDED and (verdict is None or verdict["state"] != "certified"):
        raise AssertionError(f"expected a certified answer, got {verdict}")


def _spec_for(spec: Any, path: str) -> Any:
    """What the upstream streams on ``path``: logprobs with ``spec.top`` alternatives for the
    guardrail (which asks for them), each token's own logprob only on the paths where nothing
    asks (the loopback always sends a logprob per token: the nearest it comes to none)."""
    return spec if path in GUARDED else replace(spec, top=0)


async def _round(
    client: Any, spec: Any, path: str, streams: int, concurrency: int, pid: int
) -> tuple[float, float]:
    sem = asyncio.Semaphore(concurrency)
    spec = _spec_for(spec, path)

    async def one() -> None:
        async with sem:
            await _read(client, spec, path)

    gc.collect()
    p0 = _process_cpu(pid)
    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one() for _ in range(streams)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return wall, cpu + (_process_cpu(pid) - p0 if path != "direct" else 0.0)


async def scenario(
    upstream: str, litellm: Any, spec: Any, streams: int, concurrency: int, repeat: int
) -> dict[str, Best]:
    import openai

    best = {path: Best() for path in PATHS}
    clients = {
        "direct": openai.AsyncOpenAI(base_url=upstream, api_key="b", max_retries=0),
        "litellm": openai.AsyncOpenAI(base_url=litellm.base_url, api_key=litellm.key,
                                      max_retries=0, timeout=120),
    }  # fmt: skip
    for path in GUARDED:
        clients[path] = clients["litellm"]
    pid = litellm.process.pid
    try:
        for path in PATHS:  # warm-up: connections, caches, LiteLLM's first-request work
            await _round(clients[path], spec, path, concurrency, concurrency, pid)
        for r in range(repeat):
            for path in PATHS[r % len(PATHS) :] + PATHS[: r % len(PATHS)]:
                wall, cpu = await _round(clients[path], spec, path, streams, concurrency, pid)
                b = best[path]
                b.wall, b.cpu = min(b.wall, wall), min(b.cpu, cpu)
    finally:
        await clients["direct"].close()
        await clients["litellm"].close()
    return best


def _certificate() -> Any:
    from benchmarks.loopback import VOCAB
    from guardrail import Certificate, ModelIdentity, SkeletonSpec, StreamPolicy

    return Certificate(
        StreamPolicy(aggregate="min"), 2.5,
        SkeletonSpec("uniform", {"vocab_size": VOCAB}), ModelIdentity("bench"),
    )  # fmt: skip


def measure(args: argparse.Namespace) -> dict[str, Any]:
    try:  # the tests' way of starting LiteLLM (tests/adapters, not a package)
        from litellm_harness import running_litellm
    except ImportError as exc:
        raise SystemExit(f"{exc}: run it as PYTHONPATH=tests/adapters {COMMAND}") from exc

    from benchmarks.loopback import LoopbackServer, Spec

    repeat = 2 if args.quick else 3
    scenarios = {
        "paced": (Spec(args.tokens, args.top, args.delay_ms / 1000), 8, 4),
        "burst": (Spec(args.tokens, args.top, 0.0), 16 if args.quick else 40, 4),
    }
    out: dict[str, Any] = {
        "command": " ".join(["python", "-m", "benchmarks.bench_litellm", *sys.argv[1:]]),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "platform": platform.platform()},
        "litellm": _litellm_version(),
        "scenarios": {},
    }  # fmt: skip
    guardrails = {mode: {"guard_mode": mode, "on_block": "error"} for mode in GUARDED}
    with LoopbackServer() as upstream, tempfile.TemporaryDirectory() as tmp, running_litellm(
        Path(tmp), upstream.base_url, certificate=_certificate(), guardrails=guardrails,
        timeout_s=120,
    ) as litellm:  # fmt: skip
        for name, (spec, streams, concurrency) in scenarios.items():
            best = asyncio.run(
                scenario(upstream.base_url, litellm, spec, streams, concurrency, repeat)
            )
            out["scenarios"][name] = _row(spec, streams, concurrency, best)
            print(f"{name}: {json.dumps(out['scenarios'][name]['ratios'])}", flush=True)
    return out


def _row(spec: Any, streams: int, concurrency: int, best: dict[str, Best]) -> dict[str, Any]:
    n = spec.tokens * streams
    row: dict[str, Any] = {"spec": asdict(spec), "streams": streams,
                           "concurrency": concurrency, "tokens": n}  # fmt: skip
    for path, b in best.items():
        row[path] = {"wall_s": b.wall, "cpu_s": b.cpu, "wall_us_per_token": 1e6 * b.wall / n,
                     "cpu_us_per_token": 1e6 * b.cpu / n}  # fmt: skip
    d, plain = best["direct"], best["litellm"]
    row["ratios"] = {"litellm/direct wall": plain.wall / d.wall}
    for mode in GUARDED:
        guarded = best[mode]
        row["ratios"][f"{mode}/litellm wall"] = guarded.wall / plain.wall
        row["ratios"][f"{mode}/litellm cpu"] = guarded.cpu / plain.cpu
        row[f"{mode}_added_wall_us_per_token"] = 1e6 * (guarded.wall - plain.wall) / n
        row[f"{mode}_added_cpu_us_per_token"] = 1e6 * (guarded.cpu - plain.cpu) / n
    return row


def _litellm_version() -> str:
    from importlib.metadata import version

    return version("litellm")


def page(result: dict[str, Any]) -> str:
    """The docs table of a saved run."""
    spec = result["scenarios"]["paced"]["spec"]
    lines = [
        f"<!-- generated by `{COMMAND}` from benchmarks/results/bench_litellm.json; "
        "do not edit -->",
        "",
        f"LiteLLM {result['litellm']} (`litellm --config`, one process) in front of the "
        f"loopback upstream, {spec['tokens']} tokens per answer; the guardrail's upstream "
        f"sends each token's logprob and {spec['top']} alternative(s) (what it asks for), the "
        "other paths' each token's logprob only. 4 answers at a time, best of the rounds "
        f"({result['machine']['cpus']} CPUs, Python {result['machine']['python']}). Per "
        "token: wall time of the whole batch, and CPU of the client plus the LiteLLM process.",
        "",
        "| scenario | path | wall/token (µs) | CPU/token (µs) | wall vs LiteLLM "
        "| CPU vs LiteLLM | wall vs direct |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in result["scenarios"].items():
        plain = row["litellm"]
        for path in PATHS:
            r = row[path]
            vs = (f"{r['wall_s'] / plain['wall_s']:.2f} | {r['cpu_s'] / plain['cpu_s']:.2f}"
                  if path != "direct" else " | ")  # fmt: skip
            vs_direct = r["wall_s"] / row["direct"]["wall_s"]
            lines.append(
                f"| {name} | {path} | {r['wall_us_per_token']:.0f} | "
                f"{r['cpu_us_per_token']:.0f} | {vs} | {vs_direct:.2f} |"
            )
    paced = result["scenarios"]["paced"]
    added = "; ".join(
        f"{mode}: {paced[f'{mode}_added_wall_us_per_token']:.0f} µs of wall time and "
        f"{paced[f'{mode}_added_cpu_us_per_token']:.0f} µs of CPU"
        for mode in GUARDED
    )
    lines += [
        "",
        f"`paced`: tokens {1000 * spec['delay']:.0f} ms apart (a model generating); `burst`: "
        "every answer written at once. Added by the guardrail to LiteLLM's own, per token, "
        f"when paced: {added}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer streams and rounds")
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument(
        "--top", type=int, default=1,
        help="alternatives per token upstream on the guarded path (the guardrail asks this "
        "certificate's upstream for 1)",
    )  # fmt: skip
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--write-docs", action="store_true",
        help=f"save to {RESULTS.relative_to(ROOT)} and rewrite {PAGE.relative_to(ROOT)} "
        f"(default: both under {SCRATCH.relative_to(ROOT)}/)",
    )  # fmt: skip
    mode.add_argument(
        "--docs-only", action="store_true", help="rewrite the committed page from its JSON"
    )
    args = parser.parse_args(argv)
    saved, written = (RESULTS, PAGE) if args.write_docs or args.docs_only else (
        SCRATCH / RESULTS.name, SCRATCH / PAGE.name)
    if args.docs_only:
        result = json.loads(RESULTS.read_text(encoding="utf-8"))
    else:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        result = measure(args)
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {saved.relative_to(ROOT)}")
    written.parent.mkdir(parents=True, exist_ok=True)
    written.write_text(page(result), encoding="utf-8")
    print(f"wrote {written.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
