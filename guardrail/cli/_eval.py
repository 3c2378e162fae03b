"""``liftguard eval``."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ._common import CommandError, no_traces, resolve_clip, stream_policy

__all__ = ["cmd_eval"]


def cmd_eval(args: argparse.Namespace) -> int:
    from .._evaluate import baseline_method, evaluate_methods, lift_method
    from .._scores import BASELINES
    from .._traces import read_traces

    if args.boundary == "paper":
        raise CommandError("eval supports --boundary betting only for now", status=2)
    traces = read_traces(args.traces)
    if not traces:
        raise no_traces(args.traces)
    if args.top_k is not None:
        traces = [t.truncate_top(args.top_k) for t in traces]
    resolve_clip(args, traces[0].vocab_size)
    policy = stream_policy(args)
    exact = args.top_k is None
    methods = [lift_method(traces, policy, args.skeleton, exact=exact)]
    methods += [baseline_method(traces, name, exact=exact) for name in BASELINES]
    correct = np.array([bool(t.correct) for t in traces])
    results = evaluate_methods(
        methods, correct, risk=args.risk, delta=args.delta, splits=args.splits, seed=args.seed
    )
    note = _refusal_note(args, len(traces), results)
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
    if note:
        print(f"liftguard eval: note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(_finite_or_null(report), indent=2, sort_keys=True, allow_nan=False))
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
        if r["all_refused"]:  # nothing was ever calibrated: no coverage, risk or reading
            print(f"  {name:<14}{'refused':>9}{'-':>8}{'-':>12}{r['auroc']:>8.3f}{'-':>7}{'-':>8}")
            continue
        print(
            f"  {name:<14}{r['coverage_mean']:>9.1%}{r['risk_mean']:>8.3f}"
            f"{r['risk_violation_rate']:>12.0%}{r['auroc']:>8.3f}{r['tokens_read_fraction']:>7.0%}"
            f"{r['tokens_read_median']:>8.0%}"
        )
    return 0


def _refusal_note(args: argparse.Namespace, n: int, results: dict[str, dict[str, Any]]) -> str:
    """Mark each method whose calibration refused on every split (``all_refused``,
    and then ``refusal_reason`` and ``needed_answered``) and return a note that
    says which methods and why; ``""`` if every method calibrated at least once."""
    from .._bounds import min_answered_for_risk

    needed = min_answered_for_risk(args.risk, args.delta)
    n_cal = round(n * 0.5)  # the calibration half of each split
    target = f"risk {args.risk:g} at delta {args.delta:g}"
    if n_cal < needed:
        reason = (
            f"{target} needs at least {needed} answered calibration examples even with "
            f"zero errors, but each calibration half has only {n_cal} of the {n} traces"
        )
    else:
        reason = (
            f"at no threshold were the answered calibration examples right often enough to "
            f"certify {target} ({needed} answered examples are needed even with zero errors, "
            f"more with errors; each calibration half has {n_cal} of the {n} traces)"
        )
    refused = []
    for name, r in results.items():
        r["all_refused"] = r["refused"] == args.splits
        if r["all_refused"]:
            r["refusal_reason"] = reason
            r["needed_answered"] = needed
            refused.append(name)
    if not refused:
        return ""
    which = "every method" if len(refused) == len(results) else ", ".join(refused)
    return (
        f"calibration refused on all {args.splits} splits for {which}, which therefore "
        f"answer nothing: {reason}. Add calibration data or relax --risk/--delta."
    )


def _finite_or_null(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by ``None`` (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_or_null(v) for v in value]
    return value
