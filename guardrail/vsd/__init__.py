"""Variational Skeleton Design (PyTorch, CPU or CUDA; imported only when called):
``pip install "liftguard[vsd]"``."""

from __future__ import annotations

from ._design import (
    DEFAULT_FLOOR,
    Geometry,
    VSDResult,
    distributions_from_logits,
    distributions_from_traces,
    vsd,
    vsd_objective,
)

__all__ = [
    "DEFAULT_FLOOR",
    "Geometry",
    "VSDResult",
    "distributions_from_logits",
    "distributions_from_traces",
    "vsd",
    "vsd_objective",
]
