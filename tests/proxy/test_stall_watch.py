"""The stall timer of an upstream body: a read that waits ``timeout_s`` ends with
``TimeoutError``; one that was answered in time never does, however many reads follow.

The timer is fired by hand here (never by waiting), on aiohttp's real stream reader, so
that each case is decided by the order of events alone. That a stalled upstream ends its
answer through the proxy is ``stall`` in ``tests/stream_shapes.py``.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.client_proto import ResponseHandler

from adapters._proxy._body import _StallWatch


@pytest.fixture
async def content() -> AsyncIterator[aiohttp.StreamReader]:
    """aiohttp's stream reader on a connected protocol (one end of a socket pair)."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    protocol = ResponseHandler(loop)
    transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock=ours)
    try:
        yield aiohttp.StreamReader(protocol, 2**16, loop=loop)
    finally:
        transport.close()
        theirs.close()


async def test_a_read_still_waiting_when_its_timer_fires_ends_with_timeout(
    content: aiohttp.StreamReader,
) -> None:
    watch = _StallWatch(content, 30.0)
    read = asyncio.ensure_future(content.readany())
    watch.reading(watch.loop.time())
    await asyncio.sleep(0)
    watch._fire()
    with pytest.raises(TimeoutError, match=r"no bytes for 30\.0 s"):
        await read


async def test_a_timer_set_for_an_answered_read_moves_to_the_read_now_waiting(
    content: aiohttp.StreamReader,
) -> None:
    watch = _StallWatch(content, 30.0)
    watch.reading(100.0)  # armed for this read, which is answered
    watch.since = None
    watch.reading(101.0)  # a later read, the timer still set for the first
    watch._fire()
    assert content.exception() is None
    assert watch._handle is not None and watch._armed == 101.0
    content.feed_data(b"data: {}\n\n")
    assert await content.readany() == b"data: {}\n\n"
    watch.close()
    assert watch._handle is None


async def test_a_timer_that_fires_between_reads_lapses(content: aiohttp.StreamReader) -> None:
    watch = _StallWatch(content, 30.0)
    watch.reading(watch.loop.time())
    watch.since = None  # answered; the consumer is busy with the part
    watch._fire()
    assert watch._handle is None and content.exception() is None
    watch.reading(watch.loop.time())  # the next read arms a timer of its own
    assert watch._handle is not None
    watch.close()


async def test_reads_answered_at_once_set_one_timer_not_one_each(
    content: aiohttp.StreamReader,
) -> None:
    watch = _StallWatch(content, 30.0)
    handles = set()
    for n in range(100):
        watch.reading(watch.loop.time())
        handles.add(id(watch._handle))
        content.feed_data(b"%d" % n)
        assert await content.readany() == b"%d" % n
        watch.since = None
    assert len(handles) == 1
    watch.close()
