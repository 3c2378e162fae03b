"""Choosing a fitted statistic by what a user gets: coverage at the target risk.

AUROC rewards the whole ranking; the deployed calibration (fixed-sequence testing
from the highest scores down, :func:`~guardrail.evaluate.ltt_threshold`) certifies
only as far down as the top of the ranking stays below the target risk. A gain in
AUROC bought in the middle of the ranking is worth nothing there, and a statistic
that ranks a few confident wrong answers at the very top can certify less than the
plain sequence log-likelihood it was meant to beat.

:func:`cv_coverage` estimates, on the fitting answers only, the coverage a
candidate would give under that calibration: out-of-fold scores (the logistic
statistic fitted on the other folds), then ``splits`` random halves of them, one
half calibrating at ``(risk, delta)`` exactly as ``liftguard eval`` does, the other
measuring coverage. :func:`select_statistic` returns the candidate with the largest
mean coverage (ties: fewer refusals, then the larger out-of-fold AUROC). Among the
candidates ``liftguard fit --select coverage`` offers are the single scores a user
could threshold by hand (the sequence log-likelihood, the lowest token logprob), so
the choice cannot be worse at the top than the best of them by more than the
cross-validation's noise.

Without a :class:`Deployment` the estimate reads each answer's final score. With one
it reads the rule as deployed: each fold's statistic gets the candidate's early-block
margins (:func:`~guardrail.fitting.block_margins`, from that fold's fitting answers),
and every out-of-fold answer is replayed through the monitor's objects
(:func:`~guardrail.fitting.replay_fitted`) and scored by its critical score, the
largest ``tau`` at which the monitor shows it. So the margins, which can block an
answer whose final score would pass, are chosen by the coverage they give, like the
features and the penalty. Within the token limit and without margins the two
estimates agree exactly (the exact early verdicts change when, not what).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from ._aggregates import Feature
from ._errors import ConfigError
from ._fitted import DEFAULT_ALTERNATIVES, Form
from ._fitted_replay import block_margins, critical_score, replay_fitted
from ._fitting import fit_statistic
from ._policy import StreamPolicy
from ._reads import Skeleton
from ._traces import Trace

__all__ = ["Candidate", "CandidateScore", "Deployment", "cv_coverage", "select_statistic"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Candidate:
    """A statistic to try: a name, the features it reads (a subset of the columns given to
    :func:`select_statistic`, by feature) and its L2 penalty."""

    name: str
    features: tuple[Feature, ...]
    l2: float
    early_block: float | None = None
    """Quantile of the early-block margins the deployed rule gets (``None``: the exact
    early blocks only). Read only when scored with a :class:`Deployment`."""


@dataclass(frozen=True)
class Deployment:
    """How the chosen statistic will stream: the fitting answers' traces (one per row of
    ``x``, in order) and what the monitor replays them with. With one, cross-validation
    scores the rule as deployed (see the module docstring)."""

    traces: Sequence[Trace]
    policy: StreamPolicy
    skeleton: Skeleton | str | None = None
    max_tokens: int | None = None
    form: Form = "answer"
    ranges: Mapping[str, tuple[float, float]] | None = None
    alternatives: int = DEFAULT_ALTERNATIVES


@dataclass(frozen=True)
class CandidateScore:
    """What cross-validation measured of one candidate."""

    candidate: Candidate
    coverage: float
    """Mean coverage on the measuring halves (a refused split counts as 0)."""
    refused: int
    """Splits whose calibrating half passed no threshold."""
    auroc: float
    """AUROC of the out-of-fold scores (the tie-break)."""


def _oof_scores(
    x: FloatArray,
    y: npt.NDArray[np.bool_],
    candidate: Candidate,
    vocab_size: int,
    folds: int,
    rng: np.random.Generator,
    deployment: Deployment | None,
) -> FloatArray:
    fold = rng.permutation(y.size) % folds
    out = np.full(y.size, -np.inf)
    feats, l2 = candidate.features, candidate.l2
    for k in range(folds):
        train, test = fold != k, fold == k
        if deployment is None:
            stat = fit_statistic(x[train], y[train], feats, vocab_size=vocab_size, l2=l2)
            score = stat.score(x[test])
            out[test] = np.where(np.isfinite(score), score, -np.inf)  # empty: never shown
            continue
        d = deployment
        stat = fit_statistic(x[train], y[train], feats, vocab_size=vocab_size, l2=l2,
                             form=d.form, ranges=d.ranges, alternatives=d.alternatives)  # fmt: skip
        skel, limit = d.skeleton, d.max_tokens
        if candidate.early_block is not None:
            fitting = [d.traces[int(i)] for i in np.flatnonzero(train)]
            margins = block_margins(
                stat, fitting, candidate.early_block, skeleton=skel, max_tokens=limit
            )
            stat = replace(stat, block_margins=margins)
        for i in np.flatnonzero(test):
            path = replay_fitted(stat, d.traces[int(i)], skeleton=skel, max_tokens=limit)
            out[i] = critical_score(path, d.policy)
    return out


def cv_coverage(
    x: npt.ArrayLike,
    correct: npt.ArrayLike,
    candidate: Candidate,
    columns: Sequence[Feature],
    *,
    vocab_size: int,
    risk: float,
    delta: float,
    folds: int = 5,
    splits: int = 20,
    seed: int = 0,
    deployment: Deployment | None = None,
    repeats: int = 1,
) -> CandidateScore:
    """Cross-validated coverage of ``candidate`` at ``(risk, delta)`` (see the module
    docstring). ``x``: one row per answer, one column per feature in ``columns`` (rows
    with a non-finite value, empty answers, are scored as never shown); ``deployment``:
    score the rule as deployed, replayed, rather than the final scores; ``repeats``: the
    whole cross-validation that many times over with new folds and splits, averaged (a
    less noisy estimate; ``refused`` counts over every split)."""
    from ._evaluate import MethodScores, _per_split, auroc  # (scipy: only when selecting)

    if folds < 2 or splits < 1 or repeats < 1:
        raise ConfigError("folds must be >= 2, splits and repeats >= 1")
    cols = list(columns)
    try:
        idx = [cols.index(f) for f in candidate.features]
    except ValueError:
        raise ConfigError(f"candidate {candidate.name!r} reads a feature not in columns") from None
    xs = np.asarray(x, dtype=np.float64)[:, idx]
    y = np.asarray(correct, dtype=bool)
    if deployment is not None and len(deployment.traces) != y.size:
        raise ConfigError(
            f"deployment: expected one trace per answer ({y.size}), got {len(deployment.traces)}"
        )
    rng = np.random.default_rng(seed)
    coverage, refused, aurocs = [], 0, []
    for _ in range(repeats):
        scores = _oof_scores(xs, y, candidate, vocab_size, folds, rng, deployment)
        perms = [rng.permutation(y.size) for _ in range(splits)]
        method = MethodScores(candidate.name, scores, scores)
        for test, tau, shown in _per_split(method, y, perms, 0.5, risk, delta, replay_policy=False):
            refused += tau is None
            coverage.append(float(shown.sum()) / test.size)
        aurocs.append(auroc(scores, y))
    return CandidateScore(candidate, float(np.mean(coverage)), refused, float(np.mean(aurocs)))


def select_statistic(
    x: npt.ArrayLike,
    correct: npt.ArrayLike,
    candidates: Sequence[Candidate],
    columns: Sequence[Feature],
    *,
    vocab_size: int,
    risk: float,
    delta: float,
    folds: int = 5,
    splits: int = 20,
    seed: int = 0,
    deployment: Deployment | None = None,
    repeats: int = 1,
    progress: Callable[[int, int], object] | None = None,
) -> tuple[Candidate, list[CandidateScore]]:
    """The candidate with the largest cross-validated coverage at ``(risk, delta)`` (ties:
    fewer refusals, then the larger out-of-fold AUROC), and every candidate's scores, in
    the order given. Every candidate sees the same folds and splits (the same ``seed``).
    ``progress(done, total)`` is called after each candidate."""
    if not candidates:
        raise ConfigError("select_statistic needs at least one candidate")
    scored = []
    for c in candidates:
        scored.append(
            cv_coverage(
                x,
                correct,
                c,
                columns,
                vocab_size=vocab_size,
                risk=risk,
                delta=delta,
                folds=folds,
                splits=splits,
                seed=seed,
                deployment=deployment,
                repeats=repeats,
            )
        )
        if progress is not None:
            progress(len(scored), len(candidates))
    best = max(scored, key=lambda s: (round(s.coverage, 12), -s.refused, s.auroc))
    return best.candidate, scored
