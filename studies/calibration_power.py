"""What a calibration buys with the labels a user has: the two label-based procedures
against the in-sample ceiling, on the long-answer traces and in seeded simulation.

    python -m studies.calibration_power            # every row (a few minutes)
    python -m studies.calibration_power --docs-only

Writes ``benchmarks/results/calibration_power.json`` and
``docs/results/calibration_power.md``.

The ceiling of a score at risk ``r`` is the largest top share of the answers whose error
rate is at most ``r``, chosen with every label and no guarantee; a procedure that keeps
its promise (error rate at most ``r`` with probability ``1 - delta``) stays below it.

- **Real answers** (``n`` = 100, 150, 300): the 600 GSM8K and 500 MBPP answers of
  Qwen2.5-Coder-1.5B-Instruct (``benchmarks/traces``), ``n`` drawn without replacement
  for calibration, the rest for the test, 100 draws (seed 0); coverage and the share of
  the ceiling on the test answers. A refusal counts as 0% shown.
- **Simulation** (``n`` up to 10,000): scores drawn from the answers' own scores, each
  wrong with the probability a logistic fit of the labels on the score gives it; the
  population risk of every threshold is then known exactly (on a pool of 200,000
  draws), so a violation (the population risk at the threshold above ``r``) is counted,
  not estimated. 100 draws per cell (seed 1).

Scores: ``nll`` (the answer's summed log-probability) and ``mean_logprob``, the two
single scores whose ceilings lead on these traces. ``delta`` = 0.05 throughout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from guardrail import InsufficientDataError
from guardrail.evaluate import ltt_threshold
from guardrail.traces import baseline_score

ROOT = Path(__file__).resolve().parents[1]
SAVED = ROOT / "benchmarks" / "results" / "calibration_power.json"
OUT = ROOT / "docs" / "results" / "calibration_power.md"
COMMAND = "python -m studies.calibration_power"
TRACES = {
    "GSM8K": ROOT / "benchmarks" / "traces" / "gsm8k_qwen25coder",
    "MBPP": ROOT / "benchmarks" / "traces" / "mbpp_qwen25coder.jsonl.xz",
}
SCORES = ("nll", "mean_logprob")
RISKS = (0.2, 0.3)
REAL_SIZES = (100, 150, 300)
SIM_SIZES = (300, 1000, 10000)
Procedure = Literal["fixed-sequence", "simultaneous"]
PROCEDURES: tuple[Procedure, ...] = ("fixed-sequence", "simultaneous")
DELTA, DRAWS, POOL = 0.05, 100, 200_000

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def load_scores(path: Path) -> tuple[dict[str, FloatArray], BoolArray]:
    """Each score of every answer of a trace file or folder of parts, and the labels."""
    from adapters.tracefiles import open_trace_objects
    from guardrail.traces import parse_trace

    parts = sorted(path.iterdir()) if path.is_dir() else [path]
    traces = [parse_trace(obj) for part in parts for _line, obj in open_trace_objects(str(part))]
    ok = np.array([bool(t.correct) for t in traces])
    return {s: np.array([baseline_score(t, s) for t in traces]) for s in SCORES}, ok


def ceiling(scores: FloatArray, errors: FloatArray, risk: float) -> float:
    """The largest top share whose error rate (mean of ``errors``) is at most ``risk``."""
    order = np.argsort(-scores, kind="stable")
    rate = np.cumsum(errors[order]) / np.arange(1, scores.size + 1)
    good = np.flatnonzero(rate <= risk)
    return float((good[-1] + 1) / scores.size) if good.size else 0.0


def threshold(s: FloatArray, err: BoolArray, risk: float, procedure: Procedure) -> float:
    try:
        return ltt_threshold(s, err, risk, DELTA, procedure=procedure).tau
    except InsufficientDataError:
        return float("inf")


def real_rows(name: str, scores: dict[str, FloatArray], ok: BoolArray) -> list[dict[str, Any]]:
    rows = []
    for score, s in scores.items():
        for risk in RISKS:
            top = ceiling(s, (~ok).astype(float), risk)
            for n in REAL_SIZES:
                rng = np.random.default_rng(0)
                draws = [rng.permutation(s.size) for _ in range(DRAWS)]
                for procedure in PROCEDURES:
                    shown, refused = [], 0
                    for perm in draws:
                        cal, test = perm[:n], perm[n:]
                        tau = threshold(s[cal], ~ok[cal], risk, procedure)
                        refused += not np.isfinite(tau)
                        shown.append(float((s[test] >= tau).mean()))
                    rows.append({"data": name, "score": score, "risk": risk, "n": n,
                                 "procedure": procedure, "ceiling": top,
                                 "coverage": float(np.mean(shown)), "refused": refused,
                                 "draws": DRAWS})  # fmt: skip
    return rows


def sim_rows(name: str, scores: dict[str, FloatArray], ok: BoolArray) -> list[dict[str, Any]]:
    from scipy.optimize import minimize

    rows = []
    for score, s in scores.items():
        z = (s - s.mean()) / s.std()

        def loss(w: FloatArray, z: FloatArray = z) -> float:
            p = 1.0 / (1.0 + np.exp(-(w[0] + w[1] * z)))
            p = np.clip(p, 1e-12, 1 - 1e-12)
            return float(-np.mean(np.where(ok, np.log(p), np.log1p(-p))))

        w = minimize(loss, np.zeros(2), method="Nelder-Mead").x
        p_err = 1.0 - 1.0 / (1.0 + np.exp(-(w[0] + w[1] * z)))
        pool_rng = np.random.default_rng(2)
        pool = pool_rng.integers(0, s.size, POOL)
        order = np.argsort(-s[pool], kind="stable")
        pool_s, pool_e = s[pool][order], p_err[pool][order]
        risk_at = np.cumsum(pool_e) / np.arange(1, POOL + 1)  # population risk, top-m

        def population(
            tau: float, pool_s: FloatArray = pool_s, risk_at: FloatArray = risk_at
        ) -> tuple[float, float]:
            m = int(np.searchsorted(-pool_s, -tau, side="right"))
            return (m / POOL, float(risk_at[m - 1])) if m else (0.0, 0.0)

        for risk in RISKS:
            top = ceiling(pool_s, pool_e, risk)
            for n in SIM_SIZES:
                for procedure in PROCEDURES:
                    rng = np.random.default_rng(1)
                    shown, refused, violated = [], 0, 0
                    for _ in range(DRAWS):
                        idx = rng.integers(0, s.size, n)
                        err = rng.random(n) < p_err[idx]
                        tau = threshold(s[idx], err, risk, procedure)
                        refused += not np.isfinite(tau)
                        cov, r = population(tau)
                        shown.append(cov)
                        violated += r > risk
                    rows.append({"data": f"{name} (simulated)", "score": score, "risk": risk,
                                 "n": n, "procedure": procedure, "ceiling": top,
                                 "coverage": float(np.mean(shown)), "refused": refused,
                                 "violations": violated, "draws": DRAWS})  # fmt: skip
    return rows


def run() -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for name, path in TRACES.items():
        scores, ok = load_scores(path)
        rows += real_rows(name, scores, ok)
        rows += sim_rows(name, scores, ok)
        print(f"{name}: done", file=sys.stderr)
    return {"generated_by": COMMAND, "delta": DELTA, "rows": rows}


def _violation_cell(row: dict[str, Any]) -> str:
    if "violations" not in row:
        return "-"
    from scipy import stats

    k, n = row["violations"], row["draws"]
    lo, hi = stats.beta.ppf([0.025, 0.975], [max(k, 1), k + 1], [n - k + 1, max(n - k, 1)])
    lo = 0.0 if k == 0 else lo
    hi = 1.0 if k == n else hi
    return f"{k} of {n} [{lo:.1%}, {hi:.1%}]"


def render(saved: dict[str, Any]) -> str:
    lines = [
        f"<!-- generated by `{COMMAND}` (or `--docs-only` from its JSON); do not edit -->",
        "",
        "| data | score | risk | labels | procedure | shown | ceiling | share of ceiling "
        "| refused | violations (95% interval) |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in saved["rows"]:
        share = f"{r['coverage'] / r['ceiling']:.0%}" if r["ceiling"] else "n/a"
        lines.append(
            f"| {r['data']} | `{r['score']}` | {r['risk']:g} | {r['n']:,} | {r['procedure']} "
            f"| {r['coverage']:.1%} | {r['ceiling']:.1%} | {share} "
            f"| {r['refused']} of {r['draws']} | {_violation_cell(r)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=COMMAND, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs-only", action="store_true",
                        help="rewrite the page from the saved JSON")  # fmt: skip
    args = parser.parse_args(argv)
    if args.docs_only:
        saved = json.loads(SAVED.read_text(encoding="utf-8"))
    else:
        saved = run()
        SAVED.write_text(json.dumps(saved, indent=1) + "\n", encoding="utf-8")
    OUT.write_text(render(saved), encoding="utf-8")


if __name__ == "__main__":
    main()
