"""Early-block margin rules that do not lean on the fitting answers' lengths, under the
shifts of ``studies/shift.py``: how much of a blocked answer each rule reads, and what it
costs in coverage.

    python -m studies.margin_rules               # every shift and rule (a minute or two)
    python -m studies.margin_rules --docs-only   # the page from the saved JSON

Writes ``benchmarks/results/margin_rules.json`` and ``docs/results/margin_rules.md``.

Data, shifts, risks and the evaluation are :mod:`studies.shift`'s: the committed
Qwen2.5-Coder-1.5B answers (500 MBPP, 600 GSM8K, a 512-token limit); per shift the default
certificate fitted on the source (``fit_certificate(source, FitOptions(fit_fraction=1.0,
max_tokens=512))``), whose statistic is held fixed; only its early-block margins change.
Each rule reads the correct source answers' replayed scores (the statistic without
margins, :func:`guardrail.fitting.replay_fitted`) and gives a margin for each of the 512
positions; the target answers are replayed once and the margins applied to the replay
(:func:`guardrail.fitting.with_margins`, exactly what the monitor streams). Tau is
calibrated on the target by :func:`guardrail.evaluate.evaluate_methods` (50 random splits
seeded 7, half calibration and half test, Learn-then-Test at delta 0.05), which replays
every rule's early blocks: coverage (mean share of the test halves shown, a refusal
counted as 0%) and the share of a blocked answer read before it was stopped (mean over
the blocked test answers of the splits that calibrated).

The rules (:data:`RULES`; the rise of an answer from position ``t`` is its final score
minus its score after ``t`` tokens; ``share`` is ``FitOptions().early_block_share``, 0.9,
and the quantile ``FitOptions().early_block``, 0.99):

- *per position, flat tail*: per position the quantile of the rises where at least 20
  answers reach, widened by one factor until ``share`` of the answers never rise past it;
  past those positions the largest margin of their last half
  (:func:`guardrail.fitting.margins_from_scores` with ``positions``).
- *per position, sqrt tail* (``fit``'s default): the same per position; past them
  ``c / sqrt(t)`` (at most the flat tail), ``c`` the ``share`` quantile over the answers
  of their largest ``rise(j) * sqrt(j)`` over the first half of their positions
  (``margins_from_scores(..., tail="sqrt")``).
- *envelope c/sqrt(t)*: ``c / sqrt(t)`` at every position, ``c`` the ``share`` quantile
  over the answers of their largest ``rise(t) * sqrt(t)``, so that ``share`` of them never
  rise past it (a running mean's typical rise over ``m`` more tokens,
  ``sigma sqrt(m) / (t + m)``, is largest at ``m = t``: ``sigma / (2 sqrt(t))``).
- *envelope c/t*: the same with ``t`` for ``sqrt(t)`` (a running mean's largest rise over any
  continuation falls as ``1 / t``).
- *constant*: one margin for every position, the ``share`` quantile of the answers'
  largest rise.
- *per-token spread*: ``z sigma / (2 sqrt(t))``, ``sigma`` the standard deviation over the
  answers' tokens of the per-token term a running mean of the score would add
  (``t s_t - (t - 1) s_(t-1)``), ``z`` the normal quantile of 0.99.
- *exact only*: no margins (the exact early blocks of the score's bounds).

Two floors per row, both at the tau showing the default rule's mean coverage on all the
target answers: *floor*, the least mean share any margins could read (a block needs the
score below tau: :func:`studies.shift.read_floor`); *lossless floor*, the least any
margins could read that block none of the correct answers shown at that tau (margins at
least ``tau`` minus each such answer's score at every position; read with the target's
labels, in hindsight: no rule fitted elsewhere can do better without losing a correct
answer). The criterion of ``studies/shift.py``: a mean share of at most 50%.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from statistics import NormalDist
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from guardrail import StreamPolicy
from guardrail.evaluate import MethodScores, evaluate_methods
from guardrail.fitting import (
    FitOptions,
    FittedPath,
    critical_score,
    fit_certificate,
    margins_from_scores,
    replay_fitted,
    stop_at,
    with_margins,
)
from guardrail.traces import Trace
from studies import shift
from studies.tables import page_main

SAVED = shift.ROOT / "benchmarks" / "results" / "margin_rules.json"
PAGE = shift.ROOT / "docs" / "results" / "margin_rules.md"
COMMAND = "python -m studies.margin_rules"
LIMIT = shift.MAX_TOKENS


def _given(value: float | None, name: str) -> float:
    if value is None:
        raise SystemExit(f"FitOptions().{name} is None: the study widens fit's default margins")
    return value


QUANTILE = _given(FitOptions().early_block, "early_block")
SHARE = _given(FitOptions().early_block_share, "early_block_share")
REFERENCE = "per position, sqrt tail"
"""The rule ``fit`` uses by default: the reference of the floors and of the coverage cost."""

FloatArray = npt.NDArray[np.float64]
Margins = tuple[float, ...]
MarginTail = Literal["flat", "sqrt"]


def _rises(s: FloatArray) -> FloatArray:
    return np.asarray(s[-1] - s, dtype=np.float64)


def _positions(n: int) -> FloatArray:
    return np.arange(1, n + 1, dtype=np.float64)


def per_position(right: Sequence[FloatArray], tail: MarginTail) -> Margins:
    """``fit``'s margins (quantile and share its defaults) to :data:`LIMIT` positions, past
    the fitted ones the ``tail`` rule of :func:`guardrail.fitting.margins_from_scores`."""
    return margins_from_scores(right, QUANTILE, share=SHARE, positions=LIMIT, tail=tail)


def envelope(right: Sequence[FloatArray], power: float) -> Margins:
    """``c / t**power`` at each of :data:`LIMIT` positions, ``c`` the :data:`SHARE`
    quantile over the answers of their largest ``rise(t) * t**power``."""
    worst = [float(np.max(_rises(s) * _positions(s.size) ** power)) for s in right if s.size]
    c = max(0.0, float(np.quantile(worst, SHARE)))
    return tuple(float(m) for m in c / _positions(LIMIT) ** power)


def constant(right: Sequence[FloatArray]) -> Margins:
    """One margin at every position: the :data:`SHARE` quantile of the largest rises."""
    worst = [float(np.max(_rises(s))) for s in right if s.size]
    return (max(0.0, float(np.quantile(worst, SHARE))),) * LIMIT


def spread(right: Sequence[FloatArray]) -> Margins:
    """``z sigma / (2 sqrt(t))``: ``sigma`` of the per-token terms ``t s_t - (t-1) s_(t-1)``
    over every answer's tokens, ``z`` the normal quantile of :data:`QUANTILE`."""
    terms = [np.diff(_positions(s.size) * s) for s in right if s.size > 1]
    sigma = float(np.std(np.concatenate(terms)))
    z = NormalDist().inv_cdf(QUANTILE)
    return tuple(float(m) for m in z * sigma / (2.0 * np.sqrt(_positions(LIMIT))))


RULES: dict[str, Callable[[Sequence[FloatArray]], Margins]] = {
    "per position, flat tail": lambda right: per_position(right, "flat"),
    REFERENCE: lambda right: per_position(right, "sqrt"),
    "envelope c/sqrt(t)": lambda right: envelope(right, 0.5),
    "envelope c/t": lambda right: envelope(right, 1.0),
    "constant": constant,
    "per-token spread": spread,
    "exact only": lambda right: (),
}
"""Each rule: the correct source answers' replayed scores in, a margin per position out."""


def lossless_margins(
    paths: Sequence[FittedPath], correct: npt.NDArray[np.bool_], policy: StreamPolicy,
    tau: float,
) -> Margins:  # fmt: skip
    """The least margins (to :data:`LIMIT` positions) that block none of the correct answers
    shown at ``tau`` (``paths``: the replays without margins): at each position, the most
    by which such an answer's score there falls short of ``tau`` (0 where none does)."""
    need = np.zeros(LIMIT)
    for p, right in zip(paths, correct, strict=True):
        if right and p.scores.size and critical_score(p, policy) >= tau:
            k = min(p.scores.size, LIMIT)
            need[:k] = np.maximum(need[:k], tau - p.scores[:k])
    return tuple(float(m) for m in need)


def lossless_floor(
    paths: Sequence[FittedPath], correct: npt.NDArray[np.bool_], policy: StreamPolicy,
    tau: float,
) -> float | None:  # fmt: skip
    """The least mean share of a blocked answer that margins blocking none of the correct
    answers shown at ``tau`` could read: that of :func:`lossless_margins` (a larger margin
    blocks no sooner), over the answers they do not show. ``None`` where none is blocked."""
    least = lossless_margins(paths, correct, policy, tau)
    gated = [with_margins(p, least) for p in paths if p.scores.size]
    reads = [stop_at(p, policy, tau) / p.scores.size
             for p in gated if critical_score(p, policy) < tau]  # fmt: skip
    return float(np.mean(reads)) if reads else None


def measure(
    kind: str, name: str, task: str, source: list[Trace], target: list[Trace],
    progress: Callable[[str], object],
) -> dict[str, Any]:  # fmt: skip
    """Every rule on one shift: its margins from the correct source answers, its coverage
    and blocked share on the target at each risk, and the floors."""
    progress(f"{name}: fit")
    cert, _ = fit_certificate(source, FitOptions(fit_fraction=1.0, max_tokens=LIMIT))
    assert cert.statistic is not None
    stat = replace(cert.statistic, block_margins=())
    skeleton, policy = cert.replay_skeleton(), cert.policy
    progress(f"{name}: replay")
    right = [replay_fitted(stat, t, skeleton=skeleton, max_tokens=LIMIT).scores
             for t in source if t.correct and t.n_tokens]  # fmt: skip
    plain = [replay_fitted(stat, t, skeleton=skeleton, max_tokens=LIMIT) for t in target]
    ok = np.array([bool(t.correct) for t in target])
    methods, margins = [], {}
    for rule, make in RULES.items():
        margins[rule] = make(right)
        paths = [with_margins(p, margins[rule]) for p in plain] if margins[rule] else plain
        crit = np.array([critical_score(p, policy) for p in paths])
        final = np.array([p.final for p in paths])
        methods.append(MethodScores(rule, crit, final, policy=policy, paths=paths))
    progress(f"{name}: coverage")
    risks: dict[str, Any] = {}
    for r in shift.RISKS[task]:
        ev = evaluate_methods(methods, ok, risk=r, delta=shift.DELTA, splits=shift.SPLITS,
                              seed=shift.SPLIT_SEED)  # fmt: skip
        rules = {m.name: {"coverage": ev[m.name]["coverage_mean"],
                          "refused": ev[m.name]["refused"],
                          "blocked_read": _share(ev[m.name]["blocked_read_mean"]),
                          "blocked_read_median": _share(ev[m.name]["blocked_read_median"])}
                 for m in methods}  # fmt: skip
        reference = methods[list(RULES).index(REFERENCE)]
        cover = rules[REFERENCE]["coverage"]
        floor = lossless = None
        if cover > 0.0:
            floor = shift.read_floor(reference, cover)
            tau = float(np.quantile(reference.decision, 1.0 - cover))
            lossless = lossless_floor(plain, ok, policy, tau)
        risks[f"{r:g}"] = {"rules": rules, "floor": floor, "lossless_floor": lossless}
    fitted = len(margins_from_scores(right, QUANTILE))
    return {
        "kind": kind, "name": name, "target_task": task,
        "n_source": len(source), "n_target": len(target),
        "source_tokens_median": float(np.median([t.n_tokens for t in source])),
        "target_tokens_median": float(np.median([t.n_tokens for t in target])),
        "fitted_positions": fitted,
        "margins_at": {rule: {str(t): round(m[t - 1], 4) for t in AT} if m else {}
                       for rule, m in margins.items()},
        "risks": risks,
    }  # fmt: skip


AT = (1, 10, 30, 100, 300)
"""The positions whose margins the page shows."""


def _share(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def run() -> dict[str, Any]:
    from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs in the lock

    data = {task: shift.read(path) for task, path in shift.TRACES.items()}
    todo = shift.shifts(data)
    rows = []
    with tqdm(total=len(todo), unit="shift", disable=not sys.stderr.isatty()) as bar:
        for kind, name, task, source, target in todo:
            rows.append(measure(kind, name, task, source, target, bar.set_description))
            bar.update()
    return {
        "generated_by": COMMAND, "rules": list(RULES), "reference": REFERENCE,
        "quantile": QUANTILE, "share": SHARE, "max_tokens": LIMIT, "splits": shift.SPLITS,
        "split_seed": shift.SPLIT_SEED, "delta": shift.DELTA,
        "blocked_read_limit": shift.BLOCKED_READ_LIMIT, "shifts": rows,
    }  # fmt: skip


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _cell(entry: dict[str, Any], limit: float) -> str:
    read = entry["blocked_read"]
    shown = f"{100 * read:.0f}%" if read is not None else "-"
    if read is not None and read > limit:
        shown = f"**{shown}**"
    return f"{shown} ({100 * entry['coverage']:.1f}%)"


def met(saved: dict[str, Any], rule: str) -> tuple[int, int]:
    """``(met, open)``: the cells (shift and risk, something blocked) whose lossless floor is
    within the limit, and how many of them ``rule`` meets."""
    limit, hit, total = saved["blocked_read_limit"], 0, 0
    for s in saved["shifts"]:
        for cell in s["risks"].values():
            lossless, read = cell["lossless_floor"], cell["rules"][rule]["blocked_read"]
            if lossless is None or lossless > limit or read is None:
                continue
            total += 1
            hit += read <= limit
    return hit, total


def render(saved: dict[str, Any]) -> str:
    rules, limit = saved["rules"], saved["blocked_read_limit"]
    lines = [
        f"<!-- generated by `{COMMAND}` (or `--docs-only` from its JSON); do not edit -->",
        "",
        "Share of a blocked answer's tokens read before it was stopped: mean over the "
        "blocked test answers of the splits that calibrated (coverage at the target risk in "
        f"brackets; **bold** above {100 * limit:.0f}%; - where nothing was blocked). Floors "
        f"at the tau showing the coverage of *{saved['reference']}* on all the target "
        "answers: the least any margins could read, and the least any margins that block no "
        "correct answer shown there could read (in hindsight, with the target's labels).",
        "",
        "| fitted on -> tested on | risk | " + " | ".join(rules)
        + " | floor | lossless floor |",
        "|---|---:|" + "---:|" * (len(rules) + 2),
    ]  # fmt: skip
    for s in saved["shifts"]:
        for r, cell in s["risks"].items():
            cells = " | ".join(_cell(cell["rules"][rule], limit) for rule in rules)
            lines.append(f"| {s['name']} | {r} | {cells} | {_pct(cell['floor'])} "
                         f"| {_pct(cell['lossless_floor'])} |")  # fmt: skip
    lines += [
        "",
        f"Cells within {100 * limit:.0f}% (of those whose lossless floor allows it, "
        "something blocked), and the coverage in-domain against "
        f"*{saved['reference']}* (points, per risk):",
        "",
        "| rule | cells within | " + " | ".join(
            f"{s['name']} at {r}" for s in saved["shifts"] if s["kind"] == "in-domain"
            for r in s["risks"]) + " |",
        "|---|---:|" + "---:|" * sum(
            len(s["risks"]) for s in saved["shifts"] if s["kind"] == "in-domain"),
    ]  # fmt: skip
    for rule in rules:
        hit, total = met(saved, rule)
        diffs = [
            100 * (c["rules"][rule]["coverage"] - c["rules"][saved["reference"]]["coverage"])
            for s in saved["shifts"] if s["kind"] == "in-domain" for c in s["risks"].values()
        ]  # fmt: skip
        lines.append(f"| {rule} | {hit} of {total} | "
                     + " | ".join(f"{d:+.1f}" for d in diffs) + " |")  # fmt: skip
    lines += [
        "",
        "Margins at a few positions (score units), fitted on each source; the fitted "
        "positions are those at least 20 correct source answers reach:",
        "",
        "| fitted on | fitted positions | rule | " + " | ".join(f"t = {t}" for t in AT) + " |",
        "|---|---:|---|" + "---:|" * len(AT),
    ]  # fmt: skip
    for s in saved["shifts"]:
        for rule in rules:
            at = s["margins_at"][rule]
            if at:
                lines.append(f"| {s['name']} | {s['fitted_positions']} | {rule} | "
                             + " | ".join(f"{at[str(t)]:.2f}" for t in AT) + " |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    page_main(argv, command=COMMAND, doc=__doc__, saved=SAVED, page=PAGE,
              run=lambda _args: run(), render=render)  # fmt: skip


if __name__ == "__main__":
    main()
