"""Provider-neutral guarding of a token stream: one pure step, thin sync/async loops.

:class:`StreamStep` is the whole decision logic and does no I/O: each provider
item (a chunk or an event) is parsed into :class:`~guardrail.TokenEvent` objects
and the text it shows, every event goes to the monitor, and
:class:`~guardrail.Gate` says which units (by default the text each item adds)
may be shown now. The loops
:func:`aguard` / :func:`guard` only iterate, yield and close the upstream
stream: after a BLOCK (so that the server stops generating), after an error
(the error then propagates unchanged, except a chunk that is not valid JSON,
which becomes a :class:`ProviderFormatError`; nothing held back is released),
and when the consumer stops early. At the end of the stream the monitor gets
the provider's finish reason: a stream that ended without one, or sent no
chunk at all, is blocked as truncated (:class:`~guardrail.StreamTruncated`),
never certified.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Generator, Iterable
from typing import Any, Generic, Literal, TypeVar, overload

from guardrail import (
    Cause,
    ConfigError,
    Gate,
    GuardrailBlocked,
    Monitor,
    State,
    StreamTruncated,
    TokenEvent,
    Verdict,
)

from .._errors import ProviderFormatError
from ._openai_events import ChunkParts
from ._shown import ReadText

__all__ = [
    "DEFAULT_MAX_TOKEN_CHARS", "Mode", "OnBlock", "Parser", "StreamStep", "aclose_upstream",
    "aguard", "close_upstream", "guard",
]  # fmt: skip

logger = logging.getLogger(__name__)

Mode = Literal["passthrough", "buffered", "final"]
OnBlock = Literal["raise", "stop"]
U = TypeVar("U")
Parser = Callable[[Any], ChunkParts]
"""Provider item -> its token events, text, finish reason and refusal flag."""
DEFAULT_MAX_TOKEN_CHARS = 4096
"""Longest text of one token event (the longest tokens of common vocabularies have a few
hundred characters); a longer one is a malformed stream, not an answer."""


class StreamStep(Generic[U]):
    """Feed provider items to ``monitor``; say which of their units may be shown (pure, no I/O).

    Each item is parsed once (``parse``) and ``unit(item, parts)`` gives what the
    caller shows of it: by default the text it adds (a ``StreamStep[str]``); the proxy
    gives the chunk itself. :class:`~guardrail.Gate` holds and releases those
    units per ``mode``; :meth:`feed` and :meth:`end` return the units released now.
    ``hold_finish``: the unit of an item that carries a finish reason (and every one
    after it) is held until :meth:`end`, which releases it only with a certified
    final verdict; ``enforce=False`` reports the verdict and blocks nothing (the
    proxy's ``observe`` mode).

    ``blocked`` holds the BLOCKED verdict once there is one; the loops then stop
    reading and close the upstream stream. ``finish_reason`` is the last finish
    reason an item carried: :meth:`end` passes it to the monitor, so only a
    stream that ended the documented way can be certified.

    Besides the evidence, an item blocks the answer when it carries a choice the
    guard does not read (a second choice, a duplicate or missing index: cause
    ``unguarded_choice``; the item is never released), refusal
    text (cause ``refusal``), a tool or function call (cause ``tool_call``: no
    logprob backs it, whatever finish reason follows) or a token whose text cannot
    be reconstructed (empty text and no bytes, as llama.cpp streams partial UTF-8
    characters: cause ``unreadable_text``); a token longer than ``max_token_chars``
    characters is a :class:`ProviderFormatError`. The text shown is the text read
    (:mod:`._shown`): shown text that is not the tokens' blocks (``content_mismatch``),
    and so does anything of an answer after its finish (``after_finish``).
    """

    __slots__ = (
        "_held", "_hold_finish", "_items", "_max_chars", "_max_tokens", "_monitor", "_parse",
        "_read", "_tokens", "_unit", "blocked", "finish_reason", "on_block",
    )  # fmt: skip

    @overload
    def __init__(
        self: StreamStep[str],
        monitor: Monitor,
        mode: Mode,
        on_block: OnBlock,
        parse: Parser,
        *,
        max_token_chars: int = DEFAULT_MAX_TOKEN_CHARS,
        max_tokens: int | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self,
        monitor: Monitor,
        mode: Mode,
        on_block: OnBlock,
        parse: Parser,
        *,
        unit: Callable[[Any, ChunkParts], U],
        max_token_chars: int = DEFAULT_MAX_TOKEN_CHARS,
        hold_finish: bool = False,
        enforce: bool = True,
        max_tokens: int | None = None,
    ) -> None: ...

    def __init__(
        self,
        monitor: Monitor,
        mode: Mode,
        on_block: OnBlock,
        parse: Parser,
        *,
        unit: Callable[[Any, ChunkParts], Any] | None = None,
        max_token_chars: int = DEFAULT_MAX_TOKEN_CHARS,
        hold_finish: bool = False,
        enforce: bool = True,
        max_tokens: int | None = None,
    ) -> None:
        if not isinstance(monitor, Monitor):
            raise ConfigError(f"monitor must be a guardrail.Monitor, got {type(monitor).__name__}")
        if on_block not in ("raise", "stop"):
            raise ConfigError(f"on_block must be 'raise' or 'stop', got {on_block!r}")
        self._max_chars = check_max_token_chars(max_token_chars)
        self._monitor, self._parse, self.on_block = monitor, parse, on_block
        self._unit: Callable[[Any, ChunkParts], U] = _text if unit is None else unit  # type: ignore[assignment]
        # validates mode (and early=False for "final")
        self._held: Gate[U] = Gate(monitor, mode, enforce=enforce)
        self._hold_finish = hold_finish
        self.blocked: Verdict | None = None
        self.finish_reason: str | None = None
        self._items = 0
        self._max_tokens, self._tokens = max_tokens, 0
        self._read = ReadText()

    @property
    def monitor(self) -> Monitor:
        return self._monitor

    def feed(self, item: Any) -> list[U]:
        """One provider item: update the monitor with each of its tokens; the units to
        show now."""
        self._items += 1
        parts = self._parse(item)
        problem = self._read.check(parts) if self.blocked is None else None
        if problem is not None:  # the text shown is not the text read (see ._shown)
            verdict = self._monitor.abort(*problem)
            self._block(verdict)
            return self._held.push(self._unit(item, parts), verdict)
        return self._feed_parts(item, parts)

    def _feed_parts(self, item: Any, parts: ChunkParts) -> list[U]:
        stray = None
        if len(parts) == 6:  # (no starred unpacking: this runs per item)
            events, shown, finish, refusal, tool_call, stray = parts
        elif len(parts) == 5:
            events, shown, finish, refusal, tool_call = parts
        else:  # a parser's 4-tuple: no tool call
            (events, shown, finish, refusal), tool_call = parts, False
        unit = self._unit(item, parts)
        if finish is not None:
            self.finish_reason = finish
            if self._hold_finish:
                self._held.hold_to_end()
        monitor = self._monitor
        if stray is not None:
            verdict = monitor.abort(Cause.UNGUARDED_CHOICE, stray_choice_reason(stray))
        elif tool_call:
            verdict = monitor.abort(Cause.TOOL_CALL, TOOL_CALL_REASON)
        elif not events:
            verdict = monitor.verdict
        elif refusal:
            verdict = monitor.abort(Cause.REFUSAL, "the model refused to answer (refusal text)")
        else:
            verdict = feed_events(monitor, events, shown, self._max_chars)
            if self._max_tokens is not None and verdict.state is not State.BLOCKED:
                self._tokens += len(events)
                if self._tokens > self._max_tokens:  # (the monitor may know the limit too)
                    reason = over_limit_reason(self._max_tokens)
                    verdict = monitor.abort(Cause.OVER_TOKEN_LIMIT, reason)
        out = self._held.push(unit, verdict)
        if verdict.state is State.BLOCKED:
            self._block(verdict)
        return out

    def end(self) -> list[U]:
        """End of stream: the final rule after a documented finish; the held units to
        release."""
        monitor = self._monitor
        if self._items == 0:
            monitor.abort(Cause.EMPTY_STREAM, EMPTY_STREAM_REASON)
        elif (problem := self._read.end()) is not None:
            monitor.abort(*problem)
        verdict = monitor.finish(self.finish_reason)
        out = self._held.close(verdict)
        if verdict.state is State.BLOCKED:
            self._block(verdict)
        return out

    def outcome(self) -> None:
        """Raise :class:`GuardrailBlocked` if the answer was blocked and ``on_block='raise'``
        (:class:`StreamTruncated` for a stream that was cut off or empty)."""
        if self.blocked is not None and self.on_block == "raise":
            raise blocked_error(self.blocked)

    def _block(self, verdict: Verdict) -> None:
        if self.blocked is None:
            self.blocked = verdict
            logger.info("guarded stream blocked after %d tokens: %s", verdict.t, verdict.reason)


def _text(item: Any, parts: ChunkParts) -> str:
    """The default unit: the text an item adds to the answer (a parser may give a plain
    tuple in :class:`ChunkParts`' order)."""
    return parts[1]


EMPTY_STREAM_REASON = (
    "the provider sent no chunk at all (an empty stream, e.g. an OpenAI-compatible server "
    "started without logits, or a proxy that dropped the body): there is nothing to certify; "
    "check that the server streams answers with token logprobs"
)


def check_max_token_chars(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"max_token_chars must be an integer >= 1, got {value!r}")
    return value


def feed_events(
    monitor: Monitor,
    events: list[TokenEvent],
    shown: str,
    max_chars: int,
) -> Verdict:
    """Each event to ``monitor`` after the checks every path shares; the last verdict.

    A token longer than ``max_chars`` (or shown text longer than ``max_chars``
    per token) is a :class:`ProviderFormatError`; a token with no text and no
    bytes blocks the answer (its text cannot be reconstructed)."""
    if len(shown) > max_chars * len(events):
        raise ProviderFormatError(
            f"{len(shown)} characters of text for {len(events)} token(s): more than "
            f"max_token_chars={max_chars} per token",
            field="delta.content",
        )
    update, verdict = monitor.update, monitor.verdict
    for event in events:
        text = event.text
        if len(text) > max_chars:
            raise ProviderFormatError(
                f"a token of {len(text)} characters (max_token_chars={max_chars})",
                field="logprobs.content.token",
            )
        if not text and not event.bytes:
            return monitor.abort(Cause.UNREADABLE_TEXT, UNREADABLE_REASON)
        verdict = update(event)
    return verdict


TOOL_CALL_REASON = (
    "the answer carries a tool (function) call, which has no token logprobs to certify; "
    "guard the tool's own answer instead (adapters.guard_tool), or send tool-calling turns "
    "without the guard"
)


def over_limit_reason(limit: int) -> str:
    """The reason of a block for an answer past its token limit."""
    return (
        f"the upstream sent more than {limit} tokens for one answer (its token limit): the "
        "rest was never judged"
    )


def stray_choice_reason(what: str) -> str:
    """The reason of a block for a choice the guard did not read (``what``: in words)."""
    return (
        f"the provider sent {what}: the guard reads exactly one choice (index 0) and "
        "delivers only what it read, so the answer is blocked and none of it is delivered"
    )


UNREADABLE_REASON = (
    "a token arrived with empty text and no bytes, so the answer's text cannot be "
    "reconstructed (llama.cpp's server streams partial UTF-8 characters this way, e.g. emoji)"
)


def blocked_error(verdict: Verdict) -> GuardrailBlocked:
    """The exception for a blocked answer: :class:`StreamTruncated` for a cut-off or
    empty stream, :class:`GuardrailBlocked` otherwise."""
    if verdict.cause in (Cause.TRUNCATED, Cause.EMPTY_STREAM):
        return StreamTruncated(verdict, verdict.reason)
    return GuardrailBlocked(verdict, verdict.reason)


async def aclose_upstream(stream: object) -> None:
    """Close an async provider stream (``close()`` or ``aclose()``, awaited); never raises."""
    for name in ("close", "aclose"):
        close = getattr(stream, name, None)
        if callable(close):
            try:
                result = close()
                if inspect.isawaitable(result):
                    await result
            except Exception:  # cleanup is best effort: never mask the real outcome
                logger.warning("closing the upstream stream failed", exc_info=True)
            return


def close_upstream(stream: object) -> None:
    """Close a sync provider stream (``close()``); never raises."""
    close = getattr(stream, "close", None)
    if callable(close):
        try:
            close()
        except Exception:  # cleanup is best effort: never mask the real outcome
            logger.warning("closing the upstream stream failed", exc_info=True)


def _malformed(exc: ValueError) -> ProviderFormatError:
    return ProviderFormatError(f"malformed stream chunk, not valid JSON ({exc})", field="chunk")


async def aguard(
    stream: AsyncIterable[Any], step: StreamStep[str], *, in_thread: bool = False
) -> AsyncGenerator[str, None]:
    """Async loop around ``step``; the upstream stream is closed on every exit path.

    A chunk that is not valid JSON (the SDK raises :class:`json.JSONDecodeError`
    while iterating) becomes a :class:`ProviderFormatError`. ``in_thread``: the step
    runs in a worker thread (a step that evaluates a local model per token takes
    milliseconds, which the event loop must not wait on)."""
    items = aiter(stream)
    try:
        while True:
            try:
                item = await anext(items)
            except StopAsyncIteration:
                held = await asyncio.to_thread(step.end) if in_thread else step.end()
                out = "".join(held)
                if out:
                    yield out
                break
            except json.JSONDecodeError as exc:
                raise _malformed(exc) from exc
            released = await asyncio.to_thread(step.feed, item) if in_thread else step.feed(item)
            out = "".join(released)
            if out:
                yield out
            if step.blocked is not None:
                break
    finally:
        await aclose_upstream(stream)
    step.outcome()


def guard(stream: Iterable[Any], step: StreamStep[str]) -> Generator[str, None, None]:
    """Sync twin of :func:`aguard` (same step, same order)."""
    items = iter(stream)
    try:
        while True:
            try:
                item = next(items)
            except StopIteration:
                out = "".join(step.end())
                if out:
                    yield out
                break
            except json.JSONDecodeError as exc:
                raise _malformed(exc) from exc
            out = "".join(step.feed(item))
            if out:
                yield out
            if step.blocked is not None:
                break
    finally:
        close_upstream(stream)
    step.outcome()
