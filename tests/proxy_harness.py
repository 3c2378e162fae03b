"""Shared parts of the guard proxy tests: a real uvicorn server running the proxy app on
127.0.0.1, in front of real upstreams.

- :class:`ProxyServer`: ``create_app(config)`` served by uvicorn in a thread of
  its own (own event loop) on a socket bound before the thread starts, so a
  client can connect at once (uvicorn accepts once its lifespan has started;
  nothing waits on a timer). Leaving the ``with`` block stops it cleanly
  (lifespan shutdown: upstream client closed, recorder drained).
- :class:`Upstream`: the adapters' scripted SSE server (``tests/sse_server.py``)
  that also records each request's headers and answers ``GET /v1/models``.
- :func:`echo_upstream`: an asyncio (uvicorn) upstream whose answer is made of the
  request's own words, for many concurrent streams (the scripted server's
  ``select()`` cannot watch descriptors past 1024).

Numbers, as in ``tests/adapters/test_stream_honesty.py``: ``UniformSkeleton(50_000)``
gives lift ``logprob + 10.82``; under ``StreamPolicy(aggregate="min")`` at
``tau = 4`` a token at -0.05 passes and one at -12 blocks at once, and a clean
answer is certified only at its end (``finish_reason`` "stop").
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import queue
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


import uvicorn
from sse_server import SSEServer, _Handler, chat_chunk, serving, token_entry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from adapters.proxy import ProxyConfig, StaticCertificate, create_app
from guardrail import (
    Calibration,
    Certificate,
    GenerationContext,
    ModelIdentity,
    SkeletonSpec,
    StreamPolicy,
)

VOCAB = 50_000
TAU = 4.0
GOOD, BAD = -0.05, -12.0
WORDS = ["The", " capital", " of", " France", " is", " Paris", "."]


def make_certificate(
    tau: float = TAU, context: GenerationContext | None = None, model_id: str = "test-model"
) -> Certificate:
    return Certificate(
        StreamPolicy(aggregate="min"),
        tau,
        SkeletonSpec("uniform", {"vocab_size": VOCAB}),
        ModelIdentity(model_id, vocab_size=VOCAB),
        context=context or GenerationContext(),
    )


def calibrated_certificate(
    risk: float, context: GenerationContext | None = None, tau: float = TAU
) -> Certificate:
    """:func:`make_certificate` with a calibration promising ``risk`` (coverage 1/2): a
    certificate with a live risk monitor."""
    cal = Calibration(
        method="ltt", tau=tau, risk=risk, delta=0.05, score="lift", n=1000, n_answered=500,
        n_errors=25, coverage=0.5, empirical_risk=0.05, risk_upper=0.07,
    )  # fmt: skip
    return dataclasses.replace(make_certificate(tau, context), calibration=cal)


ROLE = chat_chunk({"role": "assistant", "content": ""}, {"content": []})
STOP = chat_chunk({}, None, "stop")


def tokens(logprobs: list[float], words: list[str] = WORDS) -> list[dict[str, Any]]:
    return [
        chat_chunk({"content": words[i]}, {"content": [token_entry(words[i], lp)]})
        for i, lp in enumerate(logprobs)
    ]


# --- the proxy under test --------------------------------------------------------------------


class ProxyServer:
    """``create_app(config)`` served by uvicorn in a background thread."""

    def __init__(self, config: ProxyConfig) -> None:
        self.app = create_app(config)
        self.proxy = self.app.state.proxy
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(2048)
        port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.base_url = f"{self.url}/v1"
        uv = uvicorn.Config(
            self.app, lifespan="on", log_level="warning", backlog=2048, timeout_keep_alive=30
        )
        self.server = uvicorn.Server(uv)
        self.thread = threading.Thread(target=self._run, name="proxy", daemon=True)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._has_loop = threading.Event()

    def _run(self) -> None:
        async def main() -> None:
            self.loop = asyncio.get_running_loop()
            self._has_loop.set()
            await self.server.serve(sockets=[self.sock])

        asyncio.run(main())

    def __enter__(self) -> ProxyServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()
        assert not self.thread.is_alive(), "the proxy did not stop"

    def call(self, coro: Any, timeout: float = 30.0) -> Any:
        """Run ``coro`` on the proxy's event loop (e.g. ``proxy.refresh_certificates()``)."""
        assert self._has_loop.wait(timeout) and self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


FEEDBACK_IDS = 64
"""The answers a test proxy keeps for feedback (``ProxyConfig.feedback_ids``; 50,000 by
default): a test of many answers finds the store full, at its bound, after the first 64,
so that memory measured across later answers stays flat."""


@contextlib.contextmanager
def running_proxy(upstream: str, **options: Any) -> Iterator[ProxyServer]:
    options.setdefault("certificate", StaticCertificate(make_certificate(), "test-cert"))
    options.setdefault("refresh_interval_s", 0)
    options.setdefault("feedback_ids", FEEDBACK_IDS)
    with ProxyServer(ProxyConfig(upstream=upstream, **options)) as srv:
        yield srv


# --- upstreams -------------------------------------------------------------------------------


class _RecordingHandler(_Handler):
    """The scripted handler, also recording request headers; ``GET /v1/models``."""

    def do_POST(self) -> None:
        with self.server.lock:
            self.server.headers_seen.append({k.lower(): v for k, v in self.headers.items()})
        super().do_POST()

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.headers_seen.append({k.lower(): v for k, v in self.headers.items()})
        if self.path.rstrip("/") != "/v1/models":
            self.send_error(404)
            return
        data = json.dumps(
            {"object": "list", "data": [{"id": "test-model", "object": "model",
                                         "created": 0, "owned_by": "test"}]}
        ).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Upstream(SSEServer):
    def __init__(self) -> None:
        super().__init__()
        self.RequestHandlerClass = _RecordingHandler
        self.headers_seen: list[dict[str, str]] = []


@contextlib.contextmanager
def scripted_upstream() -> Iterator[Upstream]:
    with serving(Upstream()) as srv:
        yield srv


def echo_answer(question: str) -> list[str]:
    """The words of the echo upstream's answer to ``question``."""
    return ["Answer", " to", *(f" {w}" for w in question.split())]


def _echo_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    question = body["messages"][-1]["content"]
    words = echo_answer(question)
    return [ROLE, *tokens([GOOD] * len(words), words), STOP]


async def _echo(request: Request) -> StreamingResponse:
    body = json.loads(await request.body())

    async def frames() -> AsyncIterator[bytes]:
        for event in _echo_events(body):
            yield b"data: " + json.dumps(event).encode() + b"\n\n"
            await asyncio.sleep(0)
        yield b"data: [DONE]\n\n"

    return StreamingResponse(frames(), media_type="text/event-stream")


@contextlib.contextmanager
def echo_upstream() -> Iterator[str]:
    """An asyncio upstream for many concurrent streams; yields its base URL."""
    app = Starlette(routes=[Route("/v1/chat/completions", _echo, methods=["POST"])])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    # connections stay open between batches (uvicorn closes idle ones after 5 s by default,
    # which would make the proxy's pool, and what it holds, depend on timing)
    config = uvicorn.Config(
        app, lifespan="off", log_level="warning", backlog=2048, timeout_keep_alive=600
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=lambda: asyncio.run(server.serve(sockets=[sock])), name="echo", daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


class VerdictLines(logging.Handler):
    """Collects the proxy's JSON verdict lines; :meth:`next` waits for the next one (an
    explicit hand-off from the proxy's thread: no timer decides when it is there)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.put(json.loads(record.getMessage()))

    async def next(self, timeout: float = 10.0) -> dict[str, Any]:
        return await asyncio.to_thread(self.lines.get, True, timeout)


@contextlib.contextmanager
def verdict_lines() -> Iterator[VerdictLines]:
    logger = logging.getLogger("adapters.proxy.verdicts")
    handler, level = VerdictLines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


# --- shared checks ---------------------------------------------------------------------------


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of Prometheus sample ``name`` whose labels include ``labels`` (None if
    absent) in a ``/metrics`` page."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    return None


async def guarded_directly(base_url: str, question: str, cert: Certificate) -> tuple[str, Any]:
    """Text and final verdict of the adapters' ``guarded_chat_completion`` against the
    server at ``base_url`` (what a guard in front of it must agree with)."""
    import openai

    from adapters import guarded_chat_completion
    from guardrail import GuardrailBlocked

    client = openai.AsyncOpenAI(base_url=base_url, api_key="local", max_retries=0)
    monitor = cert.monitor()
    parts: list[str] = []
    try:
        async for text in guarded_chat_completion(
            client, certificate=cert, monitor=monitor, model="smollm2",
            messages=[{"role": "user", "content": question}],
        ):  # fmt: skip
            parts.append(text)
    except GuardrailBlocked:
        pass
    finally:
        await client.close()
    return "".join(parts), monitor.verdict
