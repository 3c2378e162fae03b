"""The starlette application: routes, lifecycle, and the guarded answer loop.

Routes: ``POST /v1/chat/completions`` (guarded), ``GET /v1/models`` (passed
through), ``GET /healthz``, ``GET /metrics`` (Prometheus). The app's lifespan
starts the upstream client, the recorder thread and the certificate refresh
loop, and stops them in reverse order (the recorder writes what is queued).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from guardrail import Cause, GuardrailError, MissingLogprobsError

from .._errors import ProviderFormatError
from ._auth import Auth
from ._certs import CertificateSource
from ._chat import (
    answer_record,
    assemble,
    blocked_response,
    check_upstream,
    error_event,
    error_response,
    prepare,
    refusal_chunk,
    upstream_status_response,
    verdict_headers,
)
from ._config import ProxyConfig
from ._guarded import AnswerGuard, decode_chunk
from ._metrics import ProxyMetrics
from ._recording import Recorder
from ._request import BadRequest, parse_json, read_body, validate_chat
from ._upstream import (
    TOO_LARGE,
    Upstream,
    UpstreamAnswer,
    UpstreamFailure,
    aclose_response,
)
from ._wire import (
    DONE,
    HEADER_CERTIFICATE,
    HEADER_MODE,
    HEADER_REQUEST_ID,
    UPSTREAM_TYPE,
    header_value,
    redact_secrets,
    redact_url,
    sse,
)

__all__ = ["Proxy", "create_app"]

logger = logging.getLogger(__name__)
SCORING_THREADS = 4
"""Worker threads that score answers whose certificate evaluates a local model."""
verdict_logger = logging.getLogger("adapters.proxy.verdicts")
"""One JSON line per verdict (INFO); the command line prints them on stderr."""


class Proxy:
    """The state of one proxy: configuration, upstream client, metrics, recorder."""

    def __init__(self, config: ProxyConfig, *, registry: CollectorRegistry | None = None) -> None:
        self.config = config
        self.metrics = ProxyMetrics(registry)
        self.auth = Auth(client_key=config.client_key, upstream_key=config.upstream_key)
        self.upstream = Upstream(
            config.upstream,
            timeout_s=config.upstream_timeout_s,
            max_connections=config.max_upstream_connections,
        )
        self.recorder: Recorder | None = None
        if config.record_dir is not None:
            self.recorder = Recorder(
                config.record_dir,
                metrics=self.metrics,
                dataset=config.record_dataset,
                max_bytes=config.record_max_bytes,
                queue_size=config.record_queue,
            )
        entries: dict[str, CertificateSource] = dict(config.model_certificates)
        if config.certificate is not None:
            entries["*"] = config.certificate
        for source in entries.values():  # a rule the upstream cannot feed: refused now
            check_upstream(source.current()[0], config.top_logprobs)
        self.sources = entries
        self._shown: dict[str, str] = {}
        self._scoring = anyio.CapacityLimiter(SCORING_THREADS)

    # -- lifecycle -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.upstream.start()
        if self.recorder is not None:
            self.recorder.start()
        self._publish_versions()
        task = None
        if self.config.refresh_interval_s > 0 and any(
            type(s).refresh is not CertificateSource.refresh for s in self.sources.values()
        ):
            task = asyncio.create_task(self._refresh_loop(self.config.refresh_interval_s))
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.upstream.aclose()
            if self.recorder is not None:
                await asyncio.to_thread(self.recorder.close)

    async def _refresh_loop(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            await self.refresh_certificates()

    async def refresh_certificates(self) -> dict[str, bool]:
        """Re-read every store alias now; ``{model entry: changed}``. A failing store
        keeps its current certificate (logged, counted)."""
        out: dict[str, bool] = {}
        seen: dict[int, bool] = {}
        for name, source in self.sources.items():
            if id(source) not in seen:
                try:
                    seen[id(source)] = await asyncio.to_thread(source.refresh)
                    result = "changed" if seen[id(source)] else "unchanged"
                except Exception as exc:
                    seen[id(source)] = False
                    result = "failed"
                    logger.warning("refreshing %s failed: %s", source.describe(), exc)
                self.metrics.refreshes.labels(result=result).inc()
            out[name] = seen[id(source)]
        self._publish_versions()
        return out

    def _publish_versions(self) -> None:
        gauge = self.metrics.certificate_info
        for name, source in self.sources.items():
            label = source.current()[1]
            old = self._shown.get(name)
            if old is not None and old != label:
                gauge.remove(name, old)
                logger.info("model %s: certificate %s -> %s", name, old, label)
            gauge.labels(model=name, certificate=label).set(1)
            self._shown[name] = label

    # -- simple endpoints ------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        rec = self.recorder
        return JSONResponse(
            {
                "status": "ok",
                "mode": self.config.mode,
                "upstream": redact_url(self.config.upstream),
                "certificates": {n: s.current()[1] for n, s in self.sources.items()},
                "recording": None
                if rec is None
                else {"dir": str(rec.directory), "written": rec.written, "dropped": rec.dropped},
            }
        )

    async def metrics_endpoint(self, request: Request) -> Response:
        """Prometheus metrics; with a client key, only for requests that send it (a
        scraper's ``authorization: Bearer ...``): the counters tell the traffic's shape."""
        if not self.auth.allows(request.headers):
            return self._unauthorized()
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    def _secrets(self, request: Request) -> list[str]:
        """What an upstream's error body must not echo to the client: the keys and the
        upstream URL's password."""
        password = urlsplit(self.config.upstream).password
        keys = [self.config.upstream_key, self.config.client_key, password]
        auth = request.headers.get("authorization", "")
        keys.append(auth.split(" ", 1)[1] if " " in auth else auth)
        return [k for k in keys if k]

    def _unauthorized(self) -> JSONResponse:
        return error_response(
            401, "invalid or missing API key for the liftguard proxy",
            "authentication_error", "invalid_api_key",
        )  # fmt: skip

    async def models(self, request: Request) -> Response:
        if not self.auth.allows(request.headers):
            return self._unauthorized()
        headers = {**self.auth.upstream_headers(request.headers), "accept": "application/json"}
        try:
            resp = await self.upstream.get("/models", headers)
        except httpx.HTTPError as exc:
            self.metrics.upstream_errors.labels(kind="unreachable").inc()
            message = f"the upstream failed: {exc!r}"
            return error_response(502, message, UPSTREAM_TYPE, "unreachable")
        media = resp.headers.get("content-type", "application/json")
        return Response(resp.content, status_code=resp.status_code, media_type=media)

    # -- chat completions ------------------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        if not self.auth.allows(request.headers):
            return self._unauthorized()
        config = self.config
        try:
            raw = await read_body(
                request, max_bytes=config.max_body_bytes, timeout_s=config.body_timeout_s
            )
            body = validate_chat(parse_json(raw))
        except BadRequest as exc:
            return error_response(exc.status, str(exc), code=exc.code, param=exc.param)
        prepared = prepare(
            body, source_for=config.source_for, mode=config.mode,
            top_logprobs=config.top_logprobs, max_answer_tokens=config.max_answer_tokens,
        )  # fmt: skip
        if isinstance(prepared, Response):
            return prepared
        info = prepared.info
        for field in info.mismatches:
            self.metrics.context_mismatches.labels(field=field).inc()
        if info.mismatches and config.on_context_mismatch == "reject":
            return error_response(
                400,
                "the request changes settings the certificate was calibrated with "
                f"({', '.join(info.mismatches)}): its guarantee would not cover the answer",
                code="context_mismatch",
            )
        headers = self.auth.upstream_headers(request.headers)
        try:
            resp = await self.upstream.open_stream("/chat/completions", prepared.body, headers)
        except httpx.HTTPError as exc:
            kind = "upstream_timeout" if isinstance(exc, httpx.TimeoutException) else "unreachable"
            self.metrics.upstream_errors.labels(kind=kind).inc()
            self._log({"event": "upstream_failed", "request_id": info.request_id, "error": kind})
            status = 504 if kind == "upstream_timeout" else 502
            return error_response(status, f"the upstream failed: {exc!r}", UPSTREAM_TYPE, kind)
        if resp.status_code != 200:
            raw = await resp.aread()
            await aclose_response(resp)
            self.metrics.upstream_errors.labels(kind="status").inc()
            self._log(
                {"event": "upstream_status", "request_id": info.request_id,
                 "status": resp.status_code}
            )  # fmt: skip
            media = resp.headers.get("content-type", "application/json")
            raw = redact_secrets(raw, self._secrets(request))
            return upstream_status_response(resp.status_code, raw, media, info.model)
        answer = UpstreamAnswer(resp, max_bytes=config.max_answer_bytes)
        guard = AnswerGuard(
            info,
            prepared.monitor,
            max_token_chars=config.max_token_chars,
            record=self.recorder is not None,
        )
        self.metrics.active_streams.inc()
        if info.stream:
            return StreamingResponse(
                self._sse(guard, answer),
                media_type="text/event-stream",
                headers={
                    HEADER_REQUEST_ID: info.request_id,
                    HEADER_CERTIFICATE: header_value(info.label),
                    HEADER_MODE: info.mode,
                    "cache-control": "no-cache",
                },
                background=BackgroundTask(self._finish, guard, answer),
            )
        return await self._complete(guard, answer, request)

    async def _step(self, guard: AnswerGuard, chunk: dict[str, Any] | None) -> list[Any]:
        """``guard.feed(chunk)`` (``guard.end()`` for None), in a worker thread when the
        certificate scores with a local model, so that the event loop never waits on it
        (other requests, ``/healthz`` and shutdown stay responsive)."""
        if not guard.heavy:
            return guard.end() if chunk is None else guard.feed(chunk)
        call = guard.end if chunk is None else partial(guard.feed, chunk)
        return await anyio.to_thread.run_sync(call, limiter=self._scoring)

    async def _guarded(
        self, guard: AnswerGuard, upstream: UpstreamAnswer
    ) -> AsyncGenerator[list[dict[str, Any]], None]:
        """The chunks the client may see, in batches (a buffer released at certification
        goes out in one write). The upstream is closed at once on a block or a failure;
        after a clean end its connection is kept for reuse (see :meth:`_finish`)."""
        clock = time.perf_counter
        try:
            async for event, data in upstream.events:
                t0 = clock()
                chunk = decode_chunk(event, data)
                if chunk is None:
                    break
                out = await self._step(guard, chunk)
                guard.busy_s += clock() - t0
                if guard.blocked:
                    return  # (nothing is released on a block)
                if guard.tokens_read > guard.info.max_tokens:
                    raise UpstreamFailure(
                        TOO_LARGE,
                        f"the upstream sent more than {guard.info.max_tokens} tokens for one "
                        "answer (the request's token limit, or the proxy's max_answer_tokens)",
                    )
                if out:
                    yield out
            upstream.clean = True
            out = await self._step(guard, None)
            if out:
                yield out
        except UpstreamFailure as exc:
            self.metrics.upstream_errors.labels(kind=exc.kind).inc()
            cause = Cause.OVER_TOKEN_LIMIT if exc.kind == TOO_LARGE else Cause.TRUNCATED
            guard.fail(exc.kind, str(exc), cause)
        except ProviderFormatError as exc:
            self.metrics.upstream_errors.labels(kind="malformed_chunk").inc()
            guard.fail("malformed_chunk", str(exc))
        except MissingLogprobsError as exc:
            guard.fail("missing_logprobs", str(exc), Cause.MISSING_LOGPROBS)
        except GuardrailError as exc:
            logger.error("request %s: the guard failed: %s", guard.info.request_id, exc)
            guard.fail("guard_error", str(exc), Cause.NO_VERDICT)
        finally:
            if not upstream.clean:
                await upstream.close()

    async def _sse(self, guard: AnswerGuard, upstream: UpstreamAnswer) -> AsyncIterator[bytes]:
        clock = time.perf_counter
        chunks = self._guarded(guard, upstream)
        try:
            last: dict[str, Any] | None = None
            async for batch in chunks:
                t0 = clock()
                data = b"".join([sse(chunk) for chunk in batch])
                guard.busy_s += clock() - t0
                last = batch[-1]
                yield data
            if not guard.blocked:
                yield DONE
            elif guard.error is None and self.config.on_block == "refusal":
                yield sse(refusal_chunk(guard, self.config.refusal_message, last))
                yield DONE
            else:
                yield sse(error_event(guard))
        finally:
            with anyio.CancelScope(shield=True):
                await chunks.aclose()
                await self._finish(guard, upstream)

    async def _complete(
        self, guard: AnswerGuard, upstream: UpstreamAnswer, request: Request
    ) -> Response:
        """The whole answer, decided; a client that disconnects meanwhile ends it at once
        (the upstream is closed, the answer counted as abandoned, never certified)."""
        chunks = self._guarded(guard, upstream)
        out: list[dict[str, Any]] = []
        try:
            async with anyio.create_task_group() as tasks:

                async def watch() -> None:
                    while (await request.receive())["type"] != "http.disconnect":
                        pass
                    tasks.cancel_scope.cancel()

                tasks.start_soon(watch)
                async for batch in chunks:
                    out += batch
                tasks.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await chunks.aclose()
                await self._finish(guard, upstream)
        if guard.blocked:
            return blocked_response(guard, self.config.on_block, self.config.refusal_message)
        return JSONResponse(assemble(out, guard), headers=verdict_headers(guard))

    async def _finish(self, guard: AnswerGuard, upstream: UpstreamAnswer) -> None:
        """Once per answer: close the upstream (after ``[DONE]``, reading the rest of its
        body first, briefly, so that the connection goes back to the pool); count, log
        and record the verdict."""
        await upstream.finish()
        if guard.finalized:
            return
        guard.finalized = True
        self.metrics.active_streams.dec()
        if not guard.ended and not guard.blocked:
            self.metrics.client_disconnects.inc()
            guard.fail("client_closed", "the client closed the connection before the end")
        m, verdict = self.metrics, guard.verdict
        m.verdicts.labels(state=verdict.state.value, cause=verdict.cause.value).inc()
        m.verdict_tokens.observe(verdict.t)
        if guard.tokens_read:
            m.tokens_read.inc(guard.tokens_read)
            m.latency_per_token.observe(guard.busy_s / guard.tokens_read)
        field = guard.verdict_field()
        info = guard.info
        self._log(
            {"event": "verdict", **field, "model": info.model, "stream": info.stream,
             "finish_reason": guard.finish_reason}
        )  # fmt: skip
        if self.recorder is not None:
            self.recorder.submit(answer_record(guard, field))

    def _log(self, record: dict[str, Any]) -> None:
        if verdict_logger.isEnabledFor(logging.INFO):
            record = {"ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **record}
            verdict_logger.info(json.dumps(record, ensure_ascii=False, default=str))


def create_app(config: ProxyConfig, *, registry: CollectorRegistry | None = None) -> Starlette:
    """The ASGI application of a guard proxy (serve it with uvicorn; ``app.state.proxy``
    is its :class:`Proxy`). ``registry``: where its metrics live (a new one by default)."""
    proxy = Proxy(config, registry=registry)
    routes = [
        Route("/v1/chat/completions", proxy.chat_completions, methods=["POST"]),
        Route("/v1/models", proxy.models, methods=["GET"]),
        Route("/healthz", proxy.healthz, methods=["GET"]),
        Route("/metrics", proxy.metrics_endpoint, methods=["GET"]),
    ]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=list(config.allowed_hosts))]
    app = Starlette(routes=routes, middleware=middleware, lifespan=proxy.lifespan)
    app.state.proxy = proxy
    return app
