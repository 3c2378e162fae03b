"""Earlier blocks for the fitted rule: how much of a blocked answer each reads, and what
it costs in coverage.

``python -m studies.early_block SHARED_TRACES_DIR`` (about 20 s; writes
``benchmarks/results/early_block.json`` and the table ``docs/results/early_block.md``).

SmolLM2's TriviaQA answers are split in halves by a seeded permutation (seed 0, as in
``select_coverage.py``). The preset statistic is fitted on half A (``liftguard fit
--fit-fraction 1`` with SmolLM2's context and ``--early-block none`` unless a row says
otherwise); half B's answers are replayed through the monitor's own objects and
evaluated over 50 splits at risk 0.8, delta 0.05, tau calibrated on one half of B
exactly as ``liftguard eval`` does. The rules:

- ``exact``: the exact early blocks alone. The rule blocks when the upper bound of the
  final score over every continuation within the token limit is below tau, each term
  maximised on its own.
- ``joint``: the same exact rule with all terms maximised for the same number of
  further tokens (a tighter bound, still valid: the script checks that it never falls
  below an answer's final score, so coverage cannot change).
- ``gate q``: ``exact``, and also block when the score so far plus ``m`` is below tau,
  ``m`` the ``q`` quantile over half A's correct answers of how far the score still
  rose after a token, one margin for every position. Replayed in calibration, so the
  guarantee holds; it costs coverage where a correct answer rises more than ``m``.
- ``early block q``: ``liftguard fit --early-block q`` (0.99 is its default): a margin per
  position (the ``q`` quantile of how far half A's correct answers still rose after
  that many tokens), replayed in calibration the same way.
- ``monotone``: a statistic fitted with ``--form monotone`` (every term can only
  fall), the exact rule.

Reads are the share of a blocked test answer's tokens read before the block, mean and
median over the splits.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from guardrail import Certificate, InsufficientDataError
from guardrail.evaluate import ltt_threshold
from guardrail.fitting import (
    EventReader,
    FittedPath,
    FittedState,
    RecordedSkeleton,
    critical_score,
    stop_at,
    trace_events,
)
from guardrail.traces import read_traces
from studies.tables import halves

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "early_block.json"
PAGE = ROOT / "docs" / "results" / "early_block.md"
COMMAND = "python -m studies.early_block ../shared/data/traces"
RISK, DELTA, SPLITS, SEED = 0.8, 0.05, 50, 7
GATES = (0.99, 0.95)
MARGINS = ("0.99", "0.95", "0.9")


def _best_rise(agg: Any, c: float, k: int) -> float:
    """The most the term ``c * agg`` can rise over exactly ``k`` more tokens."""
    kind, v = type(agg).__name__, agg.value
    if k == 0 or kind == "First":
        return 0.0
    if kind == "Sum":
        return float(c * k * (agg.hi if c > 0 else agg.lo))
    if kind == "Mean":
        x = agg.hi if c > 0 else agg.lo
        return float(c * ((agg.total + k * x) / (agg.t + k) - v))
    if kind == "Min":
        return 0.0 if c > 0 else c * (min(v, agg.lo) - v)
    if kind == "Max":
        return c * (max(v, agg.hi) - v) if c > 0 else 0.0
    if kind == "Lowest2":
        end = agg.lo if k >= 2 else (agg.lo + agg.low1) / 2.0
        return 0.0 if c > 0 else c * (min(end, v) - v)
    if kind == "CountBelow":
        return c * k if c > 0 and agg.lo < agg.level else 0.0
    if kind == "Count":
        return c * k
    raise SystemExit(f"early_block.py: no joint bound for a {kind} term")


def _replay(cert: Certificate, trace: Any) -> dict[str, np.ndarray]:
    """Score, lower and upper bound (term by term, and joint) after every token."""
    stat, limit = cert.statistic, cert.context.max_tokens
    assert stat is not None
    # the state keeps one aggregate per nonzero term, in feature order
    coef = [c for c in stat.coefficients()[1] if c != 0.0]
    skel = RecordedSkeleton(trace.prompt_free_logprobs) if "skeleton" in stat.requires else None
    reader, state = EventReader(stat, skel), FittedState(stat, limit)
    n = trace.n_tokens
    out = {k: np.empty(n) for k in ("score", "lower", "upper", "joint")}
    for i, event in enumerate(trace_events(trace)):
        values = reader.read(event)
        if isinstance(values, tuple):  # the trace lacks what the statistic reads
            raise SystemExit(f"early_block.py: trace {trace.id} lacks {values[0]}")
        s = state.update(values)
        m = 0 if limit is None else max(limit - state.t, 0)
        rise = max(
            sum(_best_rise(a, coef[j], k) for j, a in enumerate(state.aggregates))
            for k in range(m + 1)
        )
        out["score"][i], out["lower"][i], out["upper"][i] = s, state.lower(), state.ceiling()
        out["joint"][i] = min(out["upper"][i], s + rise)
    return out


def _path(cert: Certificate, r: dict[str, np.ndarray], upper: np.ndarray) -> FittedPath:
    return FittedPath(r["score"], r["lower"], upper, cert.context.max_tokens)


def _evaluate(paths: list[Any], correct: np.ndarray, policy: Any) -> dict[str, Any]:
    crit = np.array([critical_score(p, policy) for p in paths])
    rng = np.random.default_rng(SEED)
    coverage, reads, medians, refused = [], [], [], 0
    for _ in range(SPLITS):
        perm = rng.permutation(len(paths))
        cal, test = perm[: len(paths) // 2], perm[len(paths) // 2 :]
        try:
            tau = ltt_threshold(crit[cal], ~correct[cal], RISK, DELTA).tau
        except InsufficientDataError:
            refused += 1
            coverage.append(0.0)
            continue
        shown = crit[test] >= tau
        coverage.append(float(shown.mean()))
        read = [stop_at(paths[i], policy, tau) / paths[i].scores.size
                for i in test[~shown] if paths[i].scores.size]  # fmt: skip
        reads.append(float(np.mean(read)))
        medians.append(float(np.median(read)))
    return {"coverage_mean": float(np.mean(coverage)), "refused": refused,
            "blocked_read_mean": float(np.mean(reads)) if reads else None,
            "blocked_read_median": float(np.mean(medians)) if medians else None}  # fmt: skip


def _fit(traces: Path, out: Path, *extra: str) -> Certificate:
    context = ROOT / "guardrail" / "data" / "smollm2_context.json"
    subprocess.run([sys.executable, "-m", "adapters.cli", "fit", "--traces", str(traces),
                    "--context", str(context), "--fit-fraction", "1", "--out", str(out),
                    *extra], check=True, capture_output=True, cwd=ROOT)  # fmt: skip
    return Certificate.load(out)


def run(shared: Path) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as t:
        a, b = halves(shared / "triviaqa_smollm2.jsonl", Path(t))
        train, test = read_traces(a), read_traces(b)
        correct = np.array([bool(x.correct) for x in test])
        cert = _fit(a, Path(t) / "answer.json", "--early-block", "none")
        rb = [_replay(cert, x) for x in test]
        fitted_right = [x for x in train if x.correct and x.n_tokens]
        rises = np.concatenate(
            [r["score"][-1] - r["score"] for r in (_replay(cert, x) for x in fitted_right)]
        )
        below = sum(bool((r["joint"] < r["score"][-1] - 1e-9).any()) for r in rb if r["score"].size)
        rows["exact"] = _evaluate([_path(cert, r, r["upper"]) for r in rb], correct, cert.policy)
        rows["joint"] = _evaluate([_path(cert, r, r["joint"]) for r in rb], correct, cert.policy)
        rows["joint"]["answers_whose_bound_fell_below_their_final_score"] = below
        for q in GATES:
            m = float(np.quantile(rises, q))
            gated = [_path(cert, r, np.minimum(r["upper"], r["score"] + m)) for r in rb]
            rows[f"gate {q:g}"] = {**_evaluate(gated, correct, cert.policy), "margin": m}
        for q in MARGINS:
            gated = _fit(a, Path(t) / f"margins_{q}.json", "--early-block", q)
            rg = [_replay(gated, x) for x in test]
            rows[f"early block {q}"] = _evaluate([_path(gated, r, r["upper"]) for r in rg],
                                                 correct, gated.policy)  # fmt: skip
        mono = _fit(a, Path(t) / "monotone.json", "--form", "monotone", "--early-block", "none")
        rm = [_replay(mono, x) for x in test]
        rows["monotone"] = _evaluate([_path(mono, r, r["upper"]) for r in rm], correct,
                                     mono.policy)  # fmt: skip
    return {"command": COMMAND, "risk": RISK, "delta": DELTA, "splits": SPLITS,
            "model": "smollm2", "token_limit": cert.context.max_tokens, "rules": rows}  # fmt: skip


def render(data: dict[str, Any]) -> str:
    lines = ["| rule | coverage | refused | blocked answers read (mean / median) |",
             "|---|---:|---:|---|"]  # fmt: skip
    order = ["exact", "joint", *(f"gate {q:g}" for q in GATES),
             *(f"early block {q}" for q in MARGINS), "monotone"]  # fmt: skip
    for name in sorted(data["rules"], key=lambda n: order.index(n) if n in order else 99):
        r = data["rules"][name]
        read = ("-" if r["blocked_read_mean"] is None
                else f"{r['blocked_read_mean']:.0%} / {r['blocked_read_median']:.0%}")  # fmt: skip
        lines.append(f"| {name} | {r['coverage_mean']:.1%} | {r['refused']} | {read} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("traces_dir", type=Path, metavar="SHARED_TRACES_DIR")
    data = run(parser.parse_args().traces_dir)
    if data["rules"]["joint"]["answers_whose_bound_fell_below_their_final_score"]:
        raise SystemExit("early_block.py: the joint bound fell below a final score (invalid)")
    RESULTS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    PAGE.write_text(f"<!-- generated by `{COMMAND}`; do not edit -->\n\n{render(data)}",
                    encoding="utf-8")  # fmt: skip
    print(render(data))
    print(f"wrote {RESULTS} and {PAGE}", file=sys.stderr)


if __name__ == "__main__":
    main()
