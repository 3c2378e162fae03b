"""What a calibration buys with the labels a user has: the label-based procedures against
the in-sample ceiling, on the long-answer traces and in seeded simulation.

    python -m studies.calibration_power            # every row (several minutes)
    python -m studies.calibration_power --docs-only

Needs MAPIE (``pip install -e ".[bench]"``), compared in the same run. Writes
``benchmarks/results/calibration_power.json`` and ``docs/results/calibration_power.md``.

The ceiling of a score at risk ``r`` is the largest top share of the answers whose error
rate is at most ``r``, chosen with every label and no guarantee; a procedure that keeps
its promise stays below it (in expectation, give or take the noise of one test set).

Procedures, two kinds of promise:

- **high probability** (the error rate among shown answers is at most ``r`` with
  probability ``1 - delta`` over the calibration draw; one threshold, usable on a
  stream): liftguard's ``fixed-sequence`` (the default) and ``simultaneous``
  (:func:`guardrail.evaluate.ltt_threshold`), and MAPIE's Learn-then-Test
  (``BinaryClassificationController``, risk ``precision``, on its default grid of 100
  thresholds over the calibration scores' empirical distribution, Hoeffding-Bentkus
  p-values, with Bonferroni-Holm, its default, and with fixed-sequence testing, which
  MAPIE starts at the grid's safest end, 0.99, i.e. the top 1% of the answers);
- **in expectation** (the expected share of wrong answers among those shown in one
  batch is at most ``r``; the cut-off depends on the whole batch, so it triages finished
  answers, not a stream): ``conformal selection``
  (:func:`guardrail.evaluate.conformal_select`), the test answers being the batch; and
  its stream twin ``conformal threshold`` (``calibrate(..., procedure="conformal")``:
  the same selection on the calibration answers' own scores, its lowest shown score
  kept as a fixed threshold; the promise is about the threshold's error rate averaged
  over calibration draws).

- **Real answers** (``n`` = 100, 150, 300): the 600 GSM8K and 500 MBPP answers of
  Qwen2.5-Coder-1.5B-Instruct (``benchmarks/traces``), ``n`` drawn without replacement
  for calibration, the rest for the test, 100 draws (seed 0); coverage, the share of the
  ceiling and the share of wrong answers among those shown on the test answers (mean
  over draws; a draw that shows nothing counts 0% shown and 0% wrong). A refusal counts
  as 0% shown.
- **Simulation** (``n`` up to 10,000): scores drawn from the answers' own scores, each
  wrong with the probability a logistic fit of the labels on the score gives it; the
  population risk of every threshold is then known exactly (on a pool of 200,000
  draws), so a violation (the population risk at the threshold above ``r``) is counted,
  not estimated. Conformal selection triages batches of 1,000 drawn answers; its mean
  share of wrong among shown is given with a 95% interval. 100 draws per cell (seed 1).

The **best single test** beside each ceiling is what a high-probability promise can
show at all with ``n`` labels of this ranking: the coverage of one level-``delta``
binomial test at the one top share that shows most on average, chosen knowing the error
curve (the error rate of every top share, from all the answers or, simulated, the
population): ``max_q q * P(Binomial(n q, e(q)) <= c)``, with ``c`` the largest count that
passes at risk ``r``. No procedure is held to it (one that tests many candidates can pass
a little beyond it by luck of the draw), but where it sits far below the ceiling, the
ranking's errors among its most confident answers, not the procedure, are what costs.

Scores: ``nll`` (the answer's summed log-probability) and ``mean_logprob``, the two
single scores whose ceilings lead on these traces, and ``certificate``: the default
fitted certificate (``fit_certificate(..., FitOptions(fit_fraction=1.0,
max_tokens=512))``: every default of ``liftguard fit``) as its monitor decides each answer
streamed through it (its critical score, early blocks included: the score calibration
tests), out of fold: the answers in 5 folds (a permutation seeded 0), each fold's scores
from the certificate fitted on the other four. A fold's answers never fitted the
statistic that scores them, so a calibration draw and its test answers are scored as a
deployed certificate scores new answers; five statistics, not one, so the certificate
rows read as the fitted statistic's typical power, not one certificate's. ``delta`` =
0.05 throughout.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from guardrail import InsufficientDataError, calibrate
from guardrail.evaluate import conformal_select
from guardrail.traces import baseline_score
from studies.tables import binomial_count, page_main

ROOT = Path(__file__).resolve().parents[1]
SAVED = ROOT / "benchmarks" / "results" / "calibration_power.json"
OUT = ROOT / "docs" / "results" / "calibration_power.md"
COMMAND = "python -m studies.calibration_power"
TRACES = {
    "GSM8K": ROOT / "benchmarks" / "traces" / "gsm8k_qwen25coder",
    "MBPP": ROOT / "benchmarks" / "traces" / "mbpp_qwen25coder.jsonl.xz",
}
SCORES = ("nll", "mean_logprob", "certificate")
FOLDS, MAX_TOKENS = 5, 512
RISKS = (0.2, 0.3)
REAL_SIZES = (100, 150, 300)
SIM_SIZES = (300, 1000, 10000)
HIGH_PROBABILITY = ("fixed-sequence", "simultaneous", "MAPIE Bonferroni-Holm",
                    "MAPIE fixed sequence")  # fmt: skip
IN_EXPECTATION = ("conformal selection", "conformal threshold")
BATCH_ONLY = ("conformal selection",)
PROCEDURES = HIGH_PROBABILITY + IN_EXPECTATION
DELTA, DRAWS, POOL, BATCH = 0.05, 100, 200_000, 1000

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def load_scores(path: Path) -> tuple[dict[str, FloatArray], BoolArray]:
    """Each score of every answer of a trace file or folder of parts, and the labels."""
    from adapters.tracefiles import open_trace_objects
    from guardrail.traces import parse_trace

    parts = sorted(path.iterdir()) if path.is_dir() else [path]
    traces = [parse_trace(obj) for part in parts for _line, obj in open_trace_objects(str(part))]
    ok = np.array([bool(t.correct) for t in traces])
    scores = {s: np.array([baseline_score(t, s) for t in traces]) for s in SCORES[:2]}
    return {**scores, "certificate": out_of_fold(traces)}, ok


def out_of_fold(traces: list[Any], folds: int = FOLDS, seed: int = 0) -> FloatArray:
    """Each answer's critical score under the default certificate fitted on the other
    folds' answers (module docstring)."""
    from guardrail.evaluate import fitted_method
    from guardrail.fitting import FitOptions, fit_certificate

    parts = np.array_split(np.random.default_rng(seed).permutation(len(traces)), folds)
    out = np.empty(len(traces))
    for k, held in enumerate(parts):
        rest = [traces[i] for j, part in enumerate(parts) if j != k for i in part]
        cert, _ = fit_certificate(rest, FitOptions(fit_fraction=1.0, max_tokens=MAX_TOKENS))
        method = fitted_method([traces[i] for i in held], cert, max_tokens=MAX_TOKENS)
        out[held] = method.decision
    return out


def ceiling(scores: FloatArray, errors: FloatArray, risk: float) -> float:
    """The largest top share whose error rate (mean of ``errors``) is at most ``risk``."""
    rate = _rates(scores, errors)
    good = np.flatnonzero(rate <= risk)
    return float((good[-1] + 1) / scores.size) if good.size else 0.0


def best_single_test(rates: FloatArray, n: int, risk: float, delta: float = DELTA) -> float:
    """The best single test's mean coverage (module docstring): ``rates[m - 1]`` is the
    error rate of the top ``m`` of ``rates.size`` ranked answers; ``n`` labels."""
    from scipy import stats

    best = 0.0
    for q in np.arange(1, 100) / 100:
        k = round(n * q)
        if k < 1:
            continue
        e = float(rates[max(1, round(q * rates.size)) - 1])
        c = int(stats.binom.ppf(delta, k, risk))
        while c >= 0 and stats.binom.cdf(c, k, risk) > delta:
            c -= 1
        if c >= 0:
            best = max(best, q * float(stats.binom.cdf(c, k, e)))
    return best


def _rates(scores: FloatArray, errors: FloatArray) -> FloatArray:
    order = np.argsort(-scores, kind="stable")
    return np.cumsum(errors[order]) / np.arange(1, scores.size + 1)


def mapie_threshold(s: FloatArray, err: BoolArray, risk: float, method: str) -> float:
    """MAPIE's Learn-then-Test threshold on the score's scale (``inf`` when it refuses).

    MAPIE thresholds a probability of the positive class (a right answer) on a grid in
    [0, 0.99]; the score is handed over as its empirical distribution on the calibration
    answers (no labels), so the grid is a grid of the scores' quantiles, and the chosen
    grid value maps back to the smallest calibration score at or above it.
    """
    import warnings

    from mapie.risk_control import BinaryClassificationController

    ranked = np.sort(s)

    def proba(x: npt.ArrayLike) -> FloatArray:
        u = np.searchsorted(ranked, np.asarray(x, dtype=np.float64).ravel(), "right") / s.size
        return np.column_stack([1.0 - u, u])

    fwer = "bonferroni_holm" if method == "MAPIE Bonferroni-Holm" else "fixed_sequence"
    controller = BinaryClassificationController(
        proba, "precision", target_level=1.0 - risk, confidence_level=1.0 - DELTA,
        best_predict_param_choice="recall", fwer_method=fwer,
    )  # fmt: skip
    with warnings.catch_warnings():  # "no threshold found" and the like: a refusal, counted
        warnings.simplefilter("ignore", UserWarning)
        controller.calibrate(s[:, None], (~err).astype(int))
    best = controller.best_predict_param
    if best is None or not np.isfinite(float(best)):
        return float("inf")
    shown = s[proba(s)[:, 1] >= float(best)]
    return float(shown.min()) if shown.size else float("inf")


def threshold(s: FloatArray, err: BoolArray, risk: float, procedure: str) -> float:
    """The procedure's threshold on the score (``inf``: it refuses); the library's own
    procedures are :func:`guardrail.calibrate`'s."""
    if procedure.startswith("MAPIE"):
        return mapie_threshold(s, err, risk, procedure)
    name = "conformal" if procedure == "conformal threshold" else procedure
    try:
        return calibrate(s, ~err, risk=risk, delta=DELTA, procedure=name).tau
    except InsufficientDataError:
        return float("inf")


def shown_on(
    s: FloatArray, err: BoolArray, risk: float, procedure: str, batch: FloatArray
) -> tuple[BoolArray, bool]:
    """Which batch answers the procedure calibrated on ``s, err`` shows, and whether it refused."""
    if procedure in BATCH_ONLY:
        return conformal_select(s, err, batch, risk).selected, False
    tau = threshold(s, err, risk, procedure)
    return batch >= tau, not np.isfinite(tau)


def real_rows(name: str, scores: dict[str, FloatArray], ok: BoolArray) -> list[dict[str, Any]]:
    rows = []
    for score, s in scores.items():
        for risk in RISKS:
            top = ceiling(s, (~ok).astype(float), risk)
            rates = _rates(s, (~ok).astype(float))
            for n in REAL_SIZES:
                single = best_single_test(rates, n, risk)
                rng = np.random.default_rng(0)
                draws = [rng.permutation(s.size) for _ in range(DRAWS)]
                for procedure in PROCEDURES:
                    shown, wrong, refused = [], [], 0
                    for perm in draws:
                        cal, test = perm[:n], perm[n:]
                        sel, refusal = shown_on(s[cal], ~ok[cal], risk, procedure, s[test])
                        refused += refusal
                        shown.append(float(sel.mean()))
                        wrong.append(float((~ok[test][sel]).mean()) if sel.any() else 0.0)
                    rows.append({"data": name, "score": score, "risk": risk, "n": n,
                                 "procedure": procedure, "ceiling": top,
                                 "single_test": single,
                                 "coverage": float(np.mean(shown)), "refused": refused,
                                 "wrong_shown": float(np.mean(wrong)),
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
                single = best_single_test(risk_at, n, risk)
                for procedure in PROCEDURES:
                    rng = np.random.default_rng(1)
                    shown, wrong, refused, violated = [], [], 0, 0
                    for _ in range(DRAWS):
                        idx = rng.integers(0, s.size, n)
                        err = rng.random(n) < p_err[idx]
                        if procedure in BATCH_ONLY:
                            b = rng.integers(0, s.size, BATCH)
                            b_err = rng.random(BATCH) < p_err[b]
                            sel = conformal_select(s[idx], err, s[b], risk).selected
                            shown.append(float(sel.mean()))
                            wrong.append(float(b_err[sel].mean()) if sel.any() else 0.0)
                            continue
                        tau = threshold(s[idx], err, risk, procedure)
                        refused += not np.isfinite(tau)
                        cov, r = population(tau)
                        shown.append(cov)
                        wrong.append(r)
                        violated += r > risk
                    row = {"data": f"{name} (simulated)", "score": score, "risk": risk,
                           "n": n, "procedure": procedure, "ceiling": top,
                           "single_test": single,
                           "coverage": float(np.mean(shown)), "refused": refused,
                           "wrong_shown": float(np.mean(wrong)), "draws": DRAWS}  # fmt: skip
                    if procedure in IN_EXPECTATION:
                        row["wrong_shown_se"] = float(np.std(wrong, ddof=1) / np.sqrt(DRAWS))
                    if procedure not in BATCH_ONLY:
                        row["violations"] = violated
                    rows.append(row)
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
    return binomial_count(row["violations"], row["draws"]) if "violations" in row else "-"


def _wrong_cell(row: dict[str, Any]) -> str:
    if "wrong_shown" not in row:
        return "-"
    if "wrong_shown_se" in row:
        mean, half = row["wrong_shown"], 1.96 * row["wrong_shown_se"]
        return f"{mean:.1%} [{mean - half:.1%}, {mean + half:.1%}]"
    return f"{row['wrong_shown']:.1%}"


def _score_cell(score: str) -> str:
    return "certificate (out of fold)" if score == "certificate" else f"`{score}`"


def render(saved: dict[str, Any]) -> str:
    lines = [
        f"<!-- generated by `{COMMAND}` (or `--docs-only` from its JSON); do not edit -->",
        "",
        "| data | score | risk | labels | procedure | promise | shown | ceiling "
        "| share of ceiling | best single test | wrong among shown | refused "
        "| violations (95% interval) |",
        "|---|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in saved["rows"]:
        share = f"{r['coverage'] / r['ceiling']:.0%}" if r["ceiling"] else "n/a"
        promise = "in expectation" if r["procedure"] in IN_EXPECTATION else "high probability"
        refused = f"{r['refused']} of {r['draws']}" if r["procedure"] not in BATCH_ONLY else "-"
        lines.append(
            f"| {r['data']} | {_score_cell(r['score'])} | {r['risk']:g} | {r['n']:,} "
            f"| {r['procedure']} "
            f"| {promise} | {r['coverage']:.1%} | {r['ceiling']:.1%} | {share} "
            f"| {r['single_test']:.1%} | {_wrong_cell(r)} | {refused} | {_violation_cell(r)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    page_main(argv, command=COMMAND, doc=__doc__, saved=SAVED, page=OUT,
              run=lambda _args: run(), render=render)  # fmt: skip


if __name__ == "__main__":
    main()
