"""500 guarded streams at once in one event loop: no cross-talk, and every monitor is freed.

Real sockets all the way: one real ``openai.AsyncOpenAI`` client (its default
pool: up to 1000 connections, 100 kept alive) sends 500 requests at once
(``asyncio.gather``) to the loopback SSE server of :mod:`sse_server`, run in a
child process (this file as a script) with a listen backlog of 1024 instead of
128, so that 500 simultaneous connects are not dropped and retried. In this
process, the server's 500 threads starved the event loop of the GIL (convoy
effect): batches took 20 s and connects hit the SDK's 5 s timeout.

Each request asks for "request <i>"; the server's responder scripts the answer
from ``i`` (20 tokens, one a chunk, ``UniformSkeleton(50_000)``, ``tau = 4``,
default betting policy):

- ``i % 3 == 0``: ``p`` tokens of lift exactly ``tau`` (the betting wealth does not
  move) then tokens of lift 10.77: CERTIFIED at token ``7 + p`` (7..20);
- ``i % 3 == 1``: tokens of lift ``tau`` with one chunk without logprobs at
  position ``j``: BLOCKED there (``t = j``, ``on_missing_logprobs='block'``);
- ``i % 3 == 2``: ``p`` tokens of lift ``tau`` then tokens of lift 0: BLOCKED at
  token ``17 + p`` (17..20, the betting boundary).

Every token's text names its request (`` r<i>t<n>``); the mode (buffered or
passthrough) and the entry point (:func:`guarded_chat_completion` or
:func:`guard_chat_stream`) vary with ``i`` too. Each stream must end with exactly
its own verdict, verdict token and text, and the server must have served each
request once (certified answers read to the end).

Memory, after a batch of 500 and again after a second batch of 500 on the same
client: no ``Monitor``, ``StreamStep``, ``Gate`` or ``TextGate`` is alive
(counted with ``gc``: these classes have ``__slots__`` without ``__weakref__``,
so they cannot be weak-referenced), no type of ``gc``-tracked object grew by 50
or more, and ``sys.getallocatedblocks()`` grew by less than 2 blocks per
stream. ``tracemalloc`` made a batch about 3x slower (26 s instead of 8 s of
CPU on 2 busy cores), so it is opt-in: ``LIFTGUARD_TRACEMALLOC=1`` traces the
second batch and adds its top allocation sites to a failure message.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import openai
import pytest
from sse_server import Reply, SSEServer

from adapters import guard_chat_stream, guarded_chat_completion
from adapters._guard._stream import StreamStep
from guardrail import (
    Gate,
    GuardrailBlocked,
    Monitor,
    StreamPolicy,
    TextGate,
    TokenEvent,
    UniformSkeleton,
)

N = 500  # streams per batch, all at once
TOKENS = 20  # tokens per answer
VOCAB, TAU = 50_000, 4.0
LOG_V = math.log(VOCAB)
GOOD = -0.05  # lift 10.77
NEUTRAL = TAU - LOG_V  # lift == tau: d = 0, the betting wealth does not move
BAD = -12.0  # lift 0 (clipped)
DELAY = 0.03  # seconds between two events of one answer (on the server)
BLOCK_BOUND = 2 * N  # memory blocks a second batch may leave (a leak of 2 objects per stream fails)

CERTIFY, MISSING, LOW = 0, 1, 2


class _BigBacklogServer(SSEServer):
    request_queue_size = 1024  # 500 clients connect within a few milliseconds


def _tok(text: str, logprob: float) -> dict[str, Any]:
    top = [{"token": text, "logprob": logprob, "bytes": list(text.encode())}]
    top.append({"token": "alt", "logprob": logprob - 3.0, "bytes": None})
    return {"token": text, "logprob": logprob, "bytes": list(text.encode()), "top_logprobs": top}


def _chunk(i: int, delta: dict[str, Any], logprobs: Any, finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    return json.dumps(
        {
            "id": f"chatcmpl-{i}",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "gpt-test",
            "choices": [choice],
        }
    )


def script(i: int) -> tuple[list[float | None], tuple[str, int, str]]:
    """Token logprobs of request ``i`` and its expected (state, t, reason fragment)."""
    kind, q = i % 3, i // 3
    if kind == CERTIFY:
        p = q % 14  # certified at 7..20
        return [NEUTRAL] * p + [GOOD] * (TOKENS - p), ("certified", 7 + p, "mean lift > 4")
    if kind == MISSING:
        j = 1 + q % (TOKENS - 1)  # 1..19
        lps: list[float | None] = [NEUTRAL] * TOKENS
        lps[j] = None
        return lps, ("blocked", j, f"missing logprob at token {j}")
    p = q % 4  # blocked at 17..20
    return [NEUTRAL] * p + [BAD] * (TOKENS - p), ("blocked", 17 + p, "mean lift < 4")


def texts_of(i: int) -> list[str]:
    return [f" r{i}t{n}" for n in range(TOKENS)]


def mode_of(i: int) -> str:
    return "passthrough" if (i // 3) % 2 else "buffered"


def expected(i: int) -> tuple[str, int, str, str]:
    """(state, t, reason fragment, text shown) for request ``i``."""
    lps, (state, t, why) = script(i)
    texts = texts_of(i)
    if state == "certified":
        shown = "".join(texts)
    elif mode_of(i) == "buffered":
        shown = ""
    else:  # passthrough: every token before the blocking one
        shown = "".join(texts[: lps.index(None) if None in lps else t - 1])
    return state, t, why, shown


def reply_for(i: int) -> Reply:
    lps, _ = script(i)
    events = [_chunk(i, {"role": "assistant", "content": ""}, {"content": [], "refusal": None})]
    for text, lp in zip(texts_of(i), lps, strict=True):
        logprobs = None if lp is None else {"content": [_tok(text, lp)], "refusal": None}
        events.append(_chunk(i, {"content": text}, logprobs))
    events.append(_chunk(i, {}, None, "stop"))
    return Reply(events, delay=DELAY)


def test_scripts_are_what_the_monitor_decides() -> None:
    """The table above, checked on a bare monitor (no I/O), for every request of the run."""
    for i in range(2 * N):
        lps, (state, t, why) = script(i)
        mon = Monitor.lift(StreamPolicy(), TAU, skeleton=UniformSkeleton(VOCAB))
        for n, lp in enumerate(lps):
            v = mon.update(TokenEvent(f"t{n}", lp))
            if v.decided:
                break
        assert (v.state.value, v.t) == (state, t) and why in v.reason, i


# --- the server, in a child process ---------------------------------------------------------


class Tracker:
    """The server's responder: the answer scripted for "request <i>"; records the peak
    number of requests being served at once."""

    def __init__(self, server: SSEServer) -> None:
        self.server, self.peak = server, 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        i = int(body["messages"][0]["content"].removeprefix("request "))
        with self.server.lock:  # this request's record is appended right after
            active = 1 + sum(not rec.done.is_set() for rec in self.server.records)
            self.peak = max(self.peak, active)
        return reply_for(i)


def serve() -> None:
    """Child process: serve, print the base URL; on each stdin line ``records``, print the
    requests served since the last one (as JSON) once all are finished; stop at EOF."""
    srv = _BigBacklogServer()
    tracker = Tracker(srv)
    srv.responder = tracker
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    print(srv.base_url, flush=True)
    for _ in sys.stdin:
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            with srv.lock:
                recs = list(srv.records)
            if all(rec.done.is_set() for rec in recs):
                break
            time.sleep(0.02)
        with srv.lock:
            srv.records.clear()
        rows = [
            [r.body["messages"][0]["content"], r.sent, r.total, r.client_closed, r.done.is_set()]
            for r in recs
        ]
        print(json.dumps({"peak": tracker.peak, "records": rows}), flush=True)
        tracker.peak = 0
    srv.shutdown()
    srv.server_close()
    thread.join(5)


class ServerProcess:
    """This file run as the server; talks to :func:`serve` over its stdin/stdout."""

    def __init__(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.proc = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parent,
            env=env,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.base_url = self.stdout.readline().strip()
        assert self.base_url.startswith("http://127.0.0.1:"), self.base_url

    async def records(self) -> dict[str, Any]:
        """The requests served since the last call (waits until the server finished them)."""

        def ask() -> dict[str, Any]:
            self.stdin.write("records\n")
            self.stdin.flush()
            return cast("dict[str, Any]", json.loads(self.stdout.readline()))

        return await asyncio.to_thread(ask)

    def close(self) -> None:
        self.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    srv = ServerProcess()
    yield srv
    srv.close()


@pytest.fixture
async def client(server: ServerProcess) -> AsyncIterator[openai.AsyncOpenAI]:
    # The SDK's pool (1000 connections, 100 kept alive), but idle connections expire after
    # 10 min instead of 5 s, so that the pool is full (100 idle) after each batch whatever
    # the timing and the memory of two batches compares like for like. 60 s instead of the
    # SDK's 5 s connect timeout: parsing 500 streams keeps the one event loop busy, and
    # when it was slower (tracemalloc on, or the server's threads in this process) the
    # last connects of a batch waited more than 5 s on 2 busy cores.
    lim = openai.DEFAULT_CONNECTION_LIMITS
    limits = type(lim)(
        max_connections=lim.max_connections,
        max_keepalive_connections=lim.max_keepalive_connections,
        keepalive_expiry=600.0,
    )
    c = openai.AsyncOpenAI(
        base_url=server.base_url,
        api_key="test",
        max_retries=0,
        timeout=60.0,
        http_client=openai.DefaultAsyncHttpxClient(limits=limits),
    )
    yield c
    await c.close()


# --- the run ---------------------------------------------------------------------------------


async def one(client: openai.AsyncOpenAI, i: int) -> tuple[int, str, int, str, str]:
    """Request ``i``, guarded; only plain data comes back (no monitor, no exception)."""
    mon = Monitor.lift(StreamPolicy(), TAU, skeleton=UniformSkeleton(VOCAB))
    mode: Any = mode_of(i)
    kwargs: dict[str, Any] = {
        "model": "gpt-test",
        "messages": [{"role": "user", "content": f"request {i}"}],
    }
    out: list[str] = []
    try:
        if (i // 6) % 2:
            texts = guarded_chat_completion(client, monitor=mon, mode=mode, **kwargs)
        else:
            stream = await client.chat.completions.create(
                **kwargs, stream=True, logprobs=True, top_logprobs=2
            )
            texts = guard_chat_stream(stream, mon, mode=mode)
        async for text in texts:
            out.append(text)
    except GuardrailBlocked as exc:
        assert exc.verdict is mon.verdict
    v = mon.verdict
    assert v.final
    return i, v.state.value, v.t, v.reason, "".join(out)


async def batch(client: openai.AsyncOpenAI, server: ServerProcess, ids: range) -> tuple[float, int]:
    """Run requests ``ids`` at once and check each outcome; (seconds, peak served at once)."""
    t0 = time.perf_counter()
    results = await asyncio.gather(*(one(client, i) for i in ids))
    elapsed = time.perf_counter() - t0
    assert [r[0] for r in results] == list(ids)
    wrong = []
    for i, state, t, reason, shown in results:
        want_state, want_t, why, want_text = expected(i)
        if (state, t, shown) != (want_state, want_t, want_text) or why not in reason:
            wrong.append((i, (state, t, reason, shown), (want_state, want_t, why, want_text)))
    assert not wrong, f"{len(wrong)} streams with the wrong outcome, e.g. {wrong[:3]}"
    # the server side: each request came once; every certified answer was read to the end
    report = await server.records()
    recs = {int(row[0].removeprefix("request ")): row[1:] for row in report["records"]}
    assert sorted(recs) == list(ids) and len(report["records"]) == len(ids)
    for i, (sent, total, client_closed, done) in recs.items():
        assert done, i
        if i % 3 == CERTIFY:
            assert sent == total and not client_closed, i
    return elapsed, int(report["peak"])


async def settle() -> None:
    """Collect garbage and let the loop run what the collection scheduled.

    The SDK's internal async generators of a stream closed early (a BLOCK closes the
    HTTP response, not those generators) are finalized by the loop's asyncgen hook:
    ``gc`` finds them, the hook schedules their ``aclose()`` on the loop, and only
    then are their frames (with the last chunks) freed.
    """
    for _ in range(5):
        gc.collect()
        await asyncio.sleep(0.02)
    gc.collect()


def census() -> Counter[type]:
    """Live objects tracked by ``gc``, by type."""
    return Counter(type(obj) for obj in gc.get_objects())


async def test_500_concurrent_streams_keep_their_own_outcome_and_free_their_monitors(
    server: ServerProcess, client: openai.AsyncOpenAI
) -> None:
    watched = (Monitor, StreamStep, Gate, TextGate)
    await settle()
    before = census()  # other tests of the session may have left some
    first, peak_first = await batch(client, server, range(N))
    await settle()
    census_first, blocks_first = census(), sys.getallocatedblocks()
    trace = bool(os.environ.get("LIFTGUARD_TRACEMALLOC"))  # opt-in: ~3x slower batch
    if trace:
        tracemalloc.start()
        snap_first = tracemalloc.take_snapshot()
    second, peak_second = await batch(client, server, range(N, 2 * N))
    await settle()
    census_second, blocks_second = census(), sys.getallocatedblocks()
    top = ""
    if trace:
        snap_second = tracemalloc.take_snapshot()
        tracemalloc.stop()
        top = "\n".join(str(st) for st in snap_second.compare_to(snap_first, "lineno")[:10])

    for cen in (census_first, census_second):  # no monitor outlives its stream
        left = {c.__name__: cen[c] - before[c] for c in watched if cen[c] > before[c]}
        assert not left, f"left alive after a batch: {left}"
    grown = {
        t.__name__: census_second[t] - census_first[t]
        for t in census_second
        if census_second[t] - census_first[t] >= N // 10
    }
    assert not grown, f"objects left behind by the second batch: {grown}\n{top}"
    growth = blocks_second - blocks_first
    assert growth < BLOCK_BOUND, f"{growth} more memory blocks after the second batch\n{top}"
    assert min(peak_first, peak_second) >= N // 5, "the streams did not overlap"
    print(
        f"\nbatches of {N}: {first:.1f} s and {second:.1f} s, up to {peak_first} and "
        f"{peak_second} answers streamed at once; memory blocks {blocks_first} -> "
        f"{blocks_second} ({growth:+d})"
    )


if __name__ == "__main__":  # the server process of this test
    serve()
