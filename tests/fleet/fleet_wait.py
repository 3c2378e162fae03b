"""Waiting for what a replica writes to Redis off the request path (an answer's in-flight
mark, its record): ask again until the reply says it is there, for at most
:data:`PATIENCE_S`. The bound is for a stalled machine, never a measurement: a run returns
as soon as the condition holds, however slow or loaded the machine is within it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

PATIENCE_S = 120.0


async def until(
    ask: Callable[[], Awaitable[T]], done: Callable[[T], bool], patience: float = PATIENCE_S
) -> list[T]:
    """Every reply of ``ask()`` until ``done(reply)`` holds (the last one) or ``patience``
    seconds have passed (the last one then fails ``done``)."""
    deadline = time.monotonic() + patience
    replies = [await ask()]
    while not done(replies[-1]) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
        replies.append(await ask())
    return replies
