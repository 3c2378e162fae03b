"""No credential reaches a client or a log, in any of its forms, wherever the upstream writes it.

- an upstream response aiohttp cannot parse (``Transfer-Encoding`` with ``Content-Length``, a
  header past aiohttp's limit) fails the request with a 502 that names the failure, not the
  exception's text (which holds the request's headers, the key among them): the chat and the
  models routes, and the log lines;
- the credentials of an upstream URL (``http://user:password@host/v1``) are redacted in
  every form: the password, the ``user:password`` pair and its base64 (what basic auth
  sends), in a relayed error body and an error event mid-stream, and the verdict log line;
- a key in a URL's query (``?api_key=...``) in an error body is redacted;
- an error body cut at the 1 MiB cap in the middle of the key loses the key's first part too;
- rate-limit headers are relayed only as counts, durations and dates: a 429 that writes a
  key into ``x-ratelimit-*`` or ``Retry-After`` is not relayed verbatim.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from proxy_harness import GOOD, ROLE, Upstream, VerdictLines, running_proxy, tokens
from raw_http import read_request
from sse_server import Reply

from adapters._proxy._upstream import MAX_SIDE_BODY_BYTES

KEY = "sk-upstream-secret-4242"
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def _escaped(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


async def _post(proxy_url: str, **body: object) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(
            f"{proxy_url}/chat/completions",
            json={"model": "test-model", "messages": MESSAGES, **body},
        )


UNPARSEABLE = {
    "length-and-chunked": b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "huge-header": b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * (1024 * 1024) + b"\r\n\r\n",
}
"""Responses aiohttp's parser refuses before the body."""


@asynccontextmanager
async def _answering(response: bytes) -> AsyncIterator[str]:
    """A loopback upstream that answers every request with ``response`` and closes; its
    base URL."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await read_request(reader)
            writer.write(response)
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


@pytest.mark.parametrize("shape", list(UNPARSEABLE))
async def test_an_unparseable_upstream_response_names_no_key(
    shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with _answering(UNPARSEABLE[shape]) as url:
        with running_proxy(url, upstream_key=KEY) as proxy:
            chat = await _post(proxy.base_url)
            async with httpx.AsyncClient(timeout=30) as client:
                models = await client.get(f"{proxy.base_url}/models")
    for resp in (chat, models):
        assert resp.status_code == 502, resp.text
        assert KEY not in resp.text and "authorization" not in resp.text.lower(), resp.text
        assert resp.json()["error"]["message"].startswith("the upstream "), resp.text
    assert KEY not in caplog.text


USER, PASSWORD = "svc-user", "pw-7f3a9c"
PAIR = f"{USER}:{PASSWORD}"
BASIC = base64.b64encode(PAIR.encode()).decode()


def _with_credentials(url: str) -> str:
    return url.replace("http://", f"http://{USER}:{PASSWORD}@")


@pytest.mark.parametrize("json_body", [True, False])
async def test_url_credentials_are_redacted_in_every_form(
    upstream: Upstream, json_body: bool
) -> None:
    said = f"denied: Authorization {BASIC} from {PAIR} (password {PASSWORD})"
    raw = json.dumps({"error": {"message": said}}).encode() if json_body else said.encode()
    upstream.replies.put(Reply(status=401, raw=raw))
    with running_proxy(_with_credentials(upstream.base_url)) as proxy:
        resp = await _post(proxy.base_url)
    assert upstream.headers_seen[-1]["authorization"] == f"Basic {BASIC}"
    assert resp.status_code == 401
    for form in (BASIC, BASIC.rstrip("="), PAIR, PASSWORD):
        assert form not in resp.text, resp.text


async def test_an_error_event_that_echoes_basic_credentials_is_redacted(
    upstream: Upstream, lines: VerdictLines
) -> None:
    event = {"error": {"message": f"auth {BASIC} for {PAIR} rejected"}}
    upstream.replies.put(Reply([ROLE, *tokens([GOOD, GOOD]), event], delay=0.0))
    with running_proxy(_with_credentials(upstream.base_url)) as proxy:
        resp = await _post(proxy.base_url, stream=True)
        line = await lines.next()
    assert resp.status_code == 200 and "upstream_error" in resp.text
    for form in (BASIC, PAIR, PASSWORD):
        assert form not in resp.text and form not in json.dumps(line), (resp.text, line)


@pytest.mark.parametrize("json_body", [True, False])
async def test_a_key_in_a_url_query_is_redacted(upstream: Upstream, json_body: bool) -> None:
    said = "GET https://api.example.com/v1/models?api_key=AIzaQuerySecret9&alt=json: forbidden"
    raw = json.dumps({"error": {"message": said}}).encode() if json_body else said.encode()
    upstream.replies.put(Reply(status=403, raw=raw))
    with running_proxy(upstream.base_url) as proxy:
        resp = await _post(proxy.base_url)
    assert resp.status_code == 403
    assert "AIzaQuerySecret9" not in resp.text and "alt=json" in resp.text, resp.text


@pytest.mark.parametrize("escaped", [False, True])
async def test_a_key_cut_at_the_error_body_cap_loses_its_first_part(
    upstream: Upstream, escaped: bool
) -> None:
    spelled = (_escaped(KEY) if escaped else KEY).encode()
    half = len(spelled) // 2
    raw = b"x" * (MAX_SIDE_BODY_BYTES - half) + spelled + b"y" * 1000
    upstream.replies.put(Reply(status=500, raw=raw))
    with running_proxy(upstream.base_url, upstream_key=KEY) as proxy:
        resp = await _post(proxy.base_url)
    assert resp.status_code == 500
    tail = resp.content[-200:]
    assert spelled[: half - 1] not in tail and KEY[:6].encode() not in tail, tail
    assert tail.endswith(b"x***"), tail


async def test_rate_limit_headers_that_carry_a_key_are_not_relayed(upstream: Upstream) -> None:
    headers = {
        "Retry-After": KEY,
        "x-ratelimit-remaining-requests": KEY,
        "x-ratelimit-limit-tokens": "sk-another-key",
        "x-ratelimit-reset-tokens": "6m0s",
        "retry-after-ms": "1500",
    }
    body = {"error": {"message": "slow down", "type": "rate_limit_error"}}
    upstream.replies.put(Reply(status=429, body=body, headers=headers))
    with running_proxy(upstream.base_url, upstream_key=KEY) as proxy:
        resp = await _post(proxy.base_url)
    assert resp.status_code == 429
    assert all("sk-" not in value for value in resp.headers.values()), resp.headers
    assert resp.headers["x-ratelimit-reset-tokens"] == "6m0s"
    assert resp.headers["retry-after-ms"] == "1500"
