"""The guard proxy: an OpenAI-compatible server that guards every answer it relays.

``pip install "liftguard[serve]"`` (starlette, uvicorn with httptools and uvloop, aiohttp,
prometheus-client);
``liftguard serve`` runs it from the command line. Point a client's ``base_url``
at the proxy instead of the model server::

    from adapters.proxy import ProxyConfig, Recording, certificate_source, create_app, serve

    config = ProxyConfig(
        upstream="http://127.0.0.1:8000/v1",
        certificate=certificate_source("cert.json"),  # or "s3://bucket/store#chat@production"
        mode="buffered",
        recording=Recording("traces/"),
    )
    serve(config, host="127.0.0.1", port=8080)  # or: uvicorn with create_app(config)

The settings come in small groups, each validated on its own: :class:`Limits` (what a
request or an answer may take), :class:`Recording` (where every guarded answer is
written) and :class:`FleetSettings` (the Redis or Valkey server that replicas share). A
host that serves answers itself runs a fleet replica in its own process
(:meth:`FleetSettings.replica`), handing it a :class:`FinishedAnswer` per answer.

Each request is forwarded with ``stream=True``, ``logprobs=True`` and the
alternatives the certificate needs, with the certificate's generation context
filled in where the client left a setting unset; every answer goes through the
same stream rules as the adapters (an answer is certified only after the
upstream's documented finish). The wire shapes (the error event, the
``liftguard`` verdict field and headers) are documented in
:mod:`adapters._serving._wire`; the metrics in :mod:`adapters._serving._metrics`;
the recorded trace lines in :mod:`adapters._proxy._recording`.

Recorded answers are labelled with ``liftguard traces label`` (by reference answers,
or by an LLM judge, :class:`adapters.Judge`, which needs only httpx).
"""

from __future__ import annotations

from ._proxy._serve import INSTALL_HINT as _INSTALL_HINT
from ._proxy._serve import serve

try:
    from ._proxy._app import create_app
    from ._proxy._config import FleetSettings, Limits, ProxyConfig, Recording
    from ._risk._risk_watch import FinishedAnswer
    from ._serving._certs import StaticCertificate, certificate_source
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    if exc.name in ("starlette", "uvicorn", "aiohttp", "prometheus_client", "anyio", "pydantic"):
        raise ImportError(_INSTALL_HINT) from exc
    raise

__all__ = [
    "FinishedAnswer",
    "FleetSettings",
    "Limits",
    "ProxyConfig",
    "Recording",
    "StaticCertificate",
    "certificate_source",
    "create_app",
    "serve",
]
