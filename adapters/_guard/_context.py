"""What every adapter shares about the rule it deploys: a :class:`Guard`, and what the
rule reads checked against what a stream carries.

A :class:`Guard` is built once per adapter from ``certificate=`` (or, for a
hand-made rule, from ``policy``/``tau``/``skeleton``) and gives one fresh monitor
per answer. (Whether a request generates answers as the calibration's were is
:mod:`adapters._guard._settings`'s one check.)

What a rule reads per token (its :class:`~guardrail._reads.Reads`: every rule reads the
token's logprob; a fitted statistic may read ``statistic.alternatives``
alternatives and exact entropies) is checked against what the adapter's stream
carries (:class:`Supplies`, stated by each adapter) in one place, :func:`check_supplies`:
a stream that cannot carry it is a :class:`~guardrail.ConfigError` when the
adapter is built (or, where the adapter makes the request, before it is sent),
naming the fix -- never a block in the middle of an answer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from guardrail import Certificate, ConfigError, ModelIdentity, Monitor, SkeletonSpec, StreamPolicy
from guardrail._fit._statistic import DEFAULT_ALTERNATIVES
from guardrail._reads import Reads, Skeleton, skeleton_reads
from guardrail._skeletons import TokenIds, WithTokenIds

__all__ = [
    "Guard",
    "Supplies",
    "check_supplies",
    "monitor_for",
    "resolve_guard",
]

MissingPolicy = Literal["block", "pass", "error"]


@dataclass(frozen=True)
class Supplies:
    """What a stream carries per token, as the adapter that reads it states it.

    ``source``: the stream in words, as error messages name it (``"an OpenAI Chat
    Completions stream"``); ``logprobs``: the emitted token's logprob; ``alternatives``:
    how many top alternatives it carries per token (at most; ``None``: not known before
    the stream, as for a stream the caller created); ``exact_entropy``: the entropy of
    each token's full distribution; ``fix``: how to make the stream carry the logprobs
    and ``{k}`` alternatives (``{k}`` is filled in)."""

    source: str
    logprobs: bool | None = True
    alternatives: int | None = None
    exact_entropy: bool = False
    fix: str = ""

    def describe(self) -> str:
        """What the stream carries, in words."""
        if self.logprobs is False:
            return "no token logprobs"
        alt = self.alternatives
        what = (
            "token logprobs"
            if alt == 0
            else "token logprobs and their alternatives"
            if alt is None
            else f"token logprobs and up to {alt} alternatives per token"
        )
        what += " and exact entropies" if self.exact_entropy else ""
        return f"at most {what}" if self.logprobs is None else what


def check_supplies(rule: Certificate | Monitor, supplies: Supplies) -> Reads:
    """What ``rule`` (a certificate, or a monitor of one) reads, after checking that a
    stream that ``supplies`` this can feed it: a :class:`~guardrail.ConfigError` naming
    the group, what the stream carries and the fix when it cannot. What the stream does
    not state (``None``) is not checked here."""
    needs = rule.reads
    k = needs.alternatives
    fitted = f"this certificate's fitted statistic (feature group {needs.group!r})"
    if needs.exact_entropy and not supplies.exact_entropy:
        remedy = (
            supplies.fix.format(k=DEFAULT_ALTERNATIVES)
            if supplies.alternatives == 0 and supplies.fix
            else "use a certificate fitted on what this provider sends ('liftguard fit "
            "--group api', or --group lift with a skeleton)"
        )
        raise ConfigError(
            f"{fitted} reads the exact entropy of each token's full distribution, which "
            f"{supplies.source} never carries (it carries {supplies.describe()}): {remedy}; "
            "or generate with a local model (LocalModel.guarded_generate feeds the monitor "
            "exact entropies)"
        )
    fix = supplies.fix.format(k=max(k, DEFAULT_ALTERNATIVES))
    if supplies.logprobs is False:
        reads = f"{fitted} reads" if needs.group is not None else "this certificate reads"
        raise ConfigError(
            f"{reads} each token's logprob, but {supplies.source} carries none"
            + (f": {fix}" if fix else "")
        )
    have = supplies.alternatives
    if k and have is not None and have < k:
        raise ConfigError(
            f"{fitted} reads {k} alternatives (top_logprobs) per token, but "
            f"{supplies.source} carries {'none' if have == 0 else f'at most {have}'}"
            + (f": {supplies.fix.format(k=k)}" if supplies.fix else "")
        )
    return needs


@dataclass(frozen=True)
class Guard:
    """The certificate an adapter deploys, with the skeleton object that overrides its
    spec (if any), an explicit missing-logprobs policy (if any), the token-id resolver
    an id-based skeleton needs on a stream without ids, and whether the stream feeds
    the monitor exact entropies (a local model's does)."""

    certificate: Certificate
    skeleton: Skeleton | None = None
    on_missing_logprobs: MissingPolicy | None = None
    token_ids: TokenIds | None = None
    exact_entropy: bool = False

    def _skeleton(self) -> Skeleton | None:
        skel = self.skeleton if self.skeleton is not None else self.certificate.bound_skeleton
        if self.token_ids is None:
            return skel
        if skel is None:
            skel = self.certificate.skeleton.build()
        return WithTokenIds(skel, self.token_ids) if skeleton_reads(skel).token_ids else skel

    def monitor(self, max_tokens: int | Literal["context"] | None = "context") -> Monitor:
        """A fresh monitor for one answer (a stateful skeleton gets its own stream);
        ``max_tokens``: the answer's token limit, as :meth:`Certificate.monitor` takes it."""
        return self.certificate.monitor(
            skeleton=self._skeleton(),
            on_missing_logprobs=self.on_missing_logprobs,
            exact_entropy=self.exact_entropy,
            max_tokens=max_tokens,
        )


def resolve_guard(
    certificate: Certificate | None,
    policy: StreamPolicy | None,
    tau: float | None,
    skeleton: Skeleton | None,
    on_missing_logprobs: MissingPolicy | None = None,
    token_ids: TokenIds | None = None,
    *,
    supplies: Supplies,
) -> Guard:
    """``certificate=`` or a hand-made ``policy`` + ``tau`` + ``skeleton`` (not both);
    checked now against what the adapter's stream ``supplies`` (:func:`check_supplies`)
    and by building one monitor. A skeleton that needs token ids gets the
    resolver ``token_ids``, else the one the certificate's ``model.tokenizer``
    names; with neither, the stream could not be scored: a ConfigError now."""
    if certificate is not None:
        if not isinstance(certificate, Certificate):
            raise ConfigError(
                f"certificate must be a guardrail.Certificate, got {type(certificate).__name__}"
            )
        if policy is not None or tau is not None:
            raise ConfigError("pass either certificate=... or policy and tau, not both")
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
        certificate = Certificate(
            policy, float(tau), SkeletonSpec.of(skeleton), ModelIdentity("unspecified")
        )
    needs = check_supplies(certificate, supplies)
    guard = Guard(certificate, skeleton, on_missing_logprobs, token_ids, needs.exact_entropy)
    skel = guard.monitor().skeleton  # validates the skeleton and the missing policy now
    if skeleton_reads(skel).token_ids:
        if guard.token_ids is None:
            guard = _with_resolver(guard)
        guard.monitor()
    return guard


def monitor_for(
    monitor: Monitor | None,
    certificate: Certificate | None,
    supplies: Supplies,
    max_tokens: int | Literal["context"] | None = "context",
) -> Monitor:
    """``monitor`` (which must apply ``certificate``'s rule if both are given), or a fresh
    monitor of ``certificate`` for an answer of at most ``max_tokens`` tokens (as
    :meth:`Certificate.monitor` takes it); either checked against what the stream
    ``supplies``."""
    if monitor is None and certificate is None:
        raise ConfigError("pass certificate=... (or a monitor=...)")
    if monitor is None:
        guard = resolve_guard(certificate, None, None, None, supplies=supplies)
        return guard.monitor(max_tokens=max_tokens)
    if not isinstance(monitor, Monitor):
        raise ConfigError(f"monitor must be a guardrail.Monitor, got {type(monitor).__name__}")
    if certificate is not None and (
        monitor.policy != certificate.policy or monitor.tau != certificate.tau
    ):
        raise ConfigError("monitor= does not apply certificate='s policy and tau")
    check_supplies(monitor, supplies)
    return monitor


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
    return replace(guard, token_ids=ids)
