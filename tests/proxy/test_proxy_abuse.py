"""The guard proxy under abuse: content it cannot read, answers that never end, clients
that vanish, bad bodies. Each test drives the real proxy (uvicorn) with the openai client
or raw HTTP, in front of the scripted SSE upstream."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from typing import Any

import httpx
import openai
import pytest
from proxy_harness import (
    GOOD,
    ROLE,
    STOP,
    Upstream,
    VerdictLines,
    make_certificate,
    running_proxy,
    tokens,
)
from sse_server import Reply, chat_chunk

from adapters.proxy import Limits, StaticCertificate
from guardrail import TokenEvent
from guardrail._reads import Reads

MESSAGES = [{"role": "user", "content": "Send the money."}]
TOOL_CALL = {
    "index": 0,
    "id": "call_1",
    "type": "function",
    "function": {"name": "transfer_money", "arguments": '{"to": "mallory", "amount": 1000}'},
}


def _client(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="sk-client", max_retries=0)


def _text_then_tool_call() -> list[dict[str, Any]]:
    """Text with good logprobs, then a tool call (no logprobs), then finish ``stop``."""
    return [ROLE, *tokens([GOOD] * 5), chat_chunk({"tool_calls": [TOOL_CALL]}, None), STOP]


# --- 4. tool calls are never certified --------------------------------------------------------


@pytest.mark.parametrize("mode", ["buffered", "passthrough"])
async def test_a_streamed_tool_call_never_reaches_the_client(upstream: Upstream, mode: str) -> None:
    upstream.replies.put(Reply(_text_then_tool_call(), delay=0.0))
    with running_proxy(upstream.base_url, mode=mode) as proxy:
        client = _client(proxy.base_url)
        seen: list[Any] = []
        with pytest.raises(openai.APIError) as caught:
            stream = await client.chat.completions.create(
                model="test-model", messages=MESSAGES, stream=True
            )
            async for chunk in stream:
                seen.append(chunk)
        await client.close()
    assert all(not c.choices or c.choices[0].delta.tool_calls is None for c in seen)
    assert all(not c.choices or c.choices[0].finish_reason is None for c in seen)
    body = caught.value.body
    assert isinstance(body, dict) and body["liftguard"]["cause"] == "tool_call"
    assert body["liftguard"]["state"] == "blocked"


async def test_a_non_streamed_tool_call_is_blocked_not_dropped(upstream: Upstream) -> None:
    upstream.replies.put(Reply(_text_then_tool_call(), delay=0.0))
    with running_proxy(upstream.base_url) as proxy:
        client = _client(proxy.base_url)
        with pytest.raises(openai.UnprocessableEntityError) as caught:
            await client.chat.completions.create(model="test-model", messages=MESSAGES)
        await client.close()
    assert (caught.value.type, caught.value.code) == ("liftguard_blocked", "tool_call")


async def test_a_tool_call_in_observe_mode_flows_and_is_reported(upstream: Upstream) -> None:
    upstream.replies.put(Reply(_text_then_tool_call(), delay=0.0))
    with running_proxy(upstream.base_url, mode="observe") as proxy:
        client = _client(proxy.base_url)
        completion = await client.chat.completions.create(model="test-model", messages=MESSAGES)
        await client.close()
    verdict = (completion.model_extra or {})["liftguard"]
    assert (verdict["state"], verdict["cause"]) == ("blocked", "tool_call")
    calls = completion.choices[0].message.tool_calls
    assert calls is not None and calls[0].function.name == "transfer_money"  # not dropped


# --- 5. bad bodies are OpenAI-shaped 400s, never 500s -----------------------------------------

_OK = b'{"model": "test-model", "messages": [{"role": "user", "content": "hi"}]'


def _with(field: bytes) -> bytes:
    return _OK + b", " + field + b"}"


BAD_BODIES = {
    "deep_json": (b"[" * 40_000 + b"]" * 40_000, "invalid_json", None),  # (under the object limit)
    "deep_in_messages": (
        b'{"model": "test-model", "messages": [{"role": "user", "content": '
        + b"[" * 5000
        + b"]" * 5000
        + b"}]}",
        "invalid_json",
        None,
    ),
    "nan": (_with(b'"temperature": NaN'), "invalid_json", None),
    "infinity": (_with(b'"temperature": Infinity'), "invalid_json", None),
    "overflow": (_with(b'"temperature": 1e400'), "invalid_json", None),
    "lone_surrogate": (
        b'{"model": "test-model", "messages": [{"role": "user", "content": "\\ud800"}]}',
        "invalid_json",
        None,
    ),
    "top_logprobs_negative": (_with(b'"logprobs": true, "top_logprobs": -1'), None, "top_logprobs"),
    "top_logprobs_50": (_with(b'"logprobs": true, "top_logprobs": 50'), None, "top_logprobs"),
    "max_tokens_negative": (_with(b'"max_tokens": -1'), None, "max_tokens"),
    "max_tokens_zero": (_with(b'"max_tokens": 0'), None, "max_tokens"),
    "max_tokens_text": (_with(b'"max_tokens": "abc"'), None, "max_tokens"),
    "max_tokens_fraction": (_with(b'"max_tokens": 1.5'), None, "max_tokens"),
    "temperature_text": (_with(b'"temperature": "hot"'), None, "temperature"),
    "stop_number": (_with(b'"stop": 5'), None, "stop"),
    "role_unknown": (
        b'{"model": "test-model", "messages": [{"role": "hacker", "content": "hi"}]}',
        None,
        "messages",
    ),
    "not_an_object": (b"[1, 2]", None, None),
}


@pytest.mark.parametrize("name", sorted(BAD_BODIES))
async def test_a_bad_body_is_a_400_before_the_upstream(upstream: Upstream, name: str) -> None:
    raw, code, param = BAD_BODIES[name]
    with running_proxy(upstream.base_url) as proxy:
        async with httpx.AsyncClient() as client:
            resp = await client.post(
                f"{proxy.base_url}/chat/completions",
                content=raw,
                headers={"content-type": "application/json"},
            )
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == (code or "invalid_request")
    assert error["param"] == param
    assert upstream.records == []


async def test_size_content_type_and_host_are_checked(upstream: Upstream) -> None:
    body = {"model": "test-model", "messages": [{"role": "user", "content": "x" * 5000}]}
    hosts = ("127.0.0.1", "localhost")
    with running_proxy(
        upstream.base_url, limits=Limits(max_body_bytes=4096), allowed_hosts=hosts
    ) as proxy:
        async with httpx.AsyncClient() as client:
            url = f"{proxy.base_url}/chat/completions"
            big = await client.post(url, json=body)
            plain = await client.post(
                url, content=b'{"model": "test-model"}', headers={"content-type": "text/plain"}
            )
            rebound = await client.post(url, json=body, headers={"host": "evil.example"})
    assert (big.status_code, big.json()["error"]["code"]) == (413, "request_too_large")
    assert (plain.status_code, plain.json()["error"]["code"]) == (415, "unsupported_media_type")
    assert rebound.status_code == 400
    assert upstream.records == []


# --- 1. an answer past its limits is blocked, not held ---------------------------------------


async def test_an_upstream_past_the_token_limit_is_cut_off(upstream: Upstream) -> None:
    words = [f" w{i}" for i in range(40)]
    upstream.replies.put(Reply([ROLE, *tokens([GOOD] * 40, words), STOP], delay=0.0, hold_after=8))
    with running_proxy(upstream.base_url) as proxy:
        client = _client(proxy.base_url)
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(
                model="test-model", messages=MESSAGES, max_tokens=5
            )
        await client.close()
    # blocked by the guard's one token limit, as every front end blocks it (not an upstream error)
    assert caught.value.status_code == 422
    assert caught.value.code == "over_token_limit"
    body = caught.value.body
    assert isinstance(body, dict) and body["liftguard"]["cause"] == "over_token_limit"
    assert body["liftguard"]["tokens_read"] == 6  # the 6th token is past the limit of 5
    assert (await upstream.records[-1].finished()).client_closed  # the upstream was closed


@pytest.mark.parametrize("mode", ["observe", "passthrough"])
async def test_every_mode_ends_an_answer_at_the_token_limit(upstream: Upstream, mode: str) -> None:
    words = [f" w{i}" for i in range(40)]
    upstream.replies.put(Reply([ROLE, *tokens([GOOD] * 40, words), STOP], delay=0.0, hold_after=8))
    with running_proxy(upstream.base_url, mode=mode) as proxy:
        client = _client(proxy.base_url)
        shown: list[str] = []
        with pytest.raises(openai.APIError) as caught:
            stream = await client.chat.completions.create(
                model="test-model", messages=MESSAGES, max_tokens=5, stream=True
            )
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    shown.append(chunk.choices[0].delta.content)
        await client.close()
    body = caught.value.body
    assert isinstance(body, dict) and body["code"] == "over_token_limit"
    assert " w5" not in "".join(shown)  # the token past the limit is never delivered
    assert (await upstream.records[-1].finished()).client_closed


async def test_an_upstream_past_the_byte_limit_is_cut_off(upstream: Upstream) -> None:
    junk = chat_chunk({"content": ""}, {"content": []})
    junk["padding"] = "x" * 4000  # chunks with no token, only bytes
    upstream.replies.put(Reply([ROLE, *([junk] * 20), STOP], delay=0.0, hold_after=10))
    with running_proxy(upstream.base_url, limits=Limits(max_answer_bytes=16 * 1024)) as proxy:
        client = _client(proxy.base_url)
        with pytest.raises(openai.APIError) as caught:
            stream = await client.chat.completions.create(
                model="test-model", messages=MESSAGES, stream=True
            )
            async for _ in stream:
                pass
        await client.close()
    body = caught.value.body
    assert isinstance(body, dict) and body["code"] == "upstream_too_large"
    assert body["liftguard"]["cause"] == "over_token_limit"
    assert (await upstream.records[-1].finished()).client_closed


# --- 2. a non-streamed request whose client vanishes ends the upstream request ---------------


async def test_a_vanished_non_streamed_client_closes_the_upstream(
    upstream: Upstream, lines: VerdictLines
) -> None:
    upstream.replies.put(Reply([ROLE, *tokens([GOOD] * 5), STOP], hold_after=2, hold_timeout=10))
    with running_proxy(upstream.base_url) as proxy:
        host, port = proxy.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        body = json.dumps({"model": "test-model", "messages": MESSAGES}).encode()
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        while not (upstream.records and upstream.records[-1].sent >= 2):
            await asyncio.sleep(0.01)  # the upstream has started answering
        writer.close()
        await writer.wait_closed()
        record = await upstream.records[-1].finished()
        line = await lines.next()
    assert record.client_closed
    assert (line["state"], line["error"]) == ("blocked", "client_closed")
    del reader


# --- 9. credentials never leave the proxy -----------------------------------------------------


async def test_credentials_in_the_upstream_url_and_echoed_keys_are_redacted(
    upstream: Upstream,
) -> None:
    echoed = {"error": {"message": "bad key: Bearer sk-upstream-secret (from sk-upstream-secret)",
                        "type": "invalid_request_error", "code": "invalid_api_key"}}  # fmt: skip
    upstream.replies.put(Reply(status=401, body=echoed))
    base = upstream.base_url.replace("http://", "http://user:hunter2@")
    with running_proxy(base, upstream_key="sk-upstream-secret") as proxy:
        async with httpx.AsyncClient() as client:
            health = await client.get(f"{proxy.url}/healthz")
            resp = await client.post(
                f"{proxy.base_url}/chat/completions",
                json={"model": "test-model", "messages": MESSAGES},
                headers={"authorization": "Bearer sk-client-secret"},
            )
    assert "hunter2" not in health.text and "user:***@" in health.json()["upstream"]
    assert resp.status_code == 401
    assert "sk-upstream-secret" not in resp.text and "***" in resp.text


# --- 10. sampling settings a certificate cannot cover ----------------------------------------

CHANGES = {
    "logit_bias": {"logit_bias": {"1234": 50}},
    "frequency_penalty": {"frequency_penalty": 1.0},
    "presence_penalty": {"presence_penalty": 0.5},
    "top_k": {"top_k": 5},
    "min_p": {"min_p": 0.2},
    "assistant_prefill": {
        "messages": [*MESSAGES, {"role": "assistant", "content": "The answer is"}]
    },
}


@pytest.mark.parametrize("name", sorted(CHANGES))
async def test_settings_that_move_logprobs_are_not_covered(upstream: Upstream, name: str) -> None:
    body = {"model": "test-model", "messages": MESSAGES, **CHANGES[name]}
    upstream.replies.put(Reply([ROLE, *tokens([GOOD] * 5), STOP], delay=0.0))
    with running_proxy(upstream.base_url) as logged, httpx.Client() as client:
        answer = client.post(f"{logged.base_url}/chat/completions", json=body).json()
    with (
        running_proxy(upstream.base_url, on_context_mismatch="reject") as strict,
        httpx.Client() as client,
    ):
        refused = client.post(f"{strict.base_url}/chat/completions", json=body)
    assert answer["liftguard"]["covered"] is False
    assert name in answer["liftguard"]["context_mismatches"]
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_mismatch"
    assert len(upstream.records) == 1  # the refused request never reached the upstream


# --- 3. scoring that evaluates a model never holds up the server ------------------------------


class GatedSkeleton:
    """A skeleton that evaluates "a model" (``evaluates_model``): each score waits until
    the test opens ``gate``, as a slow local model would keep the scorer busy."""

    evaluates_model = True
    reads = Reads()

    def __init__(self, gate: threading.Event, entered: threading.Event) -> None:
        self.gate, self.entered = gate, entered

    def log_prob(self, event: TokenEvent) -> float:
        self.entered.set()
        assert self.gate.wait(30), "the test never opened the gate"
        return -math.log(50_000)


async def test_a_model_scored_answer_does_not_hold_up_the_server(upstream: Upstream) -> None:
    gate, entered = threading.Event(), threading.Event()
    cert = make_certificate().with_skeleton(GatedSkeleton(gate, entered))
    upstream.replies.put(Reply([ROLE, *tokens([GOOD] * 5), STOP], delay=0.0))
    body = {"model": "test-model", "messages": MESSAGES}
    with running_proxy(upstream.base_url, certificate=StaticCertificate(cert, "gated")) as proxy:
        try:
            async with httpx.AsyncClient(timeout=30) as client:
                answer = asyncio.create_task(
                    client.post(f"{proxy.base_url}/chat/completions", json=body)
                )
                assert await asyncio.to_thread(entered.wait, 10)  # scoring has begun
                health = await client.get(f"{proxy.url}/healthz", timeout=10)
                gate.set()
                resp = await answer
        finally:
            gate.set()
    assert health.status_code == 200
    assert resp.json()["liftguard"]["state"] == "certified"


async def test_observe_mode_reports_the_verdict_of_a_cut_off_stream(upstream: Upstream) -> None:
    upstream.replies.put(Reply([ROLE, *tokens([GOOD] * 3)], delay=0.0))  # no finish chunk
    with running_proxy(upstream.base_url, mode="observe") as proxy:
        client = _client(proxy.base_url)
        stream = await client.chat.completions.create(
            model="test-model", messages=MESSAGES, stream=True
        )
        chunks = [chunk async for chunk in stream]
        await client.close()
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "The capital of"
    )
    verdict = (chunks[-1].model_extra or {})["liftguard"]
    assert (verdict["state"], verdict["cause"]) == ("blocked", "truncated")


async def test_metrics_need_the_client_key_and_healthz_does_not(upstream: Upstream) -> None:
    with running_proxy(upstream.base_url, client_key="proxy-key") as proxy:
        async with httpx.AsyncClient(base_url=proxy.url) as client:
            anonymous = await client.get("/metrics")
            wrong = await client.get("/metrics", headers={"authorization": "Bearer other-key"})
            scraper = await client.get("/metrics", headers={"authorization": "Bearer proxy-key"})
            health = await client.get("/healthz")
    assert anonymous.status_code == 401 and wrong.status_code == 401
    assert scraper.status_code == 200 and "liftguard_verdicts_total" in scraper.text
    assert health.status_code == 200


async def test_a_body_that_never_arrives_is_a_408(upstream: Upstream) -> None:
    with running_proxy(upstream.base_url, limits=Limits(body_timeout_s=0.5)) as proxy:
        host, port = proxy.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"model"'
        )  # ... and the other 92 bytes never come
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        writer.close()
    assert head.startswith(b"HTTP/1.1 408")
    assert upstream.records == []
