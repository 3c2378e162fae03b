"""One answer's monitor: :class:`Monitor` (what of it may be shown: :mod:`guardrail._gate`).

A :class:`Monitor` owns one streamed answer's lifecycle and applies one evidence rule
(:mod:`guardrail._rules`: :class:`~guardrail.LiftRule` or
:class:`~guardrail.FittedRule`) to it, token by token, exactly as calibration replays
that rule. ``update(event)`` returns CONTINUE until an early verdict (``final=True``);
``finish(finish_reason)`` applies the final rule, and only a documented clean finish
can certify. Once decided, ``update`` returns that verdict without reading its input
(an adapter may keep streaming in passthrough mode); after ``finish()`` it raises
:class:`~guardrail.GuardrailError`. What the monitor owns, once, for every rule:

- token order (``event.index``, when the provider gives it);
- unusable inputs (a missing, NaN, infinite, censored or positive logprob; missing
  alternatives or entropy the rule reads): ``policy.on_missing_logprobs`` decides
  (``"block"``, ``"pass"``: skipped, ``t`` unchanged, or ``"error"``);
- the token limit the rule's early verdicts assume (``rule.token_limit``): a token
  past it blocks the answer (cause ``over_token_limit``), even after an early
  certification;
- how the stream ended (:func:`~guardrail._verdict.end_cause`), ``abort`` for reasons outside
  the evidence, an empty answer, ``final_rule="block"``.

``verdict.mean``/``lower``/``upper`` and ``tau`` are in the rule's units
(``monitor.units``: nats for the lift rule, log-odds for the fitted one). Verdicts are
built by :func:`~guardrail._verdict.make_verdict`, which skips the frozen-dataclass
``__init__`` (a verdict per token).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from ._errors import ConfigError, GuardrailError, MissingLogprobsError
from ._fit._statistic import FittedStatistic
from ._policy import OnMissing, StreamPolicy
from ._reads import Reads, Skeleton
from ._rules import BLOCK, CONTINUE, MISSING, EvidenceRule, FittedRule, LiftRule
from ._trace_format import CENSORED_LOGPROB
from ._verdict import Cause, State, TokenEvent, Verdict, end_cause
from ._verdict import make_verdict as _verdict

__all__ = ["Monitor", "Skeleton", "State", "TokenEvent", "Verdict"]

_CONTINUE, _UNDECIDED = State.CONTINUE, Cause.UNDECIDED
_AFTER_FINISH = "update after the verdict was finished: use one monitor per answer"
_END_REASONS = {
    Cause.TRUNCATED: "the stream ended without a finish after {t} tokens (cut off; "
    "an answer not fully seen is never certified)",
    Cause.LENGTH: "the answer was cut at the token limit after {t} tokens "
    "(finish_reason 'length'; the policy counts only complete answers: on_length='block')",
    Cause.CONTENT_FILTER: "the provider's content filter stopped the answer after {t} tokens",
    Cause.REFUSAL: "the model refused (finish_reason {reason!r})",
    Cause.OTHER_FINISH: "the stream finished with {reason!r}, not a complete text answer",
}
_WHAT = {"alternatives": "top_logprobs", "entropy": "exact entropy"}


def _describe(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "missing" if value is None else "non-finite"
    return "censored (outside the top-k)" if value <= CENSORED_LOGPROB else "positive (> 0)"


class Monitor:
    """Certify or block one streamed answer by ``rule`` under ``policy``.

    Build one per answer, usually with :meth:`Certificate.monitor
    <guardrail.Certificate.monitor>`, or :meth:`lift` / :meth:`fitted` for a hand-made
    rule. ``on_missing_logprobs`` (``None``: the policy's) overrides the policy's
    missing-logprob rule; :attr:`policy` then carries the value applied (the
    calibration record does not). Token positions are 0-based and count every event,
    skipped ones included.

    Examples
    --------
        >>> monitor = Monitor.lift(StreamPolicy(), tau=2.0, skeleton=UniformSkeleton(1000))
        >>> for lp in [-0.1, -0.2, -0.05]:
        ...     verdict = monitor.update(TokenEvent("tok", logprob=lp))
        >>> verdict.state.value, verdict.t
        ('continue', 3)
        >>> monitor.finish().cause.value
        'certified'
    """

    __slots__ = (
        "_add",
        "_add_event",
        "_boundary",
        "_closed",
        "_finished",
        "_limit",
        "_on_missing",
        "_policy",
        "_received",
        "_rule",
        "_skipped",
        "_t",
        "_tau",
        "_verdict",
    )

    def __init__(
        self,
        rule: EvidenceRule,
        policy: StreamPolicy,
        *,
        on_missing_logprobs: OnMissing | None = None,
    ) -> None:
        if not isinstance(policy, StreamPolicy):
            raise ConfigError(f"policy must be a StreamPolicy, got {type(policy).__name__}")
        if not callable(getattr(rule, "add_event", None)):
            raise ConfigError(f"rule must be an evidence rule (LiftRule, FittedRule), got {rule!r}")
        if on_missing_logprobs not in (None, policy.on_missing_logprobs):  # validated by replace
            policy = replace(policy, on_missing_logprobs=on_missing_logprobs)
        self._rule, self._policy, self._tau, self._boundary = rule, policy, rule.tau, rule.boundary
        self._add_event, self._add = rule.add_event, rule.add
        self._on_missing, self._limit = policy.on_missing_logprobs, rule.token_limit
        self._t = self._skipped = self._received = 0  # events so far: t + skipped
        self._closed = self._finished = False
        self._continuing(0)

    @classmethod
    def lift(
        cls,
        policy: StreamPolicy,
        tau: float,
        *,
        skeleton: Skeleton | None = None,
        on_missing_logprobs: OnMissing | None = None,
        track_bounds: bool = False,
    ) -> Monitor:
        """A monitor of the lift rule (:class:`~guardrail.LiftRule`); ``update(event)`` needs
        a ``skeleton``, :meth:`update_evidence` takes clipped lifts without one."""
        rule = LiftRule(policy, tau, skeleton=skeleton, track_bounds=track_bounds)
        return cls(rule, policy, on_missing_logprobs=on_missing_logprobs)

    @classmethod
    def fitted(
        cls,
        statistic: FittedStatistic,
        policy: StreamPolicy,
        tau: float,
        *,
        skeleton: Skeleton | None = None,
        max_tokens: int | None = None,
        on_missing_logprobs: OnMissing | None = None,
    ) -> Monitor:
        """A monitor of a fitted statistic (:class:`~guardrail.FittedRule`)."""
        rule = FittedRule(statistic, policy, tau, skeleton=skeleton, max_tokens=max_tokens)
        return cls(rule, policy, on_missing_logprobs=on_missing_logprobs)

    @property
    def rule(self) -> EvidenceRule:
        return self._rule

    @property
    def reads(self) -> Reads:
        """What the rule reads of each token besides its logprob."""
        return self._rule.reads

    @property
    def units(self) -> str:
        """``"nats"`` or ``"log-odds"``: the unit of ``tau`` and of the verdicts' numbers."""
        return self._rule.units

    @property
    def policy(self) -> StreamPolicy:
        return self._policy

    @property
    def tau(self) -> float:
        return self._tau

    @property
    def skeleton(self) -> Skeleton | None:
        """The skeleton the rule scores lifts with (``None`` if none)."""
        return self._rule.skeleton

    @property
    def verdict(self) -> Verdict:
        return self._verdict

    @property
    def t(self) -> int:
        """Tokens that carried evidence so far (skipped ones not counted)."""
        return self._t

    @property
    def value(self) -> float:
        """The statistic the final rule compares with ``tau``, in the rule's units (the
        lift aggregate, ``clip`` before any token; the fitted score, NaN before any)."""
        return self._rule.value

    @property
    def max_tokens(self) -> int | None:
        """The token limit the rule was given (``None``: none, or a lift rule)."""
        return getattr(self._rule, "max_tokens", None)

    def update(self, event: TokenEvent) -> Verdict:
        """Add one token event."""
        if self._finished:
            raise GuardrailError(_AFTER_FINISH)
        self._received = n = self._received + 1
        limit = self._limit
        if limit is not None and n > limit:
            return self._over_limit(limit)
        if self._closed:
            return self._verdict
        t = self._t
        idx = event.index
        if idx is not None and idx != t + self._skipped:
            pos = t + self._skipped
            raise GuardrailError(f"token out of order: expected index {pos}, got {idx}")
        code = self._add_event(event, t + 1)
        if code:
            return self._after(code)
        self._t = t = t + 1  # the common path: no verdict yet
        return self._continuing(t)

    def update_evidence(self, x: Any) -> Verdict:
        """Add one token's evidence computed elsewhere: a clipped lift in ``[0, clip]`` for
        the lift rule (a finite value outside is a ConfigError), the base features in
        ``statistic.bases`` order for the fitted rule."""
        if self._finished:
            raise GuardrailError(_AFTER_FINISH)
        if self._closed:
            return self._verdict
        return self._after(self._add(x, self._t + 1))

    def _continuing(self, t: int) -> Verdict:
        """The verdict after ``t`` tokens of evidence that decide nothing yet (kept)."""
        rule = self._rule
        v = _verdict(_CONTINUE, t, rule.mean, rule.lower, rule.upper, self._tau, self._boundary,
                     rule.why, False, _UNDECIDED)  # fmt: skip
        self._verdict = v
        return v

    def _after(self, code: int) -> Verdict:
        rule = self._rule
        if code == MISSING:
            return self._missing(*rule.missing)
        self._t = t = self._t + 1
        if code == CONTINUE:
            return self._continuing(t)
        if code == BLOCK:
            return self._final(
                State.BLOCKED, rule.why, rule.lower, rule.upper, Cause.BELOW_THRESHOLD
            )
        return self._final(State.CERTIFIED, rule.why, rule.lower, rule.upper, Cause.CERTIFIED)

    def finish(self, finish_reason: str | None = "stop") -> Verdict:
        """End of stream: the final rule if undecided (idempotent).

        ``finish_reason`` is how the stream ended (OpenAI's; adapters map other
        providers onto it). Only ``"stop"`` (and ``"length"`` when
        ``policy.on_length == "answer"``) is a finished answer; any other end,
        ``None`` (cut off) included, gives a BLOCKED verdict with that cause, also
        after an early CERTIFIED: an answer not fully seen is never certified.
        """
        if self._finished:
            return self._verdict
        self._finished = self._closed = True
        v, t, pol = self._verdict, self._t, self._policy
        cause = end_cause(finish_reason, pol.on_length)
        if cause is not None and v.state is not State.BLOCKED:
            why = _END_REASONS[cause].format(reason=finish_reason, t=t)
            return self._final(State.BLOCKED, f"blocked: {why}", v.lower, v.upper, cause)
        if v.final:
            return v
        if t == 0:
            why = "blocked: empty answer (no token carried evidence)"
            return self._final(State.BLOCKED, why, v.lower, v.upper, Cause.EMPTY_ANSWER)
        if pol.final_rule == "block":
            why = f"blocked: no verdict after {t} tokens (final_rule='block')"
            return self._final(State.BLOCKED, why, v.lower, v.upper, Cause.NO_VERDICT)
        ok, why, lo, up = self._rule.final(t)
        if ok:
            return self._final(State.CERTIFIED, why, lo, up, Cause.CERTIFIED)
        return self._final(State.BLOCKED, why, lo, up, Cause.BELOW_THRESHOLD)

    def abort(self, cause: Cause, reason: str) -> Verdict:
        """Block the answer now for a reason outside the evidence (a refusal, a tool call,
        text that cannot be reconstructed); an earlier BLOCKED verdict stands (idempotent)."""
        if not isinstance(cause, Cause) or cause in (Cause.UNDECIDED, Cause.CERTIFIED):
            raise ConfigError(f"abort needs a blocking Cause, got {cause!r}")
        v = self._verdict
        if v.state is State.BLOCKED:
            return v
        return self._final(State.BLOCKED, f"blocked: {reason}", v.lower, v.upper, cause)

    def _final(self, state: State, why: str, lo: float, up: float, cause: Cause) -> Verdict:
        self._closed = True
        v = _verdict(state, self._t, self._rule.mean, lo, up, self._tau, self._boundary, why,
                     True, cause)  # fmt: skip
        self._verdict = v
        return v

    def _over_limit(self, limit: int) -> Verdict:
        v = self._verdict
        if v.state is State.BLOCKED:
            return v
        why = (
            f"blocked: token {self._received} is past the token limit {limit} that the early "
            "verdicts assume, so the rest of the answer was never judged (give the monitor "
            "the request's real max_tokens, or hold the request to the certificate's)"
        )
        return self._final(State.BLOCKED, why, v.lower, v.upper, Cause.OVER_TOKEN_LIMIT)

    def _missing(self, what: str, value: float | None) -> Verdict:
        pos, mode = self._t + self._skipped, self._on_missing
        self._skipped += 1
        desc = f"{_describe(value)} {_WHAT.get(what, what)} at token {pos} (value {value!r})"
        if mode == "error":
            raise MissingLogprobsError(f"{desc}; policy on_missing_logprobs='error'")
        if mode == "pass":
            return self._verdict
        why, v = f"blocked: {desc}; policy on_missing_logprobs='block'", self._verdict
        return self._final(State.BLOCKED, why, v.lower, v.upper, Cause.MISSING_LOGPROBS)
