"""A liftguard guardrail that LiteLLM's configuration names must run, or nothing is served.

LiteLLM 1.110.2 (``litellm/proxy/guardrails/guardrail_registry.py``) validates a guardrail
entry's ``litellm_params`` against its schema (a pydantic ``LitellmParams``: a missing ``mode``
or ``default_on: maybe`` fails it) before it imports the guardrail's class; the error is a
``ValueError``, which ``init_guardrails_v2`` answers with one log line ("proxy is starting
WITHOUT this guardrail") before serving the models unguarded. No code of the guardrail runs
for such an entry, so its constructor cannot refuse it. Two checks that do run:

- :func:`check_config`, when ``adapters.litellm`` is imported inside a LiteLLM proxy: every
  entry of the proxy's ``config.yaml`` that names the liftguard guardrail is validated as
  LiteLLM will validate it, and a mistake raises :class:`GuardrailStartupError` (not a
  ``ValueError``), which stops LiteLLM's start. LiteLLM imports the module when it loads a
  guardrail entry that passes its schema, and when it loads ``litellm_settings.callbacks``,
  which it does before any guardrail.
- :class:`GuardrailCheck` (``adapters.litellm.guardrail_check``, listed in
  ``litellm_settings.callbacks``): the import above then happens before LiteLLM reads any
  guardrail entry, whatever they hold; and on every request it refuses (HTTP 503) while a
  liftguard guardrail of the configuration is not running (:data:`RUNNING`), whatever kept it
  from starting.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from litellm.integrations.custom_logger import CustomLogger

from .._serving._wire import error_body
from ._config import GuardrailStartupError
from ._wire import GuardrailHTTPError

__all__ = ["CLASS_NAME", "RUNNING", "GuardrailCheck", "check_config", "configured_guardrails"]

CLASS_NAME = "LiftGuardGuardrail"
RUNNING: set[str] = set()
"""The names of the liftguard guardrails constructed in this process (by LiteLLM)."""
_HOOKS = ("pre_call", "post_call")


def configured_guardrails(config: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """The guardrail entries of LiteLLM's configuration (``config``, or the proxy's
    ``config.yaml`` when running in a LiteLLM proxy; none otherwise) that name the liftguard
    guardrail: their ``litellm_params`` by ``guardrail_name``."""
    if config is None:
        config = _proxy_config()
    out: dict[str, dict[str, Any]] = {}
    for entry in config.get("guardrails") or ():
        if not isinstance(entry, Mapping):
            continue
        params = entry.get("litellm_params")
        if not isinstance(params, Mapping):
            continue
        kind = params.get("guardrail")
        if isinstance(kind, str) and kind.rsplit(".", 1)[-1] == CLASS_NAME:
            out[str(entry.get("guardrail_name"))] = dict(params)
    return out


def _proxy_config() -> Mapping[str, Any]:
    """The configuration file of the LiteLLM proxy this process runs (``{}``: none)."""
    server = sys.modules.get("litellm.proxy.proxy_server")
    path = getattr(server, "user_config_file_path", None)
    if not isinstance(path, str) or not path or not Path(path).is_file():
        return {}
    yaml: Any = importlib.import_module("yaml")  # (LiteLLM's own dependency; no stubs)
    try:
        config = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}  # (LiteLLM reports its own configuration's errors)
    return config if isinstance(config, Mapping) else {}


def check_config(config: Mapping[str, Any] | None = None) -> list[str]:
    """The names of the liftguard guardrails of ``config`` (by default the running proxy's),
    each entry checked as LiteLLM checks it before the guardrail's constructor runs; an entry
    LiteLLM would skip raises :class:`GuardrailStartupError`.

    Examples
    --------
        >>> entry = {"guardrail": "adapters.litellm.LiftGuardGuardrail", "default_on": "maybe",
        ...          "mode": ["pre_call", "post_call"], "certificate": "cert.json"}
        >>> config = {"guardrails": [{"guardrail_name": "lg", "litellm_params": entry}]}
        >>> try:
        ...     check_config(config)
        ... except GuardrailStartupError as exc:
        ...     print(str(exc)[:60])
        the liftguard guardrail 'lg' would be skipped by LiteLLM, wh
        >>> check_config({"guardrails": [{"guardrail_name": "lg", "litellm_params":
        ...     {**entry, "default_on": False}}]})
        ['lg']
    """
    from litellm.types.guardrails import LitellmParams

    entries = configured_guardrails(config)
    for name, params in entries.items():
        try:
            LitellmParams(**params)
            problem = None if params.get("mode") is not None else "mode is missing"
        except (ValueError, TypeError) as exc:  # (pydantic's ValidationError is a ValueError)
            problem = " ".join(str(exc).split())
        hooks = params.get("mode")
        hooks = [hooks] if isinstance(hooks, str) else hooks
        if problem is None and not (isinstance(hooks, list) and all(h in hooks for h in _HOOKS)):
            problem = f"mode must hold pre_call and post_call, got {hooks!r}"
        if problem is not None:
            raise GuardrailStartupError(
                f"the liftguard guardrail {name!r} would be skipped by LiteLLM, which would then "
                f"serve its models unguarded, so LiteLLM must not start: {problem}"
            )
    return list(entries)


class GuardrailCheck(CustomLogger):  # type: ignore[misc]  # (litellm is not type-checked)
    """LiteLLM's callback ``adapters.litellm.guardrail_check``: the configuration's liftguard
    guardrails checked (:func:`check_config`) when it is loaded, and every request refused
    (HTTP 503) while one of them is not running."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.names = frozenset(check_config(config))

    def missing(self) -> list[str]:
        """The configuration's liftguard guardrails that are not running."""
        return sorted(self.names - RUNNING)

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: str
    ) -> None:
        missing = self.missing()
        if missing:
            reason = (
                f"the liftguard guardrail(s) {', '.join(map(repr, missing))} of LiteLLM's "
                f"configuration did not start: nothing is served (see LiteLLM's log)"
            )
            raise GuardrailHTTPError(503, error_body(reason, "liftguard_unguarded", "not_started"))
