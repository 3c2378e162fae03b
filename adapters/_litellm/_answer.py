"""The LiteLLM guardrail's rules, sans I/O (no LiteLLM import): the upstream request a client
request becomes, and one guarded answer, chunks in, the chunks the client may see out.

:func:`prepare_request` is the serving core's preparation
(:func:`~adapters._serving._prepare.prepare_upstream`, as the proxy's) for a request that
LiteLLM sends on: the certificate's generation context filled in (the model left out: LiteLLM's
``model`` is a routing name), the settings the client changed reported, and the upstream asked
for the logprobs and alternatives the certificate reads. Unlike the proxy it keeps ``stream`` as
the client asked: LiteLLM hands a streamed answer to the iterator hook and a whole one to the
success hook.

:class:`Answer` is the serving core's answer
(:class:`~adapters._serving._answer.ServedAnswer`, as the proxy's) over LiteLLM's chunk
objects: the chunk with ``finish_reason`` is released only with a certified final verdict,
and what the client did not ask for (logprobs, alternatives past its ``top_logprobs``) is
stripped from every chunk it gets, as is every field the serving core does not relay
(:func:`only_relayed`: reasoning, vendor and unknown fields).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from typing import Any

from guardrail import Certificate

from .._guard._settings import pack_extra_body
from .._guard._stream import DEFAULT_MAX_TOKEN_CHARS, Mode
from .._serving._answer import ServedAnswer
from .._serving._prepare import (
    DEFAULT_MAX_ANSWER_TOKENS,
    LITELLM_FIX,
    GuardedRequest,
    prepare_upstream,
)
from .._serving._relay import (
    RELAYED_CHOICE,
    RELAYED_CHUNK,
    RELAYED_DELTA,
    RELAYED_LOGPROBS,
    RELAYED_WHOLE_CHOICE,
    unrelayed,
)
from .._serving._wire import merge_released

__all__ = [
    "Answer",
    "GuardedRequest",
    "completion_chunk",
    "joined_chunks",
    "only_relayed",
    "prepare_request",
    "strip_choice",
    "upstream_finish_reasons",
]


def prepare_request(
    data: dict[str, Any],
    certificate: Certificate,
    label: str,
    *,
    request_id: str,
    mode: Mode,
    top_logprobs: int | None,
    max_answer_tokens: int = DEFAULT_MAX_ANSWER_TOKENS,
    allowed: Collection[str] = (),
) -> GuardedRequest:
    """Fill ``data`` (LiteLLM's request, changed in place) with the certificate's generation
    context and the logprobs it reads (the serving core's
    :func:`~adapters._serving._prepare.prepare_upstream`, the model left out: LiteLLM's
    ``model`` is a routing name); what the post-call hooks need to guard the answer.

    The settings a client library does not take as arguments (llama.cpp's
    ``repeat_penalty``, and what the client sent in ``extra_body``) go to the upstream in
    ``extra_body``. ``max_answer_tokens``: the guardrail's cap on the tokens read of one
    answer; ``allowed``: the fields of ``data`` besides the allowlist that are no change
    (LiteLLM's own, and those its operator allows). Raises what :func:`prepare_upstream`
    raises."""
    ask = prepare_upstream(
        certificate, data, top_logprobs=top_logprobs, routed_model=True, fix=LITELLM_FIX,
        allowed=allowed,
    )  # fmt: skip
    body = pack_extra_body(ask.body, set(ask.extra_keys))
    body.pop("model", None)
    for key in ("extra_body", *ask.extra_keys):
        data.pop(key, None)
    data.update(body)
    return GuardedRequest.of(
        ask, certificate, label, request_id=request_id, mode=mode,
        max_answer_tokens=max_answer_tokens,
    )  # fmt: skip


class Answer(ServedAnswer[Any]):
    """The serving core's answer (:class:`~adapters._serving._answer.ServedAnswer`)
    over LiteLLM's chunk objects (or :func:`completion_chunk` of a whole response): each
    released chunk stripped of what the client did not ask for. ``join`` (LiteLLM's chunk
    class) joins the text chunks released at the end into one."""

    def __init__(
        self,
        request: GuardedRequest,
        *,
        max_token_chars: int = DEFAULT_MAX_TOKEN_CHARS,
        join: Callable[..., Any] | None = None,
    ) -> None:
        super().__init__(request, max_token_chars=max_token_chars)
        self._join = join

    def strip(self, chunk: Any) -> Any:
        only_relayed(chunk)
        for choice in _field(chunk, "choices") or ():
            strip_choice(choice, self.request.want_logprobs, self.request.top_k)
        return chunk

    def released(self, chunks: list[Any]) -> list[Any]:
        """With ``join``: the plain text chunks joined (:func:`joined_chunks`)."""
        return joined_chunks(chunks, self._join) if self._join is not None else chunks


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _set(obj: Any, name: str, value: Any) -> None:
    if isinstance(obj, dict):
        obj[name] = value
    else:
        setattr(obj, name, value)


def only_relayed(response: Any, *, whole: bool = False) -> None:
    """``response`` (a LiteLLM chunk, or a whole completion with ``whole``) without the
    fields the serving core does not relay (:mod:`adapters._serving._relay`), in place:
    each is removed, or set to None where the object declares it (LiteLLM sends no field
    that is None)."""
    _drop(response, RELAYED_CHUNK)
    choice_keys, part = (RELAYED_WHOLE_CHOICE, "message") if whole else (RELAYED_CHOICE, "delta")
    for choice in _field(response, "choices") or ():
        _drop(choice, choice_keys)
        _drop(_field(choice, part), RELAYED_DELTA)
        _drop(_field(choice, "logprobs"), RELAYED_LOGPROBS)


def _drop(record: Any, keys: frozenset[str]) -> None:
    if record is None:
        return
    if isinstance(record, dict):
        for name in unrelayed(record, keys):
            del record[name]
        return
    extra = getattr(record, "__pydantic_extra__", None)
    if isinstance(extra, dict):
        for name in unrelayed(extra, keys):
            del extra[name]
    for name in unrelayed(getattr(type(record), "model_fields", ()), keys):
        if getattr(record, name, None) is not None:
            setattr(record, name, None)


def strip_choice(choice: Any, want_logprobs: bool, top_k: int) -> None:
    """``choice`` (a chunk's or a completion's, an object or a dict) without what the
    client did not ask for: its ``logprobs`` (None) unless it asked for them, else at most
    ``top_k`` alternatives per token. Changed in place."""
    logprobs = _field(choice, "logprobs")
    if logprobs is None:
        return
    if not want_logprobs:
        _set(choice, "logprobs", None)
        return
    for key in ("content", "refusal"):
        for entry in _field(logprobs, key) or ():
            top = _field(entry, "top_logprobs")
            if isinstance(top, list) and len(top) > top_k:
                _set(entry, "top_logprobs", top[:top_k])


def completion_chunk(
    response: Any, finish_reasons: Mapping[int, Any] | None = None
) -> dict[str, Any]:
    """A whole (non-streamed) completion as the one chunk of its answer: each choice's
    message as its ``delta``, with its ``index``, ``logprobs`` and ``finish_reason``, so that
    it goes through the same step as a stream (which blocks a completion of several
    choices, or of a choice without index 0). ``finish_reasons`` (by choice index): the
    upstream's own (:func:`upstream_finish_reasons`), in place of the response's."""
    choices = []
    for choice in _field(response, "choices") or ():
        message = _field(choice, "message")
        delta = {
            key: _field(message, key)
            for key in ("content", "refusal", "tool_calls", "function_call", "audio")
        }
        index = _field(choice, "index")
        finish = _field(choice, "finish_reason")
        if finish_reasons is not None and index in finish_reasons:
            finish = finish_reasons[index]
        choices.append(
            {"index": index, "delta": delta, "logprobs": _field(choice, "logprobs"),
             "finish_reason": finish}
        )  # fmt: skip
    return {"choices": choices}


def upstream_finish_reasons(data: Mapping[str, Any], response: Any) -> dict[int, Any] | None:
    """The finish reason the upstream itself sent for each choice of a whole answer, by
    index, read from LiteLLM's record of the upstream's response (its logging object's
    ``original_response``: the upstream's JSON for an OpenAI-compatible provider), when
    that record is of ``response`` (the same ``id``); None when LiteLLM kept none usable.

    LiteLLM's own response has a missing finish reason filled in as ``"stop"``
    (``litellm.types.utils.Choices``), so that a whole answer the upstream cut off would
    read as one that ended; the upstream's record says it did not."""
    details = getattr(data.get("litellm_logging_obj"), "model_call_details", None)
    raw = details.get("original_response") if isinstance(details, dict) else None
    if not isinstance(raw, str | bytes):
        return None
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    rid = _field(response, "id")
    if not isinstance(obj, dict) or not isinstance(rid, str) or obj.get("id") != rid:
        return None
    choices = obj.get("choices")
    if not isinstance(choices, list):
        return None
    out: dict[int, Any] = {}
    for choice in choices:
        index = choice.get("index", 0) if isinstance(choice, dict) else None
        if isinstance(index, int):
            out[index] = choice.get("finish_reason")
    return out


def joined_chunks(held: list[Any], build: Callable[..., Any]) -> list[Any]:
    """``held`` (chunk objects released at once) with their plain text chunks joined, as
    the proxy joins them (:func:`~adapters._serving._wire.merge_released`, here on the
    chunks' dumps; ``build(**dump)`` makes a joined chunk, LiteLLM's
    ``ModelResponseStream``): LiteLLM then serialises, and the client parses, one chunk
    for the text instead of one per token. Chunks that are not joined go out as the same
    objects; a joined one keeps its first chunk's ``_hidden_params``."""
    if len(held) < 3:
        return held
    dumps = [c.model_dump(exclude_none=True) if hasattr(c, "model_dump") else {} for c in held]
    kept = {id(d): c for d, c in zip(dumps, held, strict=True)}
    hidden = getattr(held[0], "_hidden_params", None)
    out = []
    for dump in merge_released(dumps):
        chunk = kept.get(id(dump))
        if chunk is None:  # a joined run
            chunk = build(**dump)
            if hidden is not None:
                chunk._hidden_params = hidden
        out.append(chunk)
    return out
