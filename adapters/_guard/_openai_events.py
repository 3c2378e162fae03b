"""Parse OpenAI stream items into :class:`~guardrail.TokenEvent` objects (no SDK import).

Both parsers accept the SDK's objects (pydantic models from ``openai.types``) or
the same data as plain dicts, as decoded from the wire, and check the shape as
the installed SDK declares it:

- Chat Completions (``openai/types/chat/chat_completion_chunk.py``,
  ``chat_completion_token_logprob.py``): ``choices[i].logprobs.content[j]`` has
  ``token``, ``logprob`` (``-9999.0`` outside the top 20: passed on unchanged,
  the monitor treats it as censored), ``bytes`` (a list of ints, or null) and
  ``top_logprobs`` (possibly fewer than asked). One chunk can carry several
  tokens. Refusal tokens (``delta.refusal``, ``logprobs.refusal``) count like
  content: they are text shown to the user.
- Responses (``openai/types/responses/response_text_delta_event.py``):
  ``response.output_text.delta`` events carry ``logprobs`` without bytes (only
  with ``include=["message.output_text.logprobs"]``).

A delta with ``tool_calls``, ``function_call`` or ``audio`` (and the Responses
API's tool-call argument events) is flagged as a tool call: the guard blocks the
answer (cause ``tool_call``), since nothing it reads backs such content.

llama.cpp's own ``llama-server`` sends one entry per character, not per token, when a
character spans several byte tokens (an emoji of 3 byte tokens for SmolLM2: 8 entries
for 24 generated tokens): nothing while the character is incomplete, then one entry
whose ``token`` and ``bytes`` are the whole character and whose ``id``, ``logprob`` and
``top_logprobs`` are those of the byte token that completed it. Each such entry is one
event like any other: the text stays intact, but the monitor counts characters there
(``t`` and its token limit run behind the server's own count), never sees the other
byte tokens' logprobs, and a skeleton that looks a token up in its vocabulary (the
prompt-free skeleton) cannot place a whole character and raises
:class:`~guardrail.GuardrailError`.

Text that arrives without logprobs becomes one event with ``logprob=None``: the
monitor's ``on_missing_logprobs`` policy decides, no value is ever invented.
Wrong types raise :class:`~adapters.ProviderFormatError` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import itemgetter
from typing import Any, NamedTuple

from guardrail import TokenEvent
from guardrail._verdict import make_event

from .._errors import ProviderFormatError

__all__ = [
    "ChunkParts",
    "chat_chunk_parts",
    "events_from_chat_chunk",
]

_MISSING: Any = object()
_NOT_TEXT = ("tool_calls", "function_call", "audio")
"""Delta fields of content that is not text with logprobs (any non-empty value blocks)."""
_CHOICE_FIELDS = itemgetter("index", "finish_reason", "delta", "logprobs")
_ENTRY_FIELDS = itemgetter("token", "logprob", "bytes")
_TEXT_ONLY = frozenset(("role", "content"))
"""A delta with no field besides these has no refusal and no content of :data:`_NOT_TEXT`."""


class ChunkParts(NamedTuple):
    """What one provider item (a chunk or an event) carries for the guard.

    Examples
    --------
        >>> from guardrail import TokenEvent
        >>> parts = ChunkParts([TokenEvent("Paris", logprob=-0.1)], "Paris", finish="stop")
        >>> parts.text, parts.finish, parts.refusal
        ('Paris', 'stop', False)
    """

    events: list[TokenEvent]
    """One event per token (text without logprobs: one event with ``logprob=None``)."""
    text: str
    """The text the item adds to the answer."""
    finish: str | None = None
    """The provider's finish reason if the item ends the answer (OpenAI's names:
    ``"stop"``, ``"length"``, ``"content_filter"``, ...)."""
    refusal: bool = False
    """The item carries refusal text: the model declined to answer."""
    tool_call: bool = False
    """The item carries a tool or function call (or audio): content no certificate reads,
    so an answer that holds one is never certified."""
    stray_choice: str | None = None
    """A choice besides the one guarded (a second, a duplicate or missing index), in words:
    the guard would not read it, so the answer is blocked (``unguarded_choice``)."""


def _get(obj: Any, key: str) -> Any:
    """``obj[key]`` for a mapping, ``obj.key`` otherwise; ``_MISSING`` if absent."""
    if type(obj) is dict or isinstance(obj, Mapping):  # (a plain dict: no ABC check)
        return obj.get(key, _MISSING)
    return getattr(obj, key, _MISSING)


def _is_record(obj: Any) -> bool:
    return (
        type(obj) is dict
        or isinstance(obj, Mapping)
        or hasattr(obj, "__dict__")
        or hasattr(obj, "__slots__")
    )


def _bad(expected: str, value: Any, field: str) -> ProviderFormatError:
    got = "nothing" if value is _MISSING else type(value).__name__
    return ProviderFormatError(f"expected {expected}, got {got}", field=field)


def _opt(obj: Any, key: str) -> Any:
    value = _get(obj, key)
    return None if value is _MISSING else value


def _str_or_none(value: Any, field: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _bad("a string or null", value, field)


def _list_or_none(value: Any, field: str) -> list[Any] | tuple[Any, ...] | None:
    if value is None or isinstance(value, list | tuple):
        return value
    raise _bad("a list or null", value, field)


def _number_or_none(value: Any, field: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad("a number or null", value, field)
    return float(value)


def _token_bytes(value: Any, field: str, index: int) -> bytes:
    """``bytes`` of entry ``index`` of ``field``: a list of integers in 0..255."""
    # (map(type, ...): one C-level pass; a bool is not a byte)
    if isinstance(value, list | tuple) and set(map(type, value)) <= _INT:
        try:
            return bytes(value)
        except ValueError:  # outside 0..255
            pass
    raise ProviderFormatError(
        "expected a list of integers in 0..255 or null", field=f"{field}[{index}].bytes"
    )


_INT = frozenset({int})


def _top_logprobs(value: Any, field: str) -> tuple[tuple[str | int, float], ...]:
    entries = _list_or_none(value, field)
    out: list[tuple[str | int, float]] = []
    for i, entry in enumerate(entries or ()):
        if type(entry) is dict:
            token, logprob = entry.get("token"), entry.get("logprob")
        elif _is_record(entry):
            token, logprob = _opt(entry, "token"), _opt(entry, "logprob")
        else:
            raise _bad("an object", entry, f"{field}[{i}]")
        if type(token) is not str:
            token = _str_or_none(token, f"{field}[{i}].token")
        if type(logprob) is not float:
            logprob = _number_or_none(logprob, f"{field}[{i}].logprob")
        if token is not None and logprob is not None:  # an entry without both tells nothing
            out.append((token, logprob))
    return tuple(out)


def _token_events(
    entries: Any, field: str, *, with_bytes: bool, with_top: bool = True
) -> list[TokenEvent]:
    """One TokenEvent per logprob entry (``token``, ``logprob``, ``bytes``, ``top_logprobs``).

    ``with_top=False`` skips the alternatives (most of the parsing cost) for
    skeletons that do not read them. Field names for errors are built only on an
    error (this runs once per token)."""
    events: list[TokenEvent] = []
    append = events.append
    for i, entry in enumerate(entries):
        if type(entry) is dict:  # what JSON decoding gives: no ABC checks
            get = entry.get
            token, logprob, raw, top = get("token", _MISSING), get("logprob"), get("bytes"), \
                get("top_logprobs")  # fmt: skip
        elif _is_record(entry):
            token, logprob = _get(entry, "token"), _opt(entry, "logprob")
            raw, top = _opt(entry, "bytes"), _opt(entry, "top_logprobs")
        else:
            raise _bad("an object", entry, f"{field}[{i}]")
        if not isinstance(token, str):
            raise _bad("a string", token, f"{field}[{i}].token")
        if type(logprob) is not float:
            logprob = _number_or_none(logprob, f"{field}[{i}].logprob")
        raw = _token_bytes(raw, field, i) if with_bytes and raw is not None else None
        alternatives = (
            _top_logprobs(top, f"{field}[{i}].top_logprobs") if with_top and top is not None
            else ()
        )  # fmt: skip
        append(make_event(token, logprob, raw, alternatives))
    return events


def _segment(
    text: str | None, entries: Any, field: str, *, with_bytes: bool, with_top: bool = True
) -> tuple[list[TokenEvent], str]:
    """Events and shown text of one text segment: tokens with logprobs, else one bare event."""
    if entries:
        events = _token_events(entries, field, with_bytes=with_bytes, with_top=with_top)
        return events, text if text is not None else "".join(e.text for e in events)
    if text:
        return [TokenEvent(text=text, logprob=None)], text
    return [], ""


def chat_chunk_parts(chunk: Any, *, with_top: bool = True) -> ChunkParts:
    """Token events of the one choice of a ``ChatCompletionChunk`` (index 0), the text it
    adds, its ``finish_reason`` and whether it carries refusal text.

    A guarded answer is exactly one choice: a chunk with any other choice (an index other
    than 0, a duplicate index 0, a choice without an index) gives no events and says so in
    ``stray_choice``. ``with_top=False`` leaves ``top_logprobs`` empty (for skeletons that
    never read the alternatives; parsing them is most of the guard's per-token cost)."""
    if type(chunk) is dict:
        parts = _plain_chunk_parts(chunk, with_top)
        if parts is not None:
            return parts
    return _chunk_parts(chunk, with_top)


def _plain_chunk_parts(chunk: dict[str, Any], with_top: bool) -> ChunkParts | None:
    """:func:`chat_chunk_parts` of the common chunk, fast (it runs once per token): decoded
    JSON with no choice, or one dict choice of index 0 whose ``delta`` is a dict with text
    or nothing, no refusal and no tool call. None for anything else, which
    :func:`_chunk_parts` then reads or rejects with the field it names (the two agree:
    ``tests/adapters/test_openai_events_fast.py``)."""
    choices = chunk.get("choices")
    if type(choices) is not list:
        return None
    if not choices:
        return ChunkParts([], "")
    ch = choices[0]
    if len(choices) != 1 or type(ch) is not dict:
        return None
    try:  # (one C call for a choice with the four fields, as OpenAI sends it)
        index, finish, delta, logprobs = _CHOICE_FIELDS(ch)
    except KeyError:
        index, finish, delta = ch.get("index"), ch.get("finish_reason"), ch.get("delta")
        logprobs = ch.get("logprobs")
    if type(index) is not int or index != 0:
        return None
    if type(delta) is not dict or not (finish is None or type(finish) is str):
        return None
    entries = None
    if logprobs is not None:
        if type(logprobs) is not dict or logprobs.get("refusal"):
            return None
        entries = logprobs.get("content")
    get = delta.get
    text = get("content")
    if not (text is None or type(text) is str) or not (entries is None or type(entries) is list):
        return None
    if not _TEXT_ONLY.issuperset(delta) and (  # (one C call for the common delta)
        get("refusal")
        or get("tool_calls")  # (the fields of _NOT_TEXT, spelled out: this runs per token)
        or get("function_call")
        or get("audio")
    ):
        return None
    if entries:
        events = None if with_top else _plain_events(entries)
        if events is None:  # alternatives to read, or an entry out of the common shape
            where = "choices[0].logprobs.content"
            events = _token_events(entries, where, with_bytes=True, with_top=with_top)
        return ChunkParts(events, text if text is not None else "".join(e.text for e in events),
                          finish)  # fmt: skip
    if text:
        return ChunkParts([TokenEvent(text=text, logprob=None)], text, finish)
    return ChunkParts([], "", finish)


def _plain_events(entries: list[Any]) -> list[TokenEvent] | None:
    """The events of logprob entries of the common shape (a dict with a string ``token``, a
    float ``logprob`` and ``bytes`` a list of ints or null), alternatives left out; None if
    any entry has another shape (:func:`_token_events` then reads it, or names what is
    wrong). What :func:`_token_events` gives with ``with_top=False``, with fewer steps."""
    events: list[TokenEvent] = []
    append = events.append
    for entry in entries:
        if type(entry) is not dict:
            return None
        try:  # (one C call for an entry with the three fields)
            token, logprob, raw = _ENTRY_FIELDS(entry)
        except KeyError:
            token, logprob, raw = entry.get("token"), entry.get("logprob"), entry.get("bytes")
        if type(token) is not str or type(logprob) is not float:
            return None
        if raw is not None:
            if type(raw) is not list or not set(map(type, raw)) <= _INT:
                return None
            try:
                raw = bytes(raw)
            except ValueError:  # outside 0..255
                return None
        append(make_event(token, logprob, raw))
    return events


def _chunk_parts(chunk: Any, with_top: bool) -> ChunkParts:
    """:func:`chat_chunk_parts` of any chunk record (a dict, an SDK object), every field
    checked: a malformed chunk is a :class:`ProviderFormatError` naming the field."""
    if not _is_record(chunk):
        raise _bad("a chunk object", chunk, "chunk")
    choices = _get(chunk, "choices")
    if not isinstance(choices, list | tuple):
        raise _bad("a list", choices, "choices")
    indices: list[int | None] = []
    for pos, ch in enumerate(choices):
        if not _is_record(ch):
            raise _bad("an object", ch, f"choices[{pos}]")
        index = _opt(ch, "index")
        if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
            raise _bad("an integer", index, f"choices[{pos}].index")
        indices.append(index)
    if not choices:
        return ChunkParts([], "")  # e.g. the usage-only last chunk
    stray = _stray_choice(indices)
    if stray is not None:
        return ChunkParts([], "", stray_choice=stray)
    ch, base = choices[0], "choices[0]"
    finish = _str_or_none(_opt(ch, "finish_reason"), f"{base}.finish_reason")
    delta, logprobs = _opt(ch, "delta"), _opt(ch, "logprobs")
    for name, value in (("delta", delta), ("logprobs", logprobs)):
        if value is not None and not _is_record(value):
            raise _bad("an object or null", value, f"{base}.{name}")
    events: list[TokenEvent] = []
    shown = ""
    refusal = False
    tool_call = any(_opt(delta, key) for key in _NOT_TEXT)
    for key in ("content", "refusal"):
        text = _str_or_none(_opt(delta, key), f"{base}.delta.{key}")
        where = f"{base}.logprobs.{key}"
        entries = _list_or_none(_opt(logprobs, key), where)
        evs, txt = _segment(text, entries, where, with_bytes=True, with_top=with_top)
        events += evs
        shown += txt
        refusal = refusal or (key == "refusal" and bool(evs))
    return ChunkParts(events, shown, finish, refusal, tool_call)


def _stray_choice(indices: list[int | None]) -> str | None:
    """What the choices' indices hold besides one choice of index 0, in words, or None."""
    if None in indices:
        return "a choice without an index"
    if indices.count(0) > 1:
        return f"{indices.count(0)} choices with index 0"
    other = next((i for i in indices if i != 0), None)
    return None if other is None else f"a choice with index {other}"


def events_from_chat_chunk(chunk: Any) -> list[TokenEvent]:
    """Token events of ``choices[index == 0]`` in one Chat Completions stream chunk.

    Accepts an ``openai.types.chat.ChatCompletionChunk`` or the same data as a
    dict. Several tokens per chunk give several events; text without logprobs
    gives one event with ``logprob=None``; chunks without text give ``[]``.
    """
    return chat_chunk_parts(chunk)[0]
