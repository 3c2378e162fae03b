"""A replica that is told to close stops reading the fleet's record, whenever the close comes.

The close cancels the refresh loop. A cancellation that lands after a Redis reply arrived
but before the waiting call resumed is dropped by ``asyncio.wait_for`` on Python before
3.12 (it returns the reply instead): the loop then went on reading every second and the
close waited for it forever, so a ``liftguard serve --redis`` replica sent SIGINT never
exited. The test lands the close in exactly that gap, on a real Valkey server: the task
of the refresh's read gets a done-callback (from the loop's task factory, registered
before ``wait_for``'s own) that starts the close, so the cancellation arrives while the
reply is in hand and the loop has not resumed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine, Generator
from typing import Any

from fleet_wait import until
from test_fleet_watch import replica
from valkey_process import ValkeyProcess


async def test_a_close_that_lands_as_a_read_returns_still_ends_the_refresh_loop(
    valkey: ValkeyProcess,
) -> None:
    watch = replica(valkey.url, uuid.uuid4().hex)
    loop = asyncio.get_running_loop()
    closing: list[asyncio.Task[None]] = []
    before = loop.get_task_factory()

    def task(
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any],
        **kwargs: Any,
    ) -> asyncio.Task[Any]:
        made = asyncio.Task(coro, loop=loop, **kwargs)
        if getattr(coro, "__qualname__", "") == "FleetStore.read" and not closing:
            made.add_done_callback(lambda _: closing.append(loop.create_task(watch.aclose())))
        return made

    loop.set_task_factory(task)
    try:
        await watch.start()
        ended = await until(lambda: asyncio.sleep(0, bool(closing) and closing[0].done()), bool)
    finally:
        loop.set_task_factory(before)
    assert ended[-1], "the refresh loop went on after the close"
    assert closing[0].exception() is None
