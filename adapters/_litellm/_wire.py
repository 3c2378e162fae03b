"""What a blocked answer becomes on LiteLLM's wire: the error LiteLLM relays, or the refusal.

Checked against litellm 1.110.2: an ``HTTPException`` raised in a post-call hook reaches the
client with OpenAI's error shape (its ``type`` attribute as ``error.type``, its ``detail`` as
``error.provider_specific_fields``); a chunk or a completion the hook returns is what the
client gets, an extra attribute (``liftguard``) as a field of it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from fastapi import HTTPException
from litellm.types.utils import Delta, ModelResponseStream, StreamingChoices

from .._serving._wire import BLOCKED_TYPE, UPSTREAM_TYPE, VERDICT_FIELD, error_body
from ._answer import Answer

__all__ = [
    "BLOCKED_STATUS",
    "GuardrailHTTPError",
    "blocked_body",
    "is_http_error",
    "refusal_chunk",
    "refuse_completion",
    "route_refusal",
    "untracked_refusal",
    "upstream_chunks",
    "upstream_failure",
]

BLOCKED_STATUS = 422
"""The HTTP status of a blocked answer (the proxy's, for a non-streamed request)."""
UNTRACKED_STATUS = 503
"""The HTTP status of an answer whose request the guardrail has no record of."""


class GuardrailHTTPError(HTTPException):  # type: ignore[misc]  # (fastapi is not type-checked)
    """An error LiteLLM relays to the client with OpenAI's error shape: ``type`` becomes
    ``error.type`` and ``param`` ``error.param``; ``detail`` (the proxy's error body)
    becomes ``error.provider_specific_fields``."""

    def __init__(self, status: int, detail: dict[str, Any]) -> None:
        super().__init__(status_code=status, detail=detail)
        self.type = detail["error"]["type"]
        self.param = detail["error"].get("param")


def blocked_body(answer: Answer) -> dict[str, Any]:
    """The error body of a blocked answer (type ``liftguard_blocked``, the cause as code)."""
    verdict = answer.verdict
    return error_body(
        f"liftguard {verdict.reason}",
        BLOCKED_TYPE,
        verdict.cause.value,
        verdict=answer.verdict_field(),
    )


def refusal_chunk(answer: Answer, like: Any, message: str) -> Any:
    """The chunk that ends a blocked stream with ``message`` (finish ``content_filter``),
    with ``like``'s id, creation time and model."""
    choice = StreamingChoices(
        index=0,
        delta=Delta(role="assistant", content=message),
        finish_reason="content_filter",
    )
    chunk = ModelResponseStream(choices=[choice])
    for name in ("id", "created", "model"):
        value = getattr(like, name, None)
        if value is not None:
            setattr(chunk, name, value)
    setattr(chunk, VERDICT_FIELD, answer.verdict_field())
    return chunk


def refuse_completion(response: Any, message: str) -> None:
    """A blocked whole answer as one refusal choice (``message``, finish ``content_filter``):
    whatever else its choices carried (text, tool calls, other choices) is dropped."""
    choice = response.choices[0]
    choice.index = 0
    choice.message.content = message
    for name in ("tool_calls", "function_call", "audio"):
        if getattr(choice.message, name, None) is not None:
            setattr(choice.message, name, None)
    choice.finish_reason = "content_filter"
    choice.logprobs = None
    response.choices = [choice]


async def upstream_chunks(response: Any, answer: Answer) -> AsyncGenerator[Any, None]:
    """``response``'s chunks; an upstream that fails mid-answer (an error event, a broken
    stream: LiteLLM raises, with the upstream's text, which may echo its key) ends the answer
    with the proxy's upstream error (HTTP 502), naming the exception's class only."""
    try:
        async for chunk in response:
            yield chunk
    except Exception as exc:
        reason = f"the upstream failed mid-answer ({type(exc).__name__})"
        answer.fail("upstream_error", reason)
        body = error_body(reason, UPSTREAM_TYPE, "upstream_error", verdict=answer.verdict_field())
        # (not chained: the upstream's text, its key in it, would reach LiteLLM's logs)
        raise GuardrailHTTPError(502, body) from None


def is_http_error(exc: BaseException) -> bool:
    """``exc`` is an HTTP error LiteLLM's proxy or a hook raised (its own text), not an
    upstream's failure."""
    return isinstance(exc, HTTPException)


def upstream_failure(exc: BaseException) -> GuardrailHTTPError:
    """The error a client gets for an upstream that failed before its answer came: the
    upstream's status when it is a client error (a 401, a 429), else 502, and a message that
    names the exception's class only (LiteLLM's text of it may echo the upstream's key)."""
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int) or not 400 <= status < 500:
        status = 502
    reason = f"the upstream failed (HTTP {status}, {type(exc).__name__})"
    return GuardrailHTTPError(status, error_body(reason, UPSTREAM_TYPE, "upstream_error"))


def route_refusal(call_type: str) -> GuardrailHTTPError:
    """The error a request to a guarded model gets on a route the guardrail does not guard
    (LiteLLM's ``call_type``: ``anthropic_messages``, ``atext_completion``, ...): HTTP 400."""
    reason = (
        f"this model is guarded by liftguard, which guards chat completions "
        f"(/v1/chat/completions) only: a {call_type} request is refused"
    )
    return GuardrailHTTPError(400, error_body(reason, "invalid_request_error", "route_not_guarded"))


def untracked_refusal() -> GuardrailHTTPError:
    """The error an answer gets when the guardrail has no record of its request (the
    pre-call hook did not prepare it, or it was forgotten past the bound on requests in
    flight): refused unread, never passed through (HTTP 503)."""
    reason = (
        "liftguard has no record of this request (not prepared by its pre-call hook, or "
        "forgotten among too many requests in flight): the answer is refused unread"
    )
    return GuardrailHTTPError(
        UNTRACKED_STATUS, error_body(reason, "liftguard_unguarded", "request_not_tracked")
    )
