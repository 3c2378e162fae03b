"""How many labels the default calibration needs for risk ``r``: the coverage it reaches
against the ceiling of the ranking, as the number of calibration labels grows.

    python -m studies.labels_needed                 # every cell (a few minutes)
    python -m studies.labels_needed --docs-only     # the page from the saved JSON
    python -m studies.labels_needed --triviaqa-dir DIR

Writes ``benchmarks/results/labels_needed.json`` (derived numbers only) and
``docs/results/labels_needed.md``.

Data: the 600 GSM8K and 500 MBPP answers of Qwen2.5-Coder-1.5B-Instruct
(``benchmarks/traces``), and the 2,000 TriviaQA answers of each of SmolLM2-135M-Instruct,
Gemma 3 270M and Qwen2.5-Coder-1.5B-Instruct (``triviaqa_{smollm2,gemma3,qwen25coder}.jsonl``
in ``--triviaqa-dir``, by default ``../shared/data/traces`` from the repository root; not
in the repository).

Scores: ``nll`` (the answer's summed log-probability) and ``mean_logprob``; on TriviaQA
also the single score whose in-sample ceilings, summed over the data's risks, are the
largest, when it is neither of those two (chosen with every label, like the ceiling).

Risks: those of :data:`RISKS` below the data's error rate (at or above it, showing every
answer already meets the target). A cell whose ceiling is 0, on the answers or in the
model below, is left out and listed: no number of labels buys anything there.

The model (the method of ``studies/calibration_power.py``, on the score's rank): a
calibration answer is one of the data's answers drawn at random, with its score, and it
is wrong with the probability a logistic fit of the labels on the logit of the score's
rank gives it (:func:`error_model`; on the standardised score itself, the long tail of
``nll`` flattens the fit and the model's ceilings fall far below the answers', e.g. 8%
against 52% on MBPP at 0.3). The population is the data's answers with equal weight, so
the coverage and the risk of every threshold are known exactly (no pool of draws is
needed): a *violation* (the population risk at the calibrated threshold above ``r``) is
counted, not estimated. The model's ceiling (the largest top share of the population
whose risk is at most ``r``) is what unlimited labels would buy; the model is smoother
than the real ranking, so it differs from the in-sample ceiling of the answers, which is
given beside it.

Each cell: ``ltt_threshold(..., procedure="fixed-sequence")`` (the default calibration,
delta 0.05) on ``n`` = 100, 300, 1,000, 3,000 and 10,000 simulated labels, 100 draws
(seeded): mean coverage (a refusal shows nothing), its share of the model's ceiling,
refusals, violations; and the smallest ``n`` of that grid whose mean coverage reaches
50% and 80% of the ceiling.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from guardrail import GuardrailError, InsufficientDataError
from guardrail.evaluate import in_sample_ceiling, ltt_threshold
from guardrail.traces import BASELINES, baseline_score
from studies.tables import binomial_count, page_main

ROOT = Path(__file__).resolve().parents[1]
SAVED = ROOT / "benchmarks" / "results" / "labels_needed.json"
PAGE = ROOT / "docs" / "results" / "labels_needed.md"
COMMAND = "python -m studies.labels_needed"
TRIVIAQA_DIR = ROOT.parent / "shared" / "data" / "traces"
REPO_TRACES = {
    "GSM8K": ROOT / "benchmarks" / "traces" / "gsm8k_qwen25coder",
    "MBPP": ROOT / "benchmarks" / "traces" / "mbpp_qwen25coder.jsonl.xz",
}
TRIVIAQA = {
    "TriviaQA, SmolLM2": "triviaqa_smollm2.jsonl",
    "TriviaQA, Gemma 3": "triviaqa_gemma3.jsonl",
    "TriviaQA, Qwen": "triviaqa_qwen25coder.jsonl",
}
SCORES = ("nll", "mean_logprob")
RISKS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.8)
SIZES = (100, 300, 1000, 3000, 10000)
SHARES = (0.5, 0.8)
BANDS = (0.05, 0.1, 0.25, 0.5)
"""Bounds of the model's ceiling by which the page's first table groups the cells."""
DELTA, DRAWS, SEED = 0.05, 100, 1

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def error_model(scores: FloatArray, ok: BoolArray) -> FloatArray:
    """Each answer's probability of being wrong under a logistic fit (maximum likelihood)
    of the labels on the logit of the score's rank, ``log(u / (1 - u))`` with ``u`` the
    mid-rank over ``n + 1``: the model sees the ranking only, as a threshold does, and a
    score's long tail (``nll`` of a long answer) does not flatten it."""
    from scipy import stats
    from scipy.optimize import minimize

    u = stats.rankdata(scores) / (scores.size + 1)
    x = np.log(u / (1.0 - u))
    z = (x - x.mean()) / x.std()
    wrong = ~ok

    def loss(w: FloatArray) -> tuple[float, FloatArray]:
        eta = w[0] + w[1] * z  # log-odds of an error
        nll = np.logaddexp(0.0, eta) - np.where(wrong, eta, 0.0)
        resid = 1.0 / (1.0 + np.exp(-eta)) - wrong
        return float(nll.mean()), np.array([resid.mean(), (resid * z).mean()])

    w = minimize(loss, np.zeros(2), jac=True, method="BFGS").x
    return np.asarray(1.0 / (1.0 + np.exp(-(w[0] + w[1] * z))), dtype=np.float64)


class Population:
    """The model's population: ``scores`` with equal weight, each wrong with ``p_err``.
    Coverage and risk of a threshold are exact."""

    def __init__(self, scores: FloatArray, p_err: FloatArray) -> None:
        order = np.argsort(-scores, kind="stable")
        self.scores, self.p_err = scores[order], p_err[order]
        self.risk_at = np.cumsum(self.p_err) / np.arange(1, scores.size + 1)

    def ceiling(self, risk: float) -> float:
        return in_sample_ceiling(self.scores, self.p_err, risk)

    def at(self, tau: float) -> tuple[float, float]:
        """``(coverage, risk)`` of showing the answers scored at least ``tau``."""
        m = int(np.searchsorted(-self.scores, -tau, side="right"))
        return (m / self.scores.size, float(self.risk_at[m - 1])) if m else (0.0, 0.0)


def smallest(sizes: Sequence[int], shares: Sequence[float | None], target: float) -> int | None:
    """The first size whose share of the ceiling reaches ``target``; None if none does."""
    for n, share in zip(sizes, shares, strict=True):
        if share is not None and share >= target:
            return n
    return None


def curve(
    scores: FloatArray,
    p_err: FloatArray,
    risk: float,
    *,
    sizes: Sequence[int] = SIZES,
    draws: int = DRAWS,
    seed: int = SEED,
    delta: float = DELTA,
) -> dict[str, Any]:
    """The default calibration on ``n`` simulated labels for each ``n`` of ``sizes``:
    the model's ceiling, then per ``n`` the mean coverage, its share of the ceiling (None
    where the ceiling is 0), refusals and violations out of ``draws``, and the smallest
    ``n`` reaching each of :data:`SHARES` of the ceiling."""
    pop = Population(scores, p_err)
    top = pop.ceiling(risk)
    points: list[dict[str, Any]] = []
    for n in sizes:
        rng = np.random.default_rng([seed, n])
        shown: list[float] = []
        refused = violated = 0
        for _ in range(draws):
            idx = rng.integers(0, scores.size, n)
            err = rng.random(n) < p_err[idx]
            try:
                tau = ltt_threshold(scores[idx], err, risk, delta, procedure="fixed-sequence").tau
            except InsufficientDataError:
                refused += 1
                shown.append(0.0)
                continue
            cov, r = pop.at(tau)
            shown.append(cov)
            violated += r > risk
        coverage = float(np.mean(shown))
        points.append({"n": n, "coverage": coverage, "share": coverage / top if top else None,
                       "refused": refused, "violations": violated})  # fmt: skip
    shares = [p["share"] for p in points]
    reach = {f"{t:g}": smallest(sizes, shares, t) for t in SHARES}
    return {"model_ceiling": top, "draws": draws, "points": points, "labels_for": reach}


def load(path: Path) -> tuple[dict[str, FloatArray], BoolArray]:
    """Every single score with a finite value on every answer of a trace file or folder
    of parts, and the labels."""
    from adapters.tracefiles import open_trace_objects
    from guardrail.traces import parse_trace

    parts = sorted(path.iterdir()) if path.is_dir() else [path]
    traces = [parse_trace(obj) for part in parts for _line, obj in open_trace_objects(str(part))]
    ok = np.array([bool(t.correct) for t in traces])
    scores: dict[str, FloatArray] = {}
    for name in BASELINES:
        try:
            s = np.array([baseline_score(t, name) for t in traces], dtype=np.float64)
        except GuardrailError:  # a field these traces do not carry
            continue
        if np.isfinite(s).all():
            scores[name] = s
    return scores, ok


def risks_for(error_rate: float) -> list[float]:
    return [r for r in RISKS if r < error_rate]


def favoured(scores: dict[str, FloatArray], ok: BoolArray, risks: Iterable[float]) -> str:
    """The score whose in-sample ceilings, summed over ``risks``, are the largest."""
    err = (~ok).astype(np.float64)
    risks = list(risks)
    return max(scores, key=lambda k: sum(in_sample_ceiling(scores[k], err, r) for r in risks))


def datasets(triviaqa_dir: Path) -> dict[str, Path]:
    missing = [f for f in TRIVIAQA.values() if not (triviaqa_dir / f).is_file()]
    if missing:
        raise SystemExit(
            f"{COMMAND}: no {', '.join(missing)} in {triviaqa_dir}; "
            "give the folder of the shared TriviaQA traces with --triviaqa-dir"
        )
    return {**REPO_TRACES, **{name: triviaqa_dir / f for name, f in TRIVIAQA.items()}}


def run(triviaqa_dir: Path) -> dict[str, Any]:
    from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs in the lock

    paths = datasets(triviaqa_dir)
    data: dict[str, Any] = {}
    cells: list[tuple[str, str, FloatArray, BoolArray, FloatArray, float]] = []
    for name, path in paths.items():
        scores, ok = load(path)
        error_rate = float(1.0 - ok.mean())
        risks = risks_for(error_rate)
        chosen = list(SCORES)
        if name in TRIVIAQA:
            best = favoured(scores, ok, risks)
            chosen += [best] if best not in chosen else []
        data[name] = {"answers": int(ok.size), "error_rate": error_rate, "scores": chosen,
                      "risks": risks}  # fmt: skip
        for score in chosen:
            s = scores[score]
            p_err = error_model(s, ok)
            cells += [(name, score, s, ok, p_err, r) for r in risks]
    rows: list[dict[str, Any]] = []
    dropped: list[dict[str, Any]] = []
    quiet = not sys.stderr.isatty()
    for name, score, s, ok, p_err, risk in tqdm(cells, unit="cell", disable=quiet):
        top = in_sample_ceiling(s, (~ok).astype(np.float64), risk)
        model_top = Population(s, p_err).ceiling(risk)
        cell = {"data": name, "score": score, "risk": risk, "ceiling": top}
        if top == 0.0 or model_top == 0.0:
            dropped.append({**cell, "model_ceiling": model_top})
            continue
        rows.append({**cell, **curve(s, p_err, risk)})
    return {"generated_by": COMMAND, "delta": DELTA, "draws": DRAWS, "seed": SEED,
            "sizes": list(SIZES), "data": data, "rows": rows, "dropped": dropped}  # fmt: skip


def _labels(n: int | None) -> str:
    return f"{n:,}" if n is not None else f"more than {SIZES[-1]:,}"


def _span(sizes: list[int | None]) -> str:
    """The range of the labels a group of cells needed (None: more than the grid)."""
    top = SIZES[-1] + 1
    lo, hi = min(n or top for n in sizes), max(n or top for n in sizes)
    return _labels(lo if lo <= SIZES[-1] else None) + (
        "" if lo == hi else f" to {_labels(hi if hi <= SIZES[-1] else None)}"
    )


def by_ceiling(rows: list[dict[str, Any]]) -> list[str]:
    """Table rows: the cells grouped by the model's ceiling, with the range of the labels
    each share of it took."""
    edges = (0.0, *BANDS, 1.0)
    out = []
    for lo, hi in itertools.pairwise(edges):
        group = [r for r in rows if lo <= r["model_ceiling"] < hi or r["model_ceiling"] == hi == 1]
        if group:
            spans = " | ".join(_span([r["labels_for"][f"{s:g}"] for r in group]) for s in SHARES)
            out.append(f"| {lo:.0%} to {hi:.0%} | {len(group)} | {spans} |")
    return out


def _share(share: float | None) -> str:
    return f"{share:.0%}" if share is not None else "n/a"


def render(saved: dict[str, Any]) -> str:
    sizes = saved["sizes"]
    lines = [
        f"<!-- generated by `{COMMAND}` (or `--docs-only` from its JSON); do not edit -->",
        "",
        "| ceiling (model) | cells | labels for 50% of it | labels for 80% of it |",
        "|---|---:|---|---|",
        *by_ceiling(saved["rows"]),
        "",
        "Each cell:",
        "",
        "| data | score | risk | ceiling (answers) | ceiling (model) | labels for 50% "
        "| labels for 80% | " + " | ".join(f"share at {n:,}" for n in sizes) + " |",
        "|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(sizes),
    ]
    for r in saved["rows"]:
        shares = " | ".join(_share(p["share"]) for p in r["points"])
        lines.append(
            f"| {r['data']} | `{r['score']}` | {r['risk']:g} | {r['ceiling']:.1%} "
            f"| {r['model_ceiling']:.1%} | {_labels(r['labels_for']['0.5'])} "
            f"| {_labels(r['labels_for']['0.8'])} | {shares} |"
        )
    if saved["dropped"]:
        groups: dict[tuple[str, str], list[str]] = {}
        for d in saved["dropped"]:
            groups.setdefault((d["data"], d["score"]), []).append(f"{d['risk']:g}")
        left = "; ".join(f"{data} `{score}` at {', '.join(risks)}"
                         for (data, score), risks in groups.items())  # fmt: skip
        lines += ["", f"Left out (a ceiling of 0 on the answers or in the model: no number "
                      f"of labels buys anything): {left}."]  # fmt: skip
    lines += [
        "",
        "Every cell, every size (shown: mean coverage of the population, a refusal counted "
        f"as 0%; out of {saved['draws']} draws):",
        "",
        "| data | score | risk | labels | shown | share of ceiling | refused "
        "| violations (95% interval) |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in saved["rows"]:
        for p in r["points"]:
            lines.append(
                f"| {r['data']} | `{r['score']}` | {r['risk']:g} | {p['n']:,} "
                f"| {p['coverage']:.1%} | {_share(p['share'])} "
                f"| {p['refused']} of {r['draws']} "
                f"| {binomial_count(p['violations'], r['draws'])} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--triviaqa-dir", type=Path, default=TRIVIAQA_DIR,
                            help="the shared TriviaQA traces (default: %(default)s)")  # fmt: skip

    page_main(argv, command=COMMAND, doc=__doc__, saved=SAVED, page=PAGE,
              run=lambda args: run(args.triviaqa_dir), render=render, options=options)  # fmt: skip


if __name__ == "__main__":
    main()
