"""Differences between two skeleton versions, with the eta-robustness bound.

For skeletons that are distributions (an array ``probs`` or ``log_probs``),
``eta`` is the total-variation distance between the two vectors and the
budget shift bound is :func:`guardrail._bounds.eta_budget_shift_bound`
``= min(B, 2 eta / alpha)`` with ``alpha`` the smallest probability of either vector (the
floor). A vector whose sum is off 1 by more than ``1e-6`` but less than
``1e-4`` (float32 rounding) is renormalised before the distance; beyond that
it is not a distribution and the distance is not reported.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np

from guardrail._bounds import eta_budget_shift_bound, tv_distance
from guardrail._lift import DEFAULT_CLIP

from ._version import FloatArray, SkeletonVersion

__all__ = ["ArrayChange", "VersionDiff", "diff_versions"]


class ArrayChange(TypedDict, total=False):
    """How one array changed: ``status`` (``same``, ``changed``, ``added``, ``removed``);
    for arrays in both, their dtypes and shapes (``[a, b]``), and for a changed numeric
    array of one shape the largest absolute difference."""

    status: str
    dtype: list[str]
    shape: list[list[int]]
    max_abs_diff: float


class VersionDiff(TypedDict):
    """What :meth:`SkeletonStore.diff` reports (JSON data)."""

    name: str
    a: int
    b: int
    arrays: dict[str, ArrayChange]
    fields: dict[str, list[object]]
    tv_distance: float | None
    alpha: float | None
    clip: float
    budget_shift_bound: float | None
    note: str


_RENORM_TOL = 1e-4
_SKIP = frozenset({"version", "created_at", "parent", "blob", "arrays", "manifest_sha256"})


def _distribution(v: SkeletonVersion) -> tuple[FloatArray | None, str]:
    if "probs" not in v.arrays and "log_probs" not in v.arrays:
        return None, f"{v.tag} has no 'probs' or 'log_probs' array"
    p = v.probs().ravel()
    total = float(p.sum())
    if p.size == 0 or not np.all(np.isfinite(p)) or np.any(p < 0):
        return None, f"{v.tag}: the vector is not finite and non-negative"
    if abs(total - 1.0) > _RENORM_TOL:
        return None, f"{v.tag}: the vector sums to {total!r}, not 1"
    return (p / total if abs(total - 1.0) > 1e-6 else p), ""


def _array_changes(a: SkeletonVersion, b: SkeletonVersion) -> dict[str, ArrayChange]:
    out: dict[str, ArrayChange] = {}
    for key in sorted(set(a.arrays) | set(b.arrays)):
        if key not in b.arrays:
            out[key] = {"status": "removed"}
            continue
        if key not in a.arrays:
            out[key] = {"status": "added"}
            continue
        xa, xb = a.arrays[key], b.arrays[key]
        rec: ArrayChange = {
            "status": "same" if a.array_sha256[key] == b.array_sha256[key] else "changed",
            "dtype": [xa.dtype.name, xb.dtype.name],
            "shape": [list(xa.shape), list(xb.shape)],
        }
        if rec["status"] == "changed" and xa.shape == xb.shape and xa.dtype.kind in "fiub":
            d = np.abs(xa.astype(np.float64) - xb.astype(np.float64))
            rec["max_abs_diff"] = float(d.max()) if d.size else 0.0
        out[key] = rec
    return out


def diff_versions(
    a: SkeletonVersion, b: SkeletonVersion, *, clip: float = DEFAULT_CLIP
) -> VersionDiff:
    """What changed from ``a`` to ``b``: arrays, manifest fields, TV distance and bound."""
    fields = sorted((set(a.manifest) | set(b.manifest)) - _SKIP)
    changed = {
        k: [a.manifest.get(k), b.manifest.get(k)]
        for k in fields
        if a.manifest.get(k) != b.manifest.get(k)
    }
    out: VersionDiff = {
        "name": a.name,
        "a": a.version,
        "b": b.version,
        "arrays": _array_changes(a, b),
        "fields": changed,
        "tv_distance": None,
        "alpha": None,
        "clip": float(clip),
        "budget_shift_bound": None,
        "note": "",
    }
    pa, why_a = _distribution(a)
    pb, why_b = _distribution(b)
    if pa is None or pb is None:
        out["note"] = why_a or why_b
        return out
    if pa.shape != pb.shape:
        out["note"] = f"vocabulary sizes differ ({pa.size} vs {pb.size})"
        return out
    eta = min(1.0, tv_distance(pa, pb))
    alpha = float(min(pa.min(), pb.min()))
    out["tv_distance"] = eta
    out["alpha"] = alpha
    if alpha > 0.0:
        out["budget_shift_bound"] = eta_budget_shift_bound(eta, alpha, clip)
    else:
        out["budget_shift_bound"] = float(clip)
        out["note"] = "a probability is 0 (no floor): the bound is the clip B"
    return out
