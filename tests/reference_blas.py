"""Whether this test run adds products in the order the shipped certificates were fitted
in (``conftest.py`` pins OpenBLAS's kernels where the CPU can run them), and the comparison
of a remade file with the shipped one that follows from it: byte for byte under the
pinned kernels; elsewhere every string, key and count equal and every other number within
a relative 1e-9 (another kernel's last digits), which the failure names."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import pytest

PINNED = os.environ.get("OPENBLAS_CORETYPE") == "SkylakeX"
"""The reference kernels are in force (set before numpy loaded)."""

RTOL = 1e-9


def same_file(made: str, shipped: str, name: str) -> None:
    """``made == shipped`` under the reference kernels, else within :data:`RTOL`; a failure
    names the first line that differs."""
    if made == shipped:
        return
    if not PINNED and _close(json.loads(made), json.loads(shipped)):
        return
    pairs = zip(made.splitlines(), shipped.splitlines(), strict=False)
    line, (got, want) = next(((i, p) for i, p in enumerate(pairs, 1) if p[0] != p[1]),
                             (0, ("", "")))  # fmt: skip
    kernels = "the reference BLAS kernels" if PINNED else "other BLAS kernels (within 1e-9)"
    pytest.fail(f"{name}, under {kernels}: line {line} differs:\n  made    {got}\n"
                f"  shipped {want}")  # fmt: skip


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if not isinstance(a, int | float) or not isinstance(b, int | float):
            return False
        return math.isclose(a, b, rel_tol=RTOL, abs_tol=RTOL)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return a == b
