"""The relay loop: the upstream's chunks through the answer to the client.

:class:`RelayLoop` reads the upstream's events, feeds each chunk to the answer's
:class:`~._answer.ProxyAnswer` (in a worker thread when the certificate scores with a local
model), and writes what the answer releases: as server-sent events for a stream,
or as one JSON answer. Once per answer it counts, logs and records the verdict, and
hands it to the risk monitors (:class:`~._feedback.ProxyRiskWatch`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from functools import partial
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from guardrail import Cause, GuardrailError, MissingLogprobsError

from .._errors import ProviderFormatError
from .._serving._metrics import ProxyMetrics
from .._serving._prepare import TOO_LARGE
from .._serving._redact import redact_text
from .._serving._wire import DONE, merge_released, sse
from ._answer import ProxyAnswer
from ._config import ProxyConfig
from ._feedback import ProxyRiskWatch
from ._recording import Recorder
from ._replies import (
    answer_record,
    assemble,
    blocked_response,
    error_event,
    refusal_chunk,
    verdict_headers,
)
from ._upstream import UpstreamAnswer, UpstreamFailure, decode_chunk

__all__ = ["SCORING_THREADS", "SHUTDOWN", "RelayLoop"]

logger = logging.getLogger(__name__)
SCORING_THREADS = 4
"""Worker threads that score answers whose certificate evaluates a local model."""
SHUTDOWN = "proxy_shutdown"
SHUTDOWN_REASON = (
    "the proxy shut down before the answer ended (its graceful shutdown ran out): the answer "
    "was never judged whole; ask again"
)
verdict_logger = logging.getLogger("adapters.proxy.verdicts")
"""One JSON line per verdict (INFO); the command line prints them on stderr."""


class RelayLoop:
    """The per-answer work of one proxy: relay, write, count, log and record."""

    def __init__(
        self,
        config: ProxyConfig,
        metrics: ProxyMetrics,
        recorder: Recorder | None,
        risk: ProxyRiskWatch | None = None,
    ) -> None:
        self.config, self.metrics, self.recorder, self.risk = config, metrics, recorder, risk
        self._scoring = anyio.CapacityLimiter(SCORING_THREADS)
        self._active: dict[ProxyAnswer, UpstreamAnswer] = {}
        self._draining = False

    async def drain(self) -> int:
        """End every answer in flight now (the proxy is shutting down): its upstream request
        is closed, and its client gets the error event of an answer that did not end
        (``proxy_shutdown``), never a cut-off stream. Answers that start after this are
        ended the same way. How many were in flight."""
        self._draining = True
        active = list(self._active.items())
        for answer, upstream in active:
            answer.draining = True
            await upstream.interrupt()
        return len(active)

    async def _step(self, answer: ProxyAnswer, chunk: dict[str, Any] | None) -> list[Any]:
        """``answer.feed(chunk)`` (``answer.end()`` for None), in a worker thread when the
        certificate scores with a local model, so that the event loop never waits on it
        (other requests, ``/healthz`` and shutdown stay responsive)."""
        if not answer.heavy:
            return answer.end() if chunk is None else answer.feed(chunk)
        call = answer.end if chunk is None else partial(answer.feed, chunk)
        return await anyio.to_thread.run_sync(call, limiter=self._scoring)

    async def _released(
        self, answer: ProxyAnswer, upstream: UpstreamAnswer
    ) -> AsyncGenerator[list[list[dict[str, Any]]], None]:
        """The chunks the client may see, in groups of batches: what the events of one
        network read release goes out in one write (a buffer released at certification is
        one batch). The upstream is closed at once on a block or a failure; after a clean
        end its connection is kept for reuse (see :meth:`_finish`)."""
        clock = time.perf_counter
        feed = None if answer.heavy else answer.feed  # (no coroutine per chunk for a light one)
        self._active[answer] = upstream
        if self._draining:
            answer.draining = True
            await upstream.interrupt()
        try:
            async for batch in upstream.batches:
                t0 = clock()
                ended, error = False, None
                out: list[list[dict[str, Any]]] = []
                try:
                    for event, data in batch:
                        chunk = decode_chunk(event, data)
                        if chunk is None:
                            ended = True
                            break
                        released = feed(chunk) if feed else await self._step(answer, chunk)
                        if answer.blocked:
                            break  # (nothing is released on a block; past the token limit too)
                        if released:
                            out.append(released)
                            if feed is None:  # scored in a thread: each released when scored
                                answer.busy_s += clock() - t0
                                yield out
                                out, t0 = [], clock()
                except Exception as exc:  # raised after what this read released before it
                    error = exc  # (sent first, as chunk by chunk)
                answer.busy_s += clock() - t0
                if out:
                    yield out
                if error is not None:
                    raise error
                if answer.blocked:
                    return
                if ended:
                    break
            upstream.clean = True
            released = await self._step(answer, None)
            if released:
                yield [released]
        except UpstreamFailure as exc:
            if answer.draining:
                answer.fail(SHUTDOWN, SHUTDOWN_REASON)
                return
            self.metrics.upstream_errors.labels(kind=exc.kind).inc()
            # past the byte cap: no Cause names a byte cap, and the nearest is an answer too
            # long to judge (the error, upstream_too_large, says which cap it met)
            cause = Cause.OVER_TOKEN_LIMIT if exc.kind == TOO_LARGE else Cause.TRUNCATED
            answer.fail(exc.kind, redact_text(str(exc), upstream.secrets), cause)
        except ProviderFormatError as exc:
            self.metrics.upstream_errors.labels(kind="malformed_chunk").inc()
            answer.fail("malformed_chunk", str(exc))
        except MissingLogprobsError as exc:
            answer.fail("missing_logprobs", str(exc), Cause.MISSING_LOGPROBS)
        except GuardrailError as exc:
            logger.error("request %s: the guard failed: %s", answer.info.request_id, exc)
            answer.fail("guard_error", str(exc), Cause.NO_VERDICT)
        finally:
            self._active.pop(answer, None)
            if not upstream.clean:
                await upstream.close()

    async def sse(self, answer: ProxyAnswer, upstream: UpstreamAnswer) -> AsyncIterator[bytes]:
        clock = time.perf_counter
        chunks = self._released(answer, upstream)
        try:
            last: dict[str, Any] | None = None
            async for batches in chunks:
                t0 = clock()
                data = b"".join([sse(c) for batch in batches for c in merge_released(batch)])
                answer.busy_s += clock() - t0
                last = batches[-1][-1]
                yield data
            if not answer.blocked:
                yield DONE
            elif answer.error is None and self.config.on_block == "refusal":
                yield sse(refusal_chunk(answer, self.config.refusal_message, last))
                yield DONE
            else:
                yield sse(error_event(answer))
        finally:
            with anyio.CancelScope(shield=True):
                await chunks.aclose()
                await self.finish(answer, upstream)

    async def complete(
        self, answer: ProxyAnswer, upstream: UpstreamAnswer, request: Request
    ) -> Response:
        """The whole answer, decided; a client that disconnects meanwhile ends it at once
        (the upstream is closed, the answer counted as abandoned, never certified)."""
        chunks = self._released(answer, upstream)
        out: list[dict[str, Any]] = []
        try:
            async with anyio.create_task_group() as tasks:

                async def watch() -> None:
                    while (await request.receive())["type"] != "http.disconnect":
                        pass
                    tasks.cancel_scope.cancel()

                tasks.start_soon(watch)
                async for batches in chunks:
                    for batch in batches:
                        out += batch
                tasks.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await chunks.aclose()
                await self.finish(answer, upstream)
        if answer.blocked:
            return blocked_response(answer, self.config.on_block, self.config.refusal_message)
        return JSONResponse(assemble(out, answer), headers=verdict_headers(answer))

    async def finish(self, answer: ProxyAnswer, upstream: UpstreamAnswer) -> None:
        """Once per answer: close the upstream (after ``[DONE]``, reading the rest of its
        body first, briefly, so that the connection goes back to the pool); count, log
        and record the verdict; hand it to the risk monitors."""
        await upstream.finish()
        if answer.finalized:
            return
        answer.finalized = True
        self.metrics.active_streams.dec()
        if not answer.ended and not answer.blocked:
            self.metrics.client_disconnects.inc()
            answer.fail("client_closed", "the client closed the connection before the end")
        m, verdict = self.metrics, answer.verdict
        m.verdicts.labels(state=verdict.state.value, cause=verdict.cause.value).inc()
        m.verdict_tokens.observe(verdict.t)
        if answer.tokens_read:
            m.tokens_read.inc(answer.tokens_read)
            m.latency_per_token.observe(answer.busy_s / answer.tokens_read)
        field = answer.verdict_field()
        info = answer.info
        self.log(
            {"event": "verdict", **field, "model": info.model, "stream": info.stream,
             "finish_reason": answer.finish_reason}
        )  # fmt: skip
        if self.recorder is not None:
            self.recorder.submit(answer_record(answer, field))
        if self.risk is not None:
            self.risk.answer_finished(answer)

    def log(self, record: dict[str, Any]) -> None:
        if verdict_logger.isEnabledFor(logging.INFO):
            record = {"ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **record}
            verdict_logger.info(json.dumps(record, ensure_ascii=False, default=str))
