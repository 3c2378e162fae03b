"""The LiteLLM guardrail's configuration, checked so that a mistake stops LiteLLM.

LiteLLM 1.110.2 (``litellm/proxy/guardrails/init_guardrails.py``) skips a guardrail whose
constructor raises ``ValueError`` or ``TypeError`` with one log line, "proxy is starting
WITHOUT this guardrail", and then serves the models unguarded. Every configuration error of
ours is a ``ValueError`` (:class:`~guardrail.ConfigError`), so the guardrail's constructor turns
any error into :class:`GuardrailStartupError`, which is neither: LiteLLM's start then fails
(tested against a real ``litellm --config``).

A setting LiteLLM does not know and the guardrail does not take (a typo such as
``gaurd_mode``) is an error too: LiteLLM passes every ``litellm_params`` key to the
constructor, where it would otherwise be ignored.
"""

from __future__ import annotations

import difflib
import inspect
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any, cast

from guardrail import ConfigError, GuardrailError

from .._risk._fleet_watch import FleetSettings
from .._serving._certs import CertificateSource
from .._serving._options import check_fleet_settings
from .._serving._prepare import DEFAULT_MAX_ANSWER_BYTES

__all__ = [
    "LITELLM_REQUEST_FIELDS",
    "GuardrailStartupError",
    "check_known_settings",
    "check_settings",
    "config_relative",
    "fleet_settings",
]

GUARD_MODES = ("buffered", "passthrough")
ON_BLOCK = ("error", "refusal")


class GuardrailStartupError(GuardrailError, RuntimeError):
    """The LiteLLM guardrail cannot guard (its configuration is wrong): raised by its
    constructor so that LiteLLM does not start (LiteLLM skips a guardrail whose constructor
    raises ``ValueError``, and serves unguarded). The configuration error is its cause."""


def check_settings(
    *,
    certificate: object,
    guard_mode: object,
    on_block: object,
    refusal_message: object,
    top_logprobs: object,
    max_answer_tokens: object,
    max_answer_bytes: object = DEFAULT_MAX_ANSWER_BYTES,
) -> None:
    """Each of the guardrail's own settings, or a :class:`~guardrail.ConfigError` naming it."""
    if certificate is None:
        raise ConfigError("the liftguard guardrail needs certificate: (a file or STORE#NAME)")
    if guard_mode not in GUARD_MODES:
        raise ConfigError(f"guard_mode must be buffered or passthrough, got {guard_mode!r}")
    if on_block not in ON_BLOCK:
        raise ConfigError(f"on_block must be error or refusal, got {on_block!r}")
    if not isinstance(refusal_message, str) or not refusal_message:
        raise ConfigError("refusal_message must be a non-empty string")
    if top_logprobs is not None and not _int_in(top_logprobs, 0, 20):
        raise ConfigError(f"top_logprobs must be an integer in 0..20, got {top_logprobs!r}")
    if not _int_in(max_answer_tokens, 1, None):
        raise ConfigError(f"max_answer_tokens must be an integer >= 1, got {max_answer_tokens!r}")
    if not _int_in(max_answer_bytes, 1024, None):
        raise ConfigError(f"max_answer_bytes must be an integer >= 1024, got {max_answer_bytes!r}")


def _int_in(value: object, low: int, high: int | None) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value >= low
        and (high is None or value <= high)
    )


def check_known_settings(settings: Mapping[str, Any], own: Iterable[str]) -> None:
    """A :class:`~guardrail.ConfigError` for a key of ``settings`` (what LiteLLM passes on
    besides the guardrail's ``own`` parameters) that neither LiteLLM's guardrail settings
    (``LitellmParams``) nor its ``CustomGuardrail`` take: a typo, named with the closest
    setting."""
    from litellm.integrations.custom_guardrail import CustomGuardrail
    from litellm.types.guardrails import LitellmParams

    known = set(LitellmParams.model_fields) | set(
        inspect.signature(CustomGuardrail.__init__).parameters
    )
    own = list(own)
    for key in settings:
        if key not in known:
            close = difflib.get_close_matches(key, own, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"the liftguard guardrail has no setting {key!r}{hint}")


def config_relative(certificate: str | CertificateSource) -> str | CertificateSource:
    """A relative certificate path read against the directory of LiteLLM's ``config.yaml``
    (where a reader of the configuration expects it), when LiteLLM names that file and the
    certificate is there; otherwise as given (the working directory)."""
    if not isinstance(certificate, str) or os.path.isabs(certificate) or "://" in certificate:
        return certificate
    server = sys.modules.get("litellm.proxy.proxy_server")
    config = getattr(server, "user_config_file_path", None)
    if not isinstance(config, str) or not config:
        return certificate
    path, sep, rest = certificate.partition("#")
    beside = os.path.join(os.path.dirname(os.path.abspath(config)), path)
    return beside + sep + rest if os.path.exists(beside) else certificate


def fleet_settings(
    redis: object,
    redis_url: object,
    namespace: str | None,
    timeout_s: float,
    feedback_ttl_s: int,
    *,
    deployment: str | None = None,
    connect_timeout_s: float = 5.0,
) -> FleetSettings | None:
    """Where the guardrail's fleet keeps its state: ``redis_url``, or with ``redis: true``
    LiteLLM's own Redis settings (``REDIS_URL``, or ``REDIS_HOST`` and ``REDIS_PORT`` with
    ``REDIS_PASSWORD``, ``REDIS_USERNAME``, ``REDIS_SSL``: what its cache and router read);
    ``None``: each worker keeps its own. The namespace derives from ``deployment`` as the
    proxy's does (:meth:`FleetSettings.namespace_for`); LiteLLM has no one upstream to name a
    deployment by default, so a fleet needs ``fleet_deployment`` (or ``fleet_namespace``):
    two LiteLLM deployments on one Redis never share an alarm unless named alike. A
    :class:`~guardrail.ConfigError` names what is wrong."""
    if not isinstance(redis, bool):
        raise ConfigError(f"redis must be true or false, got {redis!r}")
    url = redis_url
    if url is None and redis:
        from litellm._redis import get_redis_url_from_environment

        try:
            url = get_redis_url_from_environment()
        except ValueError as exc:
            raise ConfigError(f"redis: true takes LiteLLM's Redis settings, and {exc}") from None
    check_fleet_settings(
        url, namespace, timeout_s, feedback_ttl_s,
        deployment=deployment, connect_timeout_s=connect_timeout_s,
    )  # fmt: skip
    if url is None:
        return None
    if namespace is None and deployment is None:
        raise ConfigError(
            "a fleet (redis or redis_url) needs fleet_deployment: the name of this LiteLLM "
            "deployment, the same in each of its workers and pods and another in any other "
            "deployment on this Redis (or fleet_namespace, the namespace itself)"
        )
    return FleetSettings(
        cast(str, url), namespace=namespace, deployment=deployment, timeout_s=timeout_s,
        connect_timeout_s=connect_timeout_s, feedback_ttl_s=feedback_ttl_s,
    )  # fmt: skip


LITELLM_REQUEST_FIELDS = frozenset(
    {
        "metadata",
        "litellm_metadata",
        "tags",
        "litellm_call_id",
        "litellm_trace_id",
        "litellm_logging_obj",
        "proxy_server_request",
        "secret_fields",
        "_litellm_strip_stream_usage",
        "_litellm_stream_usage_injected",
    }
)
"""The fields LiteLLM's proxy adds to a request for its own use (its metadata, call id,
logging object): read by LiteLLM, never sent upstream, and no change of the generation
context. An allowlist too: LiteLLM's other request parameters include some that change the
prompt (``litellm_system_prompt``, ``assistant_continue_message``, ...)."""
