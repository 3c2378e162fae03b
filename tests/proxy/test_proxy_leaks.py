"""No key reaches a client or a log, no upstream body is read without a cap, and a client
that must back off is told so.

- a ``\\u``-escaped key in an upstream's JSON error body is redacted (the body is redacted in
  its decoded strings), and in one cut at the cap, which no longer parses (the key is found
  however JSON may spell it);
- an upstream error event mid-stream that echoes the key reaches neither the client's error
  event nor the verdict log line with the key in it;
- a non-200 body and ``/v1/models`` (endless, here) are read to at most 1 MiB, however much
  the upstream sends;
- ``Retry-After`` and ``x-ratelimit-*`` headers are relayed with an upstream's error.
"""

from __future__ import annotations

import contextlib
import json

import httpx
from proxy_harness import GOOD, ROLE, Upstream, VerdictLines, running_proxy, tokens
from sse_server import Reply, SSEServer, _Handler, serving

from adapters._proxy._upstream import MAX_SIDE_BODY_BYTES
from adapters._serving._redact import redact_secrets

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


async def test_an_escaped_key_in_an_error_body_is_redacted(upstream: Upstream) -> None:
    raw = ('{"error": {"message": "invalid key ' + _escaped(KEY) + '", "type": "auth"}}').encode()
    upstream.replies.put(Reply(status=401, raw=raw))
    with running_proxy(upstream.base_url, upstream_key=KEY) as proxy:
        resp = await _post(proxy.base_url)
    assert resp.status_code == 401
    assert KEY not in resp.text and _escaped(KEY) not in resp.text
    assert KEY not in json.dumps(resp.json(), ensure_ascii=False)
    assert "***" in resp.json()["error"]["message"]


def test_a_key_in_json_escapes_is_redacted_in_text_that_is_not_json() -> None:
    key = "sk-ab/c9"
    for spelled in (
        _escaped(key),
        _escaped(key).upper().replace("\\U", "\\u"),  # hex digits in upper case
        "sk-\\u0061b\\/c9",  # some characters escaped, "/" as "\/"
        key,
    ):
        cut = f'{{"error": {{"message": "invalid key {spelled}", "type": "au'.encode()
        out = redact_secrets(cut, [key])
        assert out == b'{"error": {"message": "invalid key ***", "type": "au', spelled


async def test_an_escaped_key_in_an_error_body_past_the_cap_is_redacted(
    upstream: Upstream,
) -> None:
    head = '{"error": {"message": "invalid key ' + _escaped(KEY) + '", "padding": "'
    raw = head.encode() + b"x" * (2 * MAX_SIDE_BODY_BYTES) + b'"}}'  # cut at the cap: not JSON
    upstream.replies.put(Reply(status=401, raw=raw))
    with running_proxy(upstream.base_url, upstream_key=KEY) as proxy:
        resp = await _post(proxy.base_url)
    assert resp.status_code == 401
    assert KEY not in resp.text and _escaped(KEY)[2:] not in resp.text
    assert "invalid key ***" in resp.text


async def test_an_error_event_that_echoes_the_key_is_redacted(
    upstream: Upstream, lines: VerdictLines
) -> None:
    event = {"error": {"message": f"upstream crashed, auth was Bearer {KEY} ({KEY})"}}
    upstream.replies.put(Reply([ROLE, *tokens([GOOD, GOOD]), event], delay=0.0))
    with running_proxy(upstream.base_url, upstream_key=KEY) as proxy:
        resp = await _post(proxy.base_url, stream=True)
        line = await lines.next()
    assert resp.status_code == 200
    assert KEY not in resp.text and "upstream_error" in resp.text
    assert KEY not in json.dumps(line) and line["error"] == "upstream_error"


async def test_an_endless_error_body_is_read_to_a_cap(upstream: Upstream) -> None:
    upstream.replies.put(Reply(status=500, raw=b"x" * (3 * MAX_SIDE_BODY_BYTES)))
    with running_proxy(upstream.base_url) as proxy:
        resp = await _post(proxy.base_url)
    assert resp.status_code == 500
    assert 0 < len(resp.content) <= MAX_SIDE_BODY_BYTES


class _EndlessModels(_Handler):
    """``GET /v1/models`` answered with a JSON body that never ends (until the client hangs
    up)."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._chunk(b'{"object": "list", "data": [')
        model = b'{"id": "m", "object": "model", "created": 0, "owned_by": "x"},' * 1000
        with contextlib.suppress(ConnectionError):
            while True:
                self._chunk(model)
        self.close_connection = True


async def test_an_endless_model_list_is_read_to_a_cap() -> None:
    endless = SSEServer()
    endless.RequestHandlerClass = _EndlessModels
    with serving(endless), running_proxy(endless.base_url) as proxy:
        async with httpx.AsyncClient(timeout=60) as client:
            resp = await client.get(f"{proxy.base_url}/models")
    assert resp.status_code == 200
    assert 0 < len(resp.content) <= MAX_SIDE_BODY_BYTES
    assert resp.content.startswith(b'{"object": "list", "data": [{"id": "m"')


async def test_rate_limit_headers_are_relayed(upstream: Upstream) -> None:
    headers = {"Retry-After": "7", "x-ratelimit-remaining-requests": "0", "x-secret": "no"}
    body = {"error": {"message": "slow down", "type": "rate_limit_error"}}
    upstream.replies.put(Reply(status=429, body=body, headers=headers))
    with running_proxy(upstream.base_url) as proxy:
        resp = await _post(proxy.base_url)
    assert resp.status_code == 429
    assert resp.headers["retry-after"] == "7"
    assert resp.headers["x-ratelimit-remaining-requests"] == "0"
    assert "x-secret" not in resp.headers


async def test_what_extra_body_holds_is_checked_like_the_rest(upstream: Upstream) -> None:
    with running_proxy(upstream.base_url) as proxy:
        not_object = await _post(proxy.base_url, extra_body="temperature=2")
        bad_value = await _post(proxy.base_url, extra_body={"temperature": "hot"})
    assert not_object.status_code == 400 and not_object.json()["error"]["param"] == "extra_body"
    assert bad_value.status_code == 400 and bad_value.json()["error"]["param"] == "temperature"
    assert upstream.records == []  # nothing reached the upstream
