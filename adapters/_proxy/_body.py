"""Reading an upstream response's body: its parts as they arrive, each read ended after a
stall (aiohttp's read timeout misses a body whose framing broke mid-way), and a capped
read for bodies that are not answers (an error body, a model list)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import aiohttp

__all__ = ["body_parts", "read_capped"]


async def body_parts(
    response: aiohttp.ClientResponse, timeout_s: float | None
) -> AsyncGenerator[bytes, None]:
    """The parts of ``response``'s body (decoded) as they arrive, each waited for at most
    ``timeout_s`` seconds (``TimeoutError``). aiohttp's own read timeout does not cover a
    body whose framing broke after some of it was read (its C parser stops, and the read
    would wait for ever): this one does."""
    content = response.content
    if timeout_s is None:
        while part := await content.readany():
            yield part
        return
    watch = _StallWatch(content, timeout_s)
    now = watch.loop.time
    try:
        while True:
            watch.reading(now())
            part = await content.readany()
            watch.since = None
            if not part:
                return
            yield part
    finally:
        watch.close()


class _StallWatch:
    """Ends a read of ``content`` that has waited ``timeout_s`` seconds, with
    ``TimeoutError``. One timer at a time, armed for the read that finds none and moved to
    the read then waiting if it fires after a later read began, so that a read costs a
    clock reading, not a timer set up and torn down (reads come at the upstream's pace,
    one per token). A timer that fires while no read waits lapses (the next read arms
    another): a body left unread keeps none."""

    __slots__ = ("_armed", "_content", "_handle", "_timeout", "loop", "since")

    def __init__(self, content: aiohttp.StreamReader, timeout_s: float) -> None:
        self._content, self._timeout = content, timeout_s
        self.loop = asyncio.get_running_loop()
        self.since: float | None = None
        """When the read now waiting began (the loop's clock); None: no read waits."""
        self._armed = 0.0  # the start of the read the timer was set for
        self._handle: asyncio.TimerHandle | None = None

    def reading(self, now: float) -> None:
        self.since = now
        if self._handle is None:
            self._arm(now)

    def _arm(self, since: float) -> None:
        self._armed = since
        self._handle = self.loop.call_at(since + self._timeout, self._fire)

    def _fire(self) -> None:
        self._handle = None
        since = self.since
        if since is None:
            return
        if since == self._armed:  # the read it was set for still waits: stalled
            self._content.set_exception(TimeoutError(f"no bytes for {self._timeout} s"))
        else:
            self._arm(since)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


async def read_capped(
    response: aiohttp.ClientResponse, max_bytes: int, timeout_s: float | None
) -> bytes:
    """At most ``max_bytes`` of ``response``'s body (an upstream error body, a model list),
    the rest left unread; the response is closed."""
    parts: list[bytes] = []
    size = 0
    body = body_parts(response, timeout_s)
    try:
        async for part in body:
            parts.append(part[: max_bytes - size])
            size += len(parts[-1])
            if size >= max_bytes:
                break
    finally:
        await body.aclose()
        response.close()
    return b"".join(parts)
