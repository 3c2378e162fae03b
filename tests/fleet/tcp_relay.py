"""A TCP relay in front of a Redis server, in a thread of its own: it delays every chunk
by ``delay_s`` each way (a far-away server: a round trip of ``2 * delay_s`` more), and
:meth:`Relay.switch` points it at another server and cuts the open connections (a
failover behind one address)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

__all__ = ["Relay"]


class Relay:
    def __init__(self, target_port: int, *, delay_s: float = 0.0) -> None:
        self.target_port, self.delay_s = target_port, delay_s
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Relay:
        self._thread.start()
        self._ready.wait(30)
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = int(server.sockets[0].getsockname()[1])
        self._ready.set()
        self._loop.run_forever()
        server.close()
        tasks = asyncio.all_tasks(self._loop)
        for task in tasks:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )
        for w in (writer, up_writer):
            self._writers.discard(w)
            w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await chunks.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    writer.close()
                    return
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(send())
        try:
            while True:
                data = await reader.read(65536)
                chunks.put_nowait((loop.time() + self.delay_s, data))
                if not data:
                    break
            await sender
        finally:
            sender.cancel()

    def switch(self, target_port: int) -> None:
        """Relay new connections to ``target_port`` and cut the open ones."""

        def cut() -> None:
            self.target_port = target_port
            for w in list(self._writers):
                w.close()

        self._call(cut)

    def _call(self, fn: Any) -> None:
        done = threading.Event()

        def run() -> None:
            fn()
            done.set()

        self._loop.call_soon_threadsafe(run)
        done.wait(30)

    def close(self) -> None:
        self._call(lambda: [w.close() for w in list(self._writers)])
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
