"""What ``liftguard eval`` prints and writes besides its table: the bootstrap intervals,
the note on methods whose calibration refused on every split, strict JSON."""

from __future__ import annotations

import argparse
import math
from typing import Any

__all__ = ["finite_or_null", "print_intervals", "refusal_note", "share", "trailing_note"]


def share(value: float, width: int) -> str:
    return f"{value:>{width}.0%}" if math.isfinite(value) else f"{'-':>{width}}"


def _interval(lo_hi: list[float], percent: bool) -> str:
    lo, hi = lo_hi
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "-"
    if percent:
        return f"[{100 * lo:+.1f}, {100 * hi:+.1f}] pts"
    return f"[{lo:+.3f}, {hi:+.3f}]"


def print_intervals(
    intervals: dict[str, dict[str, Any]], reference: str | None, replicates: int
) -> None:
    """The certificate's difference to each method (or, without a certificate, each
    method's own intervals), 95% over ``replicates`` resamples of the answers."""
    if reference is None:
        print(f"  95% intervals over {replicates} resamples of the answers:")
        for name, entry in intervals.items():
            auc = entry["auroc"]
            lo, hi = entry["coverage_mean"]
            a = f"[{auc[0]:.3f}, {auc[1]:.3f}]" if math.isfinite(auc[0]) else "-"
            print(f"  {name:<14}AUROC {a}  coverage [{lo:.1%}, {hi:.1%}]")
        return
    print(
        f"  {reference} minus each method, 95% intervals over {replicates} resamples of "
        "the answers (an interval that excludes 0 is a real difference):"
    )
    for name, entry in intervals.items():
        diff = entry.get(f"{reference}_minus")
        if diff is None:
            continue
        print(
            f"  {name:<14}AUROC {_interval(diff['auroc'], False):<18}"
            f"coverage {_interval(diff['coverage_mean'], True)}"
        )


def refusal_note(args: argparse.Namespace, n: int, results: dict[str, dict[str, Any]]) -> str:
    """Mark each method whose calibration refused on every split (``all_refused``,
    and then ``refusal_reason`` and ``needed_answered``) and return a note that
    says which methods and why; ``""`` if every method calibrated at least once."""
    from guardrail._bounds import min_answered_for_risk
    from guardrail._calibration import first_test_level

    n_cal = round(n * 0.5)  # the calibration half of each split
    level = first_test_level(n_cal, args.risk, args.delta)
    needed = min_answered_for_risk(args.risk, level)
    target = f"risk {args.risk:g} at delta {args.delta:g} (its first test at level {level:.3g})"
    if getattr(args, "procedure", "") == "conformal":
        reason = (
            f"the conformal threshold showed nothing at risk {args.risk:g} in any split: "
            f"even the top-scored answers had too many wrong calibration answers at or "
            f"above them (each calibration half has {n_cal} of the {n} traces)"
        )
    elif n_cal < needed:
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


def trailing_note(
    args: argparse.Namespace,
    results: dict[str, dict[str, Any]],
    intervals: dict[str, dict[str, Any]],
    scores: tuple[str, ...],
) -> str:
    """Where a method certifies more than the certificate, a note naming the best of them,
    the bootstrap interval of the difference when there is one, and what to do about it
    (``scores``: the methods ``liftguard calibrate --score`` can make a certificate of);
    ``""`` without a certificate, or where it certifies at least as much as every
    method."""
    cert = results.get("certificate")
    others = [n for n, r in results.items()
              if n != "certificate" and math.isfinite(r["coverage_mean"])]  # fmt: skip
    if cert is None or not others:
        return ""
    best = max(others, key=lambda n: results[n]["coverage_mean"])
    if results[best]["coverage_mean"] <= cert["coverage_mean"]:
        return ""
    text = (
        f"{best} certifies more than the certificate here: {results[best]['coverage_mean']:.1%} "
        f"of the answers against {cert['coverage_mean']:.1%} at risk {args.risk:g}"
    )
    diff = intervals.get(best, {}).get("certificate_minus")
    if diff is not None:
        lo, hi = diff["coverage_mean"]
        if math.isfinite(lo) and math.isfinite(hi):
            verdict = "a tie within the noise" if lo <= 0 <= hi else "a real difference"
            text += f" (certificate minus {best}: {_interval([lo, hi], True)}, {verdict})"
    else:
        text += " (--bootstrap 200 says whether that is more than noise)"
    if best in scores:
        text += (
            f". A single-score certificate of it: 'liftguard calibrate --score {best} "
            f"--traces ... --risk {args.risk:g} --out ...'; or refit with 'liftguard fit "
            "--select coverage', which also weighs the single scores"
        )
    return text + "."


def finite_or_null(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by ``None`` (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(v) for v in value]
    return value
