"""What the LiteLLM guardrail's hooks share: its settings, checked at start, and the steps
every hook takes (sans LiteLLM's hooks themselves: LiteLLM looks for a hook on the class it
makes, :class:`~adapters._litellm._guardrail.LiftGuardGuardrail`, not on its bases)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import httpx
from litellm.integrations.custom_guardrail import CustomGuardrail

from guardrail import Cause, ConfigError, GuardrailError, State

from .._guard._stream import DEFAULT_MAX_TOKEN_CHARS, check_max_token_chars
from .._risk._fleet_watch import FleetRiskWatch, make_risk_watch
from .._risk._risk_watch import FinishedAnswer
from .._serving._certs import CertificateSource, certificate_source
from .._serving._options import (
    DEFAULT_REFUSAL,
    check_context_settings,
    check_positive,
    check_risk_settings,
)
from .._serving._prepare import (
    DEFAULT_MAX_ANSWER_BYTES,
    DEFAULT_MAX_ANSWER_TOKENS,
    LITELLM_FIX,
    TOO_LARGE,
    check_upstream,
)
from .._serving._wire import UPSTREAM_TYPE, error_body
from . import _feedback as _litellm_feedback
from ._answer import Answer, GuardedRequest
from ._capped import AnswerTooLarge, capped_client, unbounded_reason
from ._config import (
    LITELLM_REQUEST_FIELDS,
    check_known_settings,
    check_settings,
    config_relative,
    fleet_settings,
)
from ._pending import MAX_PENDING, PendingRequests
from ._startup import RUNNING
from ._wire import BLOCKED_STATUS, GuardrailHTTPError, blocked_body, refusal_chunk

__all__ = ["GuardrailBase"]

logger = logging.getLogger("adapters._litellm._guardrail")

_HOOKS = ("pre_call", "post_call")


class GuardrailBase(CustomGuardrail):  # type: ignore[misc]  # (litellm is not type-checked)
    """The guardrail's settings (:meth:`_configure`) and its steps shared by the hooks."""

    def _configure(
        self,
        *,
        certificate: str | CertificateSource | None = None,
        guard_mode: str = "buffered",
        on_block: str = "error",
        refusal_message: str = DEFAULT_REFUSAL,
        top_logprobs: int | None = None,
        max_token_chars: int = DEFAULT_MAX_TOKEN_CHARS,
        max_answer_tokens: int = DEFAULT_MAX_ANSWER_TOKENS,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        max_pending_requests: int = MAX_PENDING,
        on_context_mismatch: str = "log",
        allow_request_fields: Sequence[str] = (),
        storage_options: Mapping[str, Any] | None = None,
        risk_alpha: float = 0.05,
        feedback_ids: int = 50_000,
        refresh_s: float = 10.0,
        redis: bool = False,
        redis_url: str | None = None,
        fleet_namespace: str | None = None,
        fleet_deployment: str | None = None,
        fleet_timeout_s: float = 0.5,
        fleet_connect_timeout_s: float = 5.0,
        feedback_ttl_s: int = 7 * 24 * 3600,
        **kwargs: Any,
    ) -> None:
        check_settings(
            certificate=certificate,
            guard_mode=guard_mode,
            on_block=on_block,
            refusal_message=refusal_message,
            top_logprobs=top_logprobs,
            max_answer_tokens=max_answer_tokens,
            max_answer_bytes=max_answer_bytes,
        )
        allowed = check_context_settings(on_context_mismatch, allow_request_fields)
        check_risk_settings(risk_alpha, feedback_ids)
        fleet = fleet_settings(
            redis, redis_url, fleet_namespace, fleet_timeout_s, feedback_ttl_s,
            deployment=fleet_deployment, connect_timeout_s=fleet_connect_timeout_s,
        )  # fmt: skip
        check_positive("refresh_s", refresh_s, allow_zero=True)
        check_known_settings(kwargs, inspect.signature(self._configure).parameters)
        hooks = kwargs.get("event_hook")
        hooks = [hooks] if isinstance(hooks, str) else list(hooks or ())
        if hooks and not all(h in hooks for h in _HOOKS):
            raise ConfigError(
                f"the liftguard guardrail needs LiteLLM's mode: [pre_call, post_call] (the "
                f"pre-call hook asks the upstream for logprobs), got {hooks}"
            )
        super().__init__(**kwargs)
        self.source = certificate_source(
            config_relative(cast(str | CertificateSource, certificate)),
            storage_options=storage_options,
        )
        self.guard_mode: str = guard_mode
        self.on_block: str = on_block
        self.refusal_message = refusal_message
        self.top_logprobs = top_logprobs
        self.max_token_chars = check_max_token_chars(max_token_chars)
        self.max_answer_tokens = max_answer_tokens
        self.max_answer_bytes = max_answer_bytes
        self._whole_http: tuple[asyncio.AbstractEventLoop, httpx.AsyncClient] | None = None
        self._unbounded_logged: set[str] = set()
        self.on_context_mismatch = on_context_mismatch
        self.allowed_fields = frozenset(allowed) | LITELLM_REQUEST_FIELDS
        # refused now, not per request
        check_upstream(self.source.current()[0], top_logprobs, LITELLM_FIX)
        self._pending = PendingRequests[GuardedRequest](max_pending_requests)
        self.name = str(getattr(self, "guardrail_name", None) or "liftguard")
        self.risk = make_risk_watch(
            {self.name: self.source},
            risk_alpha=risk_alpha,
            feedback_ids=feedback_ids,
            count=_litellm_feedback.count,
            fleet=fleet,
            count_error=_litellm_feedback.count_error,
        )
        _litellm_feedback.register(self.name, self.risk, self.refresh)
        self.refresh_s = float(refresh_s)
        self._refreshed = time.monotonic()
        self._refreshing: asyncio.Task[None] | None = None
        logger.info("liftguard guardrail: certificate %s, %s", self.source.describe(), guard_mode)
        RUNNING.add(self.name)  # (guardrail_check refuses every request while one is not)

    def _maybe_refresh(self) -> None:
        """Re-read a store alias in a worker thread when ``refresh_s`` has passed (and
        start the fleet's replay: LiteLLM has no start-up hook for a guardrail)."""
        if isinstance(self.risk, FleetRiskWatch):
            self.risk.ensure_started()
        due = self.refresh_s > 0 and time.monotonic() - self._refreshed >= self.refresh_s
        if due and self._refreshing is None:
            self._refreshed = time.monotonic()
            self._refreshing = asyncio.get_running_loop().create_task(self._refresh_due())

    async def _refresh_due(self) -> None:
        try:
            await self.refresh()
        finally:
            self._refreshing = None

    def _finished(self, answer: Answer, completion_id: Any, *, decided: bool) -> None:
        """Hand the answer's final verdict to the risk watch (once per answer)."""
        request = answer.request
        certified = decided and not answer.blocked and answer.verdict.state is State.CERTIFIED
        self.risk.take(
            self.name,
            FinishedAnswer(
                request.request_id,
                str(completion_id or request.request_id),
                request.label,
                certified,
                decided,
                request.covered,
                bool(request.mismatches),
                answer.verdict.cause.value,
            ),
        )

    def _request(self, data: dict[str, Any]) -> GuardedRequest | None:
        """The request the pre-call hook prepared for ``data`` (:mod:`._pending`), taken."""
        return self._pending.take(data)

    def _bound_whole(self, data: dict[str, Any]) -> None:
        """Send the attempt ``data`` of a guarded whole answer (LiteLLM's call, after the
        deployment's merge) with a client that reads at most ``max_answer_bytes`` of the
        upstream's body (:mod:`._capped`); an attempt that client cannot carry goes as
        before, logged once per model and reason."""
        from litellm import get_llm_provider
        from litellm.secret_managers.main import get_secret_bool

        try:
            provider = str(get_llm_provider(
                model=data.get("model"), custom_llm_provider=data.get("custom_llm_provider"),
                api_base=data.get("api_base"),
            )[1])  # fmt: skip
        except Exception as exc:  # (LiteLLM raises on a model it cannot place: so will the call)
            provider = f"unknown ({type(exc).__name__})"
        base_handler = bool(get_secret_bool("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER"))
        reason = unbounded_reason(data, provider, base_handler=base_handler)
        if reason is None:
            data["client"] = capped_client(
                self._http(data.get("shared_session")), self.max_answer_bytes,
                api_key=data["api_key"], base_url=data["api_base"],
            )  # fmt: skip
            return
        seen = f"{data.get('model')}: {reason}"
        if seen not in self._unbounded_logged and len(self._unbounded_logged) < 1024:
            self._unbounded_logged.add(seen)
            logger.warning(
                "liftguard guardrail %s: a whole (non-streamed) answer of %s is read unbounded "
                "(max_answer_bytes does not apply: %s); ask with stream: true",
                self.name, data.get("model"), reason,
            )  # fmt: skip

    def _http(self, shared_session: Any) -> httpx.AsyncClient:
        """LiteLLM's own HTTP client for OpenAI (its TLS, proxy and connection settings; the
        proxy's shared session), one per event loop, made on first use."""
        from litellm.llms.openai.common_utils import BaseOpenAILLM

        loop = asyncio.get_running_loop()
        if self._whole_http is None or self._whole_http[0] is not loop:
            http = BaseOpenAILLM.get_async_http_client(shared_session)
            self._whole_http = (loop, http if http is not None else httpx.AsyncClient())
        return self._whole_http[1]

    def _cut_whole(self, request: GuardedRequest, cut: AnswerTooLarge) -> GuardrailHTTPError:
        """A whole answer cut at ``max_answer_bytes``: blocked, as the proxy blocks an answer
        past its ``max_answer_bytes`` (cause ``over_token_limit``; HTTP 502, code
        ``upstream_too_large``: the bytes were cut before they were read)."""
        answer = Answer(request, max_token_chars=self.max_token_chars)
        answer.fail(TOO_LARGE, cut.message, Cause.OVER_TOKEN_LIMIT)
        self._finished(answer, None, decided=True)
        logger.info("answer %s blocked: %s", request.request_id, cut.message)
        body = error_body(cut.message, UPSTREAM_TYPE, TOO_LARGE, verdict=answer.verdict_field())
        return GuardrailHTTPError(502, body)

    def _step(self, answer: Answer, step: Callable[[], list[Any]]) -> list[Any]:
        """``step()``; a malformed chunk (or a missing logprob under policy ``error``) ends
        the answer with the proxy's upstream error (HTTP 502), never certified."""
        try:
            return step()
        except GuardrailError as exc:
            answer.fail("malformed_chunk", f"the upstream's answer was unusable: {exc}")
            body = error_body(
                str(exc), UPSTREAM_TYPE, "malformed_chunk", verdict=answer.verdict_field()
            )
            raise GuardrailHTTPError(502, body) from exc

    def _blocked(self, answer: Answer, like: Any) -> Any:
        """The end of a blocked stream: the refusal chunk, or the error LiteLLM relays."""
        verdict = answer.verdict
        logger.info("answer %s blocked: %s", answer.request.request_id, verdict.reason)
        if self.on_block == "refusal":
            return refusal_chunk(answer, like, self.refusal_message)
        raise GuardrailHTTPError(BLOCKED_STATUS, blocked_body(answer))

    async def refresh(self) -> bool:
        """Re-read the certificate's origin now (the guardrail's)."""
        raise NotImplementedError
