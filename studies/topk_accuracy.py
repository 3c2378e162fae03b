"""Accuracy of top-k compensation against the exact full-vocabulary values.

``python -m studies.topk_accuracy [TRACES_DIR]`` reads ``triviaqa_gemma3.jsonl``
and ``triviaqa_smollm2.jsonl`` from ``TRACES_DIR`` (default
``../shared/data/traces`` next to the repository root), keeps the top ``k`` in
{1, 5, 10, 20} log-probabilities of every answer token and compares, per model:

* per token: mean / median absolute error of the entropy, of ``log Z_1.5`` and
  ``log Z_2.0``, and of the log-probability of a censored token (the expected
  log-probability of a token drawn from outside the top k, exactly
  ``-(H - H_topk) / M`` in the traces; tokens with ``M > 1e-3`` only, below
  that the exact value is rounding noise). Estimators: ``naive`` uses the
  top-k only (the tail ignored; for the censored token ``log p_k``, the only
  bound the API gives), ``paper`` and ``anchored`` are the two tail rules of
  :func:`guardrail.topk.fit_tail`.
* per answer: the temperature-skeleton budget ``mean_t clip(logp - (logp/T -
  log Z_T), 0, 12)`` with estimated vs exact ``log Z_T``: mean absolute error
  over answers (answers with no tokens left out) and the share of answers whose
  decision ``budget >= tau`` flips, at ``tau`` = the median exact budget.
  ``naive+corr`` adds the paper's ``log(1 + M / S_typical)`` to every naive
  lift with ``S_typical`` = the naive skeleton probability of the emitted token
  (greedy traces never emit a token outside the top k, so as printed the
  correction would never apply).

Then the per-token time of the estimators (entropy and both ``log Z_T``): the
batch functions over all tokens, and the scalar path (``fit_tail`` once, the
three estimates with ``tail=``), best of 3, ``time.perf_counter``.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from guardrail import StreamPolicy
from guardrail.paper import topk_compensated_lift
from guardrail.topk import (
    TailRule,
    censored_logprob_batch,
    estimate_entropy,
    estimate_entropy_batch,
    estimate_logz,
    estimate_logz_batch,
    fit_tail,
)
from guardrail.traces import read_traces

Floats = npt.NDArray[np.float64]
MODELS = {"gemma3": "triviaqa_gemma3.jsonl", "smollm2": "triviaqa_smollm2.jsonl"}
KS = (1, 5, 10, 20)
TEMPS = (1.5, 2.0)
RULES: tuple[TailRule, ...] = ("paper", "anchored")
DEFAULT_DIR = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "traces"


class Data:
    """All answer tokens of one trace file, concatenated."""

    def __init__(self, path: Path) -> None:
        traces = read_traces(path)
        self.n_answers = len(traces)
        self.vocab = traces[0].vocab_size
        self.top = np.concatenate([t.top_logprobs for t in traces])
        self.logprob = np.concatenate([t.logprobs for t in traces])
        self.entropy = np.concatenate([t.entropy for t in traces])
        self.logz = {t: np.concatenate([tr.logz[t] for tr in traces]) for t in TEMPS}
        self.answer = np.repeat(np.arange(len(traces)), [t.n_tokens for t in traces])
        self.n_tokens = np.bincount(self.answer, minlength=self.n_answers)

    def budgets(self, lifts: Floats) -> Floats:
        """Per-answer mean of clipped lifts (answers with tokens only)."""
        x = np.clip(lifts, 0.0, StreamPolicy().clip)
        sums = np.bincount(self.answer, weights=x, minlength=self.n_answers)
        keep = self.n_tokens > 0
        return np.asarray(sums[keep] / self.n_tokens[keep], dtype=np.float64)


def _fmt(x: float) -> str:
    return f"{x:.3f}"


def accuracy_tables(d: Data) -> tuple[list[str], list[str]]:
    """Markdown rows of the per-token table and of the budget table."""
    token_rows, budget_rows = [], []
    for k in KS:
        top = d.top[:, :k]
        p = np.exp(top)
        mass = 1.0 - p.sum(axis=1)
        h_top = -(p * top).sum(axis=1)
        naive_z = {t: np.log((p ** (1 / t)).sum(axis=1)) for t in TEMPS}
        est: dict[str, dict[str, Floats]] = {
            "naive": {"entropy": h_top, **{f"log Z_{t}": naive_z[t] for t in TEMPS}}
        }
        est["naive"]["censored"] = top[:, -1]
        for rule in RULES:
            est[rule] = {
                "entropy": estimate_entropy_batch(top, d.vocab, rule=rule),
                **{f"log Z_{t}": estimate_logz_batch(top, d.vocab, t, rule=rule) for t in TEMPS},
                "censored": censored_logprob_batch(top, d.vocab, rule=rule),
            }
        keep = mass > 1e-3
        exact = {
            "entropy": d.entropy,
            **{f"log Z_{t}": d.logz[t] for t in TEMPS},
            "censored": -(d.entropy - h_top) / np.maximum(mass, 1e-12),
        }
        for q, truth in exact.items():
            sel = keep if q == "censored" else np.ones_like(keep)
            cells = []
            for m in est:
                err = np.abs(est[m][q][sel] - truth[sel])
                cells += [_fmt(float(err.mean())), _fmt(float(np.median(err)))]
            token_rows.append(f"| {k} | {q} | " + " | ".join(cells) + " |")
        for t in TEMPS:
            exact_b = d.budgets(d.logprob * (1 - 1 / t) + d.logz[t])
            tau = float(np.median(exact_b))
            lifts = {m: d.logprob * (1 - 1 / t) + est[m][f"log Z_{t}"] for m in est}
            skel = d.logprob / t - naive_z[t]
            lifts["naive+corr"] = np.array(
                [
                    topk_compensated_lift(float(x), float(mm), math.exp(s))
                    for x, mm, s in zip(lifts["naive"], np.maximum(mass, 0.0), skel, strict=True)
                ]
            )
            cells = []
            for m in ("naive", *RULES, "naive+corr"):
                b = d.budgets(lifts[m])
                flips = float(((b >= tau) != (exact_b >= tau)).mean())
                cells += [_fmt(float(np.abs(b - exact_b).mean())), f"{100 * flips:.1f}%"]
            budget_rows.append(f"| {k} | {t} | {tau:.2f} | " + " | ".join(cells) + " |")
    return token_rows, budget_rows


def _best(fn: Callable[[], object], repeat: int = 3) -> float:
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def timing_rows(d: Data, name: str) -> list[str]:
    """Microseconds per token: batch functions and the scalar path."""
    rows = []
    n_scalar = min(500, len(d.top))
    for k in (5, 20):
        top = np.ascontiguousarray(d.top[:, :k])
        for rule in RULES:

            def batch(top: Floats = top, rule: TailRule = rule) -> None:
                estimate_entropy_batch(top, d.vocab, rule=rule)
                for t in TEMPS:
                    estimate_logz_batch(top, d.vocab, t, rule=rule)

            def scalar(top: Floats = top[:n_scalar], rule: TailRule = rule) -> None:
                for row in top:
                    tail = fit_tail(row, d.vocab, rule=rule)
                    estimate_entropy(row, d.vocab, tail=tail)
                    for t in TEMPS:
                        estimate_logz(row, d.vocab, t, tail=tail)

            us_batch = _best(batch) / len(top) * 1e6
            us_scalar = _best(scalar) / n_scalar * 1e6
            rows.append(f"| {name} | {k} | {rule} | {us_batch:.1f} | {us_scalar:.0f} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("traces", nargs="?", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args(argv)
    timings = []
    for name, fname in MODELS.items():
        d = Data(args.traces / fname)
        print(f"\n## {name}: {d.n_answers} answers, {len(d.top)} tokens, V = {d.vocab}\n")
        token_rows, budget_rows = accuracy_tables(d)
        head = ["naive", "paper", "anchored"]
        print("Per-token absolute error (mean / median):\n")
        print("| k | quantity | " + " | ".join(f"{m} mean | {m} med" for m in head) + " |")
        print("|---|---|" + "---:|" * 6)
        print("\n".join(token_rows))
        head += ["naive+corr"]
        print("\nTemperature-skeleton budget: mean |error| over answers / decision flips:\n")
        print("| k | T | tau | " + " | ".join(f"{m} err | {m} flips" for m in head) + " |")
        print("|---|---|---:|" + "---:|" * 8)
        print("\n".join(budget_rows))
        timings += timing_rows(d, name)
    print("\n## Time per token (entropy + log Z_1.5 + log Z_2.0), microseconds\n")
    print("| model | k | rule | batch | scalar |")
    print("|---|---|---|---:|---:|")
    print("\n".join(timings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
