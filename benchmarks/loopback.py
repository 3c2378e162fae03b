"""A loopback OpenAI Chat Completions SSE server for benchmarks, in its own process.

``python -m benchmarks.loopback`` serves ``POST /v1/chat/completions`` on a free
127.0.0.1 port (an asyncio server, HTTP/1.1 keep-alive, chunked SSE body), prints
the base URL, and runs until its stdin closes. :class:`LoopbackServer` starts it
as a child process, so that the server's work does not share the client's
interpreter (nor, on 2 cores, its core).

What to stream is in the request: the first message's content is a JSON
:class:`Spec` (tokens, top_logprobs entries per token, delay between chunks in
seconds). The answer is one token per chunk, as OpenAI streams it: a role chunk,
``tokens`` content chunks with ``logprobs`` (the token, its logprob, bytes and
``top`` alternatives), a ``finish_reason`` chunk, then ``data: [DONE]``. Token
``n`` is ``" w<n>"`` with logprob ``LOGPROBS[n % 2]``. Bodies are built once per
spec; with no delay the whole body goes out in one write (the client then reads
as fast as it parses), otherwise chunk ``n`` at ``n * delay`` after the first (a
fixed schedule, as a model generating at a steady rate: a late wake-up does not
delay every later chunk). ``endless`` answers
never finish: blocks of 100 token chunks until the client hangs up.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Any

__all__ = ["LOGPROBS", "VOCAB", "LoopbackServer", "Spec", "answer_events", "answer_text"]

VOCAB = 50_000
LOGPROBS = (3.0 - math.log(VOCAB), 5.0 - math.log(VOCAB))
"""Token logprobs, alternating: lifts 3.0 and 5.0 with ``UniformSkeleton(VOCAB)``."""


@dataclass(frozen=True)
class Spec:
    tokens: int = 200
    top: int = 20
    delay: float = 0.0
    endless: bool = False
    """Ignore ``tokens``: send token chunks until the client hangs up (an upstream that
    ignores ``max_tokens`` and never stops)."""

    def message(self) -> str:
        return json.dumps(asdict(self))


def answer_text(tokens: int) -> str:
    return "".join(f" w{n}" for n in range(tokens))


def _event(delta: dict[str, Any], logprobs: Any, finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "gpt-bench",
        "system_fingerprint": "fp_bench",
        "choices": [choice],
    }


def answer_events(spec: Spec) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of one answer, as JSON data."""
    events = [_event({"role": "assistant", "content": ""}, {"content": [], "refusal": None})]
    for n in range(spec.tokens):
        text, lp = f" w{n}", LOGPROBS[n % 2]
        raw = list(text.encode())
        top = [{"token": text, "logprob": lp, "bytes": raw}]
        top += [
            {"token": f" alt{j}", "logprob": lp - 1.0 - j, "bytes": list(f" alt{j}".encode())}
            for j in range(spec.top - 1)
        ]
        entry = {"token": text, "logprob": lp, "bytes": raw, "top_logprobs": top[: spec.top]}
        events.append(_event({"content": text}, {"content": [entry], "refusal": None}))
    events.append(_event({}, None, "stop"))
    return events


def _frames(spec: Spec) -> list[bytes]:
    """The HTTP chunks of one answer (one SSE event each), terminator included."""
    frames = []
    for event in [*answer_events(spec), "[DONE]"]:
        data = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))
        sse = b"data: " + data.encode() + b"\n\n"
        frames.append(b"%x\r\n%s\r\n" % (len(sse), sse))
    frames[-1] += b"0\r\n\r\n"  # the last chunk goes with [DONE]
    return frames


_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
)
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


class _Server:
    def __init__(self) -> None:
        self.cache: dict[Spec, tuple[list[bytes], bytes]] = {}

    def answer(self, spec: Spec) -> tuple[list[bytes], bytes]:
        if spec not in self.cache:
            frames = _frames(spec)
            self.cache[spec] = (frames, _HEAD + b"".join(frames))
        return self.cache[spec]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: one request after another
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                try:
                    body = json.loads(await reader.readexactly(length))
                    spec = Spec(**json.loads(body["messages"][0]["content"]))
                except (ValueError, KeyError, IndexError, TypeError):  # not a benchmark request
                    writer.write(_NOT_FOUND)  # (e.g. a health check of LiteLLM's)
                    await writer.drain()
                    continue
                if spec.endless:
                    await _endless(writer, spec)
                    return
                frames, whole = self.answer(spec)
                if spec.delay <= 0:
                    writer.write(whole)
                    await writer.drain()
                    continue
                writer.write(_HEAD)
                loop = asyncio.get_running_loop()
                start = loop.time()
                for n, frame in enumerate(frames):
                    if n:  # on a fixed schedule: one sleep's overshoot is not carried on
                        await asyncio.sleep(max(0.0, start + n * spec.delay - loop.time()))
                    writer.write(frame)
                    await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client hung up, or the server is shutting down
        finally:
            writer.close()


async def _endless(writer: asyncio.StreamWriter, spec: Spec) -> None:
    """Token chunks forever (a block of 100 built once, sent again and again)."""
    block = b"".join(_frames(Spec(tokens=101, top=spec.top))[1:101])
    writer.write(_HEAD + _frames(Spec(tokens=0, top=spec.top))[0])
    while True:
        writer.write(block)
        await writer.drain()
        if spec.delay > 0:
            await asyncio.sleep(spec.delay)


async def _serve() -> None:
    server = await asyncio.start_server(_Server().handle, "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}/v1", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes our stdin
    server.close()


class LoopbackServer:
    """The server above in a child process; ``base_url`` while the ``with`` block runs."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().strip()
        if not self.base_url.startswith("http://127.0.0.1:"):
            self.close()
            raise RuntimeError(f"the loopback server did not start: {self.base_url!r}")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> LoopbackServer:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


if __name__ == "__main__":
    asyncio.run(_serve())
