"""Exceptions raised by liftguard.

The hierarchy::

    GuardrailError                  root of everything liftguard raises
    ├── ConfigError                 invalid configuration value (also ValueError)
    ├── TraceFormatError            malformed trace file or line (also ValueError)
    ├── InsufficientDataError       calibration data too small for the target (also ValueError)
    ├── MissingLogprobsError        a token arrived without a usable log-probability
    ├── MissingDependencyError      an optional extra is not installed (also ImportError);
    │                               the message names the pip command
    └── GuardrailBlocked            an answer was blocked; carries the Verdict
        └── StreamTruncated         the stream ended without the provider's documented
                                    finish (cut off, or no chunk at all): never certified

Configuration errors derive from :class:`ValueError` as well, so callers that
already catch ``ValueError`` keep working.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConfigError",
    "GuardrailBlocked",
    "GuardrailError",
    "InsufficientDataError",
    "MissingDependencyError",
    "MissingLogprobsError",
    "StreamTruncated",
    "TraceFormatError",
]


class GuardrailError(Exception):
    """Root of every exception raised by liftguard."""


class ConfigError(GuardrailError, ValueError):
    """A configuration value is invalid (raised when the object is built)."""


class TraceFormatError(GuardrailError, ValueError):
    """A trace file or line does not follow the trace format.

    ``source`` and ``line`` name where the problem is (``line`` is 1-based).
    """

    def __init__(self, message: str, *, source: str = "<traces>", line: int | None = None):
        self.source = source
        self.line = line
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {message}")


class InsufficientDataError(GuardrailError, ValueError):
    """Calibration cannot reach the requested risk with the data given.

    ``needed`` is the number of answered calibration examples that would be
    required even with zero errors (``None`` if it cannot be stated).
    """

    def __init__(self, message: str, *, needed: int | None = None):
        self.needed = needed
        super().__init__(message)


class MissingDependencyError(GuardrailError, ImportError):
    """An optional extra is not installed; the message says what to ``pip install``."""


class MissingLogprobsError(GuardrailError):
    """A token arrived without a usable log-probability (missing, NaN or censored)."""


class GuardrailBlocked(GuardrailError):
    """The guarded answer was blocked. ``verdict`` holds the evidence."""

    def __init__(self, verdict: Any, message: str | None = None):
        self.verdict = verdict
        super().__init__(message or f"answer blocked: {verdict}")


class StreamTruncated(GuardrailBlocked):
    """The stream ended without the provider's documented finish: blocked, never certified.

    The connection closed cleanly mid-answer (no ``finish_reason``), or the
    provider sent no chunk at all. ``verdict.cause`` is ``Cause.TRUNCATED`` or
    ``Cause.EMPTY_STREAM``. Text already shown (passthrough mode, or after an
    early certification) is a prefix of an answer that was never finished.
    """
