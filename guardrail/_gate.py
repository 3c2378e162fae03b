"""What of a streamed answer may be shown now: :class:`Gate`, over any unit, and
:class:`TextGate`, over text.

A stream step holds back and releases the provider's own units (a chunk, an event's
text, a token), never text re-cut to fit: the caller gives each unit with the verdict
its tokens gave, and gets back the units it may show now, in order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, Literal, TypeVar

from ._errors import ConfigError, GuardrailError
from ._verdict import State, Verdict

if TYPE_CHECKING:
    from ._monitor import Monitor

__all__ = ["Gate", "StreamMode", "TextGate"]

StreamMode = Literal["passthrough", "buffered", "final"]
U = TypeVar("U")


class Gate(Generic[U]):
    """Which units of a streamed answer may be shown now, per streaming mode (pure, no I/O).

    ``passthrough``: each unit at once; nothing from a BLOCKED verdict on (its unit
    included). ``buffered``: held until CERTIFIED, then the held units and every later
    one flow; after BLOCKED nothing held is ever released. ``final``: all held until
    :meth:`close` releases them iff CERTIFIED (needs ``early=False``).

    :meth:`hold_to_end` holds every later unit until :meth:`close`, whatever the mode
    (a unit that ends the answer goes out only with the final verdict).
    ``enforce=False`` only reports: nothing is ever dropped for a BLOCKED verdict.

    Examples
    --------
        >>> monitor = Monitor.lift(StreamPolicy(), tau=2.0, skeleton=UniformSkeleton(1000))
        >>> gate = Gate(monitor, "buffered")
        >>> gate.push("Par", monitor.update(TokenEvent("Par", logprob=-0.1)))
        []
        >>> gate.push("is", monitor.update(TokenEvent("is", logprob=-0.2)))
        []
        >>> gate.close(monitor.finish())
        ['Par', 'is']
    """

    __slots__ = (
        "_blocked",
        "_buffer",
        "_closed",
        "_enforce",
        "_mode",
        "_monitor",
        "_open",
        "_sealed",
    )

    def __init__(
        self, monitor: Monitor, mode: StreamMode = "buffered", *, enforce: bool = True
    ) -> None:
        if mode not in ("passthrough", "buffered", "final"):
            raise ConfigError(f"mode must be 'passthrough', 'buffered' or 'final', got {mode!r}")
        if mode == "final" and monitor.policy.early:
            raise ConfigError(
                "mode 'final' decides only at the end: use StreamPolicy(early=False) "
                "so that calibration replays the same rule"
            )
        self._monitor, self._mode, self._enforce = monitor, mode, enforce
        self._buffer: list[U] = []
        self._open = mode == "passthrough"
        self._blocked = self._closed = self._sealed = False

    @property
    def mode(self) -> StreamMode:
        return self._mode

    @property
    def blocked(self) -> bool:
        return self._blocked

    @property
    def pending(self) -> list[U]:
        """The units held back so far."""
        return list(self._buffer)

    def push(self, unit: U, verdict: Verdict) -> list[U]:
        """Record ``unit`` (its tokens gave ``verdict``); return the units to show now."""
        if self._closed:
            raise GuardrailError("push() after close()")
        if self._blocked:
            return []
        if verdict.state is State.BLOCKED and self._enforce:
            return self._block()
        if self._open:
            return [unit]
        self._buffer.append(unit)
        if verdict.state is State.CERTIFIED and self._mode == "buffered" and not self._sealed:
            self._open = True
            return self._drain()
        return []

    def hold_to_end(self) -> None:
        """Hold every later unit until :meth:`close` (the final verdict decides)."""
        self._open, self._sealed = False, True

    def close(self, final_verdict: Verdict | None = None) -> list[U]:
        """End of stream: the held units to show (the monitor is finished if no verdict
        given)."""
        if self._closed:
            return []
        verdict = self._monitor.finish() if final_verdict is None else final_verdict
        if not verdict.final:
            raise GuardrailError(f"close() needs a final verdict, got {verdict.state.value}")
        self._closed = True
        if self._enforce and (self._blocked or verdict.state is not State.CERTIFIED):
            return self._block()
        return self._drain()

    def _block(self) -> list[U]:
        self._blocked = True
        self._buffer.clear()
        return []

    def _drain(self) -> list[U]:
        out = self._buffer
        self._buffer = []
        return out


class TextGate:
    """What of a streamed answer's text may be shown now: :class:`Gate` over text
    pieces, joined (the modes as there).

    Examples
    --------
        >>> monitor = Monitor.lift(StreamPolicy(), tau=2.0, skeleton=UniformSkeleton(1000))
        >>> text = TextGate(monitor, "buffered")
        >>> text.push("Par", monitor.update(TokenEvent("Par", logprob=-0.1)))
        ''
        >>> text.push("is", monitor.update(TokenEvent("is", logprob=-0.2)))
        ''
        >>> text.close(monitor.finish())
        'Paris'
    """

    __slots__ = ("_units",)

    def __init__(self, monitor: Monitor, mode: StreamMode = "buffered") -> None:
        self._units: Gate[str] = Gate(monitor, mode)

    @property
    def mode(self) -> StreamMode:
        return self._units.mode

    @property
    def blocked(self) -> bool:
        return self._units.blocked

    @property
    def pending(self) -> str:
        """Text held back so far."""
        return "".join(self._units.pending)

    def push(self, text: str, verdict: Verdict) -> str:
        """Record ``text`` (its token gave ``verdict``); return the text to show now."""
        return "".join(self._units.push(text, verdict))

    def close(self, final_verdict: Verdict | None = None) -> str:
        """End of stream: the held text to show (the monitor is finished if no verdict given)."""
        return "".join(self._units.close(final_verdict))
