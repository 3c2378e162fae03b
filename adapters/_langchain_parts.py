"""What the LangChain handler reads from chunks, generations and runs (pure; no LangChain
import at run time): text, token events, finish reasons, refusals and the settings of a run
compared with a certificate's generation context."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from guardrail import Certificate, TokenEvent

from ._openai_events import _bad, _list_or_none, _segment

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

__all__ = [
    "content_text",
    "context_checks",
    "finish_of",
    "has_tool_calls",
    "logprobs_of",
    "refusal_of",
    "token_events",
    "token_parts",
]


def content_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or the text blocks of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and block.get("type") == "text":
                text = block.get("text")
                parts.append(text if isinstance(text, str) else "")
        return "".join(parts)
    return ""


def logprobs_of(record: Any) -> Any:
    """``generation_info["logprobs"]``, else ``message.response_metadata["logprobs"]``."""
    info = getattr(record, "generation_info", None)
    if isinstance(info, Mapping) and info.get("logprobs") is not None:
        return info["logprobs"]
    meta = getattr(getattr(record, "message", None), "response_metadata", None)
    return meta.get("logprobs") if isinstance(meta, Mapping) else None


def token_events(text: str, logprobs: Any) -> list[TokenEvent]:
    """Token events of one LangChain chunk: ``logprobs`` as OpenAI's ``choice.logprobs``.

    ``{"content": [...], "refusal": [...]}`` (a bare list counts as ``content``);
    text without logprob entries gives one event with ``logprob=None`` (the
    monitor's missing-logprobs policy decides); no text and no entries: none.
    """
    return token_parts(text, logprobs)[0]


def token_parts(text: str, logprobs: Any) -> tuple[list[TokenEvent], bool]:
    """:func:`token_events` and whether there were refusal tokens."""
    if logprobs is None or isinstance(logprobs, list | tuple):
        return _segment(text, logprobs, "logprobs.content", with_bytes=True)[0], False
    if not isinstance(logprobs, Mapping):
        raise _bad("an object, a list or null", logprobs, "logprobs")
    events: list[TokenEvent] = []
    refusal = False
    for key, shown in (("content", text), ("refusal", None)):
        where = f"logprobs.{key}"
        entries = _list_or_none(logprobs.get(key), where)
        found = _segment(shown, entries, where, with_bytes=True)[0]
        refusal = refusal or (key == "refusal" and bool(found))
        events += found
    return events, refusal


def finish_of(record: Any) -> str | None:
    """The finish reason a chunk or generation carries (``generation_info`` or the
    message's ``response_metadata``, as langchain-openai puts it), or None."""
    for info in (
        getattr(record, "generation_info", None),
        getattr(getattr(record, "message", None), "response_metadata", None),
    ):
        if isinstance(info, Mapping):
            reason = info.get("finish_reason")
            if isinstance(reason, str):
                return reason
    return None


def refusal_of(record: Any) -> bool:
    """The message carries refusal text (langchain-openai: ``additional_kwargs["refusal"]``)."""
    extra = getattr(getattr(record, "message", None), "additional_kwargs", None)
    return isinstance(extra, Mapping) and bool(extra.get("refusal"))


def context_checks(
    certificate: Certificate, params: Mapping[str, Any], messages: list[list[BaseMessage]]
) -> list[tuple[str, object, object]]:
    """``(setting, requested, calibrated)`` for each setting a run changed."""
    ctx = certificate.context
    out: list[tuple[str, object, object]] = []
    api_model = certificate.model.api_model
    model = params.get("model_name", params.get("model"))
    if api_model is not None and model is not None and model != api_model:
        out.append(("model", model, api_model))
    for key, value in ctx.request_settings().items():
        given = params.get(key)
        if given is not None and given != value and key != "stop":
            out.append((key, given, value))
    if ctx.system_prompt is not None and messages:
        system = next((m.content for m in messages[0] if m.type == "system"), None)
        if system != ctx.system_prompt:
            out.append(("system prompt", system, ctx.system_prompt))
    return out


def has_tool_calls(generation: Any) -> bool:
    return bool(getattr(getattr(generation, "message", None), "tool_calls", None))
