"""Overhead of guarding an OpenAI stream, end to end.

``python -m benchmarks.bench_stream_overhead [--quick]``.

The real ``openai.AsyncOpenAI`` client reads the same loopback streams
(``benchmarks/loopback.py``, a server in its own process; one token per chunk,
20 ``top_logprobs`` entries per token as ``guarded_chat_completion`` asks by
default) in five ways:

- ``unguarded``: iterate the raw ``AsyncStream`` and join ``delta.content``;
- ``guard_chat_stream(stream, monitor, mode=...)`` with a fresh
  ``Monitor.lift(policy, tau, skeleton=UniformSkeleton(50_000))`` per
  stream, for ``StreamPolicy()`` (betting boundary, mean lift, tau 3.9) and
  ``StreamPolicy(aggregate="min")`` (tau 2.5), in ``passthrough`` and
  ``buffered`` modes.

Token lifts alternate 3.0 and 5.0, so that no monitor decides before the end of
its stream: every token takes the monitor's full path, the worst case (a decided
monitor returns its verdict at once). Each run checks that every guarded stream
showed exactly the unguarded text and was certified by the final rule.

Two scenarios: ``burst`` (the server writes each answer at once: the client
parses as fast as it can, so the ratio is the client-side CPU cost of guarding)
and ``paced`` (one chunk per ``--delay-ms``, as a model generates; the client
mostly waits, and the ratio should be ~1). Each variant runs ``--repeat`` times,
the order rotating each round to spread drift; the table gives the best wall
time and the best CPU time of this process (``time.process_time``), their ratio
to ``unguarded`` and the guard's cost per token, (guarded - unguarded) / tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import os
import platform
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import openai
from openai.types.chat import ChatCompletionChunk

from adapters import chat_chunk_parts, guard_chat_stream
from benchmarks.loopback import VOCAB, LoopbackServer, Spec, answer_events, answer_text
from guardrail import Monitor, State, StreamPolicy, UniformSkeleton

POLICIES = {"default": (StreamPolicy(), 3.9), "min": (StreamPolicy(aggregate="min"), 2.5)}
Consume = Callable[[openai.AsyncOpenAI, Spec], Awaitable[str]]


async def _open(client: openai.AsyncOpenAI, spec: Spec) -> Any:
    return await client.chat.completions.create(
        model="gpt-bench",
        messages=[{"role": "user", "content": spec.message()}],
        stream=True,
        logprobs=True,
        top_logprobs=spec.top,
    )


async def unguarded(client: openai.AsyncOpenAI, spec: Spec) -> str:
    parts: list[str] = []
    async for chunk in await _open(client, spec):
        if chunk.choices:
            text = chunk.choices[0].delta.content
            if text:
                parts.append(text)
    return "".join(parts)


def guarded(policy: StreamPolicy, tau: float, mode: Any) -> Consume:
    skeleton = UniformSkeleton(VOCAB)

    async def consume(client: openai.AsyncOpenAI, spec: Spec) -> str:
        monitor = Monitor.lift(policy, tau, skeleton=skeleton)
        stream = await _open(client, spec)
        parts = [text async for text in guard_chat_stream(stream, monitor, mode=mode)]
        v = monitor.verdict
        if not (v.state is State.CERTIFIED and v.t == spec.tokens and "final" in v.reason):
            raise AssertionError(f"expected certified at the end, got {v}")
        return "".join(parts)

    return consume


@dataclass
class Result:
    wall: float = math.inf
    cpu: float = math.inf


async def run_once(
    client: openai.AsyncOpenAI, consume: Consume, spec: Spec, streams: int, concurrency: int
) -> tuple[float, float]:
    """Wall and CPU seconds to read ``streams`` answers, ``concurrency`` at a time."""
    sem = asyncio.Semaphore(concurrency)
    want = answer_text(spec.tokens)

    async def one() -> None:
        async with sem:
            text = await consume(client, spec)
        if text != want:
            raise AssertionError(f"wrong text: {text[:60]!r}...")

    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one() for _ in range(streams)))
    return time.perf_counter() - t0, time.process_time() - c0


async def scenario(
    base_url: str, spec: Spec, streams: int, concurrency: int, repeat: int
) -> dict[str, Result]:
    variants: dict[str, Consume] = {"unguarded": unguarded}
    for name, (policy, tau) in POLICIES.items():
        for mode in ("passthrough", "buffered"):
            variants[f"{name} / {mode}"] = guarded(policy, tau, mode)
    results = {name: Result() for name in variants}
    lim = openai.DEFAULT_CONNECTION_LIMITS
    limits = type(lim)(
        max_connections=max(lim.max_connections, concurrency),
        max_keepalive_connections=max(lim.max_keepalive_connections or 0, concurrency),
        keepalive_expiry=600.0,
    )
    http_client = openai.DefaultAsyncHttpxClient(limits=limits)
    async with openai.AsyncOpenAI(
        base_url=base_url, api_key="bench", max_retries=0, http_client=http_client
    ) as client:
        names = list(variants)
        for name in names:  # warm-up: connections, caches, the server's bodies
            await run_once(client, variants[name], spec, min(streams, concurrency), concurrency)
        for r in range(repeat):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                wall, cpu = await run_once(client, variants[name], spec, streams, concurrency)
                best = results[name]
                best.wall, best.cpu = min(best.wall, wall), min(best.cpu, cpu)
    return results


# --- in memory: the same chunks, already parsed by the SDK, without I/O ----------------------


async def _replay(chunks: list[ChatCompletionChunk]) -> AsyncIterator[ChatCompletionChunk]:
    for chunk in chunks:  # what an AsyncStream yields, minus HTTP and JSON
        yield chunk


async def mem_unguarded(chunks: list[ChatCompletionChunk], tokens: int) -> str:
    parts: list[str] = []
    async for chunk in _replay(chunks):
        if chunk.choices:
            text = chunk.choices[0].delta.content
            if text:
                parts.append(text)
    return "".join(parts)


async def mem_parse_only(chunks: list[ChatCompletionChunk], tokens: int) -> str:
    parts: list[str] = []
    async for chunk in _replay(chunks):
        parts.append(chat_chunk_parts(chunk).text)
    return "".join(parts)


def mem_guarded(
    policy: StreamPolicy, tau: float, mode: Any
) -> Callable[[list[ChatCompletionChunk], int], Awaitable[str]]:
    skeleton = UniformSkeleton(VOCAB)

    async def consume(chunks: list[ChatCompletionChunk], tokens: int) -> str:
        monitor = Monitor.lift(policy, tau, skeleton=skeleton)
        parts = [text async for text in guard_chat_stream(_replay(chunks), monitor, mode=mode)]
        if monitor.verdict.t != tokens:
            raise AssertionError(f"expected {tokens} tokens, got {monitor.verdict}")
        return "".join(parts)

    return consume


def in_memory(spec: Spec, streams: int, repeat: int) -> dict[str, float]:
    """Best seconds per variant to guard ``streams`` answers whose chunks are in memory."""
    chunks = [ChatCompletionChunk.model_validate(e) for e in answer_events(spec)]
    variants: dict[str, Callable[[list[ChatCompletionChunk], int], Awaitable[str]]] = {
        "unguarded": mem_unguarded,
        "parse only (`chat_chunk_parts`)": mem_parse_only,
    }
    for name, (policy, tau) in POLICIES.items():
        for mode in ("passthrough", "buffered"):
            variants[f"{name} / {mode}"] = mem_guarded(policy, tau, mode)
    want = answer_text(spec.tokens)

    async def run(consume: Callable[[list[ChatCompletionChunk], int], Awaitable[str]]) -> float:
        gc.collect()
        t0 = time.perf_counter()
        for _ in range(streams):
            if await consume(chunks, spec.tokens) != want:
                raise AssertionError("wrong text")
        return time.perf_counter() - t0

    best = dict.fromkeys(variants, math.inf)
    names = list(variants)
    for r in range(repeat + 1):  # round 0 warms up
        for name in names[r % len(names) :] + names[: r % len(names)]:
            t = asyncio.run(run(variants[name]))
            if r:
                best[name] = min(best[name], t)
    return best


def mem_table(title: str, best: dict[str, float], n_tokens: int, e2e_us: float) -> str:
    base = best["unguarded"] / n_tokens * 1e6
    lines = [
        f"**{title}**",
        "",
        "| variant | us/token | guard us/token | implied burst CPU ratio |",
        "|---|---:|---:|---:|",
    ]
    for name, t in best.items():
        us = t / n_tokens * 1e6
        extra = us - base
        lines.append(
            f"| {name} | {us:.2f} | {'-' if name == 'unguarded' else f'{extra:+.2f}'} | "
            f"{(e2e_us + extra) / e2e_us:.3f} |"
        )
    lines.append("")
    lines.append(
        f"implied ratio = (unguarded burst CPU per token, {e2e_us:.1f} us, + guard us/token) "
        "/ unguarded burst CPU per token"
    )
    return "\n".join(lines)


def table(title: str, results: dict[str, Result], n_tokens: int) -> str:
    base = results["unguarded"]
    lines = [
        f"**{title}**",
        "",
        "| variant | wall s | ratio | guard us/token | CPU s | CPU ratio | guard CPU us/token |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, res in results.items():
        if name == "unguarded":
            lines.append(f"| {name} | {res.wall:.3f} | 1.000 | - | {res.cpu:.3f} | 1.000 | - |")
            continue
        lines.append(
            f"| {name} | {res.wall:.3f} | {res.wall / base.wall:.3f} | "
            f"{(res.wall - base.wall) / n_tokens * 1e6:+.2f} | {res.cpu:.3f} | "
            f"{res.cpu / base.cpu:.3f} | {(res.cpu - base.cpu) / n_tokens * 1e6:+.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--top", type=int, default=20, help="top_logprobs entries per token")
    ap.add_argument("--concurrency", type=int, default=20, help="burst: streams at once")
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--paced-streams", type=int, default=10, help="paced: all at once")
    ap.add_argument("--paced-tokens", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a short run (1/20 of the work)")
    args = ap.parse_args()
    if args.quick:
        args.streams, args.tokens, args.repeat = 20, 100, 2
        args.paced_tokens = 25

    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    print(
        f"Python {platform.python_version()}, openai {openai.__version__}, "
        f"{os.cpu_count()} CPUs ({platform.machine()}), load average {load[0]:.1f} "
        f"at start; server in a separate process on 127.0.0.1; {args.top} top_logprobs "
        f"entries per token; best of {args.repeat}\n"
    )
    burst = Spec(args.tokens, args.top, 0.0)
    paced = Spec(args.paced_tokens, args.top, args.delay_ms / 1000)
    with LoopbackServer() as server:
        res = asyncio.run(
            scenario(server.base_url, burst, args.streams, args.concurrency, args.repeat)
        )
        n = args.streams * args.tokens
        title = (
            f"burst: {args.streams} streams x {args.tokens} tokens ({n} tokens), "
            f"{args.concurrency} at a time, no delay"
        )
        print(table(title, res, n) + "\n", flush=True)
        e2e_us = res["unguarded"].cpu / n * 1e6
        res = asyncio.run(
            scenario(server.base_url, paced, args.paced_streams, args.paced_streams, args.repeat)
        )
        n = args.paced_streams * args.paced_tokens
        title = (
            f"paced: {args.paced_streams} streams x {args.paced_tokens} tokens ({n} tokens), "
            f"all at once, {args.delay_ms:g} ms between chunks"
        )
        print(table(title, res, n) + "\n", flush=True)
    best = in_memory(burst, args.streams, args.repeat)
    n = args.streams * args.tokens
    title = (
        f"in memory: the burst chunks parsed once by the SDK, replayed to {args.streams} "
        f"streams x {args.tokens} tokens (no HTTP, no JSON)"
    )
    print(mem_table(title, best, n, e2e_us))
    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    print(f"\nload average {load[0]:.1f} at the end")


if __name__ == "__main__":
    main()
