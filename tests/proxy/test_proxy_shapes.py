"""Every adversarial stream shape through the proxy, with real clients.

Real ``openai`` clients (async and sync) and ``langchain_openai.ChatOpenAI``
(``astream`` and ``stream``) talk to the proxy (uvicorn, 127.0.0.1), which talks
to the scripted SSE upstream. The rule under test, as for the adapters: an
answer is certified only when the upstream ended it the documented way; every
other shape ends the client's stream with an in-stream error event that the
client raises as ``openai.APIError`` (``type``/``code`` say why, the verdict is
in ``body["liftguard"]``), nothing is sent before certification in buffered
mode, and an upstream that was still sending sees the proxy close the
connection (the upstream holds the stream at ``hold_after`` until it does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from langchain_openai import ChatOpenAI
from proxy_harness import ROLE, STOP, ProxyServer, Upstream, running_proxy, tokens
from sse_server import Reply
from stream_shapes import CLEAN_TEXT, FULL, SHAPES, Shape

from adapters.proxy import Limits

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


@dataclass
class Outcome:
    shown: list[str] = field(default_factory=list)
    verdict: dict[str, Any] | None = None
    error: BaseException | None = None

    @property
    def text(self) -> str:
        return "".join(self.shown)


def _caught(out: Outcome, exc: BaseException) -> Outcome:
    out.error = exc
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("liftguard"), dict):
        out.verdict = body["liftguard"]
    return out


def _chunk_verdict(out: Outcome, chunk: Any) -> None:
    extra = chunk.model_extra or {}
    if "liftguard" in extra:
        out.verdict = extra["liftguard"]


async def openai_async(proxy: ProxyServer) -> Outcome:
    out = Outcome()
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="sk-test", max_retries=0)
    try:
        stream = await client.chat.completions.create(
            model="test-model", messages=MESSAGES, stream=True
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                out.shown.append(chunk.choices[0].delta.content)
            _chunk_verdict(out, chunk)
    except openai.APIError as exc:
        _caught(out, exc)
    finally:
        await client.close()
    return out


def openai_sync(proxy: ProxyServer) -> Outcome:
    out = Outcome()
    with openai.OpenAI(base_url=proxy.base_url, api_key="sk-test", max_retries=0) as client:
        try:
            stream = client.chat.completions.create(
                model="test-model", messages=MESSAGES, stream=True
            )
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    out.shown.append(chunk.choices[0].delta.content)
                _chunk_verdict(out, chunk)
        except openai.APIError as exc:
            _caught(out, exc)
    return out


def _chat(proxy: ProxyServer) -> ChatOpenAI:
    return ChatOpenAI(base_url=proxy.base_url, api_key="sk-test", model="test-model", max_retries=0)


async def langchain_astream(proxy: ProxyServer) -> Outcome:
    out = Outcome()
    try:
        async for chunk in _chat(proxy).astream(MESSAGES[0]["content"]):
            out.shown.append(str(chunk.content))
    except openai.APIError as exc:
        _caught(out, exc)
    return out


def langchain_stream(proxy: ProxyServer) -> Outcome:
    out = Outcome()
    try:
        for chunk in _chat(proxy).stream(MESSAGES[0]["content"]):
            out.shown.append(str(chunk.content))
    except openai.APIError as exc:
        _caught(out, exc)
    return out


CLIENTS: dict[str, Callable[[ProxyServer], Any]] = {
    "openai_async": openai_async,
    "openai_sync": openai_sync,
    "langchain_astream": langchain_astream,
    "langchain_stream": langchain_stream,
}


async def _run(client: str, proxy: ProxyServer) -> Outcome:
    fn = CLIENTS[client]
    if asyncio.iscoroutinefunction(fn):
        return await fn(proxy)  # type: ignore[no-any-return]
    return await asyncio.to_thread(fn, proxy)  # type: ignore[no-any-return]


@pytest.mark.parametrize("mode", ["buffered", "passthrough"])
@pytest.mark.parametrize("client", list(CLIENTS))
@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
async def test_every_shape_every_client(
    shape: Shape, client: str, mode: str, upstream: Upstream
) -> None:
    # only the stalled upstream waits for the timeout; the others must never meet it
    timeout = 0.5 if shape.name == "stall" else 60.0
    upstream.replies.put(shape.reply())
    limits = Limits(upstream_timeout_s=timeout)
    with running_proxy(upstream.base_url, mode=mode, limits=limits) as proxy:
        out = await _run(client, proxy)
    record = await upstream.records[-1].finished()
    if shape.type is None:
        assert out.error is None, out.error
        assert out.text == CLEAN_TEXT
        if client.startswith("openai"):
            assert out.verdict is not None
            assert (out.verdict["state"], out.verdict["cause"]) == ("certified", "certified")
        return
    # never certified: a catchable error naming why
    assert isinstance(out.error, openai.APIError), (out.error, out.text)
    assert (out.error.type, out.error.code) == (shape.type, shape.code), out.error.body
    if shape.status != 200:  # refused before any answer: the upstream's status, explained
        assert isinstance(out.error, openai.PermissionDeniedError)
        assert "cannot certify" in out.error.message
        assert record.body["logprobs"] is True
        return
    assert out.verdict is not None and out.verdict["state"] == "blocked"
    assert out.verdict["cause"] == shape.cause
    assert out.verdict["request_id"].startswith("lg-")
    assert shape.before.startswith(out.text), "text sent past the fault"
    if mode == "buffered":
        assert out.text == "", "buffered mode sent text before certification"
    if shape.held:
        assert record.client_closed, "the proxy did not close the upstream request"
        assert record.sent < record.total


async def test_passthrough_shows_the_tokens_before_the_block(upstream: Upstream) -> None:
    upstream.replies.put(Reply([ROLE, *tokens(FULL), STOP], delay=0.0, hold_after=5))
    with running_proxy(upstream.base_url, mode="passthrough") as proxy:
        out = await openai_async(proxy)
    assert out.text == "The capital of"  # the 4th token blocks and is not sent
    assert isinstance(out.error, openai.APIError) and out.error.code == "below_threshold"
    assert out.verdict is not None and out.verdict["tokens"] == 4
    assert (await upstream.records[-1].finished()).client_closed


async def test_refusal_mode_ends_with_a_content_filter_refusal(upstream: Upstream) -> None:
    upstream.replies.put(Reply([ROLE, *tokens(FULL), STOP], delay=0.0, hold_after=5))
    with running_proxy(upstream.base_url, on_block="refusal", refusal_message="No.") as proxy:
        client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
        stream = await client.chat.completions.create(
            model="test-model", messages=MESSAGES, stream=True
        )
        chunks = [chunk async for chunk in stream]
        await client.close()
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "No."
    assert chunks[-1].choices[0].finish_reason == "content_filter"
    assert (chunks[-1].model_extra or {})["liftguard"]["cause"] == "below_threshold"
    assert (await upstream.records[-1].finished()).client_closed


async def test_observe_mode_blocks_nothing_and_reports_the_verdict(upstream: Upstream) -> None:
    upstream.replies.put(Reply([ROLE, *tokens(FULL), STOP], delay=0.0))
    with running_proxy(upstream.base_url, mode="observe") as proxy:
        out = await openai_async(proxy)
    assert out.error is None
    assert out.text == "The capital of France is Paris."  # all of it, the blocking token too
    assert out.verdict is not None
    assert (out.verdict["state"], out.verdict["cause"]) == ("blocked", "below_threshold")
    assert out.verdict["mode"] == "observe"
