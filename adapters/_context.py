"""What every adapter shares about the rule it deploys: a :class:`Guard`, and the
generation context a certificate was calibrated on, applied to a request.

A :class:`Guard` is built once per adapter from ``certificate=`` (or, for a
hand-made rule, from ``policy``/``tau``/``skeleton``) and gives one fresh monitor
per answer. :func:`apply_context` fills a Chat Completions request with the
certificate's generation context where the caller left a setting unset, and
warns (:class:`~guardrail.ContextMismatchWarning`) where the caller set it to
something else: the guarantee covers only answers generated like the
calibration's.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from guardrail import (
    Certificate,
    ConfigError,
    ContextMismatchWarning,
    ModelIdentity,
    Skeleton,
    SkeletonSpec,
    StreamMonitor,
    StreamPolicy,
    TokenIds,
    WithTokenIds,
    skeleton_needs,
)

__all__ = ["Guard", "apply_context", "resolve_guard", "warn_mismatch"]

MissingPolicy = Literal["block", "pass", "error"]


@dataclass(frozen=True)
class Guard:
    """The certificate an adapter deploys, with the skeleton object that overrides its
    spec (if any), an explicit missing-logprobs policy (if any), and the token-id
    resolver an id-based skeleton needs on a stream without ids."""

    certificate: Certificate
    skeleton: Skeleton | None = None
    on_missing_logprobs: MissingPolicy | None = None
    token_ids: TokenIds | None = None

    def _skeleton(self) -> Skeleton | None:
        skel = self.skeleton if self.skeleton is not None else self.certificate.bound_skeleton
        if self.token_ids is None:
            return skel
        if skel is None:
            skel = self.certificate.skeleton.build()
        return WithTokenIds(skel, self.token_ids) if skeleton_needs(skel)[1] else skel

    def monitor(self) -> StreamMonitor:
        """A fresh monitor for one answer (a stateful skeleton gets its own stream)."""
        return self.certificate.monitor(
            skeleton=self._skeleton(), on_missing_logprobs=self.on_missing_logprobs
        )


def resolve_guard(
    certificate: Certificate | None,
    policy: StreamPolicy | None,
    tau: float | None,
    skeleton: Skeleton | None,
    on_missing_logprobs: MissingPolicy | None = None,
    token_ids: TokenIds | None = None,
) -> Guard:
    """``certificate=`` or a hand-made ``policy`` + ``tau`` + ``skeleton`` (not both);
    checked now by building one monitor. A skeleton that needs token ids gets the
    resolver ``token_ids``, else the one the certificate's ``model.tokenizer``
    names; with neither, the stream could not be scored: a ConfigError now."""
    if certificate is not None:
        if not isinstance(certificate, Certificate):
            raise ConfigError(
                f"certificate must be a guardrail.Certificate, got {type(certificate).__name__}"
            )
        if policy is not None or tau is not None:
            raise ConfigError("pass either certificate=... or policy and tau, not both")
        guard = Guard(certificate, skeleton, on_missing_logprobs, token_ids)
    else:
        if policy is None or tau is None:
            raise ConfigError("pass certificate=... (or a policy and tau)")
        if not isinstance(policy, StreamPolicy):
            raise ConfigError(f"policy must be a StreamPolicy, got {type(policy).__name__}")
        if skeleton is None:
            raise ConfigError("a hand-made rule needs skeleton=...")
        if isinstance(tau, bool) or not isinstance(tau, int | float):
            raise ConfigError(f"tau must be a number, got {tau!r}")
        if not (0.0 < tau < policy.clip):
            raise ConfigError(f"tau must lie strictly inside (0, {policy.clip}), got {tau!r}")
        made = Certificate(
            policy, float(tau), SkeletonSpec.of(skeleton), ModelIdentity("unspecified")
        )
        guard = Guard(made, skeleton, on_missing_logprobs, token_ids)
    skel = guard.monitor().skeleton  # validates the skeleton and the missing policy now
    if skeleton_needs(skel)[1]:
        if guard.token_ids is None:
            guard = _with_resolver(guard)
        guard.monitor()
    return guard


def _with_resolver(guard: Guard) -> Guard:
    """``guard`` with the token-id resolver its certificate's tokenizer names."""
    from ._token_ids import token_ids_for

    tokenizer = guard.certificate.model.tokenizer
    ids = token_ids_for(tokenizer) if tokenizer else None
    if ids is None:
        raise ConfigError(
            "the skeleton scores tokens by id, and streams from an API carry no token ids: "
            "record the model's tokenizer in the certificate (model.tokenizer = "
            "'tiktoken:cl100k_base' or 'gguf:...') or pass token_ids=..."
        )
    return Guard(guard.certificate, guard.skeleton, guard.on_missing_logprobs, ids)


def warn_mismatch(field: str, requested: object, calibrated: object) -> None:
    """Warn that a request changes a setting the certificate was calibrated with."""
    warnings.warn(
        f"the request sets {field}={requested!r} but the certificate was calibrated with "
        f"{field}={calibrated!r}: its risk guarantee does not cover these answers",
        ContextMismatchWarning,
        stacklevel=4,
    )


def apply_context(certificate: Certificate, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` of ``chat.completions.create`` with the certificate's generation context
    filled in where unset; a :class:`~guardrail.ContextMismatchWarning` for each setting
    the caller changed (model, system prompt, temperature, top_p, max_tokens, stop,
    repeat_penalty)."""
    out = dict(kwargs)
    ctx = certificate.context
    api_model = certificate.model.api_model
    if api_model is not None:
        if "model" not in out:
            out["model"] = api_model
        elif out["model"] != api_model:
            warn_mismatch("model", out["model"], api_model)
    for key, value in ctx.request_settings().items():
        given = out.get(key, out.get("max_completion_tokens") if key == "max_tokens" else None)
        if given is None:
            out[key] = value
        elif given != value:
            warn_mismatch(key, given, value)
    if ctx.repeat_penalty is not None:  # llama.cpp's setting, sent in the body
        extra = dict(out.get("extra_body") or {})
        given = extra.get("repeat_penalty")
        if given is None:
            extra["repeat_penalty"] = ctx.repeat_penalty
            out["extra_body"] = extra
        elif given != ctx.repeat_penalty:
            warn_mismatch("repeat_penalty", given, ctx.repeat_penalty)
    if ctx.system_prompt is not None and "messages" in out:
        out["messages"] = _with_system(list(out["messages"]), ctx.system_prompt)
    return out


def _with_system(messages: list[Any], system: str) -> list[Any]:
    """The messages with ``system`` first unless they have a system message (checked)."""
    for message in messages:
        role = message.get("role") if isinstance(message, Mapping) else None
        if role in ("system", "developer"):
            content = message.get("content")
            if content != system:
                warn_mismatch("system prompt", content, system)
            return messages
    return [{"role": "system", "content": system}, *messages]
