"""The proxy's upstream connection pool under a burst that meets idle kept-alive connections.

httpcore 1.0's pool, which the proxy once used, handed an idle HTTP/1.1 connection to
every request that arrived before the first one given it had started on it; all but
one were queued again and started another pass over every connection, so a second
burst within the keep-alive time paid passes quadratic in its size
(``benchmarks/bench_proxy_burst.py``). The proxy's pool gives each waiting request a
connection of its own, and keeps its limit. These tests count connections (opened,
open at once), never how long anything takes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from raw_http import read_request

from adapters._proxy._upstream import Upstream

BODY = b"data: [DONE]\n\n"


class KeepAliveServer:
    """A loopback HTTP/1.1 server that answers every request on a kept-alive connection
    (after ``delay`` seconds); ``accepted`` counts the connections it was opened, ``most``
    the most open at once."""

    def __init__(self, delay: float = 0.0) -> None:
        self.accepted = 0
        self.open = 0
        self.most = 0
        self.delay = delay
        self.url = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.open += 1
        self.most = max(self.most, self.open)
        try:
            while True:
                await read_request(reader)
                await asyncio.sleep(self.delay)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            writer.close()


@asynccontextmanager
async def keep_alive_server(delay: float = 0.0) -> AsyncIterator[KeepAliveServer]:
    srv = KeepAliveServer(delay)
    server = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
    srv.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    try:
        yield srv
    finally:
        server.close()


async def _burst(upstream: Upstream, n: int) -> None:
    async def one() -> None:
        response = await upstream.open_stream("/chat/completions", {"n": 1}, {})
        assert await response.read() == BODY
        response.close()

    await asyncio.gather(*(one() for _ in range(n)))


async def test_a_second_burst_reuses_idle_connections_one_request_each() -> None:
    n = 12
    async with keep_alive_server(delay=0.05) as srv:
        upstream = Upstream(srv.url, timeout_s=10, max_connections=16)
        await upstream.start()
        try:
            await _burst(upstream, n)
            assert srv.accepted == n
            await _burst(upstream, n)
            assert srv.accepted == n  # every request of the second burst reused one
        finally:
            await upstream.aclose()


async def test_the_pool_keeps_its_limit() -> None:
    """At most ``max_connections`` at once (the other requests wait for one to come back)."""
    async with keep_alive_server(delay=0.02) as srv:
        upstream = Upstream(srv.url, timeout_s=10, max_connections=4)
        await upstream.start()
        try:
            await _burst(upstream, 10)
            await _burst(upstream, 10)
        finally:
            await upstream.aclose()
    assert srv.most <= 4
    assert srv.accepted == 4
