"""The upstream side: one shared aiohttp client session and a server-sent-events decoder.

aiohttp's client parses the upstream's HTTP in C (headers, chunked framing) and hands
a response body on as the parts that have arrived, so that a burst of chunks costs
one pass of the layers above per network read, not one per chunk; its connector gives
each waiting request a connection of its own. Every upstream failure the proxy must
not certify through is an :class:`UpstreamFailure` with a ``kind``:
``upstream_timeout`` (no bytes for ``timeout`` seconds: a stalled server),
``upstream_transport`` (the connection broke), ``upstream_error`` (an in-stream error
event) or ``malformed_chunk`` (data that is not a JSON object). Before a response, a
request fails with one of :data:`UPSTREAM_ERRORS` (:func:`is_timeout` tells a timeout).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Mapping
from typing import Any

import aiohttp
import anyio
from yarl import URL

from .._serving._prepare import DEFAULT_MAX_ANSWER_BYTES, TOO_LARGE
from .._serving._wire import loads
from ._body import body_parts, read_capped

__all__ = [
    "UPSTREAM_ERRORS",
    "Upstream",
    "UpstreamAnswer",
    "UpstreamFailure",
    "body_parts",
    "decode_chunk",
    "describe_failure",
    "encode_json",
    "event_batches",
    "events",
    "is_timeout",
    "read_capped",
]


logger = logging.getLogger(__name__)

Event = tuple[str | None, bytes]
"""One server-sent event: its ``event:`` name (None if unnamed) and its data."""

UPSTREAM_ERRORS = (aiohttp.ClientError, TimeoutError, asyncio.TimeoutError)
"""What a request to the upstream raises when it gets no response (unreachable, timed
out, the connection broke)."""
_STALE = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)
"""Connection failures before any response byte: safe to retry once."""
KEEPALIVE_S = 5.0
"""How long an idle upstream connection is kept for the next request."""

MAX_SIDE_BODY_BYTES = 1024 * 1024
"""Most bytes read of an upstream body that is not an answer: an error body, a model list."""


_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def encode_json(body: Mapping[str, Any]) -> bytes:
    """``body`` as the upstream gets it: compact JSON in UTF-8, no ``NaN`` (``ValueError``).
    The same bytes as one ``json.dumps`` of the whole, made of pieces (each field, each item
    of a list such as the messages), so that a thread that encodes a large body lets go of
    the GIL between pieces: one call for a 4 MiB body holds it for tens of milliseconds.

    >>> encode_json({"model": "m", "messages": [{"role": "user", "content": "é"}], "n": 1}).decode()
    '{"model":"m","messages":[{"role":"user","content":"é"}],"n":1}'
    """
    if type(body) is not dict or not all(type(key) is str for key in body):
        return _encode(body).encode("utf-8")
    fields = []
    for key, value in body.items():
        if type(value) is list:
            text = "[" + ",".join([_encode(item) for item in value]) + "]"
        else:
            text = _encode(value)
        fields.append(f"{_encode(key)}:{text}")
    return ("{" + ",".join(fields) + "}").encode("utf-8")


def is_timeout(exc: BaseException) -> bool:
    """``exc`` (one of :data:`UPSTREAM_ERRORS`) is a timeout, not a broken connection."""
    return isinstance(exc, (TimeoutError, asyncio.TimeoutError))


def describe_failure(exc: BaseException) -> str:
    """What a client or a log line may read of an upstream request that failed: how, and the
    exception's class, never its text (aiohttp's text of a response it could not parse holds
    the request it answered, headers and key included).

    >>> describe_failure(aiohttp.ServerDisconnectedError())
    'the upstream closed the connection (ServerDisconnectedError)'
    """
    if is_timeout(exc):
        how = "timed out"
    elif isinstance(exc, aiohttp.ClientConnectorError):
        how = "could not be reached"
    elif isinstance(exc, aiohttp.ServerDisconnectedError):
        how = "closed the connection"
    elif isinstance(exc, aiohttp.ClientResponseError | aiohttp.ClientPayloadError):
        how = "sent a response that could not be read"
    else:
        how = "failed"
    return f"the upstream {how} ({type(exc).__name__})"


class UpstreamFailure(Exception):
    """The upstream stream failed; ``kind`` names how (see the module docstring)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Upstream:
    """The upstream API at ``base_url`` (``.../v1``); :meth:`start` in the server's loop.

    Credentials in ``base_url`` (``http://user:password@host/v1``) are sent as basic
    auth, in place of any other ``authorization``; no cookie is kept between requests
    (they come from different clients), and no redirect is followed (a 3xx is the
    upstream's answer, relayed as an upstream status)."""

    def __init__(self, base_url: str, *, timeout_s: float, max_connections: int) -> None:
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        url = URL(base_url)
        self._auth: str | None = None
        if url.user is not None or url.password is not None:
            pair = f"{url.user or ''}:{url.password or ''}".encode()
            self._auth = f"Basic {base64.b64encode(pair).decode('ascii')}"
            url = url.with_user(None)
        self._base = str(url)
        self._session: aiohttp.ClientSession | None = None
        self._urls: dict[str, URL] = {}

    async def start(self) -> None:
        if self._session is None:
            t = self.timeout_s
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self.max_connections, limit_per_host=0, keepalive_timeout=KEEPALIVE_S
                ),
                timeout=aiohttp.ClientTimeout(total=None, connect=t, sock_connect=t, sock_read=t),
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
            )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("the upstream client is not started (run the app's lifespan)")
        return self._session

    async def open_stream(
        self, path: str, body: Mapping[str, Any] | bytes, headers: Mapping[str, str]
    ) -> aiohttp.ClientResponse:
        """POST ``body`` as JSON (or ``body`` as it is, already encoded by
        :func:`encode_json`) and return the response with its body unread (the caller
        closes it).

        A connection that fails before any response arrives (typically a kept-alive
        connection the upstream closed a moment before it was reused) is retried
        once on a fresh one."""
        raw = body if isinstance(body, bytes) else encode_json(body)
        sent = {**self._headers(headers), "content-type": "application/json"}
        url = self._url(path)
        try:
            return await self.session.post(url, data=raw, headers=sent, allow_redirects=False)
        except _STALE as exc:
            logger.info("%s before a response; retrying once", describe_failure(exc))
            return await self.session.post(url, data=raw, headers=sent, allow_redirects=False)

    async def get(self, path: str, headers: Mapping[str, str]) -> aiohttp.ClientResponse:
        """GET ``path`` with its body unread (the caller reads it capped, and closes it)."""
        return await self.session.get(
            self._url(path), headers=self._headers(headers), allow_redirects=False
        )

    def _headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        if self._auth is None:
            return dict(headers)
        out = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        out["authorization"] = self._auth
        return out

    def _url(self, path: str) -> URL:
        """``base_url`` + ``path``, parsed once."""
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = URL(f"{self._base}{path}")
        return url


class UpstreamAnswer:
    """One upstream response and its event iterator (created once, so that what is left
    after ``[DONE]`` is read from the same iterator)."""

    def __init__(
        self,
        response: aiohttp.ClientResponse,
        *,
        max_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        secrets: list[str] | Callable[[], list[str]] | None = None,
        timeout_s: float | None = None,
    ) -> None:
        """``secrets``: the list of :attr:`secrets`, or what makes it (called when a failure
        message needs it: most answers never do)."""
        self.response = response
        self._body = body_parts(response, timeout_s)
        self.batches = event_batches(self._body, max_bytes, timeout_s)
        """The events, a list per network read (:func:`event_batches`)."""
        self._secrets = secrets
        self.clean = False  # ``[DONE]`` or the end of the body was reached
        self._closed = False

    @property
    def secrets(self) -> list[str]:
        """What no failure message may carry (an upstream's error event may echo its key)."""
        if callable(self._secrets):
            self._secrets = self._secrets()
        return self._secrets or []

    async def close(self) -> None:
        """Close now (a block, a failure): the upstream sees the connection close (unless
        the body was read to its end: the connection then went back to the pool). Once:
        a later call returns at once (an answer's :meth:`finish` runs twice, after its
        stream and as the response's background task)."""
        if self._closed:
            return
        with anyio.CancelScope(shield=True):
            await self.batches.aclose()
            await self._body.aclose()  # (else the collector finalizes it: a task per answer)
            self.response.close()
        self._closed = True

    @property
    def events(self) -> AsyncGenerator[Event, None]:
        """The events one by one (of :attr:`batches`)."""
        return _each(self.batches)

    async def interrupt(self) -> None:
        """Close the connection under the answer being read (from another task): the reader
        gets an :class:`UpstreamFailure` where it waits."""
        self.response.close()

    async def finish(self, limit_s: float = 1.0) -> None:
        """After a clean end, read the rest of the body (at most 16 events, ``limit_s``
        seconds) so that the connection returns to the pool; then close. Never raises."""
        if not self.clean or self.response.closed:  # nothing to read (or closed already)
            await self.close()
            return
        with anyio.CancelScope(shield=True):
            if self.clean and not self.response.closed:
                with anyio.move_on_after(limit_s):
                    try:
                        n = 0
                        async for batch in self.batches:
                            n += len(batch)
                            if n > 16:
                                break
                    except UpstreamFailure:
                        pass
            await self.close()


def _too_large(max_bytes: int) -> UpstreamFailure:
    return UpstreamFailure(
        TOO_LARGE,
        f"the upstream sent more than {max_bytes} bytes for one answer "
        "(the proxy's max_answer_bytes)",
    )


def events(
    body: AsyncIterable[bytes], max_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    timeout_s: float | None = None,
) -> AsyncGenerator[Event, None]:  # fmt: skip
    """The server-sent events of a response ``body`` one by one (:func:`event_batches`)."""
    return _each(event_batches(body, max_bytes, timeout_s))


async def _each(batches: AsyncGenerator[list[Event], None]) -> AsyncGenerator[Event, None]:
    async for batch in batches:
        for event in batch:
            yield event


async def event_batches(
    body: AsyncIterable[bytes],
    max_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    timeout_s: float | None = None,
) -> AsyncGenerator[list[Event], None]:
    """The server-sent events of a response ``body`` (its parts as they arrive, decoded), a
    list per part (a burst read at once is one list, its chunks then one write): ``(event
    name, data bytes)``, comments and ids skipped, the data as the bytes it came as (lines
    split on ``\n``, ``\r\n`` or ``\r``). A stall (``upstream_timeout``, after
    ``timeout_s``), a broken connection (``upstream_transport``) or more than ``max_bytes``
    in all, one endless line included (``upstream_too_large``, so that an upstream that
    never stops cannot make the proxy hold it whole) is an :class:`UpstreamFailure`. One
    pass, no generator per line: this runs for every chunk of every answer."""
    try:
        read = 0
        buffer = bytearray()
        data: list[bytes] = []
        event: str | None = None
        async for part in body:
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
            ready: list[Event] = []
            for line in lines:
                if not line:
                    if data:
                        ready.append((event, data[0] if len(data) == 1 else b"\n".join(data)))
                    data, event = [], None
                elif line.startswith(b"data:"):
                    data.append(line[6:] if line.startswith(b"data: ") else line[5:])
                elif line.startswith(b"event:"):
                    event = line[6:].decode("utf-8", "replace").strip()
            if ready:
                yield ready
        if buffer:  # a last line without its end
            line = bytes(buffer).rstrip(b"\r")
            if line.startswith(b"data:"):
                data.append(line[6:] if line.startswith(b"data: ") else line[5:])
            elif line.startswith(b"event:"):
                event = line[6:].decode("utf-8", "replace").strip()
        if data:  # the last event without its blank line: as the openai SDK, still read it
            yield [(event, b"\n".join(data))]
    except (TimeoutError, asyncio.TimeoutError) as exc:
        after = "?" if timeout_s is None else timeout_s
        raise UpstreamFailure(
            "upstream_timeout", f"the upstream sent nothing for {after} s (stalled)"
        ) from exc
    except aiohttp.ClientError as exc:
        raise UpstreamFailure("upstream_transport", f"{describe_failure(exc)} mid-answer") from exc


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


def _error_message(chunk: Mapping[str, Any]) -> str:
    error = chunk.get("error")
    message = error.get("message") if isinstance(error, Mapping) else error
    return f"the upstream sent an error event: {message or 'no message'}"
