"""The proxy's transport to the upstream: httpx's, on an amended httpcore pool.

Two amendments, both to httpcore 1.0's pool (another version keeps its own):
:class:`OneRequestPerIdleConnection` assigns requests to connections in one pass, and
its HTTP/1.1 connections read a response body in the parts that have arrived
(:class:`CoalescingHTTP11Connection`), not one part per chunk of a chunked body.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import h11
import httpcore
import httpx

__all__ = [
    "CoalescingHTTP11Connection",
    "OneRequestPerIdleConnection",
    "upstream_transport",
]


class OneRequestPerIdleConnection(httpcore.AsyncConnectionPool):
    """httpcore's connection pool, with its request-to-connection assignment made to hand
    each idle connection to one waiting request only, and to count idle connections once.

    httpcore 1.0's ``_assign_requests_to_connections`` runs on every request and every
    response close. An idle HTTP/1.1 connection stays idle until the request it was given
    starts on it, so every request arriving meanwhile is given the same one: all but one
    fail, are queued again and start another pass (each pass scanning every connection, and
    counting idle ones once per idle connection). A burst of requests that meets idle
    connections, as a second burst does within the 5 s they are kept alive, thus costs
    passes quadratic in its size: the proxy's event loop spent them before any first byte.
    Here a pass gives each queued request its own idle connection (not one another request
    holds) or a new connection, as the limits allow; everything else is httpcore's."""

    def _assign_requests_to_connections(self) -> list[Any]:
        closing: list[Any] = []
        # idle connections already handed to a request that has not started on them
        held = {id(r.connection) for r in self._requests if r.connection is not None}
        live = []
        for each in self._connections:
            if each.is_closed():
                continue
            if each.has_expired():
                closing.append(each)
                continue
            live.append(each)
        idle = [c for c in live if c.is_idle() and id(c) not in held]
        surplus = len(idle) - self._max_keepalive_connections
        if surplus > 0:
            closing += idle[:surplus]
            gone = {id(c) for c in idle[:surplus]}
            idle = idle[surplus:]
            live = [c for c in live if id(c) not in gone]
        self._connections = live
        available = [c for c in live if id(c) not in held and c.is_available()]
        for pool_request in [r for r in self._requests if r.is_queued()]:
            origin = pool_request.request.url.origin
            connection: Any = next((c for c in available if c.can_handle_request(origin)), None)
            if connection is not None:
                if connection.is_idle():  # one request at a time (HTTP/2 multiplexes on)
                    available.remove(connection)
                    if connection in idle:
                        idle.remove(connection)
            elif len(live) < self._max_connections:
                connection = self.create_connection(origin)
                live.append(connection)
            elif idle:  # make room: close an idle connection no request holds
                old = idle.pop(0)
                live.remove(old)
                if old in available:
                    available.remove(old)
                closing.append(old)
                connection = self.create_connection(origin)
                live.append(connection)
            else:
                continue  # waits for a connection to come back
            pool_request.assign_to_connection(connection)
        return closing

    def create_connection(self, origin: httpcore.Origin) -> Any:
        connection = super().create_connection(origin)
        if type(connection) is httpcore.AsyncHTTPConnection:  # (not a proxy's tunnel)
            connection.__class__ = _CoalescingConnection  # same state, amended body reads
        return connection


class _CoalescingConnection(httpcore.AsyncHTTPConnection):
    """httpcore's connection, whose HTTP/1.1 connection (made on its first request) is a
    :class:`CoalescingHTTP11Connection`."""

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        response = await super().handle_async_request(request)
        inner = self._connection
        if type(inner) is httpcore.AsyncHTTP11Connection:  # (the body is not read yet)
            inner.__class__ = CoalescingHTTP11Connection
        return response


class CoalescingHTTP11Connection(httpcore.AsyncHTTP11Connection):
    """httpcore's HTTP/1.1 connection, with a response body read as the parts that have
    arrived: the body's pieces h11 already holds (an SSE stream's chunks, one HTTP chunk
    each, many per network read in a burst) come as one part, not one each, so that
    every layer above (httpcore's, httpx's, the proxy's event reader) runs once per read
    rather than once per chunk. The bytes, their order, the reads and the errors are
    httpcore's (an error after a part is raised after that part, as before)."""

    async def _receive_response_body(self, request: httpcore.Request) -> AsyncIterator[bytes]:
        timeouts = request.extensions.get("timeout", {})
        timeout = timeouts.get("read", None)
        while True:
            event: Any = await self._receive_event(timeout=timeout)
            if isinstance(event, h11.Data):
                parts, end, failure = [bytes(event.data)], False, None
                while True:  # what h11 can give without reading the network
                    try:
                        event = self._h11_state.next_event()
                    except h11.RemoteProtocolError as exc:
                        failure = exc
                        break
                    if type(event) is h11.Data:
                        parts.append(bytes(event.data))
                        continue
                    end = isinstance(event, (h11.EndOfMessage, h11.PAUSED))
                    break  # NEED_DATA (the next read) or the end
                yield parts[0] if len(parts) == 1 else b"".join(parts)
                if failure is not None:
                    raise httpcore.RemoteProtocolError(failure) from failure
                if end:
                    break
            elif isinstance(event, (h11.EndOfMessage, h11.PAUSED)):
                break


def upstream_transport(limits: httpx.Limits) -> httpx.AsyncHTTPTransport:
    """The proxy's transport to the upstream: httpx's, on a
    :class:`OneRequestPerIdleConnection` pool where the installed httpcore has the pool
    it amends (1.0.x; another version keeps its own)."""
    transport = httpx.AsyncHTTPTransport(limits=limits, trust_env=False)
    pool = getattr(transport, "_pool", None)
    if type(pool) is httpcore.AsyncConnectionPool and httpcore.__version__.startswith("1.0."):
        pool.__class__ = OneRequestPerIdleConnection  # same state, amended assignment
    return transport
