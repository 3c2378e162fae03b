"""Parse OpenAI Responses stream events into :class:`~guardrail.TokenEvent` objects (no SDK
import): ``response.output_text.delta`` events carry ``logprobs`` without bytes (only with
``include=["message.output_text.logprobs"]``); the events that end a response give its
finish; tool-call argument events are flagged as tool calls (see
:mod:`adapters._guard._openai_events`, whose checks this reads with)."""

from __future__ import annotations

from typing import Any

from guardrail import TokenEvent

from ._openai_events import ChunkParts, _bad, _get, _is_record, _list_or_none, _opt, _segment

__all__ = ["events_from_responses_event", "responses_event_parts"]

RESPONSES_TEXT_DELTA = "response.output_text.delta"
RESPONSES_REFUSAL_DELTA = "response.refusal.delta"
_RESPONSES_TOOL_EVENTS = frozenset(
    {"response.function_call_arguments.delta", "response.custom_tool_call_input.delta"}
)
_RESPONSES_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


def responses_event_parts(event: Any) -> ChunkParts:
    """Token events of a ``response.output_text.delta`` event and its text; the finish of
    ``response.completed`` (``"stop"``) and ``response.incomplete`` (``"length"`` for
    ``max_output_tokens``, ``"content_filter"``); a refusal for ``response.refusal.delta``."""
    if not _is_record(event):
        raise _bad("an event object", event, "event")
    kind = _get(event, "type")
    if kind == "response.completed":
        return ChunkParts([], "", "stop")
    if kind == "response.incomplete":
        details = _opt(_opt(event, "response"), "incomplete_details")
        reason = _opt(details, "reason") if details is not None else None
        return ChunkParts([], "", _RESPONSES_INCOMPLETE.get(str(reason), "incomplete"))
    if kind == "response.failed":
        return ChunkParts([], "", "failed")
    if kind in _RESPONSES_TOOL_EVENTS:
        return ChunkParts([], "", None, False, True)
    if kind == RESPONSES_REFUSAL_DELTA:
        delta = _get(event, "delta")
        text = delta if isinstance(delta, str) else ""
        return ChunkParts([TokenEvent(text=text, logprob=None)], text, None, True)
    if kind != RESPONSES_TEXT_DELTA:
        return ChunkParts([], "")
    delta = _get(event, "delta")
    if not isinstance(delta, str):
        raise _bad("a string", delta, "delta")
    entries = _list_or_none(_opt(event, "logprobs"), "logprobs")
    events, text = _segment(delta, entries, "logprobs", with_bytes=False)
    return ChunkParts(events, text)


def events_from_responses_event(event: Any) -> list[TokenEvent]:
    """Token events of one Responses stream event (``response.output_text.delta`` only).

    Accepts an ``openai.types.responses.ResponseTextDeltaEvent`` or a dict; the
    Responses API gives no token bytes, so ``bytes`` is always None. Other event
    types give ``[]``.
    """
    return responses_event_parts(event)[0]
