"""Variational Skeleton Design (PyTorch, CPU or CUDA; imported only when called):
``pip install "liftguard[vsd]"``."""

from __future__ import annotations

from ._design import Geometry, VSDResult, distributions_from_traces, vsd, vsd_objective

__all__ = [
    "Geometry",
    "VSDResult",
    "distributions_from_traces",
    "vsd",
    "vsd_objective",
]
