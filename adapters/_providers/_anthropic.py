"""Guard Anthropic Messages streams, scoring the streamed text with a local model.

Anthropic's Messages API returns **no token log-probabilities**: a stream
(``client.messages.create(..., stream=True)``) carries ``message_start``,
``content_block_start``, ``content_block_delta`` (``text_delta`` with the text),
``content_block_stop``, ``message_delta`` and ``message_stop`` events (the
SDK drops ``ping`` and raises ``APIStatusError`` for an ``error`` event). So
the answer text is scored by a local scorer model with teacher forcing
(:class:`LocalTextScorer`); the probabilities are the scorer's, not Claude's,
and the calibration, skeleton (e.g. ``UniformSkeleton(scorer.vocab_size)``) and
scorer prompt must be those of that scorer. Without a scorer there is nothing
to certify with: :func:`guarded_message` raises :class:`~guardrail.ConfigError`.
Nothing is ever made up: text is shown only as the scorer's final tokens
(the last word is held until the next whitespace or the end, see
:mod:`adapters._providers._scorer`), except after the verdict is final, when the monitor
reads no more tokens and later text is passed on unscored (``logprob=None``).

Only text blocks are guarded and yielded (several are concatenated as they
come); thinking, signature, citation and tool-input deltas are neither scored
nor yielded. A tool-use block blocks the answer (cause ``tool_call``): nothing
scored backs it, whatever ``stop_reason`` follows. The scorer runs llama.cpp
inside the event loop (tens of ms per word for SmolLM2-135M).

What the scorer supplies (:data:`SCORER_SUPPLIES`): each token's teacher-forced
logprob, nothing else -- no alternatives and no exact entropy (it reads only the
emitted token's score). A certificate whose fitted statistic reads either is
refused with a :class:`~guardrail.ConfigError` when the guard is built.

``pip install "liftguard[anthropic,local]"``. The SDK is imported only for type
checking: streams and clients are duck-typed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterable, Generator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

from guardrail import Certificate, ConfigError, Monitor, TokenEvent

from .._errors import ProviderFormatError
from .._guard._context import Supplies, monitor_for
from .._guard._openai_events import ChunkParts
from .._guard._stream import Mode, OnBlock, StreamStep, aguard, guard
from .._local._model import SMOLLM2_SYSTEM, smollm2_chat_prompt
from ._scorer import LocalTextScorer

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic
    from anthropic.types import MessageParam, RawMessageStreamEvent, TextBlockParam

    from .._local._model import LocalModel

    StreamEvent = RawMessageStreamEvent | Mapping[str, Any]

__all__ = [
    "SCORER_SUPPLIES",
    "anthropic_scorer_prompt",
    "guard_anthropic_stream",
    "guard_anthropic_stream_sync",
    "guarded_message",
]

log = logging.getLogger(__name__)

NO_LOGPROBS = (
    "Anthropic's API returns no token log-probabilities; pass scorer_model=LocalModel(...) "
    'to score the streamed text locally (pip install "liftguard[local]")'
)
SCORER_SUPPLIES = Supplies(
    "a local scorer's stream (the teacher-forced logprob of each token of Claude's text; "
    "Anthropic's API sends no logprobs)",
    alternatives=0,
    fix="use a certificate calibrated for the scorer model that reads only the logprob and "
    "lifts (a lift rule from 'liftguard calibrate')",
)


def _scorer_monitor(monitor: Monitor | None, certificate: Certificate | None) -> Monitor:
    """The monitor of a scored Claude answer. Its tokens are the scorer's, which no
    request limit counts (Anthropic's ``max_tokens`` counts Claude's), so a fresh monitor
    of a fitted certificate assumes no token limit and judges the whole answer."""
    return monitor_for(monitor, certificate, SCORER_SUPPLIES, max_tokens=None)


"""What the Anthropic path feeds the monitor: the scorer's logprob of each token only."""
_FLUSH = object()  # end of stream: score the held tail
_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "refusal": "refusal",
    "tool_use": "tool_calls",
}
"""Anthropic's ``stop_reason`` in OpenAI's finish-reason names (others pass unchanged)."""


def _stop_reason(event: Any) -> str | None:
    """The finish reason a ``message_delta`` event carries (None for other events)."""
    if _get(event, "type") != "message_delta":
        return None
    reason = _get(_get(event, "delta"), "stop_reason")
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise ProviderFormatError(
            f"expected a string, got {type(reason).__name__}", field="message_delta.stop_reason"
        )
    return _STOP_REASONS.get(reason, reason)


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


_TOOL_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})


def _is_tool_block(event: Any) -> bool:
    """A ``content_block_start`` of a tool call: content no certificate reads."""
    if _get(event, "type") != "content_block_start":
        return False
    return _get(_get(event, "content_block"), "type") in _TOOL_BLOCKS


def _event_text(event: Any) -> str:
    """The answer text an Anthropic stream event adds ("" for every other event)."""
    kind = _get(event, "type")
    if kind == "content_block_delta":
        delta, where = _get(event, "delta"), "content_block_delta.delta"
    elif kind == "content_block_start":
        delta, where = _get(event, "content_block"), "content_block_start.content_block"
    else:
        return ""
    if delta is None:
        raise ProviderFormatError("missing", field=where)
    if _get(delta, "type") not in ("text_delta", "text"):
        return ""  # thinking, signature, citations, tool input: not answer text
    text = _get(delta, "text")
    if not isinstance(text, str):
        raise ProviderFormatError(f"expected a string, got {type(text).__name__}", field=where)
    return text


class _ScoredStep(StreamStep[str]):
    """:class:`StreamStep` whose parser scores text deltas with a :class:`LocalTextScorer`."""

    __slots__ = ("_scorer",)

    def __init__(
        self, monitor: Monitor, mode: Mode, on_block: OnBlock, scorer: LocalTextScorer
    ) -> None:
        if not isinstance(scorer, LocalTextScorer):
            raise ConfigError(f"scorer must be a LocalTextScorer, got {type(scorer).__name__}")
        if scorer.text or scorer.token_ids:
            raise ConfigError("the scorer was already used: use one LocalTextScorer per answer")
        super().__init__(monitor, mode, on_block, self._parse_item)
        self._scorer = scorer

    def _parse_item(self, item: Any) -> ChunkParts:
        scorer = self._scorer
        if item is _FLUSH:
            return _with_text(scorer.finish(), "")
        if _is_tool_block(item):
            return ChunkParts([], "", None, False, True)
        text = _event_text(item)
        if not text:
            return ChunkParts([], "", _stop_reason(item))
        if self.monitor.verdict.final:  # the monitor reads no more tokens: stop scoring
            return _with_text(scorer.finish(), text)
        return _with_text(scorer.feed(text), "")

    def end(self) -> list[str]:
        """Score the held tail, then apply the final rule (after a documented stop only)."""
        out = self._feed_parts(_FLUSH, self._parse_item(_FLUSH))
        return out + super().end()


def _with_text(events: list[TokenEvent], unscored: str) -> ChunkParts:
    """Scored events plus text passed on unscored (``logprob=None``) after a final verdict."""
    shown = b"".join(e.bytes or b"" for e in events).decode("utf-8")
    if unscored:
        events = [*events, TokenEvent(text=unscored, logprob=None)]
    return ChunkParts(events, shown + unscored)


def guard_anthropic_stream(
    stream: AsyncIterable[StreamEvent],
    monitor: Monitor | None,
    scorer: LocalTextScorer,
    *,
    certificate: Certificate | None = None,
    mode: Mode = "buffered",
    on_block: OnBlock = "raise",
) -> AsyncGenerator[str, None]:
    """Guard an ``AsyncStream[RawMessageStreamEvent]``: yield only the text ``mode`` allows.

    ``stream`` comes from ``client.messages.create(..., stream=True)`` (event
    objects or dicts); ``scorer`` is a fresh :class:`LocalTextScorer` for this
    answer and ``monitor`` a fresh monitor whose skeleton and calibration belong
    to the scorer model. ``"buffered"`` holds the text until CERTIFIED,
    ``"passthrough"`` shows each scored word at once, ``"final"`` releases it at
    the end iff certified.

    On BLOCKED the upstream stream is closed at once (the server sees the
    connection close), then :class:`~guardrail.GuardrailBlocked` carrying the
    verdict is raised (``on_block="raise"``) or the iterator ends (``"stop"``).
    An ``error`` event arrives as the SDK's ``APIStatusError``; it and transport
    errors propagate after the stream is closed, and held text is never released.
    """
    step = _ScoredStep(_scorer_monitor(monitor, certificate), mode, on_block, scorer)
    return aguard(stream, step, in_thread=True)  # (the scorer evaluates a model per word)


def guard_anthropic_stream_sync(
    stream: Iterable[StreamEvent],
    monitor: Monitor | None,
    scorer: LocalTextScorer,
    *,
    certificate: Certificate | None = None,
    mode: Mode = "buffered",
    on_block: OnBlock = "raise",
) -> Generator[str, None, None]:
    """Sync twin of :func:`guard_anthropic_stream` for ``anthropic.Anthropic`` streams."""
    step = _ScoredStep(_scorer_monitor(monitor, certificate), mode, on_block, scorer)
    return guard(stream, step)


def _text_of(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Iterable):
        parts = [_get(b, "text") for b in content if _get(b, "type") == "text"]
        return "\n".join(p for p in parts if isinstance(p, str))
    raise ConfigError(f"{where} must be a string or a list of content blocks")


def anthropic_scorer_prompt(
    messages: Iterable[MessageParam | Mapping[str, Any]],
    system: str | Iterable[TextBlockParam | Mapping[str, Any]] | None = None,
    *,
    default_system: str | None = None,
) -> str:
    """The scorer prompt for a Messages request: SmolLM2's chat template
    (:func:`smollm2_chat_prompt`) with the request's ``system`` (its text blocks
    joined; else ``default_system``, the scorer certificate's system prompt; else
    :data:`SMOLLM2_SYSTEM`, the shipped certificate's) and the text
    of the last user message. A final assistant message (a prefill, which Claude
    continues) is appended after the template. Images, documents and tool blocks
    are ignored. Other scorer models or calibrations need their own prompt."""
    msgs = list(messages)
    users = [m for m in msgs if _get(m, "role") == "user"]
    question = _text_of(_get(users[-1], "content"), "message content") if users else ""
    if not question:
        raise ConfigError(
            "the request has no user message with text to condition the scorer on; "
            "pass scorer_prompt=..."
        )
    sys_text = _text_of(system, "system") or default_system or SMOLLM2_SYSTEM
    prompt = smollm2_chat_prompt(question, sys_text)
    if msgs and _get(msgs[-1], "role") == "assistant":
        prompt += _text_of(_get(msgs[-1], "content"), "message content")
    return prompt


def guarded_message(
    client: AsyncAnthropic,
    *,
    certificate: Certificate | None = None,
    monitor: Monitor | None = None,
    scorer_model: LocalModel | None = None,
    mode: Mode = "buffered",
    on_block: OnBlock = "raise",
    scorer_prompt: str | None = None,
    **create_kwargs: Any,
) -> AsyncGenerator[str, None]:
    """Stream a guarded Claude answer: ``client.messages.create(**create_kwargs)``
    with ``stream=True`` forced, its text scored by ``scorer_model``.

    Arguments are checked now (no scorer model -> :class:`~guardrail.ConfigError`:
    the API has no log-probabilities); the request is sent on the first iteration
    of the returned async generator. The scorer conditions on ``scorer_prompt``,
    by default :func:`anthropic_scorer_prompt` of the request's ``messages`` and
    ``system`` (else the certificate's system prompt). ``certificate=`` is the
    scorer model's certificate (its probabilities are the scorer's, not
    Claude's); a hand-made ``monitor`` also works. Otherwise as
    :func:`guard_anthropic_stream`.
    """
    if scorer_model is None:
        raise ConfigError(NO_LOGPROBS)
    if create_kwargs.get("stream", True) is not True:
        raise ConfigError(f"guarded_message needs stream=True, got {create_kwargs['stream']!r}")
    if scorer_prompt is None:
        if "messages" not in create_kwargs:
            raise ConfigError("guarded_message needs messages=[...]")
        messages = list(create_kwargs["messages"])  # read twice: by the prompt and the request
        create_kwargs = dict(create_kwargs, messages=messages)
        default = certificate.context.system_prompt if certificate is not None else None
        scorer_prompt = anthropic_scorer_prompt(
            messages, create_kwargs.get("system"), default_system=default
        )
    monitor = _scorer_monitor(monitor, certificate)
    step = _ScoredStep(monitor, mode, on_block, LocalTextScorer(scorer_model, scorer_prompt))
    return _stream_message(client, step, dict(create_kwargs, stream=True))


async def _stream_message(
    client: Any, step: StreamStep[str], kwargs: dict[str, Any]
) -> AsyncGenerator[str, None]:
    stream = await cast(Any, client).messages.create(**kwargs)
    async with contextlib.aclosing(aguard(stream, step, in_thread=True)) as texts:
        async for text in texts:
            yield text
