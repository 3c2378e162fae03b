"""The evidence rules a :class:`~guardrail.Monitor` applies: :class:`LiftRule` and
:class:`FittedRule`, one object per answer.

A rule reads one token's evidence from a :class:`~guardrail.TokenEvent`, adds it to its
statistic, and says whether an early verdict has come; the monitor owns everything else
(the stream's lifecycle, missing logprobs, the token limit, how the stream ended, the
verdict). Each rule declares what it reads (:class:`~guardrail._reads.Reads`) and its units:

- :class:`LiftRule`: clipped lifts ``clip(log P - log S)`` against a skeleton,
  tested by the policy's anytime statistic (:mod:`guardrail._statistics`) exactly as
  :func:`guardrail.replay` replays it; ``tau`` and ``mean``/``lower``/``upper`` are
  **nats** of mean (or lowest-k) lift.
- :class:`FittedRule`: a :class:`~guardrail.fitting.FittedStatistic` over per-token features;
  ``tau`` and the numbers are **log-odds** (the score, and its bounds over every
  continuation within the token limit), replayed by :func:`guardrail.fitting.replay_fitted`.

:meth:`add_event` (and :meth:`add`, for evidence computed elsewhere) returns
:data:`CONTINUE`, :data:`CERTIFY`, :data:`BLOCK` or :data:`MISSING` and leaves the
numbers of the verdict in ``mean``, ``lower``, ``upper`` and its text in ``why``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ._confidence_sequence import BettingConfidenceSequence
from ._errors import ConfigError
from ._fit._state import EventReader, FittedState
from ._fit._statistic import FittedStatistic
from ._policy import StreamPolicy
from ._reads import LOGPROB_SLACK, Reads, Skeleton, skeleton_reads
from ._statistics import ABOVE, BELOW, BettingMean, LowestK, PaperMean
from ._trace_format import CENSORED_LOGPROB
from ._verdict import TokenEvent

__all__ = ["BLOCK", "CERTIFY", "CONTINUE", "MISSING", "EvidenceRule", "FittedRule", "LiftRule"]

CONTINUE, CERTIFY, BLOCK, MISSING = 0, 1, 2, 3
"""What one token did: nothing decided yet, an early certification, an early block, or
the token lacked something the rule reads (``missing`` says what)."""


class EvidenceRule(Protocol):
    """One answer's evidence: what a :class:`~guardrail.Monitor` needs of a rule.

    Examples
    --------
        >>> rule: EvidenceRule = LiftRule(StreamPolicy(), tau=2.0, skeleton=UniformSkeleton(1000))
        >>> rule.units, rule.boundary
        ('nats', 'betting')
        >>> Monitor(rule, StreamPolicy()).update(TokenEvent("a", logprob=-0.1)).t
        1
    """

    reads: Reads
    units: str
    """``"nats"`` (lift) or ``"log-odds"`` (fitted): the unit of ``tau`` and of the
    verdicts' ``mean``, ``lower`` and ``upper``."""
    boundary: str
    tau: float
    skeleton: Skeleton | None
    token_limit: int | None
    """The token count the early verdicts assume the stream cannot pass (``None``: they
    assume none); a token past it blocks the answer."""
    mean: float
    lower: float
    upper: float
    why: str
    missing: tuple[str, float | None]

    @property
    def value(self) -> float:
        """The statistic the final rule compares with ``tau``."""

    def add_event(self, event: TokenEvent, t: int) -> int: ...

    def add(self, x: Any, t: int) -> int: ...

    def final(self, t: int) -> tuple[bool, str, float, float]:
        """At a clean finish of an undecided answer of ``t >= 1`` tokens: ``(shown, why,
        lower, upper)``."""


_BETTING, _PAPER, _ORDER = "betting", "paper", "order"  # which statistic decides
_CONFLICT = "continue: conflicting evidence; verdict at end of stream"
_NO_SKELETON = (
    "update(event) needs a skeleton: pass skeleton=... to the monitor, "
    "or feed clipped lifts with update_evidence()"
)


def _checked_skeleton(skeleton: Skeleton | None) -> Skeleton | None:
    if skeleton is not None and not callable(getattr(skeleton, "log_prob", None)):
        raise ConfigError(f"skeleton must have a log_prob(event) method, got {skeleton!r}")
    return skeleton


class LiftRule:
    """Clipped lifts against ``skeleton``, tested at ``tau`` (nats) by ``policy``'s statistic.

    ``add(x)`` takes a clipped lift in ``[0, clip]`` (a finite value outside is a
    ConfigError; NaN or inf is a missing lift). Bounds: ``paper``: ``mean -/+ r_t``
    in ``[0, B]``; ``betting``: ``[0, B]`` narrowed to ``tau`` on the decided side, or
    with ``track_bounds=True`` a :class:`~guardrail._confidence_sequence.BettingConfidenceSequence`
    (49-point grid, several times the per-token cost), which bounds a mean shared by
    all tokens, not the running mean a drifting stream can leave.

    Examples
    --------
        >>> rule = LiftRule(StreamPolicy(), tau=2.0)
        >>> monitor = Monitor(rule, StreamPolicy())
        >>> for lift in [6.0, 7.0, 5.0]:
        ...     verdict = monitor.update_evidence(lift)
        >>> round(rule.mean, 2), monitor.finish().state.value
        (6.0, 'certified')
    """

    __slots__ = (
        "_clip",
        "_early",
        "_kind",
        "_min_tokens",
        "_policy",
        "_reason",
        "_stat",
        "_step",
        "_t",
        "_total",
        "_track",
        "boundary",
        "lower",
        "mean",
        "missing",
        "reads",
        "skeleton",
        "tau",
        "upper",
        "why",
    )

    units = "nats"
    token_limit: int | None = None

    def __init__(
        self,
        policy: StreamPolicy,
        tau: float,
        *,
        skeleton: Skeleton | None = None,
        track_bounds: bool = False,
    ) -> None:
        if not isinstance(policy, StreamPolicy):
            raise ConfigError(f"policy must be a StreamPolicy, got {type(policy).__name__}")
        b = policy.clip
        if isinstance(tau, bool) or not isinstance(tau, int | float) or not (0.0 < tau < b):
            raise ConfigError(f"tau must lie strictly inside (0, {b}), got {tau!r}")
        self.skeleton = _checked_skeleton(skeleton)
        self.reads = Reads(skeleton=True) | skeleton_reads(skeleton) if skeleton else Reads()
        self._policy, self.tau, self._clip = policy, float(tau), b
        self.boundary: str = policy.boundary
        self._min_tokens, self._early = policy.min_tokens, policy.early
        stat: BettingMean | PaperMean | LowestK
        if policy.order_based:
            self._kind, stat = _ORDER, LowestK(policy.n_lowest, b)
        elif policy.boundary == "paper":  # v, c > 0: checked by StreamPolicy
            self._kind, stat = _PAPER, PaperMean(policy.v or 0.0, policy.c or 0.0, b, policy.delta)
        else:  # betting: updated only while early verdicts can come
            self._kind, stat = _BETTING, BettingMean(self.tau, b, policy.delta, policy.bet_cap)
        self._stat = stat
        self._step: Callable[[float], Any] = stat.update
        self._track: Callable[[float], tuple[float, float]] | None = None
        if track_bounds and self._kind is _BETTING:  # on a 49-point grid
            self._track = BettingConfidenceSequence(b, policy.delta, policy.bet_cap).update
        self._t, self._total = 0, 0.0
        wait = "evidence not yet conclusive" if self._early else "verdict at end (early=False)"
        self._reason = (
            f"continue: fewer than min_tokens={self._min_tokens} tokens",
            f"continue: {wait}",
        )
        self.mean, self.lower, self.upper, self.why = 0.0, 0.0, b, "continue: no tokens yet"
        self.missing: tuple[str, float | None] = ("", None)

    @property
    def minimum(self) -> float:
        """Smallest clipped lift so far (``clip`` before the first token); tracked for
        ``aggregate="min"`` and ``"lowest"`` policies, ``nan`` otherwise."""
        return self._stat.lowest[0] if isinstance(self._stat, LowestK) else math.nan

    @property
    def value(self) -> float:
        """The aggregate the final rule compares with ``tau``: the running mean, minimum,
        or mean of the ``lowest_k`` weakest lifts (``clip`` before any token)."""
        if isinstance(self._stat, LowestK):
            return self._stat.value
        return self.mean if self._t else self._clip

    def add_event(self, event: TokenEvent, t: int) -> int:
        """Add token ``t`` (1-based): its lift, ``clip(logprob - skeleton.log_prob(event))``."""
        skel = self.skeleton
        if skel is None:
            raise ConfigError(_NO_SKELETON)
        lp = event.logprob
        if lp is None or not (CENSORED_LOGPROB < lp <= LOGPROB_SLACK):  # not usable_logprob(lp)
            self.missing = ("logprob", lp)
            return MISSING
        ls = skel.log_prob(event)
        if not (ls <= LOGPROB_SLACK):  # NaN or > 0: a broken skeleton, not bad provider data
            raise ConfigError(f"skeleton returned an invalid log-probability {ls!r}")
        lift, b = lp - ls, self._clip  # as clipped_lift()
        return self.add(0.0 if lift <= 0.0 else (b if lift >= b else lift), t)

    def add(self, x: float, t: int) -> int:
        """Add clipped lift ``x`` as token ``t`` (1-based)."""
        b = self._clip
        if not (0.0 <= x <= b):
            if math.isfinite(x):
                raise ConfigError(f"clipped lift must lie in [0, {b}], got {x!r}")
            self.missing = ("lift", x)
            return MISSING
        self._t = t
        self._total = total = self._total + x
        tau, kind = self.tau, self._kind
        self.mean = total / t
        if kind is _BETTING:
            lower, upper, track = 0.0, b, self._track
            if track is not None:
                self.lower, self.upper = lower, upper = track(x)
            if self._early:
                hit = self._step(x)
                if hit and t >= self._min_tokens:
                    if hit == ABOVE:
                        return self._decide(True, t, lower if lower > tau else tau, upper)
                    if hit == BELOW:
                        return self._decide(False, t, lower, upper if upper < tau else tau)
                    # both at once: undecided, as replay() treats simultaneous first crossings
                    self._early, self._reason = False, (_CONFLICT, _CONFLICT)
        elif kind is _PAPER:
            self.lower, self.upper = lower, upper = self._step(x)
            if (lower > tau or upper < tau) and self._early and t >= self._min_tokens:
                return self._decide(lower > tau, t, lower, upper)
        else:  # bounds stay [0, B]
            low = self._step(x)
            if low < tau and self._early and t >= self._min_tokens:
                return self._decide(False, t, 0.0, b, low)
        self.why = self._reason[t >= self._min_tokens]
        return CONTINUE

    def final(self, t: int) -> tuple[bool, str, float, float]:
        pol, tau = self._policy, self.tau
        what = {"min": "min", "lowest": f"lowest-{pol.n_lowest}"}.get(pol.aggregate, "mean")
        stat = self.value
        ok = stat >= tau
        why = f"final {what} lift {stat:.4g} {'>=' if ok else '<'} tau={tau:g} after {t} tokens"
        return (
            ok,
            f"{'certified' if ok else 'blocked'}: {why} (final_rule='mean')",
            self.lower,
            self.upper,
        )

    def _decide(self, cert: bool, t: int, lo: float, up: float, low: float = 0.0) -> int:
        (word, rel), tau = ("certified", ">") if cert else ("blocked", "<"), self.tau
        why = f"{word}: evidence that mean lift {rel} {tau:g} after {t} tokens"
        why = f"{why} ({self.boundary} boundary)"
        if self._kind is _ORDER:  # blocked: the order statistic fell below tau
            k, agg = self._policy.n_lowest, self._policy.aggregate
            what = "token lift" if k == 1 else f"mean of the {k} lowest lifts"
            why = f"blocked: {what} {low:.4g} < tau={tau:g} by token {t} ({agg} aggregate)"
        self.lower, self.upper, self.why = lo, up, why
        return CERTIFY if cert else BLOCK


_WAIT = "continue: the fitted score can still end on either side of tau"


class FittedRule:
    """A fitted statistic's score (log-odds) at threshold ``tau``.

    ``max_tokens`` is the most tokens the stream can carry (the request's limit, which
    the provider enforces; ``None``: unknown, no limit assumed). The early verdicts
    (``policy.early``) bound the score over the continuations within it, so they are
    only as sound as the limit: the monitor blocks a token past it (cause
    ``over_token_limit``), even after an early certification. The event's
    ``entropy`` is read when the statistic needs exact entropies (group ``local``).

    Examples
    --------
        >>> from guardrail.fitting import Feature, FittedStatistic
        >>> stat = FittedStatistic(features=(Feature("logprob", "mean"),), weights=(2.0,),
        ...                        intercept=0.5, center=(-1.0,), scale=(0.5,), vocab_size=1000)
        >>> monitor = Monitor(FittedRule(stat, StreamPolicy(), tau=0.0), StreamPolicy())
        >>> for lp in [-0.2, -0.4, -0.3]:
        ...     verdict = monitor.update(TokenEvent("tok", logprob=lp))
        >>> monitor.finish().state.value, round(monitor.value, 2)
        ('certified', 3.3)
    """

    __slots__ = (
        "_early",
        "_min_tokens",
        "_reader",
        "_state",
        "lower",
        "mean",
        "missing",
        "reads",
        "skeleton",
        "statistic",
        "tau",
        "token_limit",
        "upper",
        "why",
    )

    units = "log-odds"
    boundary = "fitted"

    def __init__(
        self,
        statistic: FittedStatistic,
        policy: StreamPolicy,
        tau: float,
        *,
        skeleton: Skeleton | None = None,
        max_tokens: int | None = None,
    ) -> None:
        if not isinstance(statistic, FittedStatistic):
            raise ConfigError(f"statistic must be a FittedStatistic, got {statistic!r}")
        if not isinstance(policy, StreamPolicy):
            raise ConfigError(f"policy must be a StreamPolicy, got {type(policy).__name__}")
        if isinstance(tau, bool) or not isinstance(tau, int | float) or not math.isfinite(tau):
            raise ConfigError(f"tau must be a finite number (log-odds), got {tau!r}")
        self.skeleton = _checked_skeleton(skeleton)
        self.statistic, self.tau = statistic, float(tau)
        self._reader = EventReader(statistic, skeleton)
        self._state = FittedState(statistic, max_tokens)
        reads = statistic.reads
        self.reads = reads | skeleton_reads(skeleton) if skeleton and reads.skeleton else reads
        self.token_limit = max_tokens if policy.early else None  # only early verdicts assume it
        self._early, self._min_tokens = policy.early, policy.min_tokens
        self.mean, self.lower, self.upper = math.nan, -math.inf, math.inf
        self.why = "continue: no tokens yet"
        self.missing: tuple[str, float | None] = ("", None)

    @property
    def value(self) -> float:
        """The fitted log-odds after the tokens so far (NaN before the first)."""
        return self._state.score

    @property
    def max_tokens(self) -> int | None:
        """The token limit this rule was given (its early verdicts, if the policy has
        them, assume it); ``None``: none."""
        return self._state.limit

    def add_event(self, event: TokenEvent, t: int) -> int:
        values = self._reader.read(event)
        if isinstance(values, tuple):
            self.missing = values
            return MISSING
        return self.add(values, t, event.text)

    def add(self, x: Sequence[float], t: int, text: str = "") -> int:
        """Add one token's base features (in ``statistic.bases`` order) and its text."""
        state = self._state
        self.mean = s = state.update(x, text)
        tau = self.tau
        if self._early and t >= self._min_tokens:
            if s < tau:
                up = state.ceiling()
                if up < tau:
                    self.why = (
                        f"blocked: no continuation within the token limit reaches tau={tau:.4g}"
                        f" (fitted score {s:.4g}, at most {up:.4g} after {t} tokens)"
                        if up == state.upper()
                        else f"blocked: the fitted score {s:.4g} after {t} tokens is further "
                        f"below tau={tau:.4g} than a correct answer's score rose from there in "
                        "the fitting answers (the statistic's early-block margin)"
                    )
                    self.lower, self.upper = -math.inf, up
                    return BLOCK
            else:
                low = state.lower()
                if low >= tau:
                    self.why = (
                        "certified: every continuation within the token limit keeps the fitted "
                        f"score >= tau={tau:.4g} (at least {low:.4g} after {t} tokens)"
                    )
                    self.lower, self.upper = low, math.inf
                    return CERTIFY
        self.lower, self.upper, self.why = -math.inf, math.inf, _WAIT
        return CONTINUE

    def final(self, t: int) -> tuple[bool, str, float, float]:
        s, tau = self._state.score, self.tau
        ok = s >= tau
        why = f"final fitted score {s:.4g} {'>=' if ok else '<'} tau={tau:.4g} after {t} tokens"
        return ok, f"{'certified' if ok else 'blocked'}: {why}", s, s
