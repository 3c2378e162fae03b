"""How close the certificate's budgets and decisions come to the full-vocabulary
ones when only the top-k alternatives are known (k in 1, 5, 10, 20).

    python benchmarks/topk_decisions.py [TRACES_DIR]

For each model and configuration: the lift certificate is evaluated with exact
full-vocabulary values (from the traces) and with top-k values (compensated
estimates, as from an API), on the same splits. Reported: mean absolute
difference of the final score, share of answers whose decision at the
full-data calibrated threshold agrees (at the median full score when no
threshold can be calibrated), and test coverage at the target risk (20 splits).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from guardrail import (
    InsufficientDataError,
    StreamPolicy,
    ltt_threshold,
    read_traces,
    support_clip,
)
from guardrail.evaluate import evaluate_methods, lift_method

CONFIGS = [
    ("uniform", "lowest", "default: uniform skeleton, lowest-2 aggregate"),
    ("temperature", "mean", "paper: temperature T=1.5, mean aggregate"),
]
TARGETS = {"gemma3": 0.7, "smollm2": 0.8}


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("../shared/data/traces")
    for model, risk in TARGETS.items():
        traces = read_traces(root / f"triviaqa_{model}.jsonl")
        correct = np.array([bool(t.correct) for t in traces])
        print(f"\n### {model} (risk {risk}, delta 0.05, 20 splits)\n")
        print("| configuration | k | mean abs score diff | decision agreement | coverage |")
        print("|---|---:|---:|---:|---:|")
        for skeleton, aggregate, label in CONFIGS:
            if aggregate == "lowest":  # the default certificate, as `liftguard eval` builds it
                policy = StreamPolicy(aggregate="lowest", clip=support_clip(traces[0].vocab_size))
            else:
                policy = StreamPolicy(aggregate="mean")
            full = lift_method(traces, policy, skeleton)
            try:  # the threshold calibrated on all answers with full values
                tau = ltt_threshold(full.decision, ~correct, risk, 0.05).tau
            except InsufficientDataError:  # none passes: compare at the median score
                tau = float(np.median(full.decision[np.isfinite(full.decision)]))
            res = evaluate_methods([full], correct, risk=risk, delta=0.05, splits=20)
            print(f"| {label} | full | 0 | 100% | {res['lift']['coverage_mean']:.1%} |")
            for k in (20, 10, 5, 1):
                cut = [t.truncate_top(k) for t in traces]
                est = lift_method(cut, policy, skeleton, exact=False)
                diff = np.abs(np.nan_to_num(est.final - full.final, posinf=0, neginf=0)).mean()
                agree = ((est.decision >= tau) == (full.decision >= tau)).mean()
                r = evaluate_methods([est], correct, risk=risk, delta=0.05, splits=20)
                print(
                    f"| {label} | {k} | {diff:.3f} | {agree:.1%} | "
                    f"{r['lift']['coverage_mean']:.1%} |"
                )


if __name__ == "__main__":
    main()
