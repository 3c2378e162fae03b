"""A LiteLLM proxy guardrail that certifies or blocks every chat answer while it streams.

``pip install "liftguard[litellm]"`` (LiteLLM pinned, with the proxy's server stack), then in
LiteLLM's ``config.yaml``::

    guardrails:
      - guardrail_name: liftguard
        litellm_params:
          guardrail: adapters.litellm.LiftGuardGuardrail
          mode: [pre_call, post_call]
          default_on: true
          certificate: cert.json         # or STORE_URL#NAME@ALIAS
          guard_mode: buffered           # or passthrough
          on_block: error                # or refusal
    litellm_settings:
      callbacks: [adapters.litellm.guardrail_check]   # nothing served unless it runs

and ``litellm --config config.yaml``. The guardrail asks the upstream for the logprobs the
certificate reads (and strips them from what the client gets unless it asked), fills in the
certificate's generation context, and guards every answer with the same stream step as the
adapters and ``liftguard serve``: a blocked stream ends with an error the openai SDK raises
(``openai.APIError``, ``type`` ``liftguard_blocked``) or with a refusal (``finish_reason``
``content_filter``); a non-streamed answer is decided whole and carries its verdict in the
``liftguard`` field. See :class:`LiftGuardGuardrail` and the docs' LiteLLM page.

Set ``LITELLM_LOCAL_MODEL_COST_MAP=True`` where there is no network: LiteLLM fetches its model
price list when it is imported otherwise.
"""

from __future__ import annotations

_INSTALL_HINT = (
    'the LiteLLM guardrail needs LiteLLM and its proxy: pip install "liftguard[litellm]"'
)

try:
    from ._litellm._config import GuardrailStartupError
    from ._litellm._guardrail import LiftGuardGuardrail
    from ._litellm._startup import GuardrailCheck as _GuardrailCheck
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    if exc.name is not None and exc.name.split(".")[0] in ("litellm", "fastapi", "starlette"):
        raise ImportError(_INSTALL_HINT) from exc
    raise

__all__ = [
    "GuardrailStartupError",
    "LiftGuardGuardrail",
    "guardrail_check",
]

guardrail_check = _GuardrailCheck()
"""LiteLLM's callback (``litellm_settings: callbacks: [adapters.litellm.guardrail_check]``):
made when LiteLLM imports this module, it checks every liftguard guardrail entry of LiteLLM's
``config.yaml`` as LiteLLM will (an entry LiteLLM would skip stops its start), and refuses
every request while one of them is not running. Inside no LiteLLM proxy it checks nothing."""
