"""The proxy's upstream client reads a response body in the parts that have arrived.

A chunked SSE body comes one HTTP chunk per event; in a burst, one network read holds
many. The proxy's client (aiohttp's, its HTTP parsed in C) hands up what one read
brought in one part, so that the proxy's reader runs once per read, not once per chunk.
These tests check the bytes, the connection's reuse, the errors, a compressed body and
credentials in the upstream URL, and count the parts (never time anything).
"""

from __future__ import annotations

import asyncio
import base64
import gzip
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from raw_http import read_request

from adapters._proxy._upstream import Upstream, UpstreamAnswer, UpstreamFailure

EVENTS = [b'data: {"n": %d}\n\n' % n for n in range(50)]


def chunked(parts: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class Server:
    """A loopback server that answers each request with what ``write`` writes (kept
    alive); ``accepted`` counts its connections, ``heads`` keeps each request's head."""

    def __init__(self, write: Callable[[asyncio.StreamWriter], object]) -> None:
        self.write = write
        self.accepted = 0
        self.heads: list[bytes] = []
        self.url = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while True:
                self.heads.append(await read_request(reader))
                result = self.write(writer)
                if asyncio.iscoroutine(result):
                    await result
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def server(
    write: Callable[[asyncio.StreamWriter], object], user: str = "", timeout_s: float = 5
) -> AsyncIterator[tuple[Server, Upstream]]:
    srv = Server(write)
    listening = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
    srv.url = f"http://{user}127.0.0.1:{listening.sockets[0].getsockname()[1]}/v1"
    upstream = Upstream(srv.url, timeout_s=timeout_s, max_connections=8)
    await upstream.start()
    try:
        yield srv, upstream
    finally:
        await upstream.aclose()
        listening.close()


async def parts_of(upstream: Upstream) -> list[bytes]:
    response = await upstream.open_stream("/chat/completions", {}, {})
    try:
        return [part async for part in response.content.iter_any()]
    finally:
        response.close()


async def test_chunks_that_arrived_together_come_as_one_part() -> None:
    async with server(lambda w: w.write(HEAD + chunked(EVENTS))) as (srv, upstream):
        for _ in range(3):  # a new connection, then the same one reused
            parts = await parts_of(upstream)
            assert b"".join(parts) == b"".join(EVENTS)
            assert len(parts) < len(EVENTS) // 5
        assert srv.accepted == 1  # kept alive and reused


async def test_chunks_that_arrive_apart_come_apart() -> None:
    async def paced(writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        for event in EVENTS[:5]:
            writer.write(chunked([event])[: -len(b"0\r\n\r\n")])
            await writer.drain()
            await asyncio.sleep(0.05)
        writer.write(b"0\r\n\r\n")

    async with server(paced) as (_, upstream):
        parts = await parts_of(upstream)
    assert b"".join(parts) == b"".join(EVENTS[:5])
    assert len(parts) >= 3  # (each event waits for the one before to be read)


async def test_a_broken_chunk_fails_after_the_events_before_it() -> None:
    """aiohttp's C parser stops at the broken chunk without failing the body (its Python
    parser fails it): the reader then fails at the read timeout, never waits for ever."""

    async def broken(writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + chunked(EVENTS[:10])[: -len(b"0\r\n\r\n")])
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"zz\r\nnot a chunk\r\n")

    async with server(broken, timeout_s=0.5) as (_, upstream):
        response = await upstream.open_stream("/chat/completions", {}, {})
        answer = UpstreamAnswer(response, timeout_s=upstream.timeout_s)
        got: list[bytes] = []
        with pytest.raises(UpstreamFailure) as caught:
            async for _, data in answer.events:
                got.append(data)
        await answer.close()
    assert caught.value.kind in ("upstream_transport", "upstream_timeout")
    assert got == [event[6:-2] for event in EVENTS[:10]]


async def test_a_content_length_body_is_read_as_before() -> None:
    body = b"".join(EVENTS)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"
    async with server(lambda w: w.write(head % len(body) + body)) as (srv, upstream):
        assert b"".join(await parts_of(upstream)) == body
        assert b"".join(await parts_of(upstream)) == body
        assert srv.accepted == 1


async def test_an_encoded_body_is_decoded_before_it_is_read() -> None:
    body = gzip.compress(b'data: {"a": 1}\n\ndata: {"b": 2}\n\n')
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n"
    async with server(lambda w: w.write(head % len(body) + body)) as (_, upstream):
        answer = UpstreamAnswer(await upstream.open_stream("/chat/completions", {}, {}))
        got = [(name, data) async for name, data in answer.events]
        await answer.close()
    assert got == [(None, b'{"a": 1}'), (None, b'{"b": 2}')]


async def test_credentials_in_the_url_are_sent_as_basic_auth_in_place_of_a_key() -> None:
    body = b"data: [DONE]\n\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
    async with server(lambda w: w.write(head + body), user="user:hunter2@") as (srv, upstream):
        await parts_of(upstream)
        response = await upstream.open_stream(
            "/chat/completions", {"a": 1}, {"authorization": "Bearer sk-x"}
        )
        response.close()
    basic = b"Basic " + base64.b64encode(b"user:hunter2")
    for head_ in srv.heads:
        lines = [line.lower() for line in head_.split(b"\r\n")]
        assert lines[0].startswith(b"post /v1/chat/completions ")
        assert [line for line in lines if line.startswith(b"authorization:")] == [
            b"authorization: " + basic.lower()
        ]


async def test_a_redirect_is_the_upstreams_answer_not_followed() -> None:
    """A 3xx goes back as the upstream's status: following it would send the request (and
    its key) wherever the upstream points."""
    async with server(lambda w: w.write(HEAD + chunked(EVENTS))) as (elsewhere, _):
        head = b"HTTP/1.1 307 Temporary Redirect\r\nLocation: %s/chat/completions\r\n"
        head += b"Content-Length: 0\r\n\r\n"
        moved = head % elsewhere.url.encode()
        async with server(lambda w: w.write(moved)) as (_, upstream):
            response = await upstream.open_stream(
                "/chat/completions", {}, {"authorization": "Bearer sk-x"}
            )
            response.close()
            models = await upstream.get("/models", {"authorization": "Bearer sk-x"})
            models.close()
    assert (response.status, models.status) == (307, 307)
    assert elsewhere.accepted == 0
