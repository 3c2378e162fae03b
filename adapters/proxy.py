"""The guard proxy: an OpenAI-compatible server that guards every answer it relays.

``pip install "liftguard[serve]"`` (starlette, uvicorn, httpx, prometheus-client);
``liftguard serve`` runs it from the command line. Point a client's ``base_url``
at the proxy instead of the model server::

    from adapters.proxy import ProxyConfig, certificate_source, create_app, serve

    config = ProxyConfig(
        upstream="http://127.0.0.1:8000/v1",
        certificate=certificate_source("cert.json"),  # or "s3://bucket/store#chat@production"
        mode="buffered",
        record_dir="traces/",
    )
    serve(config, host="127.0.0.1", port=8080)  # or: uvicorn with create_app(config)

Each request is forwarded with ``stream=True``, ``logprobs=True`` and the
alternatives the certificate needs, with the certificate's generation context
filled in where the client left a setting unset; every answer goes through the
same stream rules as the adapters (an answer is certified only after the
upstream's documented finish). The wire shapes (the error event, the
``liftguard`` verdict field and headers) are documented in
:mod:`adapters._proxy._wire`; the metrics in :mod:`adapters._proxy._metrics`;
the recorded trace lines in :mod:`adapters._proxy._recording`.

Recorded answers are labelled with ``liftguard traces label`` (by reference answers,
or by an LLM judge, :class:`adapters.Judge`, which needs only httpx).
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Callable, Iterator

INSTALL_HINT = 'the guard proxy needs its server stack: pip install "liftguard[serve]"'

try:
    from ._proxy._app import Proxy, create_app
    from ._proxy._certs import (
        CertificateSource,
        FileCertificate,
        StaticCertificate,
        StoreCertificate,
        certificate_source,
    )
    from ._proxy._config import DEFAULT_REFUSAL, ProxyConfig
    from ._proxy._wire import BLOCKED_TYPE, UPSTREAM_TYPE, VERDICT_FIELD, redact_url
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    if exc.name in ("starlette", "uvicorn", "httpx", "prometheus_client", "anyio", "pydantic"):
        raise ImportError(INSTALL_HINT) from exc
    raise

__all__ = [
    "BLOCKED_TYPE",
    "DEFAULT_REFUSAL",
    "INSTALL_HINT",
    "UPSTREAM_TYPE",
    "VERDICT_FIELD",
    "CertificateSource",
    "FileCertificate",
    "Proxy",
    "ProxyConfig",
    "StaticCertificate",
    "StoreCertificate",
    "certificate_source",
    "create_app",
    "redact_url",
    "serve",
]


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
