"""The Markdown report of ``warm_start_real.py`` and strict-JSON conversion."""

from __future__ import annotations

import math
from typing import Any

from _warm_start_vsd import GEOMETRIES


def _f(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def json_safe(x: Any) -> Any:
    """NaN and infinities as null (strict JSON)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


def markdown(report: dict[str, Any]) -> str:
    s = report["settings"]
    lines = [f"# Warm-start VSD after a real model change: SmolLM2 Q4_1 -> {s['qtype']}\n"]
    ch = report.get("change")
    if ch:
        m = ch["measured"]
        bb, br, aa = (
            m["b_scored_vs_a_scored"],
            m["b_scored_vs_a_recorded"],
            m["a_scored_vs_a_recorded"],
        )
        lines += [
            f"Model change, teacher-forced on A's answers to {m['n_answers']} questions "
            f"({bb['n_tokens']} tokens), mean |delta log p| per token (nats):\n",
            "| comparison | mean | median | p95 | max |",
            "|---|---:|---:|---:|---:|",
        ]
        for label, d in (
            ("B vs A, both scored in one batch", bb),
            ("B (batch) vs A's recorded values (incremental)", br),
            ("A (batch) vs A's recorded values: noise floor", aa),
        ):
            lines.append(
                f"| {label} | {d['mean_abs']:.4f} | {d['median_abs']:.4f} | "
                f"{d['p95_abs']:.4f} | {d['max_abs']:.3f} |"
            )
        if ch.get("sweep"):
            lines += [
                "\nOther re-quantisations of A, same measure (B vs A, both in one batch):\n",
                "| type | MB | mean | median | p95 |",
                "|---|---:|---:|---:|---:|",
            ]
            for q, r in ch["sweep"].items():
                d = r["b_scored_vs_a_scored"]
                lines.append(
                    f"| {q} | {r['bytes'] / 1e6:.1f} | {d['mean_abs']:.4f} | "
                    f"{d['median_abs']:.4f} | {d['p95_abs']:.4f} |"
                )
        rc = report["model_a"].get("reproduction_check")
        if rc:
            d = rc.get("logprob_diff_on_identical_answers", {})
            lines.append(
                f"\nCheck: the trace code regenerates A's first {rc['n']} answers "
                f"{rc['identical_answers']:.0%} identically (mean |delta log p| "
                f"{_f(d.get('mean_abs'), 4)})."
            )
        ab = report["traces"]["a_vs_b"]
        lines.append(
            f"\nGreedy answers of the first {ab['n']} questions: {ab['identical_answers']:.1%} "
            f"identical; accuracy A {ab['accuracy_x']:.1%}, B {ab['accuracy_y']:.1%} "
            f"({ab['label_changes']} labels differ).\n"
        )
    v = report["vsd"]
    lines += [
        f"VSD on B's traces: {v['n_contexts']} contexts, V = {v['vocab_size']}, lam = 0.5, "
        f"tol = 0.01; seconds = best of the store call and {s['repeat']} repeats; gap = final "
        f"objective minus the reference optimum; 'to 0.01' = iterations until the objective "
        "is within 0.01 of the optimum.\n",
        "| geometry | start | iterations | passes | seconds | J start | J final | gap | "
        "to 0.01 | stop |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for g in GEOMETRIES:
        for start in ("warm", "cold"):
            r = v[g][start]
            lines.append(
                f"| {g} | {start} | {r['iterations']} | {r['passes']} | {r['seconds_best']:.2f} "
                f"| {r['objective_start']:.4f} | {r['objective_final']:.4f} | "
                f"{r['gap_final']:.4f} | {_f(r['iterations_to_within_tol_of_optimum'])} | "
                f"{r['stop_reason']} |"
            )
    ctl = report.get("vsd_control")
    if ctl:
        for g in GEOMETRIES:
            for start in ("warm", "cold"):
                r = ctl[g][start]
                lines.append(
                    f"| {g} | control: {start} | {r['iterations']} | {r['passes']} | "
                    f"{r['seconds']:.2f} | {r['objective_start']:.4f} | "
                    f"{r['objective_final']:.4f} | {r['gap_final']:.4f} | "
                    f"{_f(r['iterations_to_within_tol_of_optimum'])} | {r['stop_reason']} |"
                )
        lines.append(
            "\nControl rows: no model change; A's skeleton fitted on A's first "
            f"{s['n'] // 2} answers, re-fitted on the other {s['n'] - s['n'] // 2} (gap to "
            "that set's own optimum)."
        )
    lines.append("")
    for g in GEOMETRIES:
        a = v[g]["model_a_cold"]
        lines.append(
            f"- {g}: A's skeleton (cold on A) took {a['iterations']} iterations; on B its "
            f"objective is {v[g]['stale_objective_on_b']:.4f} (reference optimum "
            f"{v['reference_optimum']['objective']:.4f})."
        )
    c = report["coverage"]
    other = report.get("coverage_other_risks", {})
    lines += [
        f"\nCoverage after recalibration on B ({s['n']} answers; calibrate on half, test on "
        f"the other half, {s['splits']} splits; risk {s['risk']}, delta {s['delta']}, "
        f"policy aggregate {s['aggregate']}, clip {s['clip']}):\n",
        "| skeleton | coverage | selective risk | risk violations | AUROC | refused |"
        + "".join(f" coverage @{r} | refused @{r} |" for r in other),
        "|---|---:|---:|---:|---:|---:|" + "---:|---:|" * len(other),
    ]
    for table in ("model_b", "model_a_before_change"):
        for name, r in c[table].items():
            extra = "".join(
                f" {o[table][name]['coverage_mean']:.3f} | {o[table][name]['refused']} |"
                for o in other.values()
            )
            lines.append(
                f"| {name} | {r['coverage_mean']:.3f} | {_f(r['risk_mean'])} | "
                f"{r['risk_violation_rate']:.2f} | {_f(r['auroc'])} | {r['refused']} |" + extra
            )
    return "\n".join(lines)
