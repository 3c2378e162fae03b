"""``liftguard fit --select coverage``: the statistic chosen by cross-validated coverage.

The candidates: the feature set ``fit`` would use (``--group`` or ``--features``) at
three L2 penalties (``--l2`` divided by 10, as given, times 10), and the single scores a
user could threshold by hand, as one-feature statistics: the sequence log-likelihood
(``logprob.sum``), the lowest token logprob (``logprob.min``) and, for ``--form
answer``, the mean logprob; each with every early-block quantile of
:data:`EARLY_BLOCK_CHOICES` (only ``--early-block``'s, when it is given). Each is scored
on the fitting answers only by :func:`guardrail.fitting.select_statistic` at the
command's ``--risk`` and ``--delta``, replayed as the monitor will stream it (margins,
token limit and ``--on-length`` included), the cross-validation repeated :data:`REPEATS`
times over; the calibration answers are never read.

Long answers get more candidates (:func:`long_answer_sets`), at ``--l2``: where the
median fitting answer has at least :data:`LONG_ANSWER_TOKENS` tokens, the features plus
length-robust aggregates (each base's mean, the shares of tokens below log 0.5 and log
0.9), whose values do not drift with the length as minima, sums and counts do; and for
each scope (the final answer, the code block) that at least :data:`SCOPE_SHARE` of the
fitting answers have tokens in, the features plus that scope's lowest and mean logprob,
its length and its mean of every other base read.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from ._common import CommandError

__all__ = [
    "EARLY_BLOCK_CHOICES",
    "LONG_ANSWER_TOKENS",
    "REPEATS",
    "SCOPE_SHARE",
    "SINGLE_SCORES",
    "choose_statistic",
    "long_answer_sets",
    "scope_sum_features",
    "scope_sums",
    "selection_line",
    "used_scopes",
]

REPEATS = 3
"""How many times over the cross-validation runs, with new folds and splits each time."""

SINGLE_SCORES = ("logprob.sum", "logprob.min", "logprob.mean")
"""One-feature candidates: sequence log-likelihood, lowest token logprob, mean logprob."""

EARLY_BLOCK_CHOICES: tuple[float | None, ...] = (None, 0.99, 0.95, 0.9)
"""Early-block quantiles tried with every candidate (``None``: the exact early blocks
only) when ``--early-block`` is not given."""


LONG_ANSWER_TOKENS = 16
"""From this median length of the fitting answers on, selection also tries length-robust
aggregates."""

SCOPE_SHARE = 0.1
"""Share of the fitting answers with tokens in a scope from which selection tries it."""

_HALF, _NINE = repr(math.log(0.5)), repr(math.log(0.9))


def long_answer_sets(
    feats: tuple[Any, ...], traces: list[Any], form: str
) -> list[tuple[str, tuple[Any, ...]]]:
    """``(label, features)`` of the extra candidates for long answers (module docstring):
    ``feats`` with length-robust aggregates, and with each scope the answers use."""
    import numpy as np

    from guardrail.fitting import Feature, moves_one_way

    bases = [b for b in dict.fromkeys(f.base for f in feats) if b != "length"]
    out: list[tuple[str, tuple[Any, ...]]] = []

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


def used_scopes(traces: list[Any]) -> list[str]:
    """The scopes (in :data:`~guardrail.fitting.SCOPES` order) that at least
    :data:`SCOPE_SHARE` of ``traces`` have a token in."""
    import numpy as np

    from guardrail.fitting import SCOPES, scope_mask

    return [
        scope
        for scope in SCOPES
        if np.mean([bool(scope_mask(t.token_texts, scope).any()) for t in traces]) >= SCOPE_SHARE
    ] if traces else []  # fmt: skip


def scope_sums(args: argparse.Namespace, feats: tuple[Any, ...], fit_tr: list[Any]) -> tuple[
    tuple[Any, ...], list[str]
]:  # fmt: skip
    """``--scopes``: ``feats`` plus the log-likelihood (``scope:logprob.sum``) of each scope
    named, or for ``auto`` of each :func:`used_scopes` of the fitting answers; and those
    scopes. With ``--features`` the features are as given."""
    from guardrail.fitting import SCOPES

    if args.features is not None:
        if args.scopes is not None:
            raise CommandError(
                "--scopes adds to --group's preset; with --features name scoped features "
                "yourself (e.g. number:logprob.sum)",
                status=2,
            )
        return feats, []
    given = (args.scopes or "auto").strip().lower()
    if given == "auto":
        scopes = used_scopes(fit_tr)
    elif given == "none":
        scopes = []
    else:
        scopes = [n.strip() for n in given.split(",") if n.strip()]
        bad = [n for n in scopes if n not in SCOPES]
        if bad or not scopes or len(set(scopes)) != len(scopes):
            raise CommandError(
                f"--scopes: expected auto, none or distinct scopes of {', '.join(SCOPES)}; "
                f"got {args.scopes!r}",
                status=2,
            )
    return tuple(dict.fromkeys([*feats, *scope_sum_features(scopes)])), scopes


def scope_sum_features(scopes: list[str]) -> tuple[Any, ...]:
    """The log-likelihood of each scope's tokens (``scope:logprob.sum``), in order."""
    from guardrail.fitting import Feature

    return tuple(Feature.parse(f"{s}:logprob.sum") for s in scopes)


def _early_name(quantile: float | None) -> str:
    return "exact early blocks" if quantile is None else f"early block {quantile:g}"


def choose_statistic(
    args: argparse.Namespace,
    fit_tr: list[Any],
    feats: tuple[Any, ...],
    ranges: dict[str, tuple[float, float]],
    kw: dict[str, Any],
    vocab: int,
    limit: int,
    progress: Any,
) -> tuple[tuple[Any, ...], float, float | None, Any, list[dict[str, Any]]]:
    """``(features, l2, early_block, x, table)`` of the candidate with the largest
    cross-validated coverage: ``x`` its answer features on ``fit_tr`` (computed once, for
    every candidate), ``table`` every candidate's measurements (stored in the
    certificate)."""
    from guardrail import StreamPolicy
    from guardrail.fitting import (
        Candidate,
        Deployment,
        Feature,
        answer_features,
        moves_one_way,
        select_statistic,
    )

    name = "features" if args.features is not None else f"group {args.group}"
    base = [(f"{name}, l2 {l2:g}", feats, l2) for l2 in (args.l2 / 10, args.l2, args.l2 * 10)]
    base += [
        (f"{name} {label}", fs, args.l2) for label, fs in long_answer_sets(feats, fit_tr, args.form)
    ]
    for single in SINGLE_SCORES:
        f = Feature.parse(single)
        if args.form == "monotone" and not moves_one_way(f):
            continue
        base.append((single, (f,), args.l2))
    quantiles = (args.early_block,) if args.early_block_given else EARLY_BLOCK_CHOICES
    candidates = [
        Candidate(f"{label}; {_early_name(q)}", fs, l2, early_block=q)
        for label, fs, l2 in base
        for q in quantiles
    ]
    columns = list(dict.fromkeys([*feats, *(f for c in candidates for f in c.features)]))
    x = answer_features(fit_tr, columns, ranges=ranges, **kw)
    correct = [bool(t.correct) for t in fit_tr]
    deployment = Deployment(
        fit_tr,
        StreamPolicy(on_length=args.on_length),
        skeleton=kw["skeleton"],
        max_tokens=limit,
        form=args.form,
        ranges=ranges,
        alternatives=kw["alternatives"],
        early_block_share=args.early_block_share,
    )
    best, scored = select_statistic(
        x,
        correct,
        candidates,
        columns,
        vocab_size=vocab,
        risk=args.risk,
        delta=args.delta,
        seed=args.seed,
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


def selection_line(table: list[dict[str, Any]] | None, risk: float) -> str:
    """The summary's line for the selection (empty without one)."""
    if not table:
        return ""
    best = next(r for r in table if r["chosen"])
    line = (
        f"  selection        {best['candidate']}: cross-validated coverage "
        f"{best['cv_coverage']:.1%} at risk {risk:g}, best of {len(table)} candidates\n"
    )
    level = round(best["cv_coverage"], 12)
    tied = sum(round(r["cv_coverage"], 12) == level for r in table)
    if tied > 1:
        what = (
            f"{tied} candidates tie on coverage"
            if tied < len(table)
            else "every candidate certifies all of the fitting answers at this risk"
            if best["cv_coverage"] >= 1.0
            else "no candidate certifies anything at this risk"
            if best["cv_coverage"] == 0.0
            else f"all {tied} candidates tie on coverage"
        )
        line += (
            f"                   {what}: the choice fell to fewer refusals, then the "
            "out-of-fold AUROC, then the order listed\n"
        )
    behind = [r for r in table if round(r["cv_coverage"], 12) < level]
    if behind:  # how far ahead the choice is: a hair is no evidence for it
        second = max(behind, key=lambda r: r["cv_coverage"])
        gap = 100 * (best["cv_coverage"] - second["cv_coverage"])
        line += (
            f"                   next best {second['candidate']}: {second['cv_coverage']:.1%}, "
            f"{gap:.2f} points behind\n"
        )
    return line
