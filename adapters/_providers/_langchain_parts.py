"""What the LangChain handler reads from chunks, generations and runs (pure; no LangChain
import at run time): text, token events, finish reasons, refusals, the settings of a run
compared with a certificate's generation context, and what a chat model's stream will
carry (read from its settings, checked against the certificate when a guard is built)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from guardrail import Cause, Certificate, GuardrailBlocked, TokenEvent, Verdict

from .._guard._context import Supplies, check_supplies
from .._guard._openai_events import ChunkParts, _bad, _list_or_none, _segment
from .._guard._settings import Mismatch, context_mismatches
from .._guard._stream import StreamStep, blocked_error

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

__all__ = [
    "LANGCHAIN_STREAM",
    "IgnoresOtherEvents",
    "Run",
    "blocked",
    "chat_model_supplies",
    "check_model",
    "content_text",
    "context_checks",
    "finish_of",
    "given",
    "has_tool_calls",
    "logprobs_of",
    "refusal_of",
    "token_events",
    "token_parts",
]


LANGCHAIN_STREAM = Supplies(
    "a LangChain chat model's stream (OpenAI-format token logprobs)", logprobs=None
)
"""What any chat-model run carries, as far as the handler can tell without the model."""
_MISSING_HINT = (
    " (LangChain passed no token logprobs: create the chat model with logprobs=True "
    "and use the Chat Completions API; the Responses API path drops streamed logprobs)"
)
_SETTINGS = ("logprobs", "top_logprobs")


class IgnoresOtherEvents:
    """Mixed into the handler: LangChain skips the hooks of the event families a handler
    ignores (chains, agents, retrievers, retries, custom events): only model runs."""

    @property
    def ignore_chain(self) -> bool:
        return True

    @property
    def ignore_agent(self) -> bool:
        return True

    @property
    def ignore_retriever(self) -> bool:
        return True

    @property
    def ignore_retry(self) -> bool:
        return True

    @property
    def ignore_custom_event(self) -> bool:
        return True


def blocked(verdict: Verdict) -> GuardrailBlocked:
    """The handler's error for a blocked run (a hint where logprobs were missing)."""
    if verdict.cause is Cause.MISSING_LOGPROBS:
        return GuardrailBlocked(verdict, f"{verdict.reason}{_MISSING_HINT}")
    return blocked_error(verdict)


def chat_model_supplies(runnable: object) -> list[Supplies]:
    """What each OpenAI-style chat model inside ``runnable`` will stream, read from its
    settings: ``logprobs`` and ``top_logprobs`` (langchain-openai's ``ChatOpenAI`` fields,
    where it also moves them from ``model_kwargs``), overridden by kwargs bound with
    ``.bind(...)``; its
    ``use_responses_api`` path streams none. Found through bound models, sequences
    (``prompt | llm | parser``), parallel maps and fallbacks; a model of another kind
    is not known (nothing is said of it)."""
    out: list[Supplies] = []
    _walk(runnable, {}, out, set())
    return out


def check_model(certificate: Certificate, model: object) -> None:
    """A :class:`~guardrail.ConfigError` now if a chat model inside ``model`` will not
    stream what ``certificate`` reads (see :func:`chat_model_supplies`)."""
    for supplies in chat_model_supplies(model):
        check_supplies(certificate, supplies)


def _walk(node: object, bound: Mapping[str, Any], out: list[Supplies], seen: set[int]) -> None:
    if id(node) in seen:
        return
    seen.add(id(node))
    fields = getattr(type(node), "model_fields", None)
    if isinstance(fields, Mapping) and all(name in fields for name in _SETTINGS):
        out.append(_model_supplies(node, bound))
        return
    inner = getattr(node, "bound", None)
    if inner is not None:  # RunnableBinding: outer kwargs win, as at call time
        kwargs = getattr(node, "kwargs", None)
        _walk(inner, {**(kwargs if isinstance(kwargs, Mapping) else {}), **bound}, out, seen)
        return
    children: list[object] = []
    for name in ("steps", "fallbacks"):  # RunnableSequence; RunnableWithFallbacks
        value = getattr(node, name, None)
        children += value if isinstance(value, list) else []
    parallel = getattr(node, "steps__", None)  # RunnableParallel
    children += list(parallel.values()) if isinstance(parallel, Mapping) else []
    first = getattr(node, "runnable", None)  # RunnableWithFallbacks
    children += [first] if first is not None else []
    for child in children:
        _walk(child, {}, out, seen)


def _model_supplies(model: object, bound: Mapping[str, Any]) -> Supplies:
    name = type(model).__name__
    settings = {key: bound.get(key, getattr(model, key, None)) for key in _SETTINGS}
    if getattr(model, "use_responses_api", None) is True:
        return Supplies(
            f"{name}(use_responses_api=True) (langchain-openai's Responses API path drops "
            "streamed logprobs)",
            logprobs=False,
            fix=f"create it with {name}(..., use_responses_api=False, logprobs=True, "
            "top_logprobs={k})",
        )
    logprobs, top = settings["logprobs"], settings["top_logprobs"]
    source = f"the chat model {name}(logprobs={logprobs!r}, top_logprobs={top!r})"
    fix = f"create it with {name}(..., logprobs=True, top_logprobs={{k}})"
    if logprobs is not True:
        return Supplies(source, logprobs=False, alternatives=0, fix=fix)
    count = top if isinstance(top, int) and not isinstance(top, bool) else 0
    return Supplies(source, alternatives=count, fix=fix)


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


_ROLES = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}
LANGCHAIN_PARAMS = ("_type", "model_name")
"""What a run's invocation parameters hold besides the request's fields (LangChain's names
of the model class and the model): no change of the generation context."""


def context_checks(
    certificate: Certificate, params: Mapping[str, Any], messages: list[list[BaseMessage]]
) -> list[Mismatch]:
    """Each setting a run changed, by the one settings check
    (:func:`~adapters._guard._settings.context_mismatches`) on the request as sent: the run's
    invocation parameters (``model_name`` as ``model``, ``model_kwargs`` and ``extra_body``
    merged in) and its first prompt's messages. Nothing is filled in here, so a setting the
    certificate records and the run leaves unset is a change; a field that is not on the
    allowlist of request fields (LangChain's own names aside) is one too."""
    request = dict(params)
    if "model" not in request and "model_name" in request:
        request["model"] = request["model_name"]
    kwargs = request.pop("model_kwargs", None)
    if isinstance(kwargs, Mapping):
        request.update(kwargs)
    if messages:
        request["messages"] = [
            {"role": _ROLES.get(m.type, m.type), "content": m.content} for m in messages[0]
        ]
    return context_mismatches(certificate, request, as_sent=True, allowed=LANGCHAIN_PARAMS)


def has_tool_calls(generation: Any) -> bool:
    """The generation (or stream chunk) carries a tool call, whole, partial or invalid."""
    message = getattr(generation, "message", None)
    return any(
        getattr(message, name, None)
        for name in ("tool_calls", "tool_call_chunks", "invalid_tool_calls")
    )


def given(parts: ChunkParts) -> ChunkParts:
    """The handler's parser: it parses each chunk itself (it knows the run's tool-call
    state), and hands the step the parts."""
    return parts


class Run:
    """One run the handler watches: its :class:`StreamStep` and what the handler knows
    beyond one chunk (text fed yet, a tool call seen)."""

    __slots__ = ("fed", "step", "tool_call")

    def __init__(self, step: StreamStep[str]) -> None:
        self.step, self.fed, self.tool_call = step, False, False
