"""Whether this test run computes what the shipped certificates were fitted with, and the
comparison of a remade file with the shipped one that follows from it.

The fit adds its products without BLAS, so its sums are the same on every CPU; what still
moves with the CPU is numpy's ``exp`` and ``log``, which take their own AVX-512 paths
(numpy's ``X86_V4`` dispatch target) where the CPU has them and the C library's elsewhere,
with other last digits. The shipped certificates were fitted with the AVX-512 paths: there
a remade file equals the shipped one byte for byte; elsewhere every string, key and count
is equal and every other number within a relative 1e-9, and the failure names which."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np
import pytest

_FEATURES: dict[str, bool] = np._core._multiarray_umath.__cpu_features__
REFERENCE = _FEATURES.get("X86_V4", False) and "X86_V4" not in os.environ.get(
    "NPY_DISABLE_CPU_FEATURES", ""
)
"""numpy runs the ``exp`` and ``log`` paths the shipped certificates were fitted with."""

RTOL = 1e-9


def same_file(made: str, shipped: str, name: str) -> None:
    """``made == shipped`` under numpy's AVX-512 paths, else within :data:`RTOL`; a failure
    names the first line that differs."""
    if made == shipped:
        return
    if not REFERENCE and _close(json.loads(made), json.loads(shipped)):
        return
    pairs = zip(made.splitlines(), shipped.splitlines(), strict=False)
    line, (got, want) = next(((i, p) for i, p in enumerate(pairs, 1) if p[0] != p[1]),
                             (0, ("", "")))  # fmt: skip
    kernels = "numpy's AVX-512 paths" if REFERENCE else "numpy's other exp and log (within 1e-9)"
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
