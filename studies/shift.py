"""The default certificate under a shift: fitted on one set of answers, ranked and
calibrated on another, against every single score on the same target.

    python -m studies.shift               # every shift (a few minutes)
    python -m studies.shift --docs-only   # the page from the saved JSON

Writes ``benchmarks/results/shift.json`` and ``docs/results/shift.md``.

Data: the answers of Qwen2.5-Coder-1.5B-Instruct, the committed 500 MBPP
(``benchmarks/traces/mbpp_qwen25coder.jsonl.xz``) and 600 GSM8K
(``benchmarks/traces/gsm8k_qwen25coder/``), generated with a 512-token limit, and for
the short-answer shifts the shared TriviaQA ones.

Shifts (source -> target):

- *in-domain*, for reference: each task's answers split in halves by a permutation
  seeded 0 (the held-out split of every benchmark here); fit on the first, test on the
  second.
- *answer length*: each task's answers ordered by their number of tokens (ties broken by
  a permutation seeded 0) and cut in the middle; fit on the shorter half and test on the
  longer, and the reverse (:func:`length_halves`).
- *task family*: fit on all of one task's answers, test on all of the other's (MBPP ->
  GSM8K, GSM8K -> MBPP).
- *short answers to long*: fit on the same model's 2,000 answers to TriviaQA questions
  (``../shared/data/traces/triviaqa_qwen25coder.jsonl``, a few words each, 64-token
  limit, no code or numbers scope), test on all of each long-answer task's (TriviaQA ->
  MBPP, TriviaQA -> GSM8K): a certificate fitted where labels are cheap, run where
  answers are long. Those traces are not in the repository; the study needs them
  (``--docs-only`` does not).
- *task source*: fit on all the MBPP answers, test on the same model's answers to
  HumanEval's 164 tasks (``benchmarks/traces/humaneval_qwen25coder/``, made from
  ``python -m studies.humaneval_tasks``' rows): code tasks written by other people, a
  signature and docstring to complete, answers a few times as long.
- *prompt style*: the same model asked, for the first MBPP tasks, for documented code
  (type hints, a docstring, a comment on each step) instead of the bare code block
  (``benchmarks/traces/mbpp_qwen25coder_documented/``, about ten times as long); fit on
  the plain answers to the other MBPP tasks, test on the documented ones. Likewise, where
  its traces are there, GSM8K's first questions asked to be brief
  (``benchmarks/traces/gsm8k_qwen25coder_concise/``), fitted on the step-by-step answers
  to the other questions (:data:`STYLES`).

A second fitted row, ``certificate (unclamped features)``, is the default fit with
``FitOptions(clamp_features=False)``: its answer-level features are not held to the
range they span on the source answers, as every fit was before clamps became the
default (:attr:`guardrail.fitting.FittedStatistic.clamps`). A third,
``certificate (length-free features)``, is the same fit with ``FitOptions(features=...)``
restricted to per-token means, rates, minima and maxima (:data:`VARIANTS`): the
candidate for a statistic that does not lean on features growing with the answer's
length. Both are measured here, not defaults.

A last fitted row, ``certificate (flat-tail margins)``, is the default certificate with
``FitOptions(early_block_tail="flat")`` (:data:`MARGIN_VARIANTS`): the same statistic,
whose early-block margins carry their last half's largest flat to the token limit past
the positions the source answers reach, instead of the default's fall as
``c / sqrt(t)``. It differs only in when it blocks, so it is in the coverage and
read-share tables only (``python -m studies.margin_rules`` compares more margin rules).

Per shift, on the target answers: the default certificate fitted on the source
(``fit_certificate(source, FitOptions(fit_fraction=1.0, max_tokens=512))``: every default
of ``liftguard fit --fit-fraction 1``, the token limit the answers were generated with),
replayed through its monitor (:func:`guardrail.evaluate.fitted_method`), and every single
score of :data:`guardrail.traces.BASELINES` on the whole answer. AUROC of each: its final
score against the labels, with a paired percentile bootstrap 95% interval (1,000
resamples of the target answers, the same for every score) and, for the certificate,
the interval of its difference from the best single score (the best by AUROC on the
target, chosen with the target's labels). Coverage at the target risk (0.3, and also
0.2 on a GSM8K target, where the error rate leaves room): tau calibrated anew on the
target by :func:`guardrail.evaluate.evaluate_methods` (50 random splits seeded 7, half
calibration and half test, the Learn-then-Test fixed sequence at delta 0.05; a refusal
counts as 0% shown), the mean share of the test halves shown; and, for each fitted row,
how much of a blocked answer the monitor read before it stopped it (the share of its
tokens, mean and median over the test answers not shown in the splits that calibrated:
what a passthrough user sees of it), beside the least any margins could (:func:`read_floor`).

*In expectation*: the same splits with tau from the conformal threshold
(``procedure="conformal"``, the promise on the expected share of wrong answers among
those shown) for the fitted rows and every single score: the mean share shown and the
share of wrong among shown averaged over every split (``wrong_share_mean``), the
quantity that promise bounds.

*A user's pick* (the peer a certificate has to beat: what a user would deploy by hand
instead): the single score with the best AUROC on the source answers
(:func:`source_pick`), and per split the one with the best AUROC on the calibration half,
calibrated there by the same fixed sequence (:func:`calibration_pick`).

*Margins from the target's traffic* (``liftguard calibrate --certificate ... --margins-from
TRAFFIC``, the remedy the guide gives for answers unlike the fitting ones): the target's
answers are split in halves by a permutation seeded :data:`TRAFFIC_SEED`; on each half,
the default certificate as fitted, beside the same certificate with its early-block
margins set from every answer of the *other* half, labels unread
(:func:`guardrail.fitting.block_margins` with ``answers="all"`` at
:data:`TRAFFIC_QUANTILE`, ``--margins-from``'s default, to the positions those answers
reach): the traffic a deployment has seen before it calibrates. Both are calibrated and
tested on that half as above (50 splits of it); the table gives the coverage and the
share of a blocked answer read, per half.

*The ranking warning* (``liftguard calibrate --certificate`` warns when a single score ranks
the calibration answers better than the certificate's statistic beyond what resampling
explains: :func:`guardrail.evaluate.ranking_check`): over :data:`SPLITS` random halves of
the target (seeded :data:`WARNING_SEED`), whether the check on one half (what a user
calibrating on it would read) warns, and the certificate's AUROC minus that of the single
score the check named on all the target's answers, warned or not: a warning is right where
that difference is below 0 (:func:`warnings_on_halves`). All the answers, the checked half
included, give the best estimate of the difference on answers like these; the other half
alone would count against the warning, since two halves of one set are complements (a
half where the certificate looks worse leaves one where it looks better). Beside it, the
same for the point rule it replaced (warn when the best single score's AUROC is above the
statistic's by over 0.01).

The criterion (issue 50's "done when"), per fitted row: its AUROC at least the best single
score's minus 0.01, and its coverage at each target risk at least the best single
score's (the single score that covers the most there) minus 1 point; and a blocked answer
read for at most half its tokens (:data:`BLOCKED_READ_LIMIT`) at each target risk.
"""

from __future__ import annotations

import itertools
import lzma
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from guardrail import Certificate, InsufficientDataError, calibrate
from guardrail.evaluate import (
    MethodScores,
    auroc,
    evaluate_methods,
    fitted_method,
    ranking_check,
)
from guardrail.fitting import Feature, FitOptions, block_margins, fit_certificate
from guardrail.traces import BASELINES, Trace, baseline_score, parse_trace_lines, read_traces
from studies.tables import page_main

ROOT = Path(__file__).resolve().parents[1]
SAVED = ROOT / "benchmarks" / "results" / "shift.json"
PAGE = ROOT / "docs" / "results" / "shift.md"
COMMAND = "python -m studies.shift"
TRACES = {
    "MBPP": ROOT / "benchmarks" / "traces" / "mbpp_qwen25coder.jsonl.xz",
    "GSM8K": ROOT / "benchmarks" / "traces" / "gsm8k_qwen25coder",
}
SHORT = ROOT.parent / "shared" / "data" / "traces" / "triviaqa_qwen25coder.jsonl"
"""The same model's answers to TriviaQA questions: the short-answer source."""


class Style(NamedTuple):
    """A prompt-style target: what the source's answers to the other items are called, the
    style, the target task's name (a key of :data:`RISKS`) and the traces' folder."""

    items: str
    style: str
    target_task: str
    folder: Path


STYLES = {
    "MBPP": Style("other tasks", "documented code", "MBPP, documented",
                  ROOT / "benchmarks" / "traces" / "mbpp_qwen25coder_documented"),
    "GSM8K": Style("other questions", "concise", "GSM8K, concise",
                   ROOT / "benchmarks" / "traces" / "gsm8k_qwen25coder_concise"),
}  # fmt: skip
"""The prompt-style targets per task: the same model's answers to the first MBPP tasks asked
for documented code, and to the first GSM8K questions asked to be brief."""
OTHER_CODE = ROOT / "benchmarks" / "traces" / "humaneval_qwen25coder"
"""The same model's answers to HumanEval's tasks: the task-source target."""
MAX_TOKENS = 512
"""The token limit both sets of answers were generated with."""
SEED, SPLIT_SEED, SPLITS, DELTA, BOOTSTRAP = 0, 7, 50, 0.05, 1000
RISKS = {
    "MBPP": (0.3,),
    "GSM8K": (0.2, 0.3),
    "MBPP, documented": (0.3, 0.4),
    "HumanEval": (0.3, 0.4),
    "GSM8K, concise": (0.5, 0.6),
}
"""The target risks per target task (the documented code's and HumanEval's also 0.4: with
half of their 160-odd answers to calibrate on, 0.3 leaves little room; the concise GSM8K
answers are wrong on four in five, so 0.5 and 0.6)."""
AUROC_SLACK, COVERAGE_SLACK = 0.01, 0.01
BLOCKED_READ_LIMIT = 0.5
"""The criterion on early blocks: a blocked answer read for at most this share of its
tokens (mean over the blocked test answers of the splits that calibrated)."""
CERTIFICATE = "certificate"
UNCLAMPED = "certificate (unclamped features)"
LENGTH_FREE = "certificate (length-free features)"
_NINE = repr(math.log(0.9))
VARIANTS: dict[str, dict[str, Any]] = {
    CERTIFICATE: {},
    UNCLAMPED: {"clamp_features": False},
    LENGTH_FREE: {
        "features": [
            "logprob.min",
            f"logprob.frac_below@{_NINE}",
            "entropy.mean",
            "lift.min",
            "lift.max",
            "lift.mean",
            "code:logprob.mean",
            "number:logprob.mean",
        ]
    },
}
"""The fitted rows, each the :class:`~guardrail.fitting.FitOptions` it changes from the
default fit: the default (the ``lift`` preset and the scopes' log-likelihoods, each
feature held to its fitting range); the same unclamped; and the candidate that reads no
feature growing with the answer's length, the default's mapped one for one: each sum a
mean (``entropy.sum`` is dropped beside the ``entropy.mean`` already there; each scope's
``logprob.sum`` is that scope's mean, for both scopes whatever the source), the count
below log 0.9 the share below it, the length dropped; the minima and maxima kept."""
TRAFFIC = "margins from the other half's answers"
TRAFFIC_QUANTILE = 0.95
"""``liftguard calibrate --margins-from``'s default quantile (``TRAFFIC_EARLY_BLOCK``: a
test keeps the two equal)."""
WARNING_SEED = 2
"""The permutations of the target that the ranking-warning rows split it by."""
WARNING_REPLICATES = 200
"""The bootstrap resamples of each half's ranking check (``calibrate`` draws 1,000)."""
TRAFFIC_SEED = 1
"""The permutation that splits a target in the halves of the traffic-margin rows."""
FLAT_TAIL = "certificate (flat-tail margins)"
MARGIN_VARIANTS: dict[str, Literal["flat", "sqrt"]] = {FLAT_TAIL: "flat"}
"""Fitted rows of the default features that differ from ``certificate`` in their
early-block margins only: ``FitOptions(early_block_tail=...)``."""

BoolArray = npt.NDArray[np.bool_]
Promise = Literal["fixed-sequence", "conformal"]
"""The calibration procedures the coverage tables compare: high probability, in expectation."""
IntArray = npt.NDArray[np.int64]


def read(path: Path) -> list[Trace]:
    """The labelled traces of an xz file, or of a folder of xz parts in name order."""
    parts = sorted(path.glob("*.jsonl.xz")) if path.is_dir() else [path]
    traces: list[Trace] = []
    for part in parts:
        with lzma.open(part, "rt", encoding="utf-8") as src:
            traces.extend(parse_trace_lines(src, source=str(part)))
    return traces


def random_halves(n: int, seed: int = SEED) -> tuple[IntArray, IntArray]:
    """Indices of two halves by a seeded permutation (the first ``n // 2`` of it, the
    rest), each in order."""
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[: n // 2]), np.sort(perm[n // 2 :])


def length_halves(lengths: Sequence[int], seed: int = SEED) -> tuple[IntArray, IntArray]:
    """Indices of the shorter and the longer half of answers of these lengths (ties
    broken by a seeded permutation), each in order: every answer of the longer half is
    at least as long as the shorter half's longest."""
    n = len(lengths)
    tie = np.random.default_rng(seed).permutation(n)
    order = np.lexsort((tie, np.asarray(lengths)))
    return np.sort(order[: n // 2]), np.sort(order[n // 2 :])


def shifts(
    data: dict[str, list[Trace]],
    short_answers: list[Trace] | None = None,
    styled: dict[str, list[Trace]] | None = None,
    other_code: list[Trace] | None = None,
) -> list[tuple[str, str, str, list[Trace], list[Trace]]]:
    """``(kind, name, target task, source, target)`` for every shift; with the
    ``short_answers`` (TriviaQA's), the shifts from them to each task too; with the
    ``styled`` answers per task (:data:`STYLES`), the shift to them from that task's answers
    to the other items; with ``other_code`` (HumanEval's), the shift to it from all the
    MBPP answers."""
    out = []
    for task, traces in data.items():
        a, b = random_halves(len(traces))
        out.append(("in-domain", f"{task}: half A -> half B", task,
                    [traces[i] for i in a], [traces[i] for i in b]))  # fmt: skip
    for task, traces in data.items():
        short, long = length_halves([t.n_tokens for t in traces])
        s, lg = [traces[i] for i in short], [traces[i] for i in long]
        out.append(("answer length", f"{task}: shorter half -> longer half", task, s, lg))
        out.append(("answer length", f"{task}: longer half -> shorter half", task, lg, s))
    (t1, x1), (t2, x2) = data.items()
    out.append(("task family", f"{t1} -> {t2}", t2, x1, x2))
    out.append(("task family", f"{t2} -> {t1}", t1, x2, x1))
    if short_answers is not None:
        for task, traces in data.items():
            out.append(("short answers to long", f"TriviaQA -> {task}", task, short_answers,
                        traces))  # fmt: skip
    for task, answers in (styled or {}).items():
        style = STYLES[task]
        asked = {t.id for t in answers}
        others = [t for t in data[task] if t.id not in asked]
        out.append(("prompt style", f"{task}, {style.items} -> {task}, {style.style}",
                    style.target_task, others, answers))  # fmt: skip
    if other_code is not None:
        out.append(("task source", "MBPP -> HumanEval", "HumanEval", data["MBPP"], other_code))
    return out


def single_scores(traces: Sequence[Trace]) -> list[MethodScores]:
    """Every single score of :data:`BASELINES` on the whole answer, decided at the end."""
    out = []
    for name in BASELINES:
        s = np.array([baseline_score(t, name) for t in traces])
        out.append(MethodScores(name, s, s))
    return out


def source_pick(source: Sequence[Trace]) -> str:
    """The single score a user without the target's labels would deploy: the best by AUROC
    on the fitting answers (the ones the certificate was fitted on)."""
    ok = np.array([bool(t.correct) for t in source])
    return max(BASELINES, key=lambda m: _ranked(auroc([baseline_score(t, m) for t in source], ok)))


def _ranked(auc: float) -> float:
    return -1.0 if math.isnan(auc) else auc  # one class: ranks last


def calibration_pick(
    singles: Sequence[MethodScores], fitted: Sequence[MethodScores], ok: BoolArray,
    risks: Sequence[float],
) -> dict[str, Any]:  # fmt: skip
    """The single score a user thresholding by hand would deploy with the labels the
    certificate calibrates on: per split (the :data:`SPLITS` halves seeded
    :data:`SPLIT_SEED` that :func:`guardrail.evaluate.evaluate_methods` draws), the single
    score with the best AUROC on the calibration half, its tau by the same fixed sequence on
    that half, its share of the test half shown (a refusal 0%); ``expectation``, the same
    with the conformal threshold. Also the AUROC on the test half of that pick and of each
    ``fitted`` row, mean over the splits. Picking and calibrating on the same labels
    carries no guarantee: it is the peer, not a method."""
    rng = np.random.default_rng(SPLIT_SEED)
    perms = [rng.permutation(ok.size) for _ in range(SPLITS)]
    n_cal = round(ok.size * 0.5)
    picked: dict[str, int] = {}
    auc_pick: list[float] = []
    auc_fitted: dict[str, list[float]] = {m.name: [] for m in fitted}
    procedures: tuple[Promise, ...] = ("fixed-sequence", "conformal")
    cover: dict[str, dict[str, list[float]]] = {
        p: {f"{r:g}": [] for r in risks} for p in procedures
    }
    refused = {p: dict.fromkeys(cover[p], 0) for p in procedures}
    for perm in perms:
        cal, test = perm[:n_cal], perm[n_cal:]
        best = max(singles, key=lambda m: _ranked(auroc(m.final[cal], ok[cal])))
        picked[best.name] = picked.get(best.name, 0) + 1
        auc_pick.append(auroc(best.final[test], ok[test]))
        for m in fitted:
            auc_fitted[m.name].append(auroc(m.final[test], ok[test]))
        for proc, r in itertools.product(procedures, risks):
            key = f"{r:g}"
            try:
                tau = calibrate(best.decision[cal], ok[cal], risk=r, delta=DELTA,
                                procedure=proc).tau  # fmt: skip
            except InsufficientDataError:
                refused[proc][key] += 1
                cover[proc][key].append(0.0)
                continue
            cover[proc][key].append(float(np.mean(best.decision[test] >= tau)))

    def mean(proc: Promise) -> dict[str, float]:
        return {r: float(np.mean(c)) for r, c in cover[proc].items()}

    return {
        "picked": dict(sorted(picked.items(), key=lambda kv: -kv[1])),
        "auroc": float(np.nanmean(auc_pick)),
        "fitted_auroc": {name: float(np.nanmean(a)) for name, a in auc_fitted.items()},
        "coverage": mean("fixed-sequence"), "refused": refused["fixed-sequence"],
        "expectation": {"coverage": mean("conformal"), "refused": refused["conformal"]},
    }  # fmt: skip


def bootstrap_auroc(
    finals: dict[str, npt.NDArray[np.float64]], ok: BoolArray, reference: str, other: str
) -> tuple[dict[str, list[float]], list[float]]:
    """Paired percentile 95% intervals of each score's AUROC, and of ``reference`` minus
    ``other``, over :data:`BOOTSTRAP` resamples of the answers (seeded)."""
    rng = np.random.default_rng(SEED)
    names = list(finals)
    auc = np.full((len(names), BOOTSTRAP), np.nan)
    for b in range(BOOTSTRAP):
        idx = rng.integers(0, ok.size, size=ok.size)
        for j, name in enumerate(names):
            auc[j, b] = auroc(finals[name][idx], ok[idx])

    def interval(values: npt.NDArray[np.float64]) -> list[float]:
        finite = values[np.isfinite(values)]
        return [float(v) for v in np.quantile(finite, [0.025, 0.975])]

    per = {name: interval(auc[j]) for j, name in enumerate(names)}
    diff = interval(auc[names.index(reference)] - auc[names.index(other)])
    return per, diff


def measure(
    kind: str, name: str, task: str, source: list[Trace], target: list[Trace],
    progress: Callable[[str], None],
) -> dict[str, Any]:  # fmt: skip
    ok = np.array([bool(t.correct) for t in target])
    fitted: list[MethodScores] = []
    default: Certificate | None = None
    for label, change in VARIANTS.items():
        progress(f"{name}: fit {label}")
        if "features" in change:
            change = {**change, "features": tuple(Feature.parse(f) for f in change["features"])}
        opts = FitOptions(fit_fraction=1.0, max_tokens=MAX_TOKENS, **change)
        cert, _ = fit_certificate(source, opts)
        default = cert if label == CERTIFICATE else default
        fitted.append(fitted_method(target, cert, label, max_tokens=MAX_TOKENS))
    for label, tail in MARGIN_VARIANTS.items():
        progress(f"{name}: fit {label}")
        opts = FitOptions(fit_fraction=1.0, max_tokens=MAX_TOKENS, early_block_tail=tail)
        cert, _ = fit_certificate(source, opts)
        fitted.append(fitted_method(target, cert, label, max_tokens=MAX_TOKENS))
    singles = single_scores(target)
    progress(f"{name}: coverage")
    risks = RISKS[task]
    cov = {f"{r:g}": evaluate_methods([*fitted, *singles], ok, risk=r, delta=DELTA,
                                      splits=SPLITS, seed=SPLIT_SEED)
           for r in risks}  # fmt: skip
    progress(f"{name}: coverage in expectation")
    variants = fitted[: len(VARIANTS)]
    expect = {f"{r:g}": evaluate_methods([*variants, *singles], ok, risk=r, delta=DELTA,
                                         splits=SPLITS, seed=SPLIT_SEED, procedure="conformal")
              for r in risks}  # fmt: skip
    aurocs = {m.name: auroc(m.final, ok) for m in [*fitted, *singles]}
    best = max(BASELINES, key=lambda s: aurocs[s])
    progress(f"{name}: bootstrap")
    finals = {m.name: m.final for m in [*fitted, *singles]}
    methods: dict[str, Any] = {}
    for m in [*fitted, *singles]:
        methods[m.name] = {
            "auroc": aurocs[m.name],
            "coverage": {r: cov[r][m.name]["coverage_mean"] for r in cov},
            "refused": {r: cov[r][m.name]["refused"] for r in cov},
            "blocked_read": {r: _share(cov[r][m.name]["blocked_read_mean"]) for r in cov},
            "blocked_read_median": {r: _share(cov[r][m.name]["blocked_read_median"]) for r in cov},
        }
    for m in [*variants, *singles]:
        methods[m.name]["expectation"] = {
            "coverage": {r: e[m.name]["coverage_mean"] for r, e in expect.items()},
            "wrong_among_shown": {r: e[m.name]["wrong_share_mean"] for r, e in expect.items()},
            "refused": {r: e[m.name]["refused"] for r, e in expect.items()},
        }  # fmt: skip
    for m in fitted:
        cover = methods[m.name]["coverage"]
        methods[m.name]["blocked_read_floor"] = {r: read_floor(m, cover[r]) for r in cov}
    for label in VARIANTS:
        per, diff = bootstrap_auroc(finals, ok, label, best)
        methods[label]["auroc_minus_best"] = diff
        for m_name, interval in per.items():
            methods[m_name]["auroc_interval"] = interval
    best_cov = {r: max(BASELINES, key=lambda s: methods[s]["coverage"][r]) for r in cov}
    for label in VARIANTS:
        entry = methods[label]
        auc_ok = entry["auroc"] >= aurocs[best] - AUROC_SLACK
        cov_ok = _covers(entry["coverage"], {r: methods[best_cov[r]]["coverage"][r] for r in cov})
        entry["meets"] = {"auroc": bool(auc_ok), "coverage": cov_ok}
    best_expect = {r: max(BASELINES, key=lambda s: methods[s]["expectation"]["coverage"][r])
                   for r in expect}  # fmt: skip
    progress(f"{name}: a user's pick")
    by_source = source_pick(source)
    by_hand = calibration_pick(singles, variants, ok, risks)
    for label in VARIANTS:
        entry = methods[label]
        mine = entry["expectation"]["coverage"]
        best_shown = {r: methods[best_expect[r]]["expectation"]["coverage"][r] for r in expect}
        entry["meets_expectation"] = _covers(mine, best_shown)
        entry["meets_pick_expectation"] = _covers(mine, by_hand["expectation"]["coverage"])
        auc_ok = by_hand["fitted_auroc"][label] >= by_hand["auroc"] - AUROC_SLACK
        cov_ok = _covers(entry["coverage"], by_hand["coverage"])
        entry["meets_pick"] = {"auroc": bool(auc_ok), "coverage": cov_ok}
    assert default is not None
    progress(f"{name}: ranking warning")
    warning = warnings_on_halves(fitted[0].final, target)
    progress(f"{name}: margins from traffic")
    traffic = traffic_margins(default, target, risks)
    return {
        "kind": kind, "name": name, "target_task": task, "traffic": traffic,
        "warning": warning,
        "n_source": len(source), "n_target": len(target), "target_correct": float(ok.mean()),
        "source_tokens_median": float(np.median([t.n_tokens for t in source])),
        "target_tokens_median": float(np.median([t.n_tokens for t in target])),
        "risks": [f"{r:g}" for r in risks],
        "best_auroc": best, "best_coverage": best_cov, "methods": methods,
        "source_pick": by_source, "calibration_pick": by_hand, "best_expectation": best_expect,
    }  # fmt: skip


def _covers(mine: dict[str, float], other: dict[str, float]) -> bool:
    """The coverage criterion: ``mine`` at least ``other`` minus :data:`COVERAGE_SLACK` at
    every risk (both keyed by risk)."""
    return all(mine[r] >= other[r] - COVERAGE_SLACK for r in other)


def traffic_margins(
    cert: Certificate, target: list[Trace], risks: Sequence[float]
) -> dict[str, Any]:
    """Per half of ``target``: the certificate as fitted, and with its early-block margins
    set from every answer of the other half (labels unread), each calibrated and tested
    on that half (module docstring)."""
    halves = random_halves(len(target), TRAFFIC_SEED)
    stat, skeleton = cert.statistic, cert.replay_skeleton()
    assert stat is not None, "a fitted certificate"
    out: dict[str, Any] = {}
    for half, (tested, seen) in zip("AB", (halves, halves[::-1]), strict=True):
        answers = [target[i] for i in tested]
        seen_answers = [target[i] for i in seen]
        margins = block_margins(stat, seen_answers, TRAFFIC_QUANTILE, skeleton=skeleton,
                                max_tokens=MAX_TOKENS, answers="all")  # fmt: skip
        other = replace(cert, statistic=replace(stat, block_margins=margins))
        methods = [fitted_method(answers, cert, CERTIFICATE, max_tokens=MAX_TOKENS),
                   fitted_method(answers, other, TRAFFIC, max_tokens=MAX_TOKENS)]  # fmt: skip
        ok = np.array([bool(t.correct) for t in answers])
        cov = {f"{r:g}": evaluate_methods(methods, ok, risk=r, delta=DELTA, splits=SPLITS,
                                          seed=SPLIT_SEED) for r in risks}  # fmt: skip
        out[half] = {
            "n": len(answers), "positions": len(margins),
            "methods": {m.name: {
                "coverage": {r: c[m.name]["coverage_mean"] for r, c in cov.items()},
                "refused": {r: c[m.name]["refused"] for r, c in cov.items()},
                "blocked_read": {r: _share(c[m.name]["blocked_read_mean"])
                                 for r, c in cov.items()},
                "blocked_read_median": {r: _share(c[m.name]["blocked_read_median"])
                                        for r, c in cov.items()},
            } for m in methods},
        }  # fmt: skip
    return out


def warnings_on_halves(final: npt.NDArray[np.float64], target: list[Trace]) -> dict[str, Any]:
    """Would ``calibrate --certificate`` on half of ``target`` warn that a single score ranks
    better, and does that score rank the whole target better? Over :data:`SPLITS`
    permutations seeded :data:`WARNING_SEED` (the first half is checked): how many warned,
    and the certificate's AUROC (``final``, aligned with ``target``) minus the named
    score's on all of ``target``, per split, warned and not."""
    ok = np.array([bool(t.correct) for t in target])
    own = auroc(final, ok)
    whole = {m.name: auroc(m.final, ok) for m in single_scores(target)}
    rng = np.random.default_rng(WARNING_SEED)
    gaps: dict[str, tuple[list[float], list[float]]] = {"interval": ([], []), "point": ([], [])}
    for _ in range(SPLITS):
        perm = rng.permutation(ok.size)
        cal = perm[: ok.size // 2]
        check = ranking_check(final[cal], [target[i] for i in cal],
                              replicates=WARNING_REPLICATES)  # fmt: skip
        if check is None:  # one class on the checked half
            continue
        gap = own - whole[check.best_single]
        point = check.statistic_auroc < check.single_auroc - AUROC_SLACK
        for rule, warns in (("interval", check.weaker), ("point", point)):
            gaps[rule][0 if warns else 1].append(gap)
    out: dict[str, Any] = {"splits": SPLITS}
    for rule, (warned, quiet) in gaps.items():
        out[rule] = {
            "warned": len(warned), "quiet": len(quiet), "right": sum(g < 0 for g in warned),
            "gap_warned": float(np.mean(warned)) if warned else None,
            "gap_quiet": float(np.mean(quiet)) if quiet else None,
        }  # fmt: skip
    return out


def read_floor(method: MethodScores, coverage: float) -> float | None:
    """The least mean share of a blocked answer any early-block margins (>= 0) could read,
    at the tau showing ``coverage`` of the target: a block needs the score below tau, so an
    answer not shown is read at least to its first token (from the policy's
    ``min_tokens``) whose score is (to its end if none); ``None`` where nothing is shown."""
    if coverage <= 0.0 or method.paths is None or method.policy is None:
        return None
    tau, start = float(np.quantile(method.decision, 1.0 - coverage)), method.policy.min_tokens - 1
    reads = []
    for path, shown in zip(method.paths, method.decision >= tau, strict=True):
        if not shown and path.scores.size:
            below = np.flatnonzero(path.scores[start:] < tau)
            reads.append((start + below[0] + 1) / path.scores.size if below.size else 1.0)
    return float(np.mean(reads)) if reads else None


def _share(x: float) -> float | None:
    return None if math.isnan(x) else float(x)  # JSON: None where nothing was blocked


def run() -> dict[str, Any]:
    from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs in the lock

    quiet = not sys.stderr.isatty()
    if not SHORT.exists():
        raise SystemExit(f"the short-answer shifts need the shared TriviaQA traces ({SHORT}); "
                         "--docs-only rewrites the page from the saved run")  # fmt: skip
    data = {task: read(path) for task, path in TRACES.items()}
    styled = {task: read(s.folder) for task, s in STYLES.items() if s.folder.exists()}
    todo = shifts(data, read_traces(SHORT), styled,
                  read(OTHER_CODE) if OTHER_CODE.exists() else None)  # fmt: skip
    rows = []
    with tqdm(total=len(todo), unit="shift", disable=quiet) as bar:
        for kind, name, task, source, target in todo:
            rows.append(measure(kind, name, task, source, target, bar.set_description))
            bar.update()
    return {
        "generated_by": COMMAND, "variants": VARIANTS,
        "margin_variants": dict(MARGIN_VARIANTS),
        "baselines": list(BASELINES), "splits": SPLITS, "split_seed": SPLIT_SEED,
        "delta": DELTA, "bootstrap": BOOTSTRAP, "max_tokens": MAX_TOKENS,
        "auroc_slack": AUROC_SLACK, "coverage_slack": COVERAGE_SLACK,
        "blocked_read_limit": BLOCKED_READ_LIMIT, "traffic_quantile": TRAFFIC_QUANTILE,
        "traffic_seed": TRAFFIC_SEED, "warning_seed": WARNING_SEED, "shifts": rows,
    }  # fmt: skip


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _auc(entry: dict[str, Any]) -> str:
    lo, hi = entry["auroc_interval"]
    return f"{entry['auroc']:.3f} ({lo:.2f}-{hi:.2f})"


def _yes(flag: bool) -> str:
    return "yes" if flag else "**no**"


def render(saved: dict[str, Any]) -> str:
    variants = list(saved["variants"])
    rows = [*variants, *saved["margin_variants"]]  # the coverage and read-share columns
    lines = [
        f"<!-- generated by `{COMMAND}` (or `--docs-only` from its JSON); do not edit -->",
        "",
        "| shift | fitted on -> tested on | answers (tested, correct) "
        "| median tokens (fit -> test) | fitted | AUROC (95%) | best single score "
        "| AUROC (95%) | difference (95%) | meets AUROC | meets coverage |",
        "|---|---|---:|---:|---|---:|---|---:|---:|---|---|",
    ]
    for s in saved["shifts"]:
        best = s["methods"][s["best_auroc"]]
        for v in variants:
            e = s["methods"][v]
            lo, hi = e["auroc_minus_best"]
            lines.append(
                f"| {s['kind']} | {s['name']} | {s['n_target']} ({_pct(s['target_correct'])}) "
                f"| {s['source_tokens_median']:g} -> {s['target_tokens_median']:g} | {v} "
                f"| {_auc(e)} | `{s['best_auroc']}` | {_auc(best)} "
                f"| {e['auroc'] - best['auroc']:+.3f} ({lo:+.2f} to {hi:+.2f}) "
                f"| {_yes(e['meets']['auroc'])} | {_yes(e['meets']['coverage'])} |"
            )
    lines += [
        "",
        f"Coverage at the target risk, tau calibrated on the target ({saved['splits']} "
        "splits, half calibration and half test; mean share of the test half shown, a "
        "refusal counted as 0%; refused splits in brackets):",
        "",
        "| fitted on -> tested on | risk | " + " | ".join(rows)
        + " | best single score | its coverage |",
        "|---|---:|" + "---:|" * len(rows) + "---|---:|",
    ]  # fmt: skip
    for s in saved["shifts"]:
        for r in s["risks"]:
            cells = " | ".join(
                f"{_pct(s['methods'][v]['coverage'][r])} ({s['methods'][v]['refused'][r]})"
                for v in rows
            )
            b = s["best_coverage"][r]
            be = s["methods"][b]
            lines.append(f"| {s['name']} | {r} | {cells} | `{b}` "
                         f"| {_pct(be['coverage'][r])} ({be['refused'][r]}) |")  # fmt: skip
    lines += _expectation_lines(saved)
    lines += _pick_lines(saved)
    lines += _blocked_lines(saved, rows)
    lines += _traffic_lines(saved)
    lines += _warning_lines(saved)
    lines += [
        "",
        "AUROC on the target of every score (95% bootstrap interval):",
        "",
        "| score | " + " | ".join(s["name"] for s in saved["shifts"]) + " |",
        "|---|" + "---:|" * len(saved["shifts"]),
    ]
    for m in [*variants, *saved["baselines"]]:
        cells = " | ".join(_auc(s["methods"][m]) for s in saved["shifts"])
        lines.append(f"| `{m}` | {cells} |" if m in saved["baselines"] else f"| {m} | {cells} |")
    return "\n".join(lines) + "\n"


def _expectation_lines(saved: dict[str, Any]) -> list[str]:
    """Coverage with tau from the conformal threshold (the promise in expectation)."""
    if not all("best_expectation" in s for s in saved["shifts"]):
        return []
    variants = list(saved["variants"])
    lines = [
        "",
        "The same splits with the promise in expectation (`--procedure conformal`: the "
        "expected share of wrong answers among those shown at most the risk, over the "
        "calibration draw and the answers, where the table above holds with probability "
        f"{1 - saved['delta']:g} over the calibration draw): mean share of the test half "
        "shown, and in brackets the share of wrong answers among those shown (mean over "
        "every split, 0 where one shows nothing: the quantity the promise bounds, so near the "
        "risk or below where the target's answers are exchangeable); "
        "*meets*: the certificate's coverage at least the best single score's minus one "
        "point at every risk; then the calibration half's pick (the table after this one) "
        "calibrated the same way, and whether the certificate meets that.",
        "",
        "| fitted on -> tested on | risk | " + " | ".join(variants)
        + " | best single score | its coverage | meets | calibration half's pick | meets |",
        "|---|---:|" + "---:|" * len(variants) + "---|---:|---|---:|---|",
    ]  # fmt: skip

    def cell(e: dict[str, Any], r: str) -> str:
        return f"{_pct(e['coverage'][r])} ({100 * e['wrong_among_shown'][r]:.0f}%)"

    for s in saved["shifts"]:
        for r in s["risks"]:
            cells = " | ".join(cell(s["methods"][v]["expectation"], r) for v in variants)
            b = s["best_expectation"][r]
            cert = s["methods"][CERTIFICATE]
            pick = s["calibration_pick"]["expectation"]
            lines.append(f"| {s['name']} | {r} | {cells} | `{b}` "
                         f"| {cell(s['methods'][b]['expectation'], r)} "
                         f"| {_yes(cert['meets_expectation'])} | {_pct(pick['coverage'][r])} "
                         f"| {_yes(cert['meets_pick_expectation'])} |")  # fmt: skip
    return lines


def _pick_lines(saved: dict[str, Any]) -> list[str]:
    """The certificate against the single score a user would pick by hand: by the fitting
    answers' labels, or per split by the calibration half's (:func:`calibration_pick`)."""
    if not all("calibration_pick" in s for s in saved["shifts"]):
        return []
    variants = list(saved["variants"])
    lines = [
        "",
        "Against the single score a user would pick by hand instead, without the target's "
        "labels beyond those calibration has: *fitting answers' pick*, the best single score "
        "by AUROC on the answers the certificate was fitted on (its AUROC on the target); "
        "*calibration half's pick*, per split the best single score by AUROC on the "
        "calibration half, calibrated on that half by the same fixed sequence (picking and "
        "calibrating on the same labels carries no guarantee: the peer, not a method) and "
        "tested on the other: the score it picked most often (of the splits), its AUROC and "
        "the certificate's on the test halves (mean over the splits), and the coverage of "
        "each at each risk (refused splits in brackets). *Meets*: the certificate's test-half "
        "AUROC at least the pick's minus 0.01, and its coverage at each risk at least the "
        "pick's minus one point.",
        "",
        "| fitted on -> tested on | fitting answers' pick | its AUROC | certificate's AUROC "
        "| calibration half's pick | its AUROC (test halves) | certificate's (test halves) "
        "| risk: certificate shows / the pick shows | meets AUROC | meets coverage |",
        "|---|---|---:|---:|---|---:|---:|---|---|---|",
    ]  # fmt: skip
    met = dict.fromkeys(variants, 0)
    for s in saved["shifts"]:
        pick, cert = s["calibration_pick"], s["methods"][CERTIFICATE]
        top, times = next(iter(pick["picked"].items()))
        cover = "; ".join(
            f"{r}: {_pct(cert['coverage'][r])} ({cert['refused'][r]}) / "
            f"{_pct(pick['coverage'][r])} ({pick['refused'][r]})"
            for r in s["risks"]
        )
        src = s["source_pick"]
        lines.append(
            f"| {s['name']} | `{src}` | {s['methods'][src]['auroc']:.3f} | {cert['auroc']:.3f} "
            f"| `{top}` ({times} of {saved['splits']}) | {pick['auroc']:.3f} "
            f"| {pick['fitted_auroc'][CERTIFICATE]:.3f} | {cover} "
            f"| {_yes(cert['meets_pick']['auroc'])} | {_yes(cert['meets_pick']['coverage'])} |"
        )
        for v in variants:
            met[v] += all(s["methods"][v]["meets_pick"].values())
    n = len(saved["shifts"])
    lines += ["", "Rows meeting both against the calibration half's pick, and against the "
              "best single score chosen with the target's labels (the first table): "
              + "; ".join(f"{v} {met[v]} and "
                          f"{sum(all(s['methods'][v]['meets'].values()) for s in saved['shifts'])}"
                          f" of {n}" for v in variants) + "."]  # fmt: skip
    return lines


def _read(mean: float | None, median: float | None, calibrated: int) -> str:
    if mean is None or median is None:
        return "-"
    return f"{100 * mean:.0f}% ({100 * median:.0f}%), {calibrated} split{'s' * (calibrated > 1)}"


def _blocked_lines(saved: dict[str, Any], variants: list[str]) -> list[str]:
    """The share of a blocked answer read before the monitor stopped it, per fitted row."""
    limit = saved["blocked_read_limit"]
    lines = [
        "",
        "Share of a blocked answer's tokens read before it was stopped (what a passthrough "
        "user sees of it), at the tau of each split that calibrated: mean (median) over the "
        "blocked test answers of those splits, and how many splits calibrated; - where every "
        f"split refused. The criterion: a mean of at most {100 * limit:.0f}%. Floor: the "
        "least mean share any early-block margins could read, at the tau showing the mean "
        "coverage above on all the target answers (a block needs the score below tau).",
        "",
        "| fitted on -> tested on | risk | median tokens (test) | "
        + " | ".join(f"{v} | at most {100 * limit:.0f}% | floor" for v in variants) + " |",
        "|---|---:|---:|" + "---:|---|---:|" * len(variants),
    ]  # fmt: skip
    for s in saved["shifts"]:
        for r in s["risks"]:
            cells = []
            for v in variants:
                e = s["methods"][v]
                mean, median = e["blocked_read"][r], e["blocked_read_median"][r]
                calibrated = saved["splits"] - e["refused"][r]
                floor = e["blocked_read_floor"][r]
                cells.append(f"{_read(mean, median, calibrated)} | "
                             + ("-" if mean is None else _yes(mean <= limit)) + " | "
                             + ("-" if floor is None else f"{100 * floor:.0f}%"))  # fmt: skip
            lines.append(f"| {s['name']} | {r} | {s['target_tokens_median']:g} "
                         f"| {' | '.join(cells)} |")  # fmt: skip
    return lines


def _traffic_lines(saved: dict[str, Any]) -> list[str]:
    """Coverage and read share with the margins set from the target's traffic."""
    if not all("traffic" in s for s in saved["shifts"]):
        return []
    limit = saved["blocked_read_limit"]
    lines = [
        "",
        "Margins from the target's traffic (`liftguard calibrate --certificate ... "
        f"--margins-from`, quantile {saved['traffic_quantile']:g}): the target's answers in "
        f"halves (a permutation seeded {saved['traffic_seed']}); on each, the certificate as "
        "fitted on the source beside the same certificate with its early-block margins set "
        "from every answer of the other half, labels unread; each calibrated and tested on "
        f"that half ({saved['splits']} splits of it). Coverage (refused splits), then the "
        "share of a blocked answer read, as above:",
        "",
        "| fitted on -> tested on | risk | half (answers) | certificate: shown | read "
        "| at most 50% | margins from the other half: shown | read | at most 50% |",
        "|---|---:|---|---:|---:|---|---:|---:|---|",
    ]  # fmt: skip
    for s in saved["shifts"]:
        for r in s["risks"]:
            for half, h in s["traffic"].items():
                cells = []
                for v in (CERTIFICATE, TRAFFIC):
                    e = h["methods"][v]
                    mean, median = e["blocked_read"][r], e["blocked_read_median"][r]
                    calibrated = saved["splits"] - e["refused"][r]
                    cells.append(f"{_pct(e['coverage'][r])} ({e['refused'][r]}) | "
                                 f"{_read(mean, median, calibrated)} | "
                                 + ("-" if mean is None else _yes(mean <= limit)))  # fmt: skip
                lines.append(f"| {s['name']} | {r} | {half} ({h['n']}) | "
                             + " | ".join(cells) + " |")  # fmt: skip
    return lines


def _warning_lines(saved: dict[str, Any]) -> list[str]:
    """How often ``calibrate --certificate`` on half the target warns, and whether rightly."""
    if not all("warning" in s for s in saved["shifts"]):
        return []
    lines = [
        "",
        "The ranking warning (`liftguard calibrate --certificate` warns when a single score "
        "ranks the calibration answers better than the certificate's statistic: the whole "
        "95% bootstrap interval of the difference below 0, the best single score chosen anew "
        "in each resample), beside the point rule (the best single score's AUROC above the "
        f"statistic's by over 0.01): over {saved['splits']} random halves of the target (a "
        f"permutation seeded {saved['warning_seed']}), how often the check on one half warns, "
        "and the certificate's AUROC minus that of the single score the check named, on all "
        "the target's answers, mean over the halves that warned and over those that did not; "
        "a warning is right where that difference is below 0:",
        "",
        "| fitted on -> tested on | warned | right | AUROC difference where warned "
        "| where not | point rule: warned | right | difference where warned |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip

    def gap(x: float | None) -> str:
        return "-" if x is None else f"{x:+.3f}"

    for s in saved["shifts"]:
        w, p = s["warning"]["interval"], s["warning"]["point"]
        lines.append(f"| {s['name']} | {w['warned']} of {w['warned'] + w['quiet']} "
                     f"| {w['right']} of {w['warned']} | {gap(w['gap_warned'])} "
                     f"| {gap(w['gap_quiet'])} | {p['warned']} | {p['right']} "
                     f"| {gap(p['gap_warned'])} |")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> None:
    page_main(argv, command=COMMAND, doc=__doc__, saved=SAVED, page=PAGE,
              run=lambda _args: run(), render=render)  # fmt: skip


if __name__ == "__main__":
    main()
