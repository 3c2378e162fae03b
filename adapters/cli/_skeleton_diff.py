"""``liftguard skeleton diff`` of two certificate versions: what a reader decides on.

Two versions that hold certificates and no skeleton arrays are compared on what changes
a deployment's promise and its traffic: the threshold, the risk target, the calibration
coverage, the generation context and the statistic. Skeleton versions keep the full
JSON diff (arrays, fields, the TV distance and its budget shift bound), as does
``--json``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from guardrail import Certificate

__all__ = ["certificate_comparison"]

_FIXED = frozenset(
    {"version", "created_at", "parent", "certificate", "calibration", "blob", "manifest_sha256"}
)


def certificate_comparison(store: Any, name: str, a: str, b: str) -> str | None:
    """A few lines comparing versions ``a`` and ``b`` of ``name``, or ``None`` unless both
    hold a certificate and neither holds a skeleton (then the JSON diff applies)."""
    va, vb = store.get(name, a), store.get(name, b)
    if any(v.holds_skeleton() or "certificate" not in v.manifest for v in (va, vb)):
        return None
    ca, cb = va.certificate(), vb.certificate()
    lines = [f"{name} {va.tag} -> {vb.tag}: certificates"]
    for row, compare in _ROWS:
        lines.append(f"  {row:<11}{compare(ca, cb)}")
    others = sorted(
        k
        for k in (set(va.manifest) | set(vb.manifest)) - _FIXED
        if va.manifest.get(k) != vb.manifest.get(k)
    )
    if others:
        lines.append(f"  also changed {', '.join(others)} (--json for the full diff)")
    return "\n".join(lines)


def _risk(cert: Certificate) -> str:
    cal = cert.calibration
    return "none (not calibrated)" if cal is None else f"{cal.risk:g} at delta {cal.delta:g}"


def _coverage(cert: Certificate) -> str:
    cal = cert.calibration
    if cal is None:
        return "none (not calibrated)"
    return f"{cal.coverage:.1%} of {cal.n} calibration answers ({cal.method})"


def _context(a: Certificate, b: Certificate) -> str:
    """The settings that differ, old -> new; or which are recorded, if none differs."""
    old, new = asdict(a.context), asdict(b.context)
    changed = [f"{k} {_short(old[k])} -> {_short(new[k])}" for k in old if old[k] != new[k]]
    if changed:
        return "; ".join(changed)
    recorded = [k for k, v in old.items() if v not in (None, (), [])]
    return f"{', '.join(recorded)} recorded (same)" if recorded else "not recorded (same)"


def _statistic(cert: Certificate) -> str:
    stat = cert.statistic
    if stat is not None:
        return (
            f"fitted logistic over {len(stat.features)} features (group {stat.group}, "
            f"form {stat.form}, {stat.alternatives} alternatives)"
        )
    p = cert.policy
    return f"lift, skeleton {cert.skeleton.kind}, {p.boundary} boundary, {p.aggregate} rule"


def _short(value: object, width: int = 30) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _change(describe: Callable[[Certificate], str]) -> Callable[[Certificate, Certificate], str]:
    """Compare two certificates by one description: ``old -> new``, or ``old (same)``."""

    def compare(a: Certificate, b: Certificate) -> str:
        old, new = describe(a), describe(b)
        return f"{old} (same)" if old == new else f"{old} -> {new}"

    return compare


_ROWS: tuple[tuple[str, Callable[[Certificate, Certificate], str]], ...] = (
    ("tau", _change(lambda cert: f"{cert.tau:g}")),
    ("risk", _change(_risk)),
    ("coverage", _change(_coverage)),
    ("context", _context),
    ("statistic", _change(_statistic)),
)
