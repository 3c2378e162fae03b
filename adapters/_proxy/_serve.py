"""Running the proxy with uvicorn: :func:`adapters.proxy.serve`."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._config import ProxyConfig

__all__ = ["INSTALL_HINT", "serve"]

INSTALL_HINT = 'the guard proxy needs its server stack: pip install "liftguard[serve]"'


def serve(
    config: ProxyConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    log_level: str = "warning",
    on_listen: Callable[[str], None] | None = None,
) -> None:
    """Run the proxy with uvicorn until SIGINT/SIGTERM, which end it cleanly (answers in
    flight finish, the recorder writes what is queued) and make this function return
    (uvicorn would re-raise the signal; here it is consumed).

    The socket is bound first (``port=0``: a free port); ``on_listen`` then gets
    the base URL clients use (``http://host:port/v1``)."""
    try:
        import uvicorn
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    from ._app import create_app

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
        bound = sock.getsockname()[1]
        if on_listen is not None:
            shown = f"[{host}]" if family == socket.AF_INET6 else host
            on_listen(f"http://{shown}:{bound}/v1")
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(config),
                log_level=log_level,
                timeout_graceful_shutdown=30,
                backlog=2048,
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
