"""The streamed answer's HTTP response: Starlette's :class:`StreamingResponse`, with the
client's disconnect watched by one plain task instead of a task group per answer.

Starlette streams the body in a child task of an anyio task group and waits for the
disconnect in the request's own task; when the body ends it cancels the group's scope,
and anyio's cancel formats the current task's repr (its coroutine, its callbacks) for the
reason it records. That costs about as much as the rest of a short answer's response. Here
the body is written in the request's task, inside a cancel scope that a watcher task
cancels if the client disconnects first (what the group's scope did: the body's shielded
clean-up still runs to its end); when the body ends, the watcher task is cancelled, a plain
asyncio cancel. Same headers, same bytes, same background task after the body.
"""

from __future__ import annotations

import asyncio

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

__all__ = ["EventStream"]


class EventStream(StreamingResponse):
    """A :class:`StreamingResponse` whose body stops when the client disconnects (ASGI
    servers before spec 2.4, which tell a disconnect only by ``receive``: uvicorn's), without
    a task group; later servers, and websockets, get Starlette's own handling."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        spec = scope.get("asgi", {}).get("spec_version", "2.0")
        if scope["type"] != "http" or tuple(map(int, spec.split("."))) >= (2, 4):
            await super().__call__(scope, receive, send)
            return
        body = anyio.CancelScope()

        async def watch() -> None:
            await self.listen_for_disconnect(receive)
            body.cancel()

        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            with body:
                await self.stream_response(send)
        finally:
            watcher.cancel()
        if self.background is not None:
            await self.background()
