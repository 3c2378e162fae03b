"""Settings every server front end checks the same way: the refusal text, positive numbers,
the live risk monitor's settings (a :class:`~guardrail.ConfigError` naming the field)."""

from __future__ import annotations

import math

from guardrail import ConfigError

__all__ = ["DEFAULT_REFUSAL", "check_positive", "check_risk_settings", "integer_at_least"]

DEFAULT_REFUSAL = (
    "I can't give a reliable answer to this question, so I won't answer it. "
    "(The answer was withheld because it was not certified.)"
)


def check_positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    """``value`` is a finite number > 0 (>= 0 with ``allow_zero``), else ConfigError."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{name} must be a finite number {bound}, got {value!r}")


def integer_at_least(name: str, value: int, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")


def check_risk_settings(risk_alpha: float, feedback_ids: int) -> None:
    """The live risk monitor's settings (the proxy's, the LiteLLM guardrail's), else
    ConfigError naming the field."""
    alpha = risk_alpha
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha < 1:
        raise ConfigError(f"risk_alpha must be a number strictly inside (0, 1), got {alpha!r}")
    integer_at_least("feedback_ids", feedback_ids, 1)
