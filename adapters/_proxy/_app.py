"""The starlette application: routes and lifecycle.

Routes: ``POST /v1/chat/completions`` (guarded; each answer then runs in the
:class:`~adapters._proxy._relay_loop.RelayLoop`), ``GET /v1/models`` (passed
through), ``POST /v1/liftguard/feedback`` (labels for the risk monitors,
:mod:`~adapters._risk._feedback`), ``GET /healthz``, ``GET /metrics``
(Prometheus). The app's lifespan starts the upstream client, the recorder thread
and the certificate refresh loop, and stops them in reverse order (the recorder
writes what is queued).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .._guard._settings import mismatch_kind
from .._risk._feedback import FEEDBACK_PATH
from .._serving._certs import CertificateSource, CertificateTable
from .._serving._metrics import ProxyMetrics
from .._serving._prepare import check_upstream, context_refusal
from .._serving._redact import credential_forms, redact_secrets, relayed_headers
from .._serving._request import BadRequest, off_loop, parse_chat, read_body
from .._serving._wire import (
    HEADER_CERTIFICATE,
    HEADER_MODE,
    HEADER_REQUEST_ID,
    UPSTREAM_TYPE,
    error_response,
    header_value,
    redact_url,
)
from ._answer import ProxyAnswer
from ._auth import Auth
from ._config import ProxyConfig
from ._event_stream import EventStream
from ._feedback import ProxyRiskWatch
from ._prepared import prepare
from ._recording import Recorder, open_recorder
from ._relay_loop import RelayLoop
from ._replies import upstream_status_response
from ._upstream import (
    MAX_SIDE_BODY_BYTES,
    UPSTREAM_ERRORS,
    Upstream,
    UpstreamAnswer,
    describe_failure,
    encode_json,
    is_timeout,
    read_capped,
)

__all__ = ["Proxy", "create_app"]


class Proxy:
    """The state of one proxy: configuration, upstream client, metrics, recorder.

    Examples
    --------
        >>> from prometheus_client import CollectorRegistry
        >>> from guardrail import Certificate, ModelIdentity, SkeletonSpec, StreamPolicy
        >>> cert = Certificate(StreamPolicy(), tau=2.0, model=ModelIdentity("my-model"),
        ...                    skeleton=SkeletonSpec("uniform", {"vocab_size": 1000}))
        >>> config = ProxyConfig(upstream="http://127.0.0.1:8000/v1",
        ...                      certificate=StaticCertificate(cert))
        >>> proxy = Proxy(config, registry=CollectorRegistry())
        >>> proxy.config.mode
        'buffered'
    """

    def __init__(self, config: ProxyConfig, *, registry: CollectorRegistry | None = None) -> None:
        self.config = config
        self.metrics = ProxyMetrics(registry)
        self.auth = Auth(client_key=config.client_key, upstream_key=config.upstream_key)
        limits, recording = config.limits, config.recording
        self.upstream = Upstream(
            config.upstream,
            timeout_s=limits.upstream_timeout_s,
            max_connections=limits.max_upstream_connections,
        )
        self.recorder: Recorder | None = None
        if recording is not None:
            self.recorder = open_recorder(
                recording.destination,
                metrics=self.metrics,
                dataset=recording.dataset,
                fmt=recording.format,
                max_bytes=recording.max_bytes,
                max_age_s=recording.max_age_s,
                queue_size=recording.queue,
                storage_options=recording.storage_options,
                spool=recording.spool,
            )
        entries: dict[str, CertificateSource] = dict(config.model_certificates)
        if config.certificate is not None:
            entries["*"] = config.certificate
        for source in entries.values():  # a rule the upstream cannot feed: refused now
            check_upstream(source.current()[0], config.top_logprobs)
        self.certificates = CertificateTable(entries, self.metrics)
        self.risk = ProxyRiskWatch(config, self.certificates.sources, self.metrics)
        self.relay = RelayLoop(config, self.metrics, self.recorder, self.risk)

    # -- lifecycle -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.upstream.start()
        await self.risk.start()
        if self.recorder is not None:
            self.recorder.start()
        self.certificates.publish()
        task = None
        if self.config.refresh_interval_s > 0 and self.certificates.refreshable:
            task = asyncio.create_task(self._refresh_loop(self.config.refresh_interval_s))
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.upstream.aclose()
            await self.risk.aclose()
            if self.recorder is not None:
                await asyncio.to_thread(self.recorder.close)

    async def _refresh_loop(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            await self.refresh_certificates()

    async def refresh_certificates(self) -> dict[str, bool]:
        """Re-read every store alias now; ``{model entry: changed}`` (see
        :meth:`CertificateTable.refresh`); an entry whose certificate changed gets a new
        risk monitor."""
        changed = await self.certificates.refresh()
        self.risk.sync()
        return changed

    # -- simple endpoints ------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        rec, recording = self.recorder, self.config.recording
        shown = None if rec is None or recording is None else rec.health(recording.destination)
        return JSONResponse(
            {
                "status": "ok",
                "mode": self.config.mode,
                "upstream": redact_url(self.config.upstream),
                "certificates": self.certificates.labels(),
                "risk": await self.risk.health(),
                "recording": shown,
            }
        )

    async def metrics_endpoint(self, request: Request) -> Response:
        """Prometheus metrics; with a client key, only for requests that send it (a
        scraper's ``authorization: Bearer ...``): the counters tell the traffic's shape.
        With a fleet store, the monitors replay the fleet's labels first."""
        await self.risk.refresh()
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def feedback(self, request: Request) -> Response:
        """``POST /v1/liftguard/feedback``: one label of an answer (see :mod:`._feedback`)."""
        return await self.risk.endpoint(request)

    def _secrets(self, request: Request) -> list[str]:
        """What an upstream's error body must not echo to the client, in every form
        (:func:`credential_forms`): the keys, the client's ``Authorization`` and the
        upstream URL's credentials."""
        auth = request.headers.get("authorization", "")
        keys = [self.config.upstream_key, self.config.client_key]
        keys.append(auth.split(" ", 1)[1] if " " in auth else auth)
        return credential_forms(keys, self.config.upstream)

    async def _side_body(self, resp: Any, request: Request) -> bytes:
        """An upstream body that is not an answer (an error, a model list), read to
        :data:`MAX_SIDE_BODY_BYTES` and redacted (the end of one cut there too)."""
        raw = await read_capped(resp, MAX_SIDE_BODY_BYTES, self.upstream.timeout_s)
        return redact_secrets(raw, self._secrets(request), cut=len(raw) >= MAX_SIDE_BODY_BYTES)

    async def models(self, request: Request) -> Response:
        headers = {**self.auth.upstream_headers(request.headers), "accept": "application/json"}
        try:
            resp = await self.upstream.get("/models", headers)
        except UPSTREAM_ERRORS as exc:
            self.metrics.upstream_errors.labels(kind="unreachable").inc()
            return error_response(502, describe_failure(exc), UPSTREAM_TYPE, "unreachable")
        media = resp.headers.get("content-type", "application/json")
        raw = await self._side_body(resp, request)
        return Response(raw, status_code=resp.status, media_type=media)

    # -- chat completions ------------------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        config, limits = self.config, self.config.limits
        try:
            raw = await read_body(
                request, max_bytes=limits.max_body_bytes, timeout_s=limits.body_timeout_s
            )
            size = len(raw)
            body = await parse_chat(
                raw, max_values=limits.max_json_values, max_containers=limits.max_json_containers
            )
            del raw  # (held to the answer's end otherwise: up to max_body_bytes a request)
        except BadRequest as exc:
            return error_response(exc.status, str(exc), code=exc.code, param=exc.param)
        prepared = prepare(
            body,
            source_for=config.source_for,
            mode=config.mode,
            top_logprobs=config.top_logprobs,
            max_answer_tokens=limits.max_answer_tokens,
            allowed=config.allow_request_fields,
        )
        if isinstance(prepared, Response):
            return prepared
        info = prepared.info
        for field in info.mismatches:
            self.metrics.context_mismatches.labels(field=mismatch_kind(field)).inc()
        if info.mismatches and config.on_context_mismatch == "reject":
            refused = context_refusal(info.mismatches)
            return error_response(400, str(refused), code="context_mismatch", param=refused.param)
        headers = self.auth.upstream_headers(request.headers)
        try:  # a large body is encoded off the event loop, as it was decoded
            payload = off_loop(partial(encode_json, prepared.body), size, "encode")
            resp = await self.upstream.open_stream("/chat/completions", await payload, headers)
        except UPSTREAM_ERRORS as exc:
            kind = "upstream_timeout" if is_timeout(exc) else "unreachable"
            self.metrics.upstream_errors.labels(kind=kind).inc()
            self._log({"event": "upstream_failed", "request_id": info.request_id, "error": kind})
            status = 504 if kind == "upstream_timeout" else 502
            return error_response(status, describe_failure(exc), UPSTREAM_TYPE, kind)
        if resp.status != 200:
            raw = await self._side_body(resp, request)
            self.metrics.upstream_errors.labels(kind="status").inc()
            self._log(
                {
                    "event": "upstream_status",
                    "request_id": info.request_id,
                    "status": resp.status,
                }
            )
            media = resp.headers.get("content-type", "application/json")
            response = upstream_status_response(resp.status, raw, media, info.model)
            response.headers.update(relayed_headers(resp.headers, self._secrets(request)))
            return response
        upstream = UpstreamAnswer(
            resp,
            max_bytes=limits.max_answer_bytes,
            secrets=partial(self._secrets, request),
            timeout_s=self.upstream.timeout_s,
        )
        answer = ProxyAnswer(
            info,
            prepared.monitor,
            max_token_chars=limits.max_token_chars,
            record=self.recorder is not None,
        )
        self.metrics.active_streams.inc()
        self.risk.answer_started(answer)
        if info.stream:
            return EventStream(
                self.relay.sse(answer, upstream),
                media_type="text/event-stream",
                headers={
                    HEADER_REQUEST_ID: info.request_id,
                    HEADER_CERTIFICATE: header_value(info.label),
                    HEADER_MODE: info.mode,
                    "cache-control": "no-cache",
                },
                background=BackgroundTask(self.relay.finish, answer, upstream),
            )
        return await self.relay.complete(answer, upstream, request)

    def _log(self, record: dict[str, Any]) -> None:
        self.relay.log(record)


class ConcurrencyCap:
    """An ASGI app that serves at most ``limit`` requests of ``app`` at once, each from its
    first byte to its response's last (a streamed answer included); one more gets HTTP 503
    ``overloaded`` with ``Retry-After``, before its body is read."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit
        self.active = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.active >= self.limit:
            message = f"the proxy serves {self.limit} requests at once: retry shortly"
            response = error_response(
                503, message, "liftguard_overloaded", "overloaded", headers={"retry-after": "1"}
            )
            await response(scope, receive, send)
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1


def endpoint(handler: Callable[[Request], Awaitable[Response]]) -> ASGIApp:
    """``handler`` as an ASGI app: Starlette's ``request_response`` without the exception
    wrapper of its own, which wraps ``send`` once more for every message of the response.
    The app's ExceptionMiddleware wraps every route with the same handlers, so an exception
    meets the same handling one layer out."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = await handler(Request(scope, receive, send))
        await response(scope, receive, send)

    return app


def create_app(config: ProxyConfig, *, registry: CollectorRegistry | None = None) -> Starlette:
    """The ASGI application of a guard proxy (serve it with uvicorn; ``app.state.proxy``
    is its :class:`Proxy`). ``registry``: where its metrics live (a new one by default)."""
    proxy = Proxy(config, registry=registry)
    keyed = proxy.auth.required
    routes = [
        Route(
            "/v1/chat/completions",
            ConcurrencyCap(
                endpoint(keyed(proxy.chat_completions)),
                config.limits.max_concurrent_requests,
            ),
            methods=["POST"],
        ),
        Route("/v1/models", keyed(proxy.models), methods=["GET"]),
        Route(FEEDBACK_PATH, keyed(proxy.feedback), methods=["POST"]),
        Route("/healthz", proxy.healthz, methods=["GET"]),
        Route("/metrics", keyed(proxy.metrics_endpoint), methods=["GET"]),
    ]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=list(config.allowed_hosts))]
    app = Starlette(routes=routes, middleware=middleware, lifespan=proxy.lifespan)
    app.state.proxy = proxy
    return app
