"""The fitted statistic, streamed: :class:`FittedMonitor`, and the exact replay that
calibration uses.

:class:`~guardrail._fitted_state.FittedState` is the tau-free per-answer object:
``update`` takes one token's base features and returns the score (log-odds);
``upper`` / ``lower`` bound the final score over every continuation of at most
``max_tokens - t`` more tokens (unbounded when the limit is unknown), term by
term from each aggregate's reachable interval. The monitor blocks when
``upper < tau`` and certifies when ``lower >= tau`` (after ``policy.min_tokens``
tokens, if ``policy.early``), else decides at a clean finish by ``score >= tau``.

:func:`replay_fitted` feeds a recorded answer through the **same objects**
(:class:`~guardrail._fitted_state.EventReader`,
:class:`~guardrail._fitted_state.FittedState`), token events built from the trace,
so the monitor's verdicts are exactly the replay's at every threshold.
:func:`critical_score` turns a replay into the largest ``tau`` at which the answer is
shown: the rule shows it at ``tau`` iff ``critical_score >= tau`` (the early
verdicts are monotone in ``tau``), so calibration is a threshold test on this
scalar, as for the lift policies. Within the token limit the bounds are valid
and the critical score equals the final score: early verdicts never change a
decision, they only come sooner.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ._calibration import Calibration, calibrate
from ._errors import ConfigError, GuardrailError, MissingLogprobsError
from ._fitted import FittedStatistic
from ._fitted_state import EventReader, FittedState, RecordedSkeleton, trace_events
from ._monitor import Skeleton
from ._policy import OnMissing, StreamPolicy
from ._traces import Trace
from ._verdict import Cause, State, TokenEvent, Verdict, end_cause
from ._verdict import make_verdict as _verdict

__all__ = [
    "FittedMonitor",
    "FittedPath",
    "calibrate_fitted",
    "critical_score",
    "replay_fitted",
    "stop_at",
]

FloatArray = npt.NDArray[np.float64]
_BOUNDARY = "fitted"
_UNDECIDED = Cause.UNDECIDED
_CONTINUE = State.CONTINUE
_INF, _NEG_INF = math.inf, -math.inf
_WAIT = "continue: the fitted score can still end on either side of tau"


_WHAT = {"logprob": "logprob", "alternatives": "top_logprobs", "entropy": "exact entropy"}
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


class _ReadsAlternatives:
    """A skeleton seen through a monitor that reads the alternatives: every attribute is
    the skeleton's but ``needs_top_logprobs``, which is True."""

    __slots__ = ("_skeleton",)
    needs_top_logprobs = True

    def __init__(self, skeleton: Skeleton) -> None:
        self._skeleton = skeleton

    def log_prob(self, event: TokenEvent) -> float:
        return self._skeleton.log_prob(event)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._skeleton, name)


class FittedMonitor:
    """Certify or block one streamed answer with a fitted statistic at threshold ``tau``.

    The interface of :class:`~guardrail.CertificateMonitor` (``update``, ``finish``,
    ``abort``, ``verdict``, ``policy``, ``tau``, ``skeleton``, ``t``); ``tau`` and the
    verdicts' ``mean`` / ``lower`` / ``upper`` are log-odds (the score, and its bounds
    over the continuations the token limit allows). ``update(event, entropy=...)``
    takes the exact entropy when the statistic needs it (group ``local``).
    Unusable inputs follow ``policy.on_missing_logprobs`` as in CertificateMonitor.

    ``max_tokens`` is the most tokens the stream can carry (the request's limit, which
    the provider enforces); ``None``: unknown, no limit assumed. The early verdicts
    (``policy.early``) bound the score over the continuations within it, so they are
    only as sound as the limit: a token past it (the request allowed more than the
    monitor was told) blocks the answer, cause ``over_token_limit``, even after an
    early certification -- the text after it was never judged. Give the monitor the
    limit the request really has (``Certificate.monitor(max_tokens=...)``).
    """

    __slots__ = ("_closed", "_early", "_final_rule", "_finished", "_limit", "_min_tokens",
                 "_on_missing", "_policy", "_reader", "_reads_alternatives", "_received",
                 "_skeleton", "_skipped", "_state", "_statistic", "_tau", "_verdict")  # fmt: skip

    def __init__(
        self,
        statistic: FittedStatistic,
        policy: StreamPolicy,
        tau: float,
        *,
        skeleton: Skeleton | None = None,
        max_tokens: int | None = None,
        on_missing_logprobs: OnMissing | None = None,
    ) -> None:
        if not isinstance(statistic, FittedStatistic):
            raise ConfigError(f"statistic must be a FittedStatistic, got {statistic!r}")
        if not isinstance(policy, StreamPolicy):
            raise ConfigError(f"policy must be a StreamPolicy, got {type(policy).__name__}")
        if isinstance(tau, bool) or not isinstance(tau, int | float) or not math.isfinite(tau):
            raise ConfigError(f"tau must be a finite number (log-odds), got {tau!r}")
        if on_missing_logprobs not in (None, policy.on_missing_logprobs):
            policy = replace(policy, on_missing_logprobs=on_missing_logprobs)
        if skeleton is not None and not callable(getattr(skeleton, "log_prob", None)):
            raise ConfigError(f"skeleton must have a log_prob(event) method, got {skeleton!r}")
        self._statistic, self._policy, self._tau = statistic, policy, float(tau)
        self._reader = EventReader(statistic, skeleton)
        self._skeleton = skeleton
        self._reads_alternatives = "alternatives" in statistic.requires
        self._state = FittedState(statistic, max_tokens)
        self._limit = max_tokens if policy.early else None  # only early verdicts assume it
        self._received = 0
        self._early, self._min_tokens = policy.early, policy.min_tokens
        self._final_rule, self._on_missing = policy.final_rule, policy.on_missing_logprobs
        self._skipped = 0
        self._closed = self._finished = False
        why, inf = "continue: no tokens yet", math.inf
        self._verdict = _verdict(
            State.CONTINUE, 0, math.nan, -inf, inf, self._tau, _BOUNDARY, why, False, _UNDECIDED
        )

    @property
    def policy(self) -> StreamPolicy:
        return self._policy

    @property
    def tau(self) -> float:
        return self._tau

    @property
    def skeleton(self) -> Skeleton | None:
        """The skeleton of the lift features, as adapters should see it: when the statistic
        reads the alternatives, it says ``needs_top_logprobs = True`` whatever the
        skeleton itself needs (adapters ask for and parse the alternatives by it)."""
        skel = self._skeleton
        if skel is None or not self._reads_alternatives:
            return skel
        return _ReadsAlternatives(skel)

    @property
    def statistic(self) -> FittedStatistic:
        return self._statistic

    @property
    def verdict(self) -> Verdict:
        return self._verdict

    @property
    def t(self) -> int:
        return self._state.t

    @property
    def score(self) -> float:
        """The fitted log-odds after the tokens so far (NaN before the first)."""
        return self._state.score

    @property
    def max_tokens(self) -> int | None:
        """The token limit this monitor was given, which its early verdicts (if the policy
        has them) assume; ``None``: none."""
        return self._state.limit

    def update(self, event: TokenEvent, *, entropy: float | None = None) -> Verdict:
        """Add one token (``entropy``: its exact entropy, for statistics that read it)."""
        if self._finished:
            raise GuardrailError(_AFTER_FINISH)
        self._received += 1
        limit = self._limit
        if limit is not None and self._received > limit:
            return self._over_limit(limit)
        if self._closed:
            return self._verdict
        state = self._state
        idx, pos = event.index, state.t + self._skipped
        if idx is not None and idx != pos:
            raise GuardrailError(f"token out of order: expected index {pos}, got {idx}")
        values = self._reader.read(event, entropy)
        if isinstance(values, tuple):
            return self._missing(*values)
        s = state.update(values)
        t, tau = state.t, self._tau
        if self._early and t >= self._min_tokens:
            if s < tau:
                up = state.upper()
                if up < tau:
                    why = (
                        f"blocked: no continuation within the token limit reaches tau={tau:.4g}"
                        f" (fitted score {s:.4g}, at most {up:.4g} after {t} tokens)"
                    )
                    return self._final(State.BLOCKED, why, s, -math.inf, up, Cause.BELOW_THRESHOLD)
            else:
                low = state.lower()
                if low >= tau:
                    why = (
                        "certified: every continuation within the token limit keeps the fitted "
                        f"score >= tau={tau:.4g} (at least {low:.4g} after {t} tokens)"
                    )
                    return self._final(State.CERTIFIED, why, s, low, math.inf, Cause.CERTIFIED)
        v = _verdict(_CONTINUE, t, s, _NEG_INF, _INF, tau, _BOUNDARY, _WAIT, False, _UNDECIDED)
        self._verdict = v
        return v

    def finish(self, finish_reason: str | None = "stop") -> Verdict:
        """End of stream: as :meth:`CertificateMonitor.finish`, the final rule being
        ``score >= tau`` (``final_rule='block'``: block when undecided)."""
        if self._finished:
            return self._verdict
        self._finished = self._closed = True
        v, t, tau, pol = self._verdict, self._state.t, self._tau, self._policy
        cause = end_cause(finish_reason, pol.on_length)
        if cause is not None and v.state is not State.BLOCKED:
            why = _END_REASONS[cause].format(reason=finish_reason, t=t)
            return self._final(State.BLOCKED, f"blocked: {why}", v.mean, v.lower, v.upper, cause)
        if v.final:
            return v
        s = self._state.score
        if t == 0:
            why, cause = "blocked: empty answer (no token carried evidence)", Cause.EMPTY_ANSWER
            return self._final(State.BLOCKED, why, s, v.lower, v.upper, cause)
        if self._final_rule == "block":
            why = f"blocked: no verdict after {t} tokens (final_rule='block')"
            return self._final(State.BLOCKED, why, s, v.lower, v.upper, Cause.NO_VERDICT)
        ok = s >= tau
        why = f"final fitted score {s:.4g} {'>=' if ok else '<'} tau={tau:.4g} after {t} tokens"
        if ok:
            return self._final(State.CERTIFIED, f"certified: {why}", s, s, s, Cause.CERTIFIED)
        return self._final(State.BLOCKED, f"blocked: {why}", s, s, s, Cause.BELOW_THRESHOLD)

    def abort(self, cause: Cause, reason: str) -> Verdict:
        """Block now for a reason outside the evidence (as CertificateMonitor.abort)."""
        if not isinstance(cause, Cause) or cause in (Cause.UNDECIDED, Cause.CERTIFIED):
            raise ConfigError(f"abort needs a blocking Cause, got {cause!r}")
        v = self._verdict
        if v.state is State.BLOCKED:
            return v
        return self._final(State.BLOCKED, f"blocked: {reason}", v.mean, v.lower, v.upper, cause)

    def _final(
        self, state: State, why: str, s: float, lo: float, up: float, cause: Cause
    ) -> Verdict:
        self._closed = True
        t = self._state.t
        v = _verdict(state, t, s, lo, up, self._tau, _BOUNDARY, why, True, cause)
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
        return self._final(State.BLOCKED, why, v.mean, v.lower, v.upper, Cause.OVER_TOKEN_LIMIT)

    def _missing(self, what: str, value: float | None) -> Verdict:
        pos, mode = self._state.t + self._skipped, self._on_missing
        self._skipped += 1
        desc = f"missing or unusable {_WHAT[what]} at token {pos} (value {value!r})"
        if mode == "error":
            raise MissingLogprobsError(f"{desc}; policy on_missing_logprobs='error'")
        if mode == "pass":
            return self._verdict
        why, v = f"blocked: {desc}; policy on_missing_logprobs='block'", self._verdict
        return self._final(State.BLOCKED, why, v.mean, v.lower, v.upper, Cause.MISSING_LOGPROBS)


@dataclass(frozen=True)
class FittedPath:
    """A replayed answer: the score and its lower/upper bounds after every token."""

    scores: FloatArray
    lowers: FloatArray
    uppers: FloatArray
    limit: int | None = None
    """The token limit the replay's bounds assumed (``None``: none)."""

    @property
    def over_limit(self) -> bool:
        """The answer is longer than the limit: with early verdicts the monitor blocks it
        at the first token past the limit (cause ``over_token_limit``)."""
        return self.limit is not None and self.scores.size > self.limit


def replay_fitted(
    statistic: FittedStatistic,
    trace: Trace,
    *,
    skeleton: Skeleton | str | None = None,
    max_tokens: int | None = None,
) -> FittedPath:
    """Feed ``trace`` through the monitor's objects; ``skeleton="prompt-free"`` reads the
    trace's recorded prompt-free log-probabilities."""
    skel: Skeleton | None
    if skeleton == "prompt-free":
        trace.require("prompt_free_logprobs", purpose="the recorded prompt-free skeleton")
        skel = RecordedSkeleton(trace.prompt_free_logprobs)
    elif isinstance(skeleton, str):
        raise ConfigError(f"replay reads the recorded 'prompt-free' skeleton, not {skeleton!r}")
    else:
        skel = skeleton
    reader, state = EventReader(statistic, skel), FittedState(statistic, max_tokens)
    n = trace.n_tokens
    scores, lowers, uppers = np.empty(n), np.empty(n), np.empty(n)
    for i, event in enumerate(trace_events(trace)):
        values = reader.read(event, float(trace.entropy[i]))
        if isinstance(values, tuple):
            raise ConfigError(
                f"trace {trace.id}: token {i} lacks {_WHAT[values[0]]} that the statistic reads"
            )
        scores[i] = state.update(values)
        lowers[i], uppers[i] = state.lower(), state.upper()
    return FittedPath(scores, lowers, uppers, max_tokens)


def critical_score(path: FittedPath, policy: StreamPolicy) -> float:
    """The largest ``tau`` at which the monitor shows the answer (``-inf`` if never)."""
    s, lo, up = path.scores, path.lowers, path.uppers
    n = s.size
    if n == 0:
        return -math.inf
    final = float(s[-1]) if policy.final_rule == "mean" else -math.inf
    if not policy.early:
        return final
    if path.over_limit:  # blocked at the first token past the limit, whatever came before
        return -math.inf
    start = policy.min_tokens - 1
    if start >= n:
        return final
    up_c, lo_c = up[start:], lo[start:]
    before = np.r_[np.inf, np.minimum.accumulate(up_c)[:-1]]  # min of uppers before each token
    early_cert = float(np.max(np.minimum(lo_c, before)))
    return max(early_cert, min(float(up_c.min()), final))


def stop_at(path: FittedPath, policy: StreamPolicy, tau: float) -> int:
    """Tokens read before the verdict at ``tau`` (the length if it came at the end)."""
    n = path.scores.size
    if not policy.early:
        return n
    start = policy.min_tokens - 1
    blocks = path.uppers[start:] < tau
    hit = blocks | (path.lowers[start:] >= tau)
    if path.over_limit:
        assert path.limit is not None
        first = int(np.argmax(hit))
        if hit.any() and blocks[first] and start + first < path.limit:
            return start + first + 1
        return path.limit + 1  # blocked by the first token past the limit
    return start + int(np.argmax(hit)) + 1 if hit.any() else n


def calibrate_fitted(
    statistic: FittedStatistic,
    traces: Sequence[Trace],
    *,
    policy: StreamPolicy,
    risk: float,
    delta: float,
    skeleton: Skeleton | str | None = None,
    max_tokens: int | None = None,
    seed: int = 0,
    paths: Sequence[FittedPath] | None = None,
) -> tuple[Calibration, FloatArray]:
    """Calibrate ``tau`` for a fitted statistic on labelled answers it was **not** fitted
    on; returns the calibration record and each answer's critical score. ``paths``: the
    answers' replays, when the caller has them already (one per trace, in order).

    Every answer is replayed through the deployed monitor (:func:`replay_fitted`,
    early verdicts included), and ``tau`` is chosen by the fixed-sequence
    Learn-then-Test procedure of :func:`guardrail.calibrate` on the critical scores.

    Why the guarantee holds: the statistic (features, weights, normalisation, clamp
    ranges) is a function of the fitting answers only. Conditional on them it is a
    fixed rule, and the calibration answers -- drawn i.i.d. from the deployment
    distribution, independently of the fitting answers -- are i.i.d. given it. The
    rule shows an answer at ``tau`` iff its critical score is ``>= tau`` (the early
    verdicts are monotone in ``tau``), so the argument of
    :mod:`guardrail._calibration` applies verbatim to the critical scores:
    ``P(selective risk at tau_hat > risk | fitting answers) <= delta``, hence also
    unconditionally. Reusing a fitting answer for calibration would break the
    independence (the fit has seen its label); ``liftguard fit`` keeps the two
    disjoint and records both in the certificate.
    """
    if paths is None:
        paths = [replay_fitted(statistic, t, skeleton=skeleton, max_tokens=max_tokens)
                 for t in traces]  # fmt: skip
    elif len(paths) != len(traces):
        raise ConfigError(f"paths: expected one per trace ({len(traces)}), got {len(paths)}")
    crit = np.array([critical_score(p, policy) for p in paths])
    correct = np.array([bool(t.correct) for t in traces])
    name = f"fitted[{statistic.group}, {statistic.form}]"
    cal = calibrate(
        crit, correct, risk=risk, delta=delta, score_name=name, seed=seed, policy=policy
    )
    return cal, crit
