"""Provider-neutral guarding of a token stream: one pure step, thin sync/async loops.

:class:`GuardStep` is the whole decision logic and does no I/O: each provider
item (a chunk or an event) is parsed into :class:`~guardrail.TokenEvent` objects
and the text it shows, every event goes to the monitor, and
:class:`~guardrail.GuardedText` says what may be shown now. The loops
:func:`aguard` / :func:`guard` only iterate, yield and close the upstream
stream: after a BLOCK (so that the server stops generating), after an error
(the error then propagates unchanged; nothing held back is released), and when
the consumer stops early.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Generator, Iterable
from typing import Any, Literal

from guardrail import (
    CertificateMonitor,
    ConfigError,
    GuardedText,
    GuardrailBlocked,
    State,
    TokenEvent,
    Verdict,
)

__all__ = [
    "GuardStep",
    "Mode",
    "OnBlock",
    "Parser",
    "aclose_upstream",
    "aguard",
    "close_upstream",
    "guard",
]

logger = logging.getLogger(__name__)

Mode = Literal["passthrough", "buffered", "final"]
OnBlock = Literal["raise", "stop"]
Parser = Callable[[Any], "tuple[list[TokenEvent], str]"]
"""Provider item -> (token events, the text the item adds to the answer)."""


class GuardStep:
    """Feed provider items to ``monitor`` and say what text may be shown (pure, no I/O).

    ``blocked`` holds the BLOCKED verdict once there is one; the loops then stop
    reading and close the upstream stream.
    """

    __slots__ = ("_monitor", "_parse", "_text", "blocked", "on_block")

    def __init__(
        self, monitor: CertificateMonitor, mode: Mode, on_block: OnBlock, parse: Parser
    ) -> None:
        if not isinstance(monitor, CertificateMonitor):
            raise ConfigError(f"monitor must be a CertificateMonitor, got {type(monitor).__name__}")
        if on_block not in ("raise", "stop"):
            raise ConfigError(f"on_block must be 'raise' or 'stop', got {on_block!r}")
        self._monitor, self._parse, self.on_block = monitor, parse, on_block
        self._text = GuardedText(monitor, mode)  # validates mode (and early=False for "final")
        self.blocked: Verdict | None = None

    @property
    def monitor(self) -> CertificateMonitor:
        return self._monitor

    def feed(self, item: Any) -> str:
        """One provider item: update the monitor with each of its tokens; the text to show."""
        events, shown = self._parse(item)
        if not events:
            return ""
        update = self._monitor.update
        for event in events:
            verdict = update(event)
        out = self._text.push(shown, verdict)
        if verdict.state is State.BLOCKED:
            self._block(verdict)
        return out

    def end(self) -> str:
        """End of stream: apply the final rule; the held text to release (if certified)."""
        out = self._text.close()
        verdict = self._monitor.verdict
        if verdict.state is State.BLOCKED:
            self._block(verdict)
        return out

    def outcome(self) -> None:
        """Raise :class:`GuardrailBlocked` if the answer was blocked and ``on_block='raise'``."""
        if self.blocked is not None and self.on_block == "raise":
            raise GuardrailBlocked(self.blocked, self.blocked.reason)

    def _block(self, verdict: Verdict) -> None:
        if self.blocked is None:
            self.blocked = verdict
            logger.info("guarded stream blocked after %d tokens: %s", verdict.t, verdict.reason)


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


async def aguard(stream: AsyncIterable[Any], step: GuardStep) -> AsyncGenerator[str, None]:
    """Async loop around ``step``; the upstream stream is closed on every exit path."""
    try:
        async for item in stream:
            out = step.feed(item)
            if out:
                yield out
            if step.blocked is not None:
                break
        else:
            out = step.end()
            if out:
                yield out
    finally:
        await aclose_upstream(stream)
    step.outcome()


def guard(stream: Iterable[Any], step: GuardStep) -> Generator[str, None, None]:
    """Sync twin of :func:`aguard` (same step, same order)."""
    try:
        for item in stream:
            out = step.feed(item)
            if out:
                yield out
            if step.blocked is not None:
                break
        else:
            out = step.end()
            if out:
                yield out
    finally:
        close_upstream(stream)
    step.outcome()
