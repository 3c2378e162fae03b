"""What every per-answer monitor offers the adapters: :class:`StreamMonitor`.

:class:`~guardrail.CertificateMonitor` (lift statistics) and
:class:`~guardrail._fitted_monitor.FittedMonitor` (fitted statistics) both satisfy it;
``Certificate.monitor()`` returns whichever the certificate's rule needs, and the
stream adapters and :class:`~guardrail.GuardedText` accept any of them.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ._policy import StreamPolicy
from ._verdict import Cause, TokenEvent, Verdict

__all__ = ["StreamMonitor"]


@runtime_checkable
class StreamMonitor(Protocol):
    """One answer's monitor: feed token events, end the stream, read the verdict."""

    @property
    def policy(self) -> StreamPolicy: ...

    @property
    def tau(self) -> float: ...

    @property
    def skeleton(self) -> object:
        """The skeleton object the monitor scores lifts with (``None`` if none)."""

    @property
    def verdict(self) -> Verdict: ...

    @property
    def t(self) -> int: ...

    def update(self, event: TokenEvent) -> Verdict: ...

    def finish(self, finish_reason: str | None = "stop") -> Verdict: ...

    def abort(self, cause: Cause, reason: str) -> Verdict: ...
