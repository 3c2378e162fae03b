"""The proxy's HTTP/1.1 connections read a response body in the parts that have arrived.

A chunked SSE body comes one HTTP chunk per event; in a burst, one network read holds
many. httpcore hands each chunk up on its own, through every layer above it (httpcore's,
httpx's, the proxy's reader); the proxy's connections hand up what one read brought, in
one part. These tests check that the bytes, the connection's reuse and the errors are
httpcore's own, and count the parts (never time anything).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpcore
import httpx
import pytest
from raw_http import read_request

from adapters._proxy._transport import CoalescingHTTP11Connection
from adapters._proxy._upstream import upstream_transport

EVENTS = [b'data: {"n": %d}\n\n' % n for n in range(50)]


def chunked(parts: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


@asynccontextmanager
async def server(write: Callable[[asyncio.StreamWriter], object]) -> AsyncIterator[str]:
    """A loopback server that answers each request with what ``write`` writes (kept alive)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await read_request(reader)
                result = write(writer)
                if asyncio.iscoroutine(result):
                    await result
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/v1"
    finally:
        srv.close()


def client() -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=upstream_transport(httpx.Limits()), timeout=5)


async def parts_of(http: httpx.AsyncClient, url: str) -> list[bytes]:
    async with http.stream("POST", url, json={}) as response:
        return [part async for part in response.aiter_raw()]


needs_httpcore_10 = pytest.mark.skipif(
    not httpcore.__version__.startswith("1.0."), reason="amends httpcore 1.0's pool only"
)


@needs_httpcore_10
async def test_chunks_that_arrived_together_come_as_one_part() -> None:
    async with server(lambda w: w.write(HEAD + chunked(EVENTS))) as url, client() as http:
        for _ in range(3):  # a new connection, then the same one reused
            parts = await parts_of(http, url)
            assert b"".join(parts) == b"".join(EVENTS)
            assert len(parts) < len(EVENTS) // 5
        pool = http._transport._pool  # type: ignore[attr-defined]
        assert len(pool.connections) == 1  # kept alive and reused
        assert type(pool.connections[0]._connection) is CoalescingHTTP11Connection


@needs_httpcore_10
async def test_chunks_that_arrive_apart_come_apart() -> None:
    async def paced(writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        for event in EVENTS[:5]:
            writer.write(chunked([event])[: -len(b"0\r\n\r\n")])
            await writer.drain()
            await asyncio.sleep(0.05)
        writer.write(b"0\r\n\r\n")

    async with server(paced) as url, client() as http:
        parts = await parts_of(http, url)
    assert b"".join(parts) == b"".join(EVENTS[:5])
    assert len(parts) >= 3  # (each event waits for the one before to be read)


@needs_httpcore_10
async def test_a_broken_chunk_fails_after_the_chunks_before_it() -> None:
    broken = HEAD + chunked(EVENTS[:10])[: -len(b"0\r\n\r\n")] + b"zz\r\nnot a chunk\r\n"
    async with server(lambda w: w.write(broken)) as url, client() as http:
        got: list[bytes] = []
        with pytest.raises(httpx.RemoteProtocolError):
            async with http.stream("POST", url, json={}) as response:
                async for part in response.aiter_raw():
                    got.append(part)
    assert b"".join(got) == b"".join(EVENTS[:10])


@needs_httpcore_10
async def test_a_content_length_body_is_read_as_before() -> None:
    body = b"".join(EVENTS)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"
    async with server(lambda w: w.write(head % len(body) + body)) as url, client() as http:
        assert b"".join(await parts_of(http, url)) == body
        assert b"".join(await parts_of(http, url)) == body
