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

The estimate reads each answer's final score, not the streaming rule's critical
score: selection needs a ranking, and the two differ only where an early verdict
comes before the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ._aggregates import Feature
from ._errors import ConfigError
from ._fitting import fit_statistic

__all__ = ["Candidate", "CandidateScore", "cv_coverage", "select_statistic"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Candidate:
    """A statistic to try: a name, the features it reads (a subset of the columns given to
    :func:`select_statistic`, by feature) and its L2 penalty."""

    name: str
    features: tuple[Feature, ...]
    l2: float


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
    features: tuple[Feature, ...],
    l2: float,
    vocab_size: int,
    folds: int,
    rng: np.random.Generator,
) -> FloatArray:
    fold = rng.permutation(y.size) % folds
    out = np.full(y.size, -np.inf)
    for k in range(folds):
        train, test = fold != k, fold == k
        stat = fit_statistic(x[train], y[train], features, vocab_size=vocab_size, l2=l2)
        score = stat.score(x[test])
        out[test] = np.where(np.isfinite(score), score, -np.inf)  # an empty answer: never shown
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
) -> CandidateScore:
    """Cross-validated coverage of ``candidate`` at ``(risk, delta)`` (see the module
    docstring). ``x``: one row per answer, one column per feature in ``columns`` (rows
    with a non-finite value, empty answers, are scored as never shown)."""
    from ._evaluate import MethodScores, _per_split, auroc  # (scipy: only when selecting)

    if folds < 2 or splits < 1:
        raise ConfigError("folds must be >= 2 and splits >= 1")
    cols = list(columns)
    try:
        idx = [cols.index(f) for f in candidate.features]
    except ValueError:
        raise ConfigError(f"candidate {candidate.name!r} reads a feature not in columns") from None
    xs = np.asarray(x, dtype=np.float64)[:, idx]
    y = np.asarray(correct, dtype=bool)
    rng = np.random.default_rng(seed)
    scores = _oof_scores(xs, y, candidate.features, candidate.l2, vocab_size, folds, rng)
    perms = [rng.permutation(y.size) for _ in range(splits)]
    method = MethodScores(candidate.name, scores, scores)
    coverage, refused = [], 0
    for test, tau, shown in _per_split(method, y, perms, 0.5, risk, delta, replay_policy=False):
        refused += tau is None
        coverage.append(float(shown.sum()) / test.size)
    return CandidateScore(candidate, float(np.mean(coverage)), refused, auroc(scores, y))


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
) -> tuple[Candidate, list[CandidateScore]]:
    """The candidate with the largest cross-validated coverage at ``(risk, delta)`` (ties:
    fewer refusals, then the larger out-of-fold AUROC), and every candidate's scores, in
    the order given. Every candidate sees the same folds and splits (the same ``seed``)."""
    if not candidates:
        raise ConfigError("select_statistic needs at least one candidate")
    scored = [
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
        )
        for c in candidates
    ]
    best = max(scored, key=lambda s: (round(s.coverage, 12), -s.refused, s.auroc))
    return best.candidate, scored
