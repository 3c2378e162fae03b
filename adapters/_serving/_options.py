"""Settings every server front end checks the same way: the refusal text, positive numbers,
what a request that changes the context gets, the live risk monitor's settings (a
:class:`~guardrail.ConfigError` naming the field)."""

from __future__ import annotations

import math
from typing import Any

from guardrail import ConfigError

__all__ = [
    "DEFAULT_REFUSAL",
    "FLEET_FIELDS",
    "ON_CONTEXT_MISMATCH",
    "check_context_settings",
    "check_fleet_settings",
    "check_positive",
    "check_risk_settings",
    "integer_at_least",
]

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


ON_CONTEXT_MISMATCH = ("log", "reject")
"""What a request that changes the certificate's context gets: forwarded and reported
(``covered: false``), or refused with HTTP 400 naming the setting."""


def check_context_settings(on_context_mismatch: Any, allow_request_fields: Any) -> tuple[str, ...]:
    """``on_context_mismatch`` (one of :data:`ON_CONTEXT_MISMATCH`) and
    ``allow_request_fields`` (field names added to the allowlist of request fields), else
    ConfigError naming the setting; the field names as a tuple."""
    if on_context_mismatch not in ON_CONTEXT_MISMATCH:
        raise ConfigError(
            f"on_context_mismatch must be one of log, reject; got {on_context_mismatch!r}"
        )
    fields = allow_request_fields
    if isinstance(fields, str | bytes) or not isinstance(fields, list | tuple | frozenset | set):
        raise ConfigError(f"allow_request_fields must be a list of names, got {fields!r}")
    if not all(isinstance(f, str) and f for f in fields):
        raise ConfigError(f"allow_request_fields must be a list of names, got {fields!r}")
    return tuple(fields)


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


FLEET_FIELDS = (
    "redis_url",
    "fleet_namespace",
    "fleet_deployment",
    "fleet_timeout_s",
    "fleet_connect_timeout_s",
    "feedback_ttl_s",
)
"""The fleet settings' names in the LiteLLM guardrail's ``config.yaml`` (the URL, the
namespace, the deployment, the two timeouts, the labelling window): what its errors name."""


def check_fleet_settings(
    redis_url: object,
    namespace: object,
    timeout_s: float,
    feedback_ttl_s: int,
    *,
    deployment: object = None,
    connect_timeout_s: float = 5.0,
    names: tuple[str, str, str, str, str, str] = FLEET_FIELDS,
) -> None:
    """The fleet store's settings (the proxy's, the LiteLLM guardrail's), else ConfigError
    naming the field by its name in ``names`` (in :data:`FLEET_FIELDS`' order; a namespace
    or a deployment ``None``: derived)."""
    url_name, namespace_name, deployment_name, timeout_name, connect_name, ttl_name = names
    if redis_url is not None:
        schemes = ("redis://", "rediss://", "unix://", "valkey://", "valkeys://")
        if not isinstance(redis_url, str) or not redis_url.startswith(schemes):
            raise ConfigError(
                f"{url_name} must be a redis://, rediss:// or unix:// URL, got {redis_url!r:.80}"
            )
    for name, value in ((namespace_name, namespace), (deployment_name, deployment)):
        if value is None:  # the namespace: derived from the deployment
            continue
        if not isinstance(value, str) or not value or not value.isprintable():
            raise ConfigError(f"{name} must be a non-empty name, got {value!r:.80}")
        if "{" in value or "}" in value:
            raise ConfigError(f"{name} must not contain braces (it is a Redis hash tag)")
    check_positive(timeout_name, timeout_s)
    check_positive(connect_name, connect_timeout_s)
    integer_at_least(ttl_name, feedback_ttl_s, 1)
