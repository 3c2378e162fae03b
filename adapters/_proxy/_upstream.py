"""The upstream side: one shared ``httpx.AsyncClient`` and a server-sent-events decoder.

Every upstream failure the proxy must not certify through is an
:class:`UpstreamFailure` with a ``kind``: ``upstream_timeout`` (no bytes for
``timeout`` seconds: a stalled server), ``upstream_transport`` (the connection
broke), ``upstream_error`` (an in-stream error event) or ``malformed_chunk``
(data that is not a JSON object).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import anyio
import httpx

from .._serving._wire import loads
from ._transport import OneRequestPerIdleConnection, upstream_transport

__all__ = [
    "OneRequestPerIdleConnection",
    "Upstream",
    "UpstreamAnswer",
    "UpstreamFailure",
    "aclose_response",
    "decode_chunk",
    "events",
    "upstream_transport",
]


logger = logging.getLogger(__name__)

Event = tuple[str | None, bytes]
"""One server-sent event: its ``event:`` name (None if unnamed) and its data."""

_STALE = (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
"""Connection failures before any response byte: safe to retry once."""


TOO_LARGE = "upstream_too_large"
"""The failure of an answer past the proxy's token or byte limit for one answer."""
MAX_SIDE_BODY_BYTES = 1024 * 1024
"""Most bytes read of an upstream body that is not an answer: an error body, a model list."""
DEFAULT_MAX_ANSWER_BYTES = 8 * 1024 * 1024
"""Most bytes one upstream answer may send (its events with their logprobs)."""


class UpstreamFailure(Exception):
    """The upstream stream failed; ``kind`` names how (see the module docstring)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Upstream:
    """The upstream API at ``base_url`` (``.../v1``); :meth:`start` in the server's loop."""

    def __init__(self, base_url: str, *, timeout_s: float, max_connections: int) -> None:
        self.base_url = base_url
        self.timeout_s = timeout_s
        self._limits = httpx.Limits(
            max_connections=max_connections,
            max_keepalive_connections=min(max_connections, 256),
        )
        self._client: httpx.AsyncClient | None = None
        self._urls: dict[str, httpx.URL] = {}

    async def start(self) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s),
                transport=upstream_transport(self._limits),
                trust_env=False,
            )

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            raise RuntimeError("the upstream client is not started (run the app's lifespan)")
        return self._client

    async def open_stream(
        self, path: str, body: Mapping[str, Any], headers: Mapping[str, str]
    ) -> httpx.Response:
        """POST ``body`` and return the response with its body unread (the caller closes it).

        A connection that fails before any response arrives (typically a kept-alive
        connection the upstream closed a moment before it was reused) is retried
        once on a fresh one."""
        request = self.client.build_request(
            "POST", self._url(path), json=dict(body), headers=dict(headers)
        )
        try:
            return await self.client.send(request, stream=True)
        except _STALE as exc:
            logger.info("upstream connection failed before a response (%r); retrying once", exc)
            return await self.client.send(request, stream=True)

    async def get(self, path: str, headers: Mapping[str, str]) -> httpx.Response:
        """GET ``path`` with its body unread (the caller reads it capped, and closes it)."""
        request = self.client.build_request("GET", self._url(path), headers=dict(headers))
        return await self.client.send(request, stream=True)

    def _url(self, path: str) -> httpx.URL:
        """``base_url`` + ``path``, parsed once (httpx parses a string on every request)."""
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx.URL(f"{self.base_url}{path}")
        return url


async def read_capped(response: httpx.Response, max_bytes: int) -> bytes:
    """At most ``max_bytes`` of ``response``'s body (an upstream error body, a model list),
    the rest left unread; the response is closed."""
    parts: list[bytes] = []
    size = 0
    try:
        async for part in response.aiter_bytes():
            parts.append(part[: max_bytes - size])
            size += len(parts[-1])
            if size >= max_bytes:
                break
    finally:
        await aclose_response(response)
    return b"".join(parts)


async def aclose_response(response: httpx.Response) -> None:
    """Close ``response`` (its connection, if unread) even inside a cancelled task."""
    with anyio.CancelScope(shield=True):
        await response.aclose()


class UpstreamAnswer:
    """One upstream response and its event iterator (created once, so that what is left
    after ``[DONE]`` is read from the same iterator)."""

    def __init__(
        self,
        response: httpx.Response,
        *,
        max_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        secrets: list[str] | None = None,
    ) -> None:
        self.response = response
        self.events = events(response, max_bytes)
        self.secrets = secrets or []
        """What no failure message may carry (an upstream's error event may echo its key)."""
        self.clean = False  # ``[DONE]`` or the end of the body was reached

    async def close(self) -> None:
        """Close now (a block, a failure): the upstream sees the connection close."""
        with anyio.CancelScope(shield=True):
            await self.events.aclose()
            await self.response.aclose()

    async def interrupt(self) -> None:
        """Close the connection under the answer being read (from another task): the reader
        gets an :class:`UpstreamFailure` (or ``httpx.StreamError``) where it waits."""
        with anyio.CancelScope(shield=True):
            await self.response.aclose()

    async def finish(self, limit_s: float = 1.0) -> None:
        """After a clean end, read the rest of the body (at most 16 events, ``limit_s``
        seconds) so that the connection returns to the pool; then close. Never raises."""
        with anyio.CancelScope(shield=True):
            if self.clean and not self.response.is_closed:
                with anyio.move_on_after(limit_s):
                    try:
                        n = 0
                        async for _ in self.events:
                            n += 1
                            if n > 16:
                                break
                    except UpstreamFailure:
                        pass
            await self.close()


def _body(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body's bytes: raw when the upstream sent them unencoded (no decoder to pass
    through per part), else decoded (gzip, ...) by httpx."""
    encoding = response.headers.get("content-encoding", "")
    if not encoding or encoding.strip().lower() == "identity":
        return response.aiter_raw()
    return response.aiter_bytes()


def _too_large(max_bytes: int) -> UpstreamFailure:
    return UpstreamFailure(
        TOO_LARGE,
        f"the upstream sent more than {max_bytes} bytes for one answer "
        "(the proxy's max_answer_bytes)",
    )


async def _events(response: httpx.Response, max_bytes: int) -> AsyncIterator[Event]:
    """``(event name, data)`` of each server-sent event (comments and ids skipped), the
    data as the bytes it came as (lines split on ``\n``, ``\r\n`` or ``\r``).

    Past ``max_bytes`` in all (one endless line included) the answer is an
    :class:`UpstreamFailure` (``upstream_too_large``), so that an upstream that never
    stops cannot make the proxy hold it whole. One pass, no generator per line: this
    runs for every chunk of every answer."""
    read = 0
    buffer = bytearray()
    data: list[bytes] = []
    event: str | None = None
    async for part in _body(response):
        read += len(part)
        if read > max_bytes:
            raise _too_large(max_bytes)
        buffer += part
        if b"\n" not in part and b"\r" not in part:
            continue  # no line ends here: nothing to scan (a long line stays linear)
        if b"\r" in buffer:
            lines, start = _cr_lines(buffer)
            del buffer[:start]
        else:
            lines = bytes(buffer).split(b"\n")
            buffer = bytearray(lines.pop())
        for line in lines:
            if not line:
                if data:
                    yield event, data[0] if len(data) == 1 else b"\n".join(data)
                data, event = [], None
            elif line.startswith(b"data:"):
                data.append(line[6:] if line.startswith(b"data: ") else line[5:])
            elif line.startswith(b"event:"):
                event = line[6:].decode("utf-8", "replace").strip()
    if buffer:  # a last line without its end
        line = bytes(buffer).rstrip(b"\r")
        if line.startswith(b"data:"):
            data.append(line[6:] if line.startswith(b"data: ") else line[5:])
        elif line.startswith(b"event:"):
            event = line[6:].decode("utf-8", "replace").strip()
    if data:  # the last event without its blank line: as the openai SDK, still read it
        yield event, b"\n".join(data)


def _cr_lines(buffer: bytearray) -> tuple[list[bytes], int]:
    """The complete lines of ``buffer`` when it holds a ``\r`` (``\r\n`` or a lone
    ``\r`` ends a line too), and where the incomplete rest starts."""
    lines: list[bytes] = []
    start = 0
    while (end := _line_end(buffer, start)) >= 0:
        lines.append(bytes(buffer[start:end]))
        start = end + (2 if buffer[end : end + 2] == b"\r\n" else 1)
    return lines, start


def _line_end(buffer: bytearray, start: int) -> int:
    """Where the next line ends (``\n``, ``\r\n`` or ``\r``); -1 if not yet known."""
    n, r = buffer.find(b"\n", start), buffer.find(b"\r", start)
    if r < 0 or (0 <= n < r):
        return n
    if r == len(buffer) - 1:
        return -1  # a \r at the end of what came: \r\n may follow
    return r


async def events(
    response: httpx.Response, max_bytes: int = DEFAULT_MAX_ANSWER_BYTES
) -> AsyncGenerator[Event, None]:
    """The server-sent events of ``response`` (``(event name, data bytes)``); a stall
    (``upstream_timeout``), a broken connection (``upstream_transport``) or too many bytes
    (``upstream_too_large``) is an :class:`UpstreamFailure`."""
    try:
        async for event in _events(response, max_bytes):
            yield event
    except httpx.TimeoutException as exc:
        raise UpstreamFailure(
            "upstream_timeout", f"the upstream sent nothing for {_timeout(response)} s (stalled)"
        ) from exc
    except httpx.TransportError as exc:
        raise UpstreamFailure(
            "upstream_transport", f"the upstream connection failed mid-answer ({exc!r})"
        ) from exc


def decode_chunk(event: str | None, data: bytes | str) -> dict[str, Any] | None:
    """The JSON chunk of one event (its data as bytes or text; bytes that are not UTF-8
    are read with U+FFFD in their place); None for ``[DONE]``. An error event or data
    that is not a JSON object is an :class:`UpstreamFailure`."""
    if data[:6] in (b"[DONE]", "[DONE]"):
        return None
    try:
        chunk = loads(data)  # orjson: decoding is most of what the proxy spends per chunk
    except ValueError as exc:
        raise UpstreamFailure(
            "malformed_chunk", f"the upstream sent a chunk that is not valid JSON ({exc})"
        ) from exc
    if not isinstance(chunk, dict):
        raise UpstreamFailure(
            "malformed_chunk", f"the upstream sent a {type(chunk).__name__}, not a chunk object"
        )
    if event == "error" or chunk.get("error"):
        raise UpstreamFailure("upstream_error", _error_message(chunk))
    return chunk


def _timeout(response: httpx.Response) -> object:
    timeouts = response.request.extensions.get("timeout", {})
    return timeouts.get("read", "?") if isinstance(timeouts, dict) else "?"


def _error_message(chunk: Mapping[str, Any]) -> str:
    error = chunk.get("error")
    message = error.get("message") if isinstance(error, Mapping) else error
    return f"the upstream sent an error event: {message or 'no message'}"
