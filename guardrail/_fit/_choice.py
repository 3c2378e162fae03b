"""The choices :func:`~guardrail.fitting.fit_certificate` makes on the fitting answers
alone: the scopes whose log-likelihood it adds, the statistic ``select="coverage"``
chooses by cross-validated coverage, and the early-block margins.

Selection's candidates: the feature set of the options (``group``'s preset or
``features``) at three L2 penalties (``l2`` divided by 10, as given, times 10), and the
single scores a user could threshold by hand, as one-feature statistics: the sequence
log-likelihood (``logprob.sum``), the lowest token logprob (``logprob.min``) and, for
``form="answer"``, the mean logprob; each with every quantile of
``early_block_choices``. Each is scored on the fitting answers only by
:func:`~guardrail._fit._cv_coverage.select_statistic` at the options' ``risk`` and ``delta``,
replayed as the monitor will stream it (margins, token limit and ``on_length``
included), the cross-validation repeated :data:`REPEATS` times over; the calibration
answers are never read.

Long answers get more candidates (:func:`long_answer_sets`), at ``l2``: where the
median fitting answer has at least :data:`LONG_ANSWER_TOKENS` tokens, the features plus
length-robust aggregates (each base's mean, the shares of tokens below log 0.5 and log
0.9), whose values do not drift with the length as minima, sums and counts do; and for
each scope (the final answer, the code block) that at least :data:`SCOPE_SHARE` of the
fitting answers have tokens in, the features plus that scope's lowest and mean logprob,
its length and its mean of every other base read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .._aggregates import Feature
from .._errors import ConfigError
from .._policy import StreamPolicy
from .._scopes import SCOPES, scope_mask
from .._trace_format import Trace
from ._cv_coverage import Candidate, Deployment, select_statistic
from ._logistic import answer_features
from ._replay import (
    FittedPath,
    MarginTail,
    margin_cost,
    margin_scale,
    margins_from_scores,
    replay_fitted,
    with_margins,
)
from ._statistic import FittedStatistic, Form, moves_one_way

if TYPE_CHECKING:
    from ._recipe import FitOptions

__all__ = [
    "EARLY_BLOCK_CHOICES",
    "LONG_ANSWER_TOKENS",
    "REPEATS",
    "SCOPE_SHARE",
    "SINGLE_SCORES",
    "choose_statistic",
    "early_margins",
    "long_answer_sets",
    "margins_blocked",
    "replays",
    "scope_sums",
    "used_scopes",
]

FloatArray = npt.NDArray[np.float64]

REPEATS = 3
"""How many times over the cross-validation runs, with new folds and splits each time."""

SINGLE_SCORES = ("logprob.sum", "logprob.min", "logprob.mean")
"""One-feature candidates: sequence log-likelihood, lowest token logprob, mean logprob."""

EARLY_BLOCK_CHOICES: tuple[float | None, ...] = (None, 0.99, 0.95, 0.9)
"""Early-block quantiles selection tries with every candidate (``None``: the exact early
blocks only) unless told otherwise."""

LONG_ANSWER_TOKENS = 16
"""From this median length of the fitting answers on, selection also tries length-robust
aggregates."""

SCOPE_SHARE = 0.1
"""Share of the fitting answers with tokens in a scope from which it is used (the
default scopes, and selection's scoped candidates)."""

_HALF, _NINE = repr(math.log(0.5)), repr(math.log(0.9))


def used_scopes(traces: Sequence[Trace]) -> list[str]:
    """The scopes (in :data:`~guardrail._scopes.SCOPES` order) that at least
    :data:`SCOPE_SHARE` of ``traces`` have a token in."""
    if not traces:
        return []
    return [
        scope
        for scope in SCOPES
        if np.mean([bool(scope_mask(t.token_texts, scope).any()) for t in traces]) >= SCOPE_SHARE
    ]


def scope_sums(
    feats: tuple[Feature, ...], scopes: Sequence[str] | None, fit_tr: Sequence[Trace]
) -> tuple[tuple[Feature, ...], list[str]]:
    """``feats`` plus the log-likelihood (``scope:logprob.sum``) of each scope of
    ``scopes`` (``None``: each :func:`used_scopes` of the fitting answers), and those
    scopes."""
    chosen = used_scopes(fit_tr) if scopes is None else list(scopes)
    bad = [s for s in chosen if s not in SCOPES]
    if bad or len(set(chosen)) != len(chosen):
        raise ConfigError(f"scopes: expected distinct scopes of {', '.join(SCOPES)}; got {bad}")
    added = tuple(Feature.parse(f"{s}:logprob.sum") for s in chosen)
    return tuple(dict.fromkeys([*feats, *added])), chosen


def long_answer_sets(
    feats: tuple[Feature, ...], traces: Sequence[Trace], form: Form
) -> list[tuple[str, tuple[Feature, ...]]]:
    """``(label, features)`` of the extra candidates for long answers (module docstring):
    ``feats`` with length-robust aggregates, and with each scope the answers use."""
    bases = [b for b in dict.fromkeys(f.base for f in feats) if b != "length"]
    out: list[tuple[str, tuple[Feature, ...]]] = []

    def extend(label: str, names: list[str]) -> None:
        extra = [f for f in map(Feature.parse, names) if form != "monotone" or moves_one_way(f)]
        combined = tuple(dict.fromkeys([*feats, *extra]))
        if len(combined) > len(feats):
            out.append((label, combined))

    if np.median([t.n_tokens for t in traces]) >= LONG_ANSWER_TOKENS:
        robust = [f"{b}.mean" for b in bases]
        extend("+ means and shares below", [*robust, f"logprob.frac_below@{_HALF}",
                                            f"logprob.frac_below@{_NINE}"])  # fmt: skip
    for scope in used_scopes(traces):
        others = [f"{scope}:{b}.mean" for b in bases if b != "logprob"]
        extend(f"+ {scope} scope", [f"{scope}:logprob.min", f"{scope}:logprob.mean",
                                    f"{scope}:length.count", *others])  # fmt: skip
    return out


def _early_name(quantile: float | None) -> str:
    return "exact early blocks" if quantile is None else f"early block {quantile:g}"


def choose_statistic(
    options: FitOptions,
    name: str,
    fit_tr: Sequence[Trace],
    feats: tuple[Feature, ...],
    deployment: Deployment,
    vocab: int,
    progress: Callable[[int, int], object] | None,
) -> tuple[tuple[Feature, ...], float, float | None, FloatArray, list[dict[str, Any]]]:
    """``(features, l2, early_block, x, table)`` of the candidate with the largest
    cross-validated coverage (``options``: the :class:`~guardrail.fitting.FitOptions`;
    ``name`` labels the feature set): ``x`` its answer features on ``fit_tr`` (computed
    once, for every candidate), ``table`` every candidate's measurements (stored in the
    certificate)."""
    l2, form = options.l2, options.form
    base = [(f"{name}, l2 {x:g}", feats, x) for x in (l2 / 10, l2, l2 * 10)]
    base += [(f"{name} {label}", fs, l2) for label, fs in long_answer_sets(feats, fit_tr, form)]
    for single in SINGLE_SCORES:
        f = Feature.parse(single)
        if form == "monotone" and not moves_one_way(f):
            continue
        base.append((single, (f,), l2))
    candidates = [
        Candidate(f"{label}; {_early_name(q)}", fs, penalty, early_block=q)
        for label, fs, penalty in base
        for q in options.early_block_choices
    ]
    columns = list(dict.fromkeys([*feats, *(f for c in candidates for f in c.features)]))
    x = answer_features(
        fit_tr,
        columns,
        ranges=deployment.ranges,
        skeleton=deployment.skeleton,
        alternatives=deployment.alternatives,
    )
    best, scored = select_statistic(
        x,
        [bool(t.correct) for t in fit_tr],
        candidates,
        columns,
        vocab_size=vocab,
        risk=options.risk,
        delta=options.delta,
        seed=options.seed,
        deployment=deployment,
        repeats=REPEATS,
        progress=progress,
    )
    table = [
        {
            "candidate": s.candidate.name,
            "cv_coverage": s.coverage,
            "refused": s.refused,
            "cv_auroc": s.auroc,
            "chosen": s.candidate is best,
        }
        for s in scored
    ]
    chosen = x[:, [columns.index(f) for f in best.features]]
    return best.features, best.l2, best.early_block, chosen, table


def replays(
    stat: FittedStatistic, traces: Sequence[Trace], skeleton: Any, limit: int | None
) -> tuple[list[FittedPath], list[FittedPath]]:
    """Each answer replayed without the statistic's early-block margins, and as the
    monitor streams it (one replay: :func:`~guardrail.fitting.with_margins` adds them)."""
    bare = replace(stat, block_margins=()) if stat.block_margins else stat
    plain = [replay_fitted(bare, t, skeleton=skeleton, max_tokens=limit) for t in traces]
    return plain, [with_margins(p, stat.block_margins) for p in plain]


def margins_blocked(
    stat: FittedStatistic,
    plain: Sequence[FittedPath],
    correct: Sequence[bool] | npt.NDArray[np.bool_],
    policy: StreamPolicy,
    tau: float,
) -> dict[str, int] | None:
    """:func:`~guardrail._fit._replay.margin_cost` at ``tau`` as the record keeps it (``None``
    for a statistic without margins)."""
    if not stat.block_margins:
        return None
    blocked, shown = margin_cost(plain, stat.block_margins, correct, policy, tau)
    return {"blocked": blocked, "shown_without_margins": shown}


def early_margins(
    stat: FittedStatistic,
    fit_tr: Sequence[Trace],
    quantile: float,
    share: float | None,
    skeleton: Any,
    limit: int,
    tail: MarginTail = "flat",
) -> tuple[tuple[float, ...], dict[str, float]]:
    """The early-block margins of ``quantile`` and ``share``, from one replay of the
    correct fitting answers, carried forward to the token limit ``limit`` by the ``tail``
    rule (:func:`~guardrail.fitting.margins_from_scores` with ``positions``; the widening read
    on the fitted positions), and ``{"share": S, "scale": c}`` where the share widens the
    per-position margins by ``c > 1`` (``{}`` otherwise: the certificate then reads as one
    fitted per position)."""
    right = [replay_fitted(stat, t, skeleton=skeleton, max_tokens=limit).scores
             for t in fit_tr if t.correct and t.n_tokens]  # fmt: skip
    margins = margins_from_scores(right, quantile, share=share, positions=limit, tail=tail)
    fitted = margins_from_scores(right, quantile)
    if share is None or not fitted or (scale := margin_scale(right, fitted, share)) <= 1.0:
        return margins, {}
    return margins, {"share": share, "scale": scale}
