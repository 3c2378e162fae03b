"""The fitted statistic, replayed exactly as a :class:`~guardrail.Monitor` of a
:class:`~guardrail.FittedRule` streams it, and calibrated on the replays.

:class:`~guardrail._fit._state.FittedState` is the tau-free per-answer object:
``update`` takes one token's base features and returns the score (log-odds);
``upper`` / ``lower`` bound the final score over every continuation of at most
``max_tokens - t`` more tokens (unbounded when the limit is unknown), term by
term from each aggregate's reachable interval. The rule blocks when
``upper < tau`` and certifies when ``lower >= tau`` (after ``policy.min_tokens``
tokens, if ``policy.early``), else decides at a clean finish by ``score >= tau``.

:func:`replay_fitted` feeds a recorded answer through the **same objects**
(:class:`~guardrail._fit._state.EventReader`,
:class:`~guardrail._fit._state.FittedState`), token events built from the trace,
so the monitor's verdicts are exactly the replay's at every threshold.
:func:`critical_score` turns a replay into the largest ``tau`` at which the answer is
shown: the rule shows it at ``tau`` iff ``critical_score >= tau`` (the early
verdicts are monotone in ``tau``), so calibration is a threshold test on this
scalar, as for the lift policies. Within the token limit the bounds are valid
and the critical score equals the final score: early verdicts never change a
decision, they only come sooner.

A statistic with block margins (:func:`block_margins`) also blocks when the score so
far plus the margin for its position is below tau: sooner, and sometimes an answer
whose final score would have passed. The replay reads the same ``ceiling`` the rule
does, so calibration prices those blocks in and the guarantee covers the rule as
deployed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import numpy.typing as npt

from .._calibration import Calibration, Procedure, calibrate
from .._errors import ConfigError
from .._policy import StreamPolicy
from .._reads import Skeleton
from .._trace_format import Trace
from ._state import EventReader, FittedState, RecordedSkeleton, trace_events
from ._statistic import FittedStatistic

__all__ = [
    "MARGIN_TAILS",
    "FittedPath",
    "MarginAnswers",
    "MarginTail",
    "block_margins",
    "calibrate_fitted",
    "critical_score",
    "margin_cost",
    "margins_from_scores",
    "read_share",
    "replay_fitted",
    "stop_at",
    "with_margins",
]

FloatArray = npt.NDArray[np.float64]
_MIN_MARGIN_ANSWERS = 20
_WHAT = {"logprob": "logprob", "alternatives": "top_logprobs", "entropy": "exact entropy"}


@dataclass(frozen=True)
class FittedPath:
    """A replayed answer: the score and its lower/upper bounds after every token.

    Examples
    --------
        >>> import numpy as np
        >>> path = FittedPath(np.array([0.5, 1.0]), np.array([-1.0, 0.2]), np.array([2.0, 1.5]),
        ...                   limit=1)
        >>> path.over_limit
        True
    """

    scores: FloatArray
    lowers: FloatArray
    uppers: FloatArray
    limit: int | None = None
    """The token limit the replay's bounds assumed (``None``: none)."""

    @property
    def final(self) -> float:
        """The score after the last token (``-inf`` for an empty answer): what the AUROC
        of a fitted statistic ranks by, in ``eval`` and ``calibrate`` alike."""
        return float(self.scores[-1]) if self.scores.size else -np.inf

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
        values = reader.read(event)
        if isinstance(values, tuple):
            raise ConfigError(
                f"trace {trace.id}: token {i} lacks {_WHAT[values[0]]} that the statistic reads"
            )
        scores[i] = state.update(values, event.text)
        lowers[i], uppers[i] = state.lower(), state.ceiling()
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


def read_share(path: FittedPath, policy: StreamPolicy, tau: float) -> float:
    """The share of the answer's tokens read before the verdict at ``tau`` (NaN for an
    empty answer: it has none). Of an answer not shown (:func:`critical_score` below
    ``tau``), what a passthrough user sees of it before it is stopped."""
    n = path.scores.size
    return stop_at(path, policy, tau) / n if n else math.nan


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
    procedure: Procedure = "fixed-sequence",
) -> tuple[Calibration, FloatArray]:
    """Calibrate ``tau`` for a fitted statistic on labelled answers it was **not** fitted
    on; returns the calibration record and each answer's critical score. ``paths``: the
    answers' replays, when the caller has them already (one per trace, in order).

    Every answer is replayed through the deployed monitor (:func:`replay_fitted`,
    early verdicts included), and ``tau`` is chosen by :func:`guardrail.calibrate` on the
    critical scores (``procedure``: fixed-sequence Learn-then-Test, or simultaneous).

    Why the guarantee holds: the statistic (features, weights, normalisation, clamp
    ranges, block margins) is a function of the fitting answers only. Conditional on them it is a
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
        paths = [
            replay_fitted(statistic, t, skeleton=skeleton, max_tokens=max_tokens) for t in traces
        ]
    elif len(paths) != len(traces):
        raise ConfigError(f"paths: expected one per trace ({len(traces)}), got {len(paths)}")
    crit = np.array([critical_score(p, policy) for p in paths])
    correct = np.array([bool(t.correct) for t in traces])
    name = f"fitted[{statistic.group}, {statistic.form}]"
    cal = calibrate(crit, correct, risk=risk, delta=delta, score_name=name, seed=seed,
                    policy=policy, procedure=procedure)  # fmt: skip
    return cal, crit


MarginAnswers = Literal["correct", "all"]
MarginTail = Literal["flat", "sqrt"]
MARGIN_TAILS: tuple[MarginTail, ...] = ("flat", "sqrt")
"""How margins run past the fitted positions (:func:`margins_from_scores`)."""


def block_margins(
    statistic: FittedStatistic,
    traces: Sequence[Trace],
    quantile: float,
    *,
    skeleton: Skeleton | str | None = None,
    max_tokens: int | None = None,
    min_answers: int = _MIN_MARGIN_ANSWERS,
    answers: MarginAnswers = "correct",
    share: float | None = None,
    positions: int | None = None,
    tail: MarginTail = "flat",
) -> tuple[float, ...]:
    """Early-block margins for ``statistic`` from the answers of ``traces``: for each
    ``t``, the ``quantile`` of how far an answer's score still rose after its first ``t``
    tokens (its final score minus its score then; 0 where that is negative), over the
    answers longer than ``t - 1`` tokens, to where fewer than ``min_answers`` are that
    long (with ``positions``, carried on by the ``tail`` rule: :func:`margins_from_scores`). As
    ``statistic.block_margins``, the rule blocks once the score plus the margin is below
    tau: at each position, about ``1 - quantile`` of the answers seen rose more.

    Per position is not per answer: over the hundreds of positions of a long answer,
    many more than ``1 - quantile`` of the answers rise past the margin somewhere (on
    300-token maths solutions, about 15% of the correct fitting answers at 0.99), and
    each such correct answer is blocked wherever its score then sits near tau.
    ``share`` (in (0, 1]) widens the margins by one common factor (at least 1) until that
    share of the answers never rises past them at any position where the margin is
    positive: :func:`margins_from_scores`.

    ``answers="correct"`` reads the correct answers only (as ``liftguard fit
    --early-block`` does, on the fitting answers). ``answers="all"`` reads every
    non-empty answer and no label, so it takes unlabelled answers of the traffic the
    rule will guard (as ``liftguard calibrate --certificate ... --margins-from`` does):
    the margins then follow that traffic, where answers may rise later than the fitting
    answers did.

    The guarantee holds as long as the margins are fixed before calibration (from answers
    other than the calibration answers): part of the fixed rule calibration replays."""
    _check_margin_args(quantile, min_answers)
    if answers not in ("correct", "all"):
        raise ConfigError(f"answers must be 'correct' or 'all', got {answers!r}")
    plain = statistic if not statistic.block_margins else replace(statistic, block_margins=())
    scores = [
        replay_fitted(plain, t, skeleton=skeleton, max_tokens=max_tokens).scores
        for t in traces
        if t.n_tokens and (answers == "all" or t.correct)
    ]
    return margins_from_scores(scores, quantile, min_answers=min_answers, share=share,
                               positions=positions, tail=tail)  # fmt: skip


def margins_from_scores(
    scores: Sequence[FloatArray],
    quantile: float,
    *,
    min_answers: int = _MIN_MARGIN_ANSWERS,
    share: float | None = None,
    positions: int | None = None,
    tail: MarginTail = "flat",
) -> tuple[float, ...]:
    """:func:`block_margins` from the answers' replayed scores (each answer's score after
    every token, as :attr:`FittedPath.scores`; a statistic without margins): one replay
    serves every quantile.

    With ``positions`` (the token limit): the margins run to that many positions, past the
    fitted ones (where ``min_answers`` answers reach) the largest margin of the last half
    of the fitted positions. Without, they end there, and past that the rule blocks only
    where no continuation within the limit reaches tau, which under hundreds of tokens it
    almost never can: an answer longer than the fitting answers is read to its end.

    Why that margin serves the positions past the fitted ones. A running mean over ``[lo,
    hi]`` rises, over ``m`` more tokens after ``t``, by at most ``(hi - lo) m / (t + m)``
    and typically by ``sigma sqrt(m) / (t + m)``, largest at ``m = t``: ``sigma / (2
    sqrt(t))``, which falls with ``t``. At a fitted position ``j >= L / 2`` (``L`` the last
    fitted) the answers that reach ``L`` still had at least ``L - j`` tokens to go, about
    ``j`` at ``L / 2``: the margins there were read on rises from that worst remaining
    length, which bound a mean's rise at every later position. The last margin does not:
    the answers reaching it mostly end soon after, so it reads short rises (on running
    means, a third of longer answers of the kind rise past it at ``L``). A minimum with a
    positive weight (a maximum with a negative one, a sum of terms that only lower the
    score) only falls. What can break the carry is a term rising with every token (a sum
    whose weighted values can be positive, the length with a positive weight): its rise
    grows with the tokens left, so a correct answer far past the fitting answers can rise
    more than the carried margin, and be blocked. That costs coverage, never validity: the
    margins are part of the rule, fixed on the fitting answers before calibration, which
    replays the rule exactly (early blocks included), so :func:`calibrate_fitted`'s
    guarantee holds and prices such blocks in.

    ``tail="sqrt"`` (with ``positions``): past the fitted positions ``c / sqrt(t)``, at most
    the flat carry, where ``c`` is the ``share`` quantile (``quantile`` without a share)
    over the answers of their largest ``rise(j) sqrt(j)`` over the first half of their
    positions ``j``, from which each still had at least as many tokens to go as it had read:
    the running mean's worst case above, read on the answers' own rises rather than on the
    last fitted margins. The margins then fall with ``t`` as such a rise does, so margins
    fitted on short answers no longer hold a long answer's block back to its end: fitted on
    the committed MBPP answers (30 tokens) and guarding GSM8K's (285), a blocked answer was
    read for 46% of its tokens at risk 0.2 (56% with the flat carry), at 0.6 points of
    coverage; in-domain, where few answers outrun the fitted positions, nothing measurable
    changes (``python -m studies.margin_rules``). On running means of 200 to 400 tokens
    fitted on answers of 20 to 80 (quantile 0.99, share 0.9), the sqrt tail is 30 to 50%
    below the flat carry from twice the fitted positions on, where under 1% of the long
    answers rise past it at a position (at most 0.1% past the flat carry): a few more
    correct long answers blocked, which calibration prices in as ever.

    With ``share``: the fitted margins times :func:`margin_scale`'s factor, before the carry.

    Examples
    --------
        >>> import numpy as np
        >>> rising = [np.array([0.0, 0.5, 1.0])] * 9 + [np.array([-2.0, 0.0, 1.0])]
        >>> margins_from_scores(rising, 0.5, min_answers=5)
        (1.0, 0.5, 0.0)
        >>> margins_from_scores(rising, 0.5, min_answers=5, share=1.0)
        (3.0, 1.5, 0.0)
        >>> margins_from_scores(rising[:5], 0.5, min_answers=5, positions=5)
        (1.0, 0.5, 0.0, 0.5, 0.5)
        >>> tail = margins_from_scores(rising[:5], 0.5, min_answers=5, positions=8, tail="sqrt")
        >>> [round(m, 2) for m in tail]
        [1.0, 0.5, 0.0, 0.5, 0.45, 0.41, 0.38, 0.35]
    """
    _check_margin_args(quantile, min_answers)
    if positions is not None and (isinstance(positions, bool) or positions < 1):
        raise ConfigError(f"positions must be an integer >= 1, got {positions!r}")
    if tail not in MARGIN_TAILS:
        raise ConfigError(f"tail must be one of {', '.join(MARGIN_TAILS)}, got {tail!r}")
    margins: list[float] = []
    for i in range(max((s.size for s in scores), default=0)):
        rises = [float(s[-1] - s[i]) for s in scores if s.size > i]
        if len(rises) < min_answers:
            break
        margins.append(max(0.0, float(np.quantile(rises, quantile))))
    if share is not None and margins:
        scale = margin_scale(scores, margins, share)
        margins = [m * scale for m in margins]
    if positions is not None and margins:
        level = quantile if share is None else share
        margins += _tail(scores, margins, positions, tail, level)
    return tuple(margins)


def _tail(
    scores: Sequence[FloatArray], fitted: Sequence[float], positions: int, tail: MarginTail,
    level: float,
) -> list[float]:  # fmt: skip
    """The margins past the ``fitted`` ones to ``positions``: :func:`margins_from_scores`."""
    n = len(fitted)
    flat = max(fitted[n // 2 :])
    worst = []
    for s in scores if tail == "sqrt" else ():
        half = s.size // 2
        if half:
            j = np.arange(1, half + 1, dtype=np.float64)
            worst.append(float(np.max((s[-1] - s[:half]) * np.sqrt(j))))
    if not worst or positions <= n:
        return [flat] * (positions - n)
    c = max(0.0, float(np.quantile(worst, level)))
    t = np.arange(n + 1, positions + 1, dtype=np.float64)
    return [float(m) for m in np.minimum(flat, c / np.sqrt(t))]


def margin_scale(scores: Sequence[FloatArray], margins: Sequence[float], share: float) -> float:
    """The smallest factor, at least 1, by which ``margins`` must grow for a ``share`` of
    the answers (their replayed scores) never to rise past them: per answer, the largest
    ratio of its rise from a position to the margin there, over the positions whose margin
    is positive; the ``share`` quantile of those. (A position whose margin is 0, where
    nearly every answer already stopped rising, stays 0: no factor widens it.)"""
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0.0 < share <= 1.0:
        raise ConfigError(f"share must be a number in (0, 1], got {share!r}")
    m = np.asarray(margins, dtype=np.float64)
    ratios = [0.0]
    for s in scores:
        k = min(s.size, m.size)
        rise, base = s[-1] - s[:k], m[:k]
        pos = base > 0.0
        ratios.append(float(np.max(rise[pos] / base[pos])) if pos.any() else 0.0)
    return max(1.0, float(np.quantile(ratios[1:] or ratios, share)))


def _check_margin_args(quantile: float, min_answers: int) -> None:
    if isinstance(quantile, bool) or not isinstance(quantile, int | float):
        raise ConfigError(f"quantile must be a number in (0, 1], got {quantile!r}")
    if not 0.0 < quantile <= 1.0:
        raise ConfigError(f"quantile must be in (0, 1], got {quantile!r}")
    if isinstance(min_answers, bool) or not isinstance(min_answers, int) or min_answers < 1:
        raise ConfigError(f"min_answers must be an integer >= 1, got {min_answers!r}")


def with_margins(path: FittedPath, margins: Sequence[float]) -> FittedPath:
    """The replay of the same answer with ``margins`` as the statistic's block margins,
    from its replay without any: the ceiling after token ``t`` (1-based) is the lower of
    the upper bound and the score plus ``margins[t - 1]``, as
    :meth:`~guardrail._fit._state.FittedState.ceiling` computes it, so the result
    equals :func:`replay_fitted` of the statistic with those margins."""
    m = np.asarray(margins, dtype=np.float64)
    if m.ndim != 1 or not (np.isfinite(m) & (m >= 0.0)).all():
        raise ConfigError("margins: expected a list of finite numbers >= 0")
    k = min(m.size, path.scores.size)
    if k == 0:
        return path
    uppers = path.uppers.copy()
    uppers[:k] = np.minimum(uppers[:k], path.scores[:k] + m[:k])
    return FittedPath(path.scores, path.lowers, uppers, path.limit)


def margin_cost(
    plain: Sequence[FittedPath],
    margins: Sequence[float],
    correct: npt.ArrayLike,
    policy: StreamPolicy,
    tau: float,
) -> tuple[int, int]:
    """What early-block margins cost at ``tau``: ``(blocked, shown)``, where ``shown`` counts
    the correct answers the rule without margins shows (``plain``: their replays without
    margins, one per answer) and ``blocked`` those of them the margins block. The margins
    are fitted so that few correct fitting answers rise past them; on answers that rise
    later (another dataset, drifted traffic) ``blocked / shown`` grows, and with it what the
    margins cost in coverage. Calibration prices the blocks in either way: this says
    whether refitting the margins, or dropping them, would let more through."""
    ok = np.asarray(correct, dtype=bool)
    if ok.shape != (len(plain),):
        raise ConfigError(f"correct: expected one label per path ({len(plain)}), got {ok.shape}")
    blocked = shown = 0
    for path, right in zip(plain, ok, strict=True):
        if not right or critical_score(path, policy) < tau:
            continue
        shown += 1
        blocked += critical_score(with_margins(path, margins), policy) < tau
    return blocked, shown
