"""``liftguard eval``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from ._common import resolve_clip, stream_policy

__all__ = ["cmd_eval"]


def cmd_eval(args: argparse.Namespace) -> int:
    import json

    from .._evaluate import baseline_method, evaluate_methods, lift_method
    from .._scores import BASELINES
    from .._traces import read_traces

    traces = read_traces(args.traces)
    if not traces:
        print(f"error: {args.traces} holds no traces", file=sys.stderr)
        return 2
    if args.top_k is not None:
        traces = [t.truncate_top(args.top_k) for t in traces]
    if args.boundary == "paper":
        print("error: eval supports --boundary betting only for now", file=sys.stderr)
        return 2
    resolve_clip(args, traces[0].vocab_size)
    policy = stream_policy(args)
    exact = args.top_k is None
    methods = [lift_method(traces, policy, args.skeleton, exact=exact)]
    methods += [baseline_method(traces, name, exact=exact) for name in BASELINES]
    correct = np.array([bool(t.correct) for t in traces])
    results = evaluate_methods(
        methods, correct, risk=args.risk, delta=args.delta, splits=args.splits, seed=args.seed
    )
    report = {
        "n": len(traces),
        "risk": args.risk,
        "delta": args.delta,
        "splits": args.splits,
        "top_k": args.top_k if args.top_k is not None else traces[0].top_k,
        "methods": results,
    }
    if args.plot:
        from ._plots import write_plots

        title = f"{Path(args.traces).stem} (n={len(traces)})"
        path = write_plots(args.plot, methods, correct, results, title=title, risk=args.risk)
        print(f"wrote {path} and its figures", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    print(
        f"liftguard eval: {args.traces}  n={len(traces)}  risk {args.risk:g}  "
        f"delta {args.delta:g}  splits {args.splits}"
    )
    print(
        f"  {'method':<14}{'coverage':>9}{'risk':>8}{'violations':>12}{'AUROC':>8}"
        f"{'read':>7}{'median':>8}"
    )
    for name, r in results.items():
        print(
            f"  {name:<14}{r['coverage_mean']:>9.1%}{r['risk_mean']:>8.3f}"
            f"{r['risk_violation_rate']:>12.0%}{r['auroc']:>8.3f}{r['tokens_read_fraction']:>7.0%}"
            f"{r['tokens_read_median']:>8.0%}"
        )
    return 0
