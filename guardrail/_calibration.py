"""Calibration of the certification threshold ``tau``.

Two methods:

``"ltt"`` (default): label-based risk control of the deployed rule
    Every calibration answer is replayed through the exact streaming policy
    (early exits included); the policy shows answer ``i`` at threshold ``tau``
    iff its score ``s_i >= tau`` (for the lift policy ``s_i`` is the answer's
    critical threshold, see :func:`guardrail.evaluate.critical_thresholds`). Candidate
    thresholds are tested from the largest down (fixed-sequence testing, as in
    Learn-then-Test, with a fallback start): at each candidate, with ``n``
    answered and ``k`` wrong, ``p = P(Binomial(n, h) <= k)`` is compared with the
    level the candidate holds; ``tau_hat`` is the last (lowest) candidate that
    passed.

    Levels (Wiens' fallback procedure): ``delta`` is split between two start
    positions fixed before seeing the labels, half at the ``start``-th highest
    score and half at four times that count (:data:`FALLBACK_STARTS`). A
    candidate's level is the share of a start that falls on it plus the level of
    the candidate before it if that one passed; a failure drops the carried level
    to 0, so the sequence stops there unless a later start gives it a fresh
    share. Where the first run passes all the way down, every candidate past the
    second start is tested at the full ``delta``, as plain fixed-sequence testing
    would; where a cluster of errors among the very top answers makes the first
    run fail (a ranking good overall but wrong at its top), the second start still
    certifies what lies below it instead of refusing.

    Guarantee: ``P(selective risk of the deployed rule at tau_hat > h) <= delta``
    over the draw of the calibration set (i.i.d. from the deployment
    distribution). Argument: write ``r(s) = P(error | score = s)`` and assume it
    is non-increasing (a higher score is never more error-prone), so the risk
    ``R(t) = P(error | score >= t)`` is non-increasing and the thresholds with
    ``R(t) > h`` lie below some ``t*``. A candidate that answers ``m`` examples
    and lies below ``t*`` answers the ``N = #{s_i > t*}`` examples above ``t*``
    -- given ``N`` their errors are i.i.d. Bernoulli(``R(t*) = h``) -- plus
    examples at or below ``t*``, each wrong with probability ``r(s_i) >= r(t*) >=
    h``; so its error count is stochastically at least ``Binomial(m, h)`` and,
    if its position is fixed in advance, it passes a test at level ``a`` with
    probability at most ``a``. A bad threshold is returned only if some bad
    candidate passes, and then the first bad candidate of some run passes: the
    first bad candidate overall (a position fixed by ``t*``), tested at no more
    than ``delta`` times the shares of the starts at or above it; or, after that
    one failed, the candidate at a later start (a count fixed in advance), tested
    at no more than ``delta`` times the shares of that start and the ones before
    it that have not yet been counted. These levels add up to at most ``delta``
    times the total share, 1, so the union has probability at most ``delta``.
    Starting below the top is what makes a pass possible at all: a test on the
    single top-scored example can never pass (a test at level ``a`` needs
    ``n >= log(a)/log(1-h)`` answered examples even with zero errors). Ties are tested as
    whole groups. Pass ``start=`` for one start at that count with the whole
    level (plain fixed-sequence testing), or ``grid=`` (a descending array fixed
    before seeing the data) for classic Learn-then-Test over a fixed grid, which
    needs no monotonicity assumption. The seeded simulations in the test suite
    count violations against a binomial interval.

``"paper"``: the source paper's Algorithm 1
    ``tau = mean_budget - sqrt(2 v log(1/delta)/n) - c log(1/delta)/n`` with
    ``(v, c)`` from a Gamma fit, inflated when the model check fails. This is
    a lower confidence bound on the *mean lift*; it uses no labels and does
    **not** bound the selective risk. Kept for comparison.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ._bounds import (
    clopper_pearson_upper,
    kappa_answer_rate_bound,
    mean_lift_lower_bound,
    min_answered_for_risk,
    mutual_information,
    pac_bayes_bound,
)
from ._calibration_record import Calibration, guarantee_text
from ._conformal_selection import conformal_threshold
from ._errors import ConfigError, InsufficientDataError
from ._policy import StreamPolicy, critical_thresholds, shown_at
from ._simultaneous import labels_needed, simultaneous_boundary
from ._subgamma import checked_subgamma

__all__ = [
    "FALLBACK_STARTS",
    "PROCEDURES",
    "Calibration",
    "LTTOutcome",
    "calibrate",
    "calibrate_policy",
    "first_test_level",
    "ltt_threshold",
    "procedure_threshold",
]

FloatArray = npt.NDArray[np.float64]
Method = Literal["ltt", "paper"]
Procedure = Literal["fixed-sequence", "simultaneous", "conformal"]
PROCEDURES: tuple[Procedure, ...] = ("fixed-sequence", "simultaneous", "conformal")
"""The label-based procedures of ``method="ltt"``: the first two keep the high-probability
promise; ``"conformal"`` (:func:`guardrail._conformal_selection.conformal_threshold`) keeps
a cheaper one **in expectation** and ignores ``delta``."""


@dataclass(frozen=True)
class LTTOutcome:
    """Result of fixed-sequence testing over candidate thresholds.

    Examples
    --------
        >>> import numpy as np
        >>> scores = np.linspace(0.0, 1.0, 200)
        >>> errors = scores < 0.3
        >>> out = ltt_threshold(scores, errors, risk=0.2, delta=0.1)
        >>> round(out.tau, 3), out.n_answered, out.n_errors
        (0.171, 166, 26)
    """

    tau: float
    n_answered: int
    n_errors: int
    pvalue: float
    start: int
    n_tested: int


def first_test_level(n: int, risk: float, delta: float) -> float:
    """Level of the first test of the default fixed sequence on ``n`` calibration examples.

    The first start's share of ``delta`` where ``n`` reaches that start, all of ``delta``
    where both starts fall past the last example (ties at the start aside). A refusal
    states ``min_answered_for_risk(risk, level)``, the answered examples needed even with
    zero errors.

    Examples
    --------
        >>> first_test_level(200, 0.3, 0.05), first_test_level(10, 0.3, 0.05)
        (0.025, 0.05)
    """
    return delta * FALLBACK_STARTS[0][1] if n >= default_start(n, risk, delta) else delta


def default_start(n: int, risk: float, delta: float) -> int:
    """Answered count at which the fixed sequence starts, fixed before seeing labels.

    ``max(n_min, ceil(sqrt(n)))`` where ``n_min`` is the fewest answered examples
    that can pass the first start's test at its share of ``delta`` (zero errors).
    """
    n_min = min_answered_for_risk(risk, delta * FALLBACK_STARTS[0][1])
    return max(n_min, math.ceil(math.sqrt(n)))


FALLBACK_STARTS: tuple[tuple[int, float], ...] = ((1, 0.5), (4, 0.5))
"""The default starts of the fixed sequence: ``(multiple of the default start count,
share of delta)``. Chosen on the shared TriviaQA traces of three models (refusals and
coverage over 50 splits, single scores and fitted statistics); the guarantee holds
for any fixed choice whose shares sum to at most 1."""


def _check_target(risk: float, delta: float) -> None:
    if not (0.0 < risk < 1.0):
        raise ConfigError(f"risk target must be in (0, 1), got {risk!r}")
    if not (0.0 < delta < 1.0):
        raise ConfigError(f"delta must be in (0, 1), got {delta!r}")


def ltt_threshold(
    scores: npt.ArrayLike,
    errors: npt.ArrayLike,
    risk: float,
    delta: float,
    *,
    start: int | None = None,
    grid: npt.ArrayLike | None = None,
    procedure: Procedure = "fixed-sequence",
) -> LTTOutcome:
    """Largest-coverage threshold certified by binomial testing.

    ``scores``: one score per calibration example (answer iff ``score >= tau``;
    ``-inf`` = never answered). ``errors``: True where the answer is wrong.
    ``procedure``: ``"fixed-sequence"`` (the default; see the module docstring) or
    ``"simultaneous"`` (every candidate tested at once against one boundary, no start
    and no stopping at a failure: :mod:`guardrail._simultaneous`; not with ``start``
    or ``grid``). Raises :class:`InsufficientDataError` when no threshold passes; its
    message estimates the labels that would.
    """
    _check_target(risk, delta)
    s = np.asarray(scores, dtype=np.float64)
    e = np.asarray(errors, dtype=bool)
    if s.ndim != 1 or s.shape != e.shape:
        raise ConfigError("scores and errors must be 1-d arrays of the same length")
    if s.size == 0:
        raise InsufficientDataError("no calibration examples", needed=None)
    if np.isnan(s).any():
        raise ConfigError("scores contain NaN")
    if procedure not in PROCEDURES[:2]:
        raise ConfigError(
            f"procedure must be one of {', '.join(PROCEDURES[:2])}; got {procedure!r}"
            + (" (the conformal threshold is calibrate()'s)" if procedure == "conformal" else "")
        )
    if procedure == "simultaneous" and (start is not None or grid is not None):
        raise ConfigError("the simultaneous procedure takes neither start nor grid")
    if grid is not None:
        cand = np.asarray(grid, dtype=np.float64)
        if cand.ndim != 1 or cand.size == 0 or (np.diff(cand) >= 0).any():
            raise ConfigError("grid must be a non-empty strictly decreasing 1-d array")
        answered = s[None, :] >= cand[:, None]
        n_ans = answered.sum(axis=1)
        n_err = (answered & e[None, :]).sum(axis=1)
        share = np.zeros(cand.size)
        share[0] = 1.0
        start_count = int(n_ans[0])
    else:
        finite = np.isfinite(s)
        order = np.argsort(-s[finite], kind="stable")
        ss = s[finite][order]
        ee = e[finite][order]
        if ss.size == 0:
            level = delta if start is not None else first_test_level(s.size, risk, delta)
            n_min = min_answered_for_risk(risk, level)
            raise InsufficientDataError(
                f"no calibration example is ever answered; at least {n_min} answered "
                f"examples are needed for risk {risk} at the first test's level "
                f"{level:.3g} (of delta = {delta})",
                needed=n_min,
            )
        last_of_group = np.r_[ss[1:] != ss[:-1], True]
        cand = ss[last_of_group]
        n_ans = np.flatnonzero(last_of_group) + 1
        n_err = np.cumsum(ee)[last_of_group]
        start_count = default_start(s.size, risk, delta) if start is None else int(start)
        if start_count < 1:
            raise ConfigError(f"start must be >= 1, got {start!r}")
        share = np.zeros(cand.size)
        for multiple, part in FALLBACK_STARTS if start is None else ((1, 1.0),):
            reach = np.flatnonzero(n_ans >= multiple * start_count)
            share[int(reach[0]) if reach.size else len(cand) - 1] += part  # past all: the last
    from scipy import stats

    pvals = stats.binom.cdf(n_err, n_ans, risk)
    pvals = np.where(n_ans > 0, pvals, 1.0)
    if procedure == "simultaneous":
        return _simultaneous_threshold(cand, n_ans, n_err, pvals, s.size, risk, delta)
    first = int(np.flatnonzero(share)[0])
    last, level, n_tested = -1, 0.0, 0
    for j in range(first, len(cand)):
        level += delta * share[j]
        if level <= 0.0:
            continue
        n_tested += 1
        if pvals[j] <= level:
            last = j
        else:
            level = 0.0  # this run stops; a later start may begin another
    if last < 0:
        j = first
        first_level = delta * float(share[j])
        n_min = min_answered_for_risk(risk, first_level)
        raise InsufficientDataError(
            f"no threshold passed the risk test: at the first candidate {int(n_ans[j])} "
            f"examples are answered with {int(n_err[j])} errors (p = {float(pvals[j]):.3g} "
            f"> its level {first_level:.3g}, of delta = {delta}). Risk {risk} at that "
            f"level needs at least {n_min} answered calibration examples even with zero "
            f"errors, and more when some answered examples are wrong; add calibration "
            f"data or relax the target.",
            needed=n_min,
        )
    return LTTOutcome(
        tau=float(cand[last]),
        n_answered=int(n_ans[last]),
        n_errors=int(n_err[last]),
        pvalue=float(pvals[last]),
        start=start_count,
        n_tested=n_tested,
    )


def needed_text(
    scores: FloatArray, errors: npt.NDArray[np.bool_], risk: float, delta: float
) -> str:
    """What a refusal adds: about how many calibration labels would pass, at the error
    rates the ranking shows (:func:`guardrail._simultaneous.labels_needed`), or that more
    labels of this ranking would not."""
    finite = np.isfinite(scores)
    order = np.argsort(-scores[finite], kind="stable")
    ss, ee = scores[finite][order], errors[finite][order]
    ends = np.r_[ss[1:] != ss[:-1], True] if ss.size else np.zeros(0, dtype=bool)
    n_ans, n_err = np.flatnonzero(ends) + 1, np.cumsum(ee)[ends]
    more = labels_needed(n_ans, n_err, int(scores.size), risk, delta)
    if more is None:
        return (
            f" No candidate's error rate is below {risk} here: more labels of this ranking "
            f"would not pass; a better score or a higher risk would."
        )
    return (
        f" At the error rates seen here, about {more} calibration labels would pass "
        f"(an estimate, with procedure='simultaneous')."
    )


def expectation_coverage(scores: npt.ArrayLike, errors: npt.ArrayLike, risk: float) -> float | None:
    """The share of these calibration answers the promise in expectation would show at
    ``risk``: the conformal threshold (``procedure="conformal"``, the calibration scores as
    the reference) applied to the same scores; ``None`` where it shows none. What a
    high-probability calibration reports beside its own coverage, so that a user whose
    labels buy little under that promise sees what the other one would show."""
    s = np.asarray(scores, dtype=np.float64)
    tau = conformal_threshold(s, errors, risk)
    return float(np.mean(s >= tau)) if np.isfinite(tau) else None


def expectation_text(scores: FloatArray, errors: npt.NDArray[np.bool_], risk: float) -> str:
    """What a high-probability refusal adds about the other promise (empty where that one
    shows nothing too): :func:`expectation_coverage`."""
    share = expectation_coverage(scores, errors, risk)
    if share is None:
        return ""
    return (
        f" In expectation instead (procedure='conformal': at most {risk:g} wrong among the "
        f"shown on average over calibration draws, not with probability 1 - delta for this "
        f"draw), these labels would show {share:.1%} of the calibration answers."
    )


def _simultaneous_threshold(
    cand: FloatArray,
    n_ans: npt.NDArray[np.int64],
    n_err: npt.NDArray[np.int64],
    pvals: FloatArray,
    n: int,
    risk: float,
    delta: float,
) -> LTTOutcome:
    level, bound = simultaneous_boundary(n, risk, delta)
    passed = np.flatnonzero(n_err <= bound[n_ans - 1])
    if passed.size == 0:
        n_min = min_answered_for_risk(risk, level)
        raise InsufficientDataError(
            f"no threshold passed the simultaneous risk test (each candidate at level "
            f"{level:.3g}, of delta = {delta}): risk {risk} needs at least {n_min} answered "
            f"calibration examples even with zero errors.",
            needed=n_min,
        )
    last = int(passed[-1])
    return LTTOutcome(
        tau=float(cand[last]),
        n_answered=int(n_ans[last]),
        n_errors=int(n_err[last]),
        pvalue=float(pvals[last]),
        start=0,
        n_tested=int(cand.size),
    )


def procedure_threshold(
    scores: FloatArray,
    errors: npt.NDArray[np.bool_],
    risk: float,
    delta: float,
    procedure: Procedure = "fixed-sequence",
    *,
    start: int | None = None,
    grid: npt.ArrayLike | None = None,
    reference: npt.ArrayLike | None = None,
) -> tuple[float, dict[str, Any]]:
    """The label-based procedure's ``tau`` (one of :data:`PROCEDURES`), and the fields it
    sets on the :class:`Calibration` record (``start``, ``n_tested``, ``extra``).

    The one place a procedure is chosen: :func:`calibrate` and the repeated-split
    evaluation both come here. ``start`` and ``grid`` go to :func:`ltt_threshold`;
    ``reference`` (unlabelled answers' scores) to the conformal threshold only. Raises
    :class:`InsufficientDataError` where the procedure refuses (no threshold passes, or the
    conformal threshold shows nothing); :func:`calibrate` adds the labels estimate to its
    message.
    """
    if procedure == "conformal":
        ref = scores if reference is None else np.r_[scores, np.asarray(reference, np.float64)]
        tau = conformal_threshold(scores, errors, risk, ref)
        if not np.isfinite(tau):
            raise InsufficientDataError(
                f"the conformal threshold shows nothing at risk {risk}: even the top-scored "
                f"answers have too many wrong calibration answers at or above them; add "
                f"calibration data or relax the target.",
                needed=None,
            )
        return tau, {"extra": {"procedure": procedure, "promise": "in expectation",
                               "reference": int(ref.size)}}  # fmt: skip
    out = ltt_threshold(scores, errors, risk, delta, start=start, grid=grid, procedure=procedure)
    fields: dict[str, Any] = {"start": out.start, "n_tested": out.n_tested}
    if procedure == "simultaneous":
        level, _ = simultaneous_boundary(int(scores.size), risk, delta)
        fields["extra"] = {"procedure": procedure, "level": level}
    return out.tau, fields


def calibrate(
    scores: npt.ArrayLike,
    correct: npt.ArrayLike,
    *,
    risk: float,
    delta: float,
    budgets: npt.ArrayLike | None = None,
    method: Method = "ltt",
    score_name: str = "score",
    start: int | None = None,
    grid: npt.ArrayLike | None = None,
    seed: int = 0,
    n_boot: int = 200,
    policy: StreamPolicy | None = None,
    answered_at: Any = None,
    procedure: Procedure = "fixed-sequence",
    reference: npt.ArrayLike | None = None,
) -> Calibration:
    """Calibrate a threshold on per-example scores and correctness labels.

    ``procedure="conformal"`` keeps the in-expectation promise (``delta`` unused; see
    :data:`PROCEDURES`); ``reference`` adds unlabelled answers' scores to the calibration
    scores that stand for the stream's (more of them make that promise tighter).

    ``budgets`` (mean clipped lift per answer) enables the sub-gamma fit, the
    model check and the PAC-Bayes bound, and is required by ``method="paper"``.
    ``answered_at(tau) -> bool array`` lets the paper method evaluate its
    threshold with the exact policy; by default an answer is shown iff its
    score is ``>= tau``.
    """
    _check_target(risk, delta)
    s = np.asarray(scores, dtype=np.float64)
    ok = np.asarray(correct, dtype=bool)
    if s.ndim != 1 or s.shape != ok.shape:
        raise ConfigError("scores and correct must be 1-d arrays of the same length")
    n = int(s.size)
    errors = ~ok
    info: dict[str, Any] = {}
    if budgets is not None:
        b = np.asarray(budgets, dtype=np.float64)
        if b.shape != s.shape:
            raise ConfigError("budgets must have one value per example")
        params, check = checked_subgamma(b, n_boot=n_boot, seed=seed)
        mean_b = float(b.mean())
        info = {
            "mean_budget": mean_b,
            "v": params.v,
            "c": params.c,
            "subgamma_method": params.method,
            "model_check": {
                "ks_stat": check.ks_stat,
                "ks_pvalue": check.ks_pvalue,
                "ad_stat": check.ad_stat,
                "ad_pvalue": check.ad_pvalue,
                "pvalue": check.pvalue,
                "inflation": check.inflation,
                "n_boot": float(check.n_boot),
            },
            "pac_bayes_bound": pac_bayes_bound(mean_b, n, params.v, params.c, delta),
        }
    if reference is not None and procedure != "conformal":
        raise ConfigError("reference scores are used by procedure='conformal' only")
    if method == "ltt":
        try:
            tau, fields = procedure_threshold(
                s, errors, risk, delta, procedure, start=start, grid=grid, reference=reference
            )
        except InsufficientDataError as exc:
            raise InsufficientDataError(
                f"{exc}{needed_text(s, errors, risk, delta)}"
                + (expectation_text(s, errors, risk) if procedure != "conformal" else ""),
                needed=exc.needed,
            ) from None
        answered = s >= tau
        info.update(fields)
    elif method == "paper":
        if budgets is None or "v" not in info:
            raise ConfigError("method='paper' needs per-answer budgets")
        tau = mean_lift_lower_bound(info["mean_budget"], n, info["v"], info["c"], delta)
        answered = answered_at(tau) if answered_at is not None else s >= tau
    else:
        raise ConfigError(f"method must be 'ltt' or 'paper', got {method!r}")
    n_ans = int(answered.sum())
    n_err = int((answered & errors).sum())
    finite = np.isfinite(s)
    # answers that are never shown rank below every finite score
    kappa = (
        mutual_information(ok, np.where(finite, s, s[finite].min() - 1.0)) if finite.any() else 0.0
    )
    return Calibration(
        method=method,
        tau=float(tau),
        risk=risk,
        delta=delta,
        score=score_name,
        n=n,
        n_answered=n_ans,
        n_errors=n_err,
        coverage=n_ans / n,
        empirical_risk=n_err / n_ans if n_ans else 0.0,
        risk_upper=clopper_pearson_upper(n_err, n_ans, delta),
        kappa=kappa,
        kappa_bound=kappa_answer_rate_bound(kappa, risk),
        seed=seed,
        policy=policy.to_dict() if policy is not None else None,
        guarantee=guarantee_text(method, risk, delta, procedure),
        **info,
    )


def calibrate_policy(
    policy: StreamPolicy,
    lifts: list[FloatArray],
    correct: npt.ArrayLike,
    *,
    risk: float,
    delta: float,
    method: Method = "ltt",
    start: int | None = None,
    procedure: Procedure = "fixed-sequence",
    seed: int = 0,
    n_boot: int = 200,
    critical: npt.ArrayLike | None = None,
    reference: npt.ArrayLike | None = None,
) -> Calibration:
    """Calibrate ``tau`` for a streaming policy from each answer's clipped lifts.

    Replays the exact policy on every answer (early certification and early
    blocking included), so the guarantee is about the rule that is deployed.
    ``critical`` may pass the answers' critical thresholds when they were
    already computed with :func:`critical_thresholds` for this policy.
    """
    scores = (
        critical_thresholds(policy, lifts)
        if critical is None
        else np.asarray(critical, dtype=np.float64)
    )
    if scores.shape != (len(lifts),):
        raise ConfigError("critical must hold one threshold per answer")
    budgets = np.array([float(x.mean()) if x.size else 0.0 for x in lifts])

    def answered_at(tau: float) -> npt.NDArray[np.bool_]:
        return shown_at(policy, lifts, [tau])[:, 0]

    return calibrate(
        scores,
        correct,
        risk=risk,
        delta=delta,
        budgets=budgets,
        method=method,
        score_name="lift",
        start=start,
        procedure=procedure,
        reference=reference,
        seed=seed,
        n_boot=n_boot,
        policy=policy,
        answered_at=answered_at,
    )
