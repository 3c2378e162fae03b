"""Running the proxy with uvicorn: :func:`adapters.proxy.serve`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._config import ProxyConfig

__all__ = ["DRAIN_MARGIN_S", "INSTALL_HINT", "SHUTDOWN_GRACE_S", "serve"]

INSTALL_HINT = 'the guard proxy needs its server stack: pip install "liftguard[serve]"'
SHUTDOWN_GRACE_S = 30.0
"""How long a shutdown waits for the answers in flight (uvicorn's graceful shutdown)."""
DRAIN_MARGIN_S = 2.0
"""How long before the grace runs out the answers still in flight are ended, each with the
error event of an answer that did not end (``proxy_shutdown``), so that none is cut off."""


def serve(
    config: ProxyConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    log_level: str = "warning",
    on_listen: Callable[[str], None] | None = None,
    shutdown_grace_s: float = SHUTDOWN_GRACE_S,
) -> None:
    """Run the proxy with uvicorn until SIGINT/SIGTERM, which end it cleanly (answers in
    flight finish, the recorder writes what is queued) and make this function return
    (uvicorn would re-raise the signal; here it is consumed).

    The socket is bound first (``port=0``: a free port); ``on_listen`` then gets
    the base URL clients use (``http://host:port/v1``). A shutdown waits
    ``shutdown_grace_s`` for the answers in flight; :data:`DRAIN_MARGIN_S` before that
    runs out, those still running are ended with an error event (``proxy_shutdown``) and
    their upstream requests closed."""
    try:
        import uvicorn
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    from ._app import create_app

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets whose protocol says
    # TCP, and without it a kept-alive connection's response waits on Nagle's algorithm for
    # the client's delayed ACK (40 ms) between its head and its body
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
        bound = sock.getsockname()[1]
        if on_listen is not None:
            shown = f"[{host}]" if family == socket.AF_INET6 else host
            on_listen(f"http://{shown}:{bound}/v1")
        app = create_app(config)

        class DrainingServer(uvicorn.Server):
            """uvicorn's server, which ends the answers still in flight before its graceful
            shutdown runs out (it would cancel them: a stream cut off, a traceback each)."""

            async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
                loop = asyncio.get_running_loop()
                drains: set[asyncio.Task[int]] = set()

                def drain() -> None:
                    drains.add(loop.create_task(app.state.proxy.relay.drain()))

                timer = loop.call_later(max(shutdown_grace_s - DRAIN_MARGIN_S, 0.0), drain)
                try:
                    await super().shutdown(sockets)
                finally:
                    timer.cancel()

        # uvicorn builds each response's access-log line (the client's address, the path
        # quoted) before its logger drops it: at a level above INFO, no access log at all
        level = uvicorn.config.LOG_LEVELS.get(log_level.lower(), logging.INFO)
        server = DrainingServer(
            uvicorn.Config(
                app,
                log_level=log_level,
                timeout_graceful_shutdown=math.ceil(shutdown_grace_s),
                backlog=2048,
                access_log=level <= logging.INFO,
            )
        )
        with _signals_consumed():
            server.run(sockets=[sock])
    finally:
        sock.close()


@contextlib.contextmanager
def _signals_consumed() -> Iterator[None]:
    """SIGINT/SIGTERM handlers that do nothing, for uvicorn to restore and re-raise into
    after its graceful shutdown (only the main thread can set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handled = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in handled}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
