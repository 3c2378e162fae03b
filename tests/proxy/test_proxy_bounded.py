"""A request's body is bounded in what it may cost to parse, and an upstream body's odd end is
no server error.

- a body of more values or objects than the proxy decodes is refused (HTTP 413) before it is
  decoded: a 4 MiB body of tiny values would otherwise cost seconds of CPU on the event loop
  and hundreds of megabytes of Python objects;
- more messages than :data:`MAX_MESSAGES`, or more content parts in a message than
  :data:`MAX_CONTENT_PARTS`, are an HTTP 400 naming ``messages``;
- a large body that is within the limits is answered (it is decoded off the event loop);
- the count of requests that change the context keeps a field off the allowlist under
  ``unlisted``, never under a name the client invented (one label per name would grow
  without bound);
- a chat request past ``max_concurrent_requests`` (counted to the last byte of a streamed
  answer) gets HTTP 503 ``overloaded`` with ``Retry-After``, before its body is read;
- a non-streamed answer whose upstream body ends with ``data: [DONE]`` and no line end is
  answered, not an HTTP 500 (a guard: it was answered before these limits too).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from proxy_harness import GOOD, ROLE, STOP, Upstream, metric, running_proxy, tokens
from raw_http import read_request
from sse_server import Reply

from adapters._serving._request import (
    MAX_CONTAINERS,
    MAX_CONTENT_PARTS,
    MAX_MESSAGES,
    MAX_VALUES,
    OFF_LOOP_BYTES,
)
from adapters.proxy import Limits

QUESTION = {"role": "user", "content": "What is the capital of France?"}


async def _post(proxy_url: str, body: bytes) -> httpx.Response:
    async with httpx.AsyncClient(timeout=60) as client:
        return await client.post(
            f"{proxy_url}/chat/completions",
            content=body,
            headers={"content-type": "application/json"},
        )


def _request(**more: object) -> bytes:
    return json.dumps({"model": "test-model", "messages": [QUESTION], **more}).encode()


TINY = {
    "values": b'{"model": "m", "messages": [], "x": [' + b"0," * MAX_VALUES + b"0]}",
    "objects": b'{"model": "m", "messages": [], "x": [' + b"{}" * (MAX_CONTAINERS + 1) + b"]}",
}


@pytest.mark.parametrize("shape", list(TINY))
async def test_a_body_of_tiny_values_is_refused_before_it_is_decoded(
    upstream: Upstream, shape: str
) -> None:
    with running_proxy(upstream.base_url) as proxy:
        resp = await _post(proxy.base_url, TINY[shape])
    assert resp.status_code == 413, resp.text
    assert resp.json()["error"]["code"] == "request_too_large"
    assert upstream.records == []


async def test_too_many_messages_or_content_parts_are_refused(upstream: Upstream) -> None:
    many = [QUESTION] * (MAX_MESSAGES + 1)
    parts = [{"type": "text", "text": "a"}] * (MAX_CONTENT_PARTS + 1)
    with running_proxy(upstream.base_url) as proxy:
        messages = await _post(proxy.base_url, json.dumps(
            {"model": "test-model", "messages": many}).encode())  # fmt: skip
        content = await _post(proxy.base_url, json.dumps(
            {"model": "test-model", "messages": [{"role": "user", "content": parts}]}).encode()
        )  # fmt: skip
    for resp in (messages, content):
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["param"] == "messages", resp.text
    assert upstream.records == []


async def test_a_large_body_within_the_limits_is_answered(upstream: Upstream) -> None:
    upstream.replies.put(Reply([ROLE, *tokens([GOOD] * 3), STOP], delay=0.0))
    long_question = {"role": "user", "content": "word " * OFF_LOOP_BYTES}
    body = json.dumps({"model": "test-model", "messages": [long_question]}).encode()
    with running_proxy(upstream.base_url) as proxy:
        resp = await _post(proxy.base_url, body)
    assert resp.status_code == 200, resp.text[:300]
    assert resp.json()["liftguard"]["state"] == "certified"


@asynccontextmanager
async def _answering(body: bytes) -> AsyncIterator[str]:
    """A loopback upstream that answers with an event stream of ``body`` (its length
    given, the connection kept alive); its base URL."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await read_request(reader)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    finally:
        server.close()


@pytest.mark.parametrize("stream", [False, True])
async def test_done_without_a_line_end_is_answered(stream: bool) -> None:
    events = [ROLE, *tokens([GOOD] * 3), STOP]
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    async with _answering(body + b"data: [DONE]") as url:
        with running_proxy(url) as proxy:
            resp = await _post(proxy.base_url, _request(stream=stream))
    assert resp.status_code == 200, resp.text
    assert "Traceback" not in resp.text
    if not stream:
        assert resp.json()["liftguard"]["state"] == "certified", resp.text


async def test_a_request_past_the_concurrency_cap_is_a_503(upstream: Upstream) -> None:
    upstream.replies.put(Reply([ROLE, *tokens([GOOD] * 6), STOP], hold_after=3, delay=0.0))
    with running_proxy(
        upstream.base_url, mode="passthrough", limits=Limits(max_concurrent_requests=1)
    ) as proxy:
        async with httpx.AsyncClient(timeout=60) as client:
            body = json.loads(_request(stream=True))
            url = f"{proxy.base_url}/chat/completions"
            async with client.stream("POST", url, json=body) as first:
                # the first answer is flowing, held open by the upstream; the reader is
                # kept (a generator left by a ``break`` may be finalised at any moment,
                # closing the connection and freeing the slot before the second request)
                parts = first.aiter_bytes()
                while b"data:" not in await anext(parts):
                    pass
                second = await client.post(url, content=_request())
                await parts.aclose()
    assert first.status_code == 200
    assert second.status_code == 503, second.text
    assert second.json()["error"]["code"] == "overloaded"
    assert second.headers["retry-after"] == "1"
    assert len(upstream.records) == 1  # the second never reached the upstream


async def test_fields_a_client_invents_share_one_metric_label(upstream: Upstream) -> None:
    for _ in range(3):
        upstream.replies.put(Reply([ROLE, *tokens([GOOD] * 2), STOP], delay=0.0))
    with running_proxy(upstream.base_url) as proxy:
        for n in range(3):
            resp = await _post(proxy.base_url, _request(**{f"invented_{n}": 1}))
            assert resp.json()["liftguard"]["context_mismatches"] == [f"invented_{n}"]
        async with httpx.AsyncClient(timeout=30) as client:
            page = (await client.get(f"{proxy.url}/metrics")).text
    name = "liftguard_context_mismatches_total"
    assert metric(page, name, field="unlisted") == 3
    assert "invented_" not in page
