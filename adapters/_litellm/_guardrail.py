"""The LiteLLM proxy guardrail: LiteLLM's hooks around :mod:`adapters._litellm._answer`.

Checked against litellm 1.110.2 (the version the ``litellm`` extra pins):

- ``async_pre_call_hook`` runs before the request is routed; what it returns is what
  LiteLLM sends on (``logprobs`` and ``top_logprobs`` included).
- ``async_post_call_streaming_iterator_hook`` gets every chunk as a ``ModelResponseStream``
  with ``choices[0].logprobs`` as the upstream sent them (also those the client did not ask
  for); what it yields is what the client gets; an extra attribute of a chunk
  (``liftguard``) reaches the client as a field of the chunk.
- A stream that ends without a finish reason (cut off, with or without ``[DONE]``)
  raises in the iterator (``APIConnectionError``: "Stream ended before a finish_reason
  was received"), as does an upstream error event: the error goes through the hook.
- An ``HTTPException`` raised in the iterator hook closes the upstream request and
  reaches the client as an in-stream error event (``{"error": {...}}``; the openai SDK
  raises ``openai.APIError``), or, when nothing was sent yet, as an HTTP error with that
  status (``openai.UnprocessableEntityError`` for 422); the exception's ``type``
  attribute becomes ``error.type`` and its ``detail`` ``error.provider_specific_fields``.
- ``async_post_call_success_hook`` gets a non-streamed ``ModelResponse``; an attribute
  set on it reaches the client as a field of the completion. LiteLLM reads its body to the
  end before: ``async_pre_call_deployment_hook`` runs for each attempt, after the router
  merged the deployment's ``api_base`` and ``api_key`` into it, and a ``client`` it sets
  there is the one LiteLLM's OpenAI handler reads the answer with (:mod:`._capped`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from functools import partial
from typing import Any

from litellm.types.utils import ModelResponseStream

from guardrail import ConfigError

from .._guard._stream import aclose_upstream
from .._serving._certs import log_swap
from .._serving._prepare import RequestError, context_refusal
from .._serving._wire import HEADER_REQUEST_ID, VERDICT_FIELD, error_body
from ._answer import (
    Answer,
    completion_chunk,
    only_relayed,
    prepare_request,
    strip_choice,
    upstream_finish_reasons,
)
from ._base import GuardrailBase
from ._capped import found_cut
from ._config import GuardrailStartupError
from ._pending import new_request_id
from ._wire import (
    BLOCKED_STATUS,
    GuardrailHTTPError,
    blocked_body,
    is_http_error,
    refuse_completion,
    route_refusal,
    untracked_refusal,
    upstream_chunks,
    upstream_failure,
)

__all__ = ["BLOCKED_STATUS", "LiftGuardGuardrail"]

logger = logging.getLogger(__name__)

_CHAT_CALLS = ("completion", "acompletion")
"""LiteLLM's call types of a chat completion: the only ones a guarded model answers."""


class LiftGuardGuardrail(GuardrailBase):
    """Certify or block every chat answer that goes through a LiteLLM proxy.

    In ``config.yaml``::

        guardrails:
          - guardrail_name: liftguard
            litellm_params:
              guardrail: adapters.litellm.LiftGuardGuardrail
              mode: [pre_call, post_call]    # LiteLLM's hooks: both are needed
              default_on: true
              certificate: cert.json         # or STORE_URL#NAME@ALIAS
              guard_mode: buffered           # or passthrough
              on_block: error                # or refusal
              on_context_mismatch: log       # or reject

    ``certificate``: a certificate file (``liftguard calibrate --out``; a relative path is
    read beside ``config.yaml`` when it is there) or a store alias ``STORE_URL#NAME[@ALIAS]``
    (``storage_options`` for an fsspec store), read once at start, its skeleton built.
    ``guard_mode``: ``buffered`` (nothing reaches the client before the answer is certified)
    or ``passthrough`` (chunks flow at once; a block ends the stream). ``on_block``:
    ``error`` (a stream ends with an error the openai SDK raises as ``openai.APIError``, type
    ``liftguard_blocked``, status 422; a whole answer gets HTTP 422) or ``refusal``
    (``refusal_message``, ``finish_reason`` ``content_filter``). ``top_logprobs``: per-token
    alternatives asked of the upstream (``None``: 20, or more if the certificate reads more).
    ``max_answer_tokens`` (16,384, at most the request's own limit): an answer past it is
    blocked there (cause ``over_token_limit``). ``max_answer_bytes`` (8 MiB, the proxy's): the
    most bytes read of a whole (non-streamed) answer's body, which LiteLLM reads before any
    hook sees it; past them the answer is blocked (``over_token_limit``, HTTP 502
    ``upstream_too_large``) and the connection closed. ``max_pending_requests`` (10,000): the most
    requests kept between the pre-call hook and their answer, each under a key the guardrail
    mints (:mod:`adapters._litellm._pending`); an answer whose request is not kept (forgotten
    past the bound, or never prepared) is refused (HTTP 503), never passed through. A guarded
    model answers chat completions only: another route on it is refused (HTTP 400).
    ``refresh_s``: a store alias is re-read at
    most this often, on the next request, in a worker thread (0: never); a new version
    applies to the requests that start after it, with a fresh risk monitor.
    ``on_context_mismatch``: a request that changes the certificate's generation context (a
    field that is not on the allowlist of request fields among them) is forwarded and
    reported (``log``: ``covered: false``) or refused with HTTP 400 naming the setting
    (``reject``); ``allow_request_fields``: names added to that allowlist (LiteLLM's own
    request fields, such as ``metadata``, are on it).

    Any configuration error (a setting's name or value, a certificate it cannot read or this
    upstream cannot feed) raises :class:`GuardrailStartupError`: LiteLLM does not start.

    The live risk monitor (:mod:`adapters._litellm._feedback`, level ``risk_alpha``): every
    decided answer feeds it; ``POST /v1/liftguard/feedback`` takes the label of one of the
    latest ``feedback_ids`` certified answers, by the request id the guardrail minted for it
    (the verdict's ``request_id``, the ``x-liftguard-request-id`` response header; never
    LiteLLM's call id, which a client sets); ``GET /v1/liftguard/risk`` and ``/metrics``
    (LiteLLM's ``prometheus`` callback) show the bounds and the alarm. ``redis: true``
    (LiteLLM's ``REDIS_URL`` or ``REDIS_HOST``/``REDIS_PORT``) or ``redis_url`` with
    ``fleet_deployment`` (the deployment's name, from which the namespace derives as the
    proxy's; or ``fleet_namespace``), ``fleet_timeout_s``, ``fleet_connect_timeout_s`` and
    ``feedback_ttl_s``, as the proxy's, makes several workers or pods one fleet: a label
    reaches any worker, one monitor per certificate version.

    The pre-call hook asks the upstream for logprobs and fills in the certificate's
    generation context where the client left it unset (a setting the client changed is
    reported: ``covered: false``). The post-call hooks guard the answer with every adapter's
    stream step: only an answer that ended with a documented finish can be certified. The
    verdict is the ``liftguard`` field of a certified stream's last chunk, of a completion,
    of a refusal, and of a block's ``error.provider_specific_fields.error``.

    Examples
    --------
        >>> import asyncio
        >>> from adapters.local import smollm2_certificate
        >>> guard = LiftGuardGuardrail(certificate=smollm2_certificate())
        >>> data = {"model": "m", "messages": [{"role": "user", "content": "Capital of France?"}]}
        >>> sent = asyncio.run(guard.async_pre_call_hook(None, None, data, "acompletion"))
        >>> sent["logprobs"], sent["temperature"], sent["max_tokens"]  # the certificate's context
        (True, 0.0, 24)
        >>> try:
        ...     LiftGuardGuardrail(certificate=smollm2_certificate(), guard_mode="fast")
        ... except GuardrailStartupError as exc:
        ...     print(exc.__cause__)
        guard_mode must be buffered or passthrough, got 'fast'
    """

    def __init__(self, **settings: Any) -> None:
        try:  # (the settings and their defaults: see _configure)
            self._configure(**settings)
        except Exception as exc:  # any of them: LiteLLM would start without the guardrail
            name = settings.get("guardrail_name") or "liftguard"
            raise GuardrailStartupError(
                f"the liftguard guardrail {name!r} cannot guard, so LiteLLM must not start "
                f"(it would serve the models unguarded): {exc}"
            ) from exc

    # -- pre-call ----------------------------------------------------------------------------

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: str
    ) -> dict[str, Any]:
        """Ask the upstream for the logprobs the certificate reads, with its context; any
        other route than a chat completion (``/v1/messages``, ``/v1/completions``, ...) is
        refused on a guarded model (HTTP 400): its answer would not be guarded."""
        if call_type not in _CHAT_CALLS:
            raise route_refusal(call_type)
        self._maybe_refresh()
        certificate, label = self.source.current()
        request_id = new_request_id()  # (not LiteLLM's call id: a client sets that one)
        try:
            request = prepare_request(
                data,
                certificate,
                label,
                request_id=request_id,
                mode="buffered" if self.guard_mode == "buffered" else "passthrough",
                top_logprobs=self.top_logprobs,
                max_answer_tokens=self.max_answer_tokens,
                allowed=self.allowed_fields,
            )
        except ConfigError as exc:
            body = error_body(str(exc), "liftguard_config_error", "certificate_unsupported")
            raise GuardrailHTTPError(500, body) from exc
        except RequestError as exc:
            body = error_body(str(exc), "invalid_request_error", "invalid_request", param=exc.param)
            raise GuardrailHTTPError(400, body) from exc
        if request.mismatches:
            logger.info(
                "request %s (LiteLLM call %r) changes %s: not covered",
                request_id, data.get("litellm_call_id"), request.mismatches,
            )  # fmt: skip
            if self.on_context_mismatch == "reject":
                refused = context_refusal(request.mismatches)
                body = error_body(
                    str(refused), "invalid_request_error", "context_mismatch", param=refused.param
                )
                raise GuardrailHTTPError(400, body)
        try:
            self._pending.add(data, request)
        except ValueError as exc:
            body = error_body(str(exc), "invalid_request_error", "bad_metadata", param="metadata")
            raise GuardrailHTTPError(400, body) from exc
        self.risk.begin(self.name, request_id)  # a label before the verdict: come back later
        return data

    async def async_pre_call_deployment_hook(
        self, kwargs: dict[str, Any], call_type: Any
    ) -> dict[str, Any]:
        """LiteLLM's own deployment-level step (``CustomGuardrail``'s), then: an attempt of a
        guarded whole (non-streamed) answer is sent with a client that reads at most
        ``max_answer_bytes`` of the upstream's body (:meth:`_bound_whole`): LiteLLM reads
        such a body to its end before any post-call hook sees it."""
        done = await super().async_pre_call_deployment_hook(kwargs, call_type)
        data = done if isinstance(done, dict) else kwargs
        chat = getattr(call_type, "value", call_type) == "acompletion"
        # (a whole answer of a request this guardrail prepared: a stream is capped as it comes)
        if chat and data.get("stream") is not True and self._pending.peek(data) is not None:
            self._bound_whole(data)
        return data

    async def refresh(self) -> bool:
        """Re-read the certificate's origin now (a store alias; a file never changes);
        True if a new version is in force (it gets a fresh risk monitor). A failure keeps
        the current certificate (logged)."""
        old = self.source.current()[1]
        try:
            changed = await asyncio.to_thread(self.source.refresh)
        except Exception as exc:
            logger.warning("refreshing %s failed: %s", self.source.describe(), exc)
            changed = False
        if changed:
            log_swap(f"liftguard guardrail {self.name}", old, self.source.current()[1])
            self.risk.sync()
        return changed

    async def async_post_call_response_headers_hook(
        self,
        data: dict[str, Any],
        user_api_key_dict: Any,
        response: Any,
        request_headers: dict[str, str] | None = None,
        litellm_call_info: dict[str, object] | None = None,
    ) -> dict[str, str] | None:
        """The request id of a guarded stream as the ``x-liftguard-request-id`` response header
        (the proxy's), before its first chunk: LiteLLM asks for a stream's headers before the
        iterator hook takes its request. (A whole answer's is set with its verdict.)"""
        request = self._pending.peek(data)
        return None if request is None else {HEADER_REQUEST_ID: request.request_id}

    async def async_post_call_failure_hook(
        self,
        request_data: dict[str, Any],
        original_exception: Exception,
        user_api_key_dict: Any,
        traceback_str: str | None = None,
    ) -> GuardrailHTTPError | None:
        """A guarded request that failed before a post-call hook took its answer: an upstream
        failure reaches the client as :func:`upstream_failure` (LiteLLM's error text may echo
        the upstream's key), a whole answer cut at ``max_answer_bytes`` blocked
        (:meth:`_cut_whole`), an error of the guardrail's own as it is."""
        request = self._request(request_data)
        if request is None or is_http_error(original_exception):
            return None
        cut = found_cut(original_exception)
        if cut is not None:
            return self._cut_whole(request, cut)
        return upstream_failure(original_exception)

    # -- streamed answers --------------------------------------------------------------------

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict[str, Any]
    ) -> AsyncGenerator[Any, None]:
        """Guard the stream: hold or pass chunks, end a blocked answer, close the upstream."""
        request = self._request(request_data)
        if request is None:  # not prepared by the pre-call hook, or forgotten: refused unread
            await aclose_upstream(response)
            raise untracked_refusal()
        answer = Answer(request, max_token_chars=self.max_token_chars, join=ModelResponseStream)
        last: Any = None
        first_id: Any = None
        ended = False
        chunks = upstream_chunks(response, answer)
        try:
            async for chunk in chunks:
                last = chunk
                first_id = first_id or getattr(chunk, "id", None)
                for out in self._step(answer, partial(answer.feed, chunk)):
                    yield out
                if answer.blocked:
                    break
            else:
                held = self._step(answer, answer.end)  # the verdict on the finish chunk
                for out in held:
                    yield out
                ended = True  # (only once every held chunk was taken: a client gone while
                # they were sent closes this generator at a yield, and the answer was not shown)
        finally:  # a block, an error, the client gone: no more tokens generated or paid for
            await chunks.aclose()
            await aclose_upstream(response)
            self._finished(answer, first_id, decided=ended or answer.blocked)
        if answer.blocked:
            yield self._blocked(answer, last)

    # -- whole answers -----------------------------------------------------------------------

    async def async_post_call_success_deployment_hook(
        self, request_data: dict[str, Any], response: Any, call_type: Any
    ) -> None:
        """Nothing: LiteLLM's ``CustomGuardrail`` runs the success hook here too, inside the
        router, for a guardrail attached to the model, and then again on the proxy's response.
        The answer is decided once, by the proxy's call (the one every guardrail gets), and a
        success hook that finds no prepared request refuses the answer."""
        return None

    async def async_post_call_success_hook(
        self, data: dict[str, Any], user_api_key_dict: Any, response: Any
    ) -> Any:
        """Decide on a whole (non-streamed) answer; the verdict travels with the response."""
        request = self._request(data)
        if request is None or not hasattr(response, "choices"):  # refused, never passed on
            raise untracked_refusal()
        answer = Answer(request, max_token_chars=self.max_token_chars)
        try:
            whole = completion_chunk(response, upstream_finish_reasons(data, response))
            self._step(answer, partial(answer.feed, whole))
            if not answer.blocked:
                self._step(answer, answer.end)
        except GuardrailHTTPError:
            self._finished(answer, getattr(response, "id", None), decided=False)
            raise
        self._finished(answer, getattr(response, "id", None), decided=True)
        only_relayed(response, whole=True)
        for choice in response.choices:
            strip_choice(choice, request.want_logprobs, request.top_k)
        if answer.blocked:
            logger.info("answer %s blocked: %s", request.request_id, answer.verdict.reason)
            if self.on_block == "error":
                raise GuardrailHTTPError(BLOCKED_STATUS, blocked_body(answer))
            refuse_completion(response, self.refusal_message)
        setattr(response, VERDICT_FIELD, answer.verdict_field())
        hidden = getattr(response, "_hidden_params", None)  # (LiteLLM's headers of a response)
        if isinstance(hidden, dict):
            headers = hidden.get("additional_headers")
            headers = dict(headers) if isinstance(headers, dict) else {}
            hidden["additional_headers"] = {**headers, HEADER_REQUEST_ID: request.request_id}
        return response
