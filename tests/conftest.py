"""Pins the BLAS kernels that the shipped certificates were fitted with, before numpy loads.

numpy's bundled OpenBLAS picks its kernels by CPU when it loads (``DYNAMIC_ARCH``): another
CPU family adds the same products in another order, and a fitted number then differs in
its last digits. The shipped certificates were fitted with the ``SkylakeX`` kernels (any
x86-64 CPU with AVX-512 can run them, AMD's included), so the tests pin those where the
CPU can, and the byte-for-byte checks hold on every such machine
(:mod:`reference_blas` says whether the pin took)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REFERENCE_CORETYPE = "SkylakeX"
_NEEDS = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


_FREE = "OPENBLAS_CORETYPE" not in os.environ and "numpy" not in sys.modules
if _FREE and _cpu_flags() >= _NEEDS:
    os.environ["OPENBLAS_CORETYPE"] = REFERENCE_CORETYPE
