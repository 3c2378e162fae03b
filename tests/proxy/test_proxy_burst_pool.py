"""The proxy's upstream connection pool under a burst that meets idle kept-alive connections.

httpcore 1.0's pool hands an idle HTTP/1.1 connection to every request that arrives
before the first one given it has started on it; all but one are queued again and
start another pass over every connection. A second burst of streams within the 5 s
for which connections are kept alive paid passes quadratic in its size in the proxy's
event loop (``benchmarks/bench_proxy_burst.py``). The proxy's pool gives each waiting
request a connection of its own. These tests count what the pool does (requests queued
again, connections opened), never how long it takes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpcore
import httpx
import pytest
from raw_http import read_request

from adapters._proxy._upstream import OneRequestPerIdleConnection, Upstream, upstream_transport

BODY = b"data: [DONE]\n\n"


class KeepAliveServer:
    """A loopback HTTP/1.1 server that answers every request at once on a kept-alive
    connection; ``accepted`` counts the connections it was opened."""

    def __init__(self) -> None:
        self.accepted = 0
        self.url = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while True:
                await read_request(reader)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def keep_alive_server() -> AsyncIterator[KeepAliveServer]:
    srv = KeepAliveServer()
    server = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
    srv.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    try:
        yield srv
    finally:
        server.close()


@pytest.fixture
def requeued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times a request was queued again after the connection it was given turned
    out to be taken (httpcore's ``ConnectionNotAvailable`` retry)."""
    count = [0]
    clear = httpcore._async.connection_pool.AsyncPoolRequest.clear_connection

    def counted(self: Any) -> None:
        count[0] += 1
        clear(self)

    monkeypatch.setattr(
        httpcore._async.connection_pool.AsyncPoolRequest, "clear_connection", counted
    )
    return count


async def _burst(send: Callable[[], Any], n: int) -> None:
    async def one() -> None:
        response = await send()
        await response.aread()
        await response.aclose()

    await asyncio.gather(*(one() for _ in range(n)))


def _pool(client: httpx.AsyncClient) -> Any:
    return client._transport._pool  # type: ignore[attr-defined]


async def test_the_proxy_upstream_pool_is_the_amended_one() -> None:
    upstream = Upstream("http://127.0.0.1:9/v1", timeout_s=5, max_connections=8)
    await upstream.start()
    try:
        assert type(_pool(upstream.client)) is OneRequestPerIdleConnection
    finally:
        await upstream.aclose()


async def test_a_second_burst_reuses_idle_connections_one_request_each(
    requeued: list[int],
) -> None:
    n = 12
    async with keep_alive_server() as srv:
        upstream = Upstream(srv.url, timeout_s=10, max_connections=16)
        await upstream.start()
        try:

            def send() -> Any:
                return upstream.open_stream("/chat/completions", {"n": 1}, {})

            await _burst(send, n)
            assert srv.accepted == n
            idle = [c for c in _pool(upstream.client).connections if c.is_idle()]
            assert len(idle) == n  # kept alive for the next burst
            await _burst(send, n)
            assert requeued[0] == 0  # no request was given a connection another one took
            assert srv.accepted == n  # every request of the second burst reused one
        finally:
            await upstream.aclose()


async def test_httpcore_own_pool_hands_one_idle_connection_to_several_requests(
    requeued: list[int],
) -> None:
    """The cause, on the pool the proxy amends (skipped once httpcore no longer does it)."""
    n = 12
    async with keep_alive_server() as srv:
        limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
        async with httpx.AsyncClient(limits=limits, trust_env=False) as client:

            def send() -> Any:
                request = client.build_request("POST", f"{srv.url}/chat/completions", json={})
                return client.send(request, stream=True)

            await _burst(send, n)
            await _burst(send, n)
    if requeued[0] == 0:
        pytest.skip(f"httpcore {httpcore.__version__} gives each request its own connection")
    assert requeued[0] >= n - 1


async def test_the_pool_keeps_its_limits(requeued: list[int]) -> None:
    """At most ``max_connections`` at once (the other requests wait for one to come back)
    and at most ``max_keepalive_connections`` idle."""
    async with keep_alive_server() as srv:
        limits = httpx.Limits(max_connections=4, max_keepalive_connections=2)
        transport = upstream_transport(limits)
        async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
            assert type(_pool(client)) is OneRequestPerIdleConnection
            most = [0]
            pool = _pool(client)

            def send() -> Any:
                most[0] = max(most[0], len(pool.connections))
                request = client.build_request("POST", f"{srv.url}/chat/completions", json={})
                return client.send(request, stream=True)

            await _burst(send, 10)
            assert most[0] <= 4
            assert len([c for c in pool.connections if c.is_idle()]) <= 2
            await _burst(send, 10)
            assert len([c for c in pool.connections if c.is_idle()]) <= 2
    assert requeued[0] == 0
