"""The streaming certificate monitor: one answer, one token at a time.

:class:`CertificateMonitor` applies exactly the rule of :func:`guardrail.replay`
in O(1) pure-Python time per token, composing the one statistic the policy
selects (:mod:`guardrail._statistics`), so calibration covers what is deployed.
``update*`` returns CONTINUE until an early verdict (``final=True``);
``finish()`` applies the final rule. Once decided, ``update*`` returns that
verdict without reading its input (an adapter may keep streaming in passthrough
mode); after ``finish()`` it raises :class:`GuardrailError`. Verdicts are built
by :func:`_verdict`, which skips the frozen-dataclass ``__init__``.

Bounds (nats): ``paper``: ``mean -/+ r_t`` in ``[0, B]``; ``betting``: ``[0, B]``
narrowed to ``tau`` on the decided side, or with ``track_bounds=True`` a
:class:`~guardrail._statistics.BettingConfidenceSequence` (49-point grid, several
times the per-token cost), which bounds a mean shared by all tokens, not the
running mean a drifting stream can leave. :class:`GuardedText` turns verdicts
into what may be shown.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal, Protocol, runtime_checkable

from ._errors import ConfigError, GuardrailError, MissingLogprobsError
from ._policy import OnMissing, StreamPolicy
from ._statistics import ABOVE, BELOW, BettingConfidenceSequence, BettingMean, LowestK, PaperMean
from ._stream_monitor import StreamMonitor
from ._traces import CENSORED_LOGPROB
from ._verdict import Cause, State, TokenEvent, Verdict, end_cause
from ._verdict import make_verdict as _verdict

__all__ = ["CertificateMonitor", "GuardedText", "Skeleton", "State", "TokenEvent", "Verdict"]

StreamMode = Literal["passthrough", "buffered", "final"]


@runtime_checkable
class Skeleton(Protocol):
    """A skeleton baseline ``S``: the log-probability it gives the emitted token."""

    def log_prob(self, event: TokenEvent) -> float: ...


_BETTING, _PAPER, _ORDER = "betting", "paper", "order"  # which statistic decides
_CONTINUE = State.CONTINUE
_UNDECIDED = Cause.UNDECIDED
_AFTER_FINISH = "update after the verdict was finished: use one CertificateMonitor per answer"
_CONFLICT = "continue: conflicting evidence; verdict at end of stream"
_NO_SKELETON = (
    "update(event) needs a skeleton: pass skeleton=... to CertificateMonitor, "
    "or feed clipped lifts with update_lift()"
)
_END_REASONS = {
    Cause.TRUNCATED: "the stream ended without a finish after {t} tokens (cut off; "
    "an answer not fully seen is never certified)",
    Cause.LENGTH: "the answer was cut at the token limit after {t} tokens "
    "(finish_reason 'length'; the policy counts only complete answers: on_length='block')",
    Cause.CONTENT_FILTER: "the provider's content filter stopped the answer after {t} tokens",
    Cause.REFUSAL: "the model refused (finish_reason {reason!r})",
    Cause.OTHER_FINISH: "the stream finished with {reason!r}, not a complete text answer",
}


def _describe(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "missing" if value is None else "non-finite"
    return "censored (outside the top-k)" if value <= CENSORED_LOGPROB else "positive (> 0)"


class CertificateMonitor:
    """Certify or block one streamed answer at threshold ``tau`` under ``policy``.

    ``update(event)`` needs a ``skeleton``; ``update_lift(x)`` takes a clipped lift in
    ``[0, clip]``. Unusable logprobs (None, NaN, +/-inf, <= -9999, > 0) and NaN/inf
    lifts follow the policy's ``on_missing_logprobs``: ``"block"`` (final BLOCKED),
    ``"pass"`` (skipped, ``t`` unchanged) or ``"error"`` (MissingLogprobsError); the
    keyword ``on_missing_logprobs`` (``None``: the policy's) overrides it, and
    :attr:`policy` then carries the value applied (the calibration record does not).
    Token positions are 0-based and count every event, skipped ones included.
    """

    __slots__ = ("_b", "_boundary", "_closed", "_early", "_finished", "_kind", "_min_tokens",
                 "_on_missing", "_policy", "_reason", "_skeleton", "_skipped", "_stat", "_step",
                 "_t", "_tau", "_total", "_track", "_verdict")  # fmt: skip

    def __init__(
        self,
        policy: StreamPolicy,
        tau: float,
        *,
        skeleton: Skeleton | None = None,
        on_missing_logprobs: OnMissing | None = None,
        track_bounds: bool = False,
    ) -> None:
        if not isinstance(policy, StreamPolicy):
            raise ConfigError(f"policy must be a StreamPolicy, got {type(policy).__name__}")
        b = policy.clip
        if isinstance(tau, bool) or not isinstance(tau, int | float) or not (0.0 < tau < b):
            raise ConfigError(f"tau must lie strictly inside (0, {b}), got {tau!r}")
        if on_missing_logprobs not in (None, policy.on_missing_logprobs):  # validated by replace
            policy = replace(policy, on_missing_logprobs=on_missing_logprobs)
        if skeleton is not None and not isinstance(skeleton, Skeleton):
            raise ConfigError(f"skeleton must have a log_prob(event) method, got {skeleton!r}")
        self._policy, self._tau, self._b, self._skeleton = policy, float(tau), b, skeleton
        self._on_missing, self._boundary = policy.on_missing_logprobs, policy.boundary
        self._min_tokens, self._early = policy.min_tokens, policy.early
        stat: BettingMean | PaperMean | LowestK
        if policy.order_based:
            self._kind, stat = _ORDER, LowestK(policy.n_lowest, b)
        elif policy.boundary == "paper":  # v, c > 0: checked by StreamPolicy
            self._kind, stat = _PAPER, PaperMean(policy.v or 0.0, policy.c or 0.0, b, policy.delta)
        else:  # betting: updated only while early verdicts can come
            self._kind, stat = _BETTING, BettingMean(self._tau, b, policy.delta, policy.bet_cap)
        self._stat, self._step = stat, stat.update
        self._track: Callable[[float], tuple[float, float]] | None = None
        if track_bounds and self._kind is _BETTING:  # on a 49-point grid
            self._track = BettingConfidenceSequence(b, policy.delta, policy.bet_cap).update
        self._t = self._skipped = 0  # events so far: t + skipped
        self._total, self._closed, self._finished = 0.0, False, False
        wait = "evidence not yet conclusive" if self._early else "verdict at end (early=False)"
        self._reason = (f"continue: fewer than min_tokens={self._min_tokens} tokens",
                        f"continue: {wait}")  # fmt: skip
        why, tau = "continue: no tokens yet", self._tau
        self._verdict = _verdict(
            _CONTINUE, 0, 0.0, 0.0, b, tau, policy.boundary, why, False, _UNDECIDED
        )

    @property
    def policy(self) -> StreamPolicy:
        return self._policy

    @property
    def tau(self) -> float:
        return self._tau

    @property
    def skeleton(self) -> Skeleton | None:
        return self._skeleton

    @property
    def verdict(self) -> Verdict:
        return self._verdict

    @property
    def t(self) -> int:
        return self._t

    @property
    def mean(self) -> float:
        return self._total / self._t if self._t else 0.0

    @property
    def minimum(self) -> float:
        """Smallest clipped lift so far (``clip`` before the first token); tracked
        for ``aggregate="min"`` and ``"lowest"`` policies, ``nan`` otherwise."""
        return self._stat.lowest[0] if isinstance(self._stat, LowestK) else math.nan

    @property
    def statistic(self) -> float:
        """The aggregate the final rule compares with ``tau``: the running mean,
        minimum, or mean of the ``lowest_k`` weakest lifts (``clip`` before any token)."""
        if isinstance(self._stat, LowestK):
            return self._stat.value
        return self._total / self._t if self._t else self._b

    def update_lift(self, x: float) -> Verdict:
        """Add one clipped lift in ``[0, clip]`` (a finite value outside is a ConfigError)."""
        if self._closed:
            return self._after_final()
        b = self._b
        if not (0.0 <= x <= b):
            if math.isfinite(x):
                raise ConfigError(f"clipped lift must lie in [0, {b}], got {x!r}")
            return self._missing(x, "lift")
        self._t = t = self._t + 1
        self._total = total = self._total + x
        tau, kind = self._tau, self._kind
        step: Callable[[float], Any] = self._step
        if kind is _BETTING:
            track = self._track
            if track is None:
                lower, upper = 0.0, b
            else:
                lower, upper = track(x)
            if self._early:
                hit = step(x)
                if hit and t >= self._min_tokens:
                    if hit == ABOVE:
                        return self._decide(True, t, lower if lower > tau else tau, upper)
                    if hit == BELOW:
                        return self._decide(False, t, lower, upper if upper < tau else tau)
                    # both at once: undecided, as replay() treats simultaneous first crossings
                    self._early, self._reason = False, (_CONFLICT, _CONFLICT)
        elif kind is _PAPER:
            lower, upper = step(x)
            if (lower > tau or upper < tau) and self._early and t >= self._min_tokens:
                return self._decide(lower > tau, t, lower, upper)
        else:
            lower, upper = 0.0, b
            low = step(x)
            if low < tau and self._early and t >= self._min_tokens:
                return self._decide(False, t, 0.0, b, low)
        why, mean = self._reason[t >= self._min_tokens], total / t
        v = _verdict(_CONTINUE, t, mean, lower, upper, tau, self._boundary, why, False, _UNDECIDED)
        self._verdict = v
        return v

    def update(self, event: TokenEvent) -> Verdict:
        """Add one token: lift ``clip(event.logprob - skeleton.log_prob(event))``."""
        skel = self._skeleton
        if skel is None:
            raise ConfigError(_NO_SKELETON)
        if self._closed:
            return self._after_final()
        idx, pos = event.index, self._t + self._skipped
        if idx is not None and idx != pos:
            raise GuardrailError(f"token out of order: expected index {pos}, got {idx}")
        lp = event.logprob
        if lp is None or not (CENSORED_LOGPROB < lp <= 1e-6):
            return self._missing(lp, "logprob")
        ls = skel.log_prob(event)
        if not (ls <= 1e-6):  # NaN or > 0: a broken skeleton, not bad provider data
            raise ConfigError(f"skeleton returned an invalid log-probability {ls!r}")
        lift = lp - ls  # as clipped_lift()
        return self.update_lift(0.0 if lift <= 0.0 else (self._b if lift >= self._b else lift))

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
        v, t, tau, pol = self._verdict, self._t, self._tau, self._policy
        cause = end_cause(finish_reason, pol.on_length)
        if cause is not None and v.state is not State.BLOCKED:
            why = _END_REASONS[cause].format(reason=finish_reason, t=t)
            return self._final(State.BLOCKED, f"blocked: {why}", v.lower, v.upper, cause)
        if v.final:
            return v
        ok, cause = False, Cause.BELOW_THRESHOLD
        if t == 0:
            why, cause = "blocked: empty answer (no token carried evidence)", Cause.EMPTY_ANSWER
        elif pol.final_rule == "block":
            why = f"blocked: no verdict after {t} tokens (final_rule='block')"
            cause = Cause.NO_VERDICT
        else:
            what = {"min": "min", "lowest": f"lowest-{pol.n_lowest}"}.get(pol.aggregate, "mean")
            stat = self.statistic
            ok = stat >= tau
            why = f"final {what} lift {stat:.4g} {'>=' if ok else '<'} tau={tau:g} after {t} tokens"
            why = f"{'certified' if ok else 'blocked'}: {why} (final_rule='mean')"
        state, cause = (State.CERTIFIED, Cause.CERTIFIED) if ok else (State.BLOCKED, cause)
        return self._final(state, why, v.lower, v.upper, cause)

    def abort(self, cause: Cause, reason: str) -> Verdict:
        """Block the answer now for a reason outside the evidence (a refusal, text that
        cannot be reconstructed); an earlier BLOCKED verdict stands (idempotent)."""
        if not isinstance(cause, Cause) or cause in (Cause.UNDECIDED, Cause.CERTIFIED):
            raise ConfigError(f"abort needs a blocking Cause, got {cause!r}")
        v = self._verdict
        if v.state is State.BLOCKED:
            return v
        return self._final(State.BLOCKED, f"blocked: {reason}", v.lower, v.upper, cause)

    def _after_final(self) -> Verdict:
        if self._finished:
            raise GuardrailError(_AFTER_FINISH)
        return self._verdict

    def _final(self, state: State, why: str, lo: float, up: float, cause: Cause) -> Verdict:
        self._closed = True
        t = self._t
        v = _verdict(state, t, self.mean, lo, up, self._tau, self._boundary, why, True, cause)
        self._verdict = v
        return v

    def _missing(self, value: float | None, what: str) -> Verdict:
        pos, mode = self._t + self._skipped, self._on_missing
        self._skipped += 1
        desc = f"{_describe(value)} {what} at token {pos} (value {value!r})"
        if mode == "error":
            raise MissingLogprobsError(f"{desc}; policy on_missing_logprobs='error'")
        if mode == "pass":
            return self._verdict
        why, v = f"blocked: {desc}; policy on_missing_logprobs='block'", self._verdict
        return self._final(State.BLOCKED, why, v.lower, v.upper, Cause.MISSING_LOGPROBS)

    def _decide(self, cert: bool, t: int, lo: float, up: float, low: float = 0.0) -> Verdict:
        (word, rel), tau = ("certified", ">") if cert else ("blocked", "<"), self._tau
        why = f"{word}: evidence that mean lift {rel} {tau:g} after {t} tokens"
        why = f"{why} ({self._boundary} boundary)"
        if self._kind is _ORDER:  # blocked: the order statistic fell below tau
            k, agg = self._policy.n_lowest, self._policy.aggregate
            what = "token lift" if k == 1 else f"mean of the {k} lowest lifts"
            why = f"blocked: {what} {low:.4g} < tau={tau:g} by token {t} ({agg} aggregate)"
        state = State.CERTIFIED if cert else State.BLOCKED
        return self._final(state, why, lo, up, Cause.CERTIFIED if cert else Cause.BELOW_THRESHOLD)


class GuardedText:
    """What of a streamed answer may be shown now, per streaming mode (pure, no I/O).

    ``passthrough``: each token at once; nothing from a BLOCKED verdict on (its
    token included). ``buffered``: held until CERTIFIED, then the buffer and every
    later token flow; after BLOCKED nothing held is ever released. ``final``: all
    held until :meth:`close` releases it iff CERTIFIED (needs ``early=False``).
    """

    __slots__ = ("_blocked", "_buffer", "_closed", "_mode", "_monitor", "_open")

    def __init__(self, monitor: StreamMonitor, mode: StreamMode = "buffered") -> None:
        if mode not in ("passthrough", "buffered", "final"):
            raise ConfigError(f"mode must be 'passthrough', 'buffered' or 'final', got {mode!r}")
        if mode == "final" and monitor.policy.early:
            raise ConfigError(
                "mode 'final' decides only at the end: use StreamPolicy(early=False) "
                "so that calibration replays the same rule"
            )
        self._monitor, self._mode = monitor, mode
        self._buffer: list[str] = []
        self._open = mode == "passthrough"
        self._blocked = self._closed = False

    @property
    def mode(self) -> StreamMode:
        return self._mode

    @property
    def blocked(self) -> bool:
        return self._blocked

    @property
    def pending(self) -> str:
        """Text held back so far."""
        return "".join(self._buffer)

    def push(self, text: str, verdict: Verdict) -> str:
        """Record ``text`` (its token gave ``verdict``); return the text to show now."""
        if self._closed:
            raise GuardrailError("push() after close()")
        if self._blocked:
            return ""
        if verdict.state is State.BLOCKED:
            return self._block()
        if self._open:
            return text
        self._buffer.append(text)
        if verdict.state is State.CERTIFIED and self._mode == "buffered":
            self._open = True
            return self._drain()
        return ""

    def close(self, final_verdict: Verdict | None = None) -> str:
        """End of stream: the held text to show (the monitor is finished if no verdict given)."""
        if self._closed:
            return ""
        verdict = self._monitor.finish() if final_verdict is None else final_verdict
        if not verdict.final:
            raise GuardrailError(f"close() needs a final verdict, got {verdict.state.value}")
        self._closed = True
        if self._blocked or verdict.state is not State.CERTIFIED:
            return self._block()
        return self._drain()

    def _block(self) -> str:
        self._blocked = True
        self._buffer.clear()
        return ""

    def _drain(self) -> str:
        out = "".join(self._buffer)
        self._buffer.clear()
        return out
