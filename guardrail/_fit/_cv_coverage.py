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
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .._aggregates import Feature
from .._errors import ConfigError
from .._policy import StreamPolicy
from .._reads import Skeleton
from .._trace_format import Trace
from ._logistic import fit_statistic
from ._replay import (
    MarginTail,
    critical_score,
    margins_from_scores,
    replay_fitted,
    with_margins,
)
from ._statistic import DEFAULT_ALTERNATIVES, Form

__all__ = ["Candidate", "CandidateScore", "Deployment", "cv_coverage", "select_statistic"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Candidate:
    """A statistic to try: a name, the features it reads (a subset of the columns given to
    :func:`select_statistic`, by feature) and its L2 penalty.

    Examples
    --------
        >>> cand = Candidate("mean-logprob", (Feature.parse("logprob.mean"),), l2=1.0)
        >>> cand.name, [f.name for f in cand.features]
        ('mean-logprob', ['logprob.mean'])
    """

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
    scores the rule as deployed (see the module docstring).

    Examples
    --------
        >>> from guardrail import StreamPolicy
        >>> deployment = Deployment(traces=[], policy=StreamPolicy(), max_tokens=256)
        >>> deployment.form, deployment.alternatives
        ('answer', 5)
    """

    traces: Sequence[Trace]
    policy: StreamPolicy
    skeleton: Skeleton | str | None = None
    max_tokens: int | None = None
    form: Form = "answer"
    ranges: Mapping[str, tuple[float, float]] | None = None
    alternatives: int = DEFAULT_ALTERNATIVES
    early_block_share: float | None = None
    """The share of correct fitting answers the margins are widened never to block
    (:func:`~guardrail.fitting.margins_from_scores`; ``None``: per position only)."""
    early_block_tail: MarginTail = "flat"
    """How the margins run past the fitted positions (``tail`` of
    :func:`~guardrail.fitting.margins_from_scores`)."""
    clamp: bool = True
    """Whether each candidate holds its features to their fitting range (``clamp`` of
    :func:`~guardrail.fitting.fit_statistic`)."""


@dataclass(frozen=True)
class CandidateScore:
    """What cross-validation measured of one candidate.

    Examples
    --------
        >>> cand = Candidate("mean-logprob", (Feature.parse("logprob.mean"),), l2=1.0)
        >>> score = CandidateScore(cand, coverage=0.42, refused=0, auroc=0.71)
        >>> score.candidate.name, score.coverage
        ('mean-logprob', 0.42)
    """

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
    group: Sequence[Candidate],
    vocab_size: int,
    folds: int,
    rng: np.random.Generator,
    deployment: Deployment | None,
) -> list[FloatArray]:
    """Out-of-fold scores of each candidate in ``group`` (one features and penalty, any
    early-block quantiles): one fit per fold, and with a deployment one replay of each
    answer, the margins of every quantile applied to it (:func:`with_margins`)."""
    fold = rng.permutation(y.size) % folds
    out = [np.full(y.size, -np.inf) for _ in group]
    feats, l2 = group[0].features, group[0].l2
    for k in range(folds):
        train, test = fold != k, fold == k
        if deployment is None:
            stat = fit_statistic(x[train], y[train], feats, vocab_size=vocab_size, l2=l2)
            score = stat.score(x[test])
            for o in out:
                o[test] = np.where(np.isfinite(score), score, -np.inf)  # empty: never shown
            continue
        d = deployment
        stat = fit_statistic(x[train], y[train], feats, vocab_size=vocab_size, l2=l2,
                             form=d.form, ranges=d.ranges, alternatives=d.alternatives,
                             clamp=d.clamp)  # fmt: skip
        skel, limit = d.skeleton, d.max_tokens
        margins: dict[float, tuple[float, ...]] = {}
        quantiles = {c.early_block for c in group if c.early_block is not None}
        if quantiles:
            right = [  # the correct fitting answers' scores, token by token
                replay_fitted(stat, t, skeleton=skel, max_tokens=limit).scores
                for t in (d.traces[int(i)] for i in np.flatnonzero(train))
                if t.correct and t.n_tokens
            ]
            share, tail = d.early_block_share, d.early_block_tail
            margins = {q: margins_from_scores(right, q, share=share, positions=limit, tail=tail)
                       for q in quantiles}  # fmt: skip
        for i in np.flatnonzero(test):
            path = replay_fitted(stat, d.traces[int(i)], skeleton=skel, max_tokens=limit)
            for c, o in zip(group, out, strict=True):
                q = c.early_block
                gated = path if q is None else with_margins(path, margins[q])
                o[i] = critical_score(gated, d.policy)
    return out


def _check_columns(candidate: Candidate, columns: Sequence[Feature]) -> list[int]:
    cols = list(columns)
    try:
        return [cols.index(f) for f in candidate.features]
    except ValueError:
        raise ConfigError(f"candidate {candidate.name!r} reads a feature not in columns") from None


def _cv_group(
    x: npt.ArrayLike,
    correct: npt.ArrayLike,
    group: Sequence[Candidate],
    columns: Sequence[Feature],
    *,
    vocab_size: int,
    risk: float,
    delta: float,
    folds: int,
    splits: int,
    seed: int,
    deployment: Deployment | None,
    repeats: int,
) -> list[CandidateScore]:
    """:func:`cv_coverage` of every candidate in ``group`` (one features and penalty):
    the same folds and splits as each alone, the fits and replays shared."""
    from .._evaluate import MethodScores, _per_split, auroc  # (scipy: only when selecting)

    if folds < 2 or splits < 1 or repeats < 1:
        raise ConfigError("folds must be >= 2, splits and repeats >= 1")
    xs = np.asarray(x, dtype=np.float64)[:, _check_columns(group[0], columns)]
    y = np.asarray(correct, dtype=bool)
    if deployment is not None and len(deployment.traces) != y.size:
        raise ConfigError(
            f"deployment: expected one trace per answer ({y.size}), got {len(deployment.traces)}"
        )
    rng = np.random.default_rng(seed)
    coverage: list[list[float]] = [[] for _ in group]
    refused = [0] * len(group)
    aurocs: list[list[float]] = [[] for _ in group]
    for _ in range(repeats):
        scores = _oof_scores(xs, y, group, vocab_size, folds, rng, deployment)
        perms = [rng.permutation(y.size) for _ in range(splits)]
        for j, (c, s) in enumerate(zip(group, scores, strict=True)):
            method = MethodScores(c.name, s, s)
            per_split = _per_split(method, y, perms, 0.5, risk, delta, replay_policy=False)
            for test, tau, shown in per_split:
                refused[j] += tau is None
                coverage[j].append(float(shown.sum()) / test.size)
            aurocs[j].append(auroc(s, y))
    return [
        CandidateScore(c, float(np.mean(coverage[j])), refused[j], float(np.mean(aurocs[j])))
        for j, c in enumerate(group)
    ]


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
    (score,) = _cv_group(x, correct, [candidate], columns, vocab_size=vocab_size, risk=risk,
                         delta=delta, folds=folds, splits=splits, seed=seed,
                         deployment=deployment, repeats=repeats)  # fmt: skip
    return score


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
    the order given. Every candidate sees the same folds and splits (the same ``seed``);
    candidates that differ only in their early-block quantile share each fold's fit and
    replays. ``progress(done, total)`` is called after each such group."""
    if not candidates:
        raise ConfigError("select_statistic needs at least one candidate")
    for c in candidates:
        _check_columns(c, columns)
    groups: dict[tuple[tuple[Feature, ...], float], list[Candidate]] = {}
    for c in candidates:
        groups.setdefault((c.features, c.l2), []).append(c)
    measured: dict[int, CandidateScore] = {}
    done = 0
    for group in groups.values():
        scores = _cv_group(x, correct, group, columns, vocab_size=vocab_size, risk=risk,
                           delta=delta, folds=folds, splits=splits, seed=seed,
                           deployment=deployment, repeats=repeats)  # fmt: skip
        measured.update((id(s.candidate), s) for s in scores)
        done += len(group)
        if progress is not None:
            progress(done, len(candidates))
    scored = [measured[id(c)] for c in candidates]
    best = max(scored, key=lambda s: (round(s.coverage, 12), -s.refused, s.auroc))
    return best.candidate, scored
