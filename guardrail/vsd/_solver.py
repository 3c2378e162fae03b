"""The VSD optimiser and its result: :class:`VSDResult`, :func:`_project`, :func:`_run`.

Projected gradient with a monotone line search, in the ``"scaled"`` or
``"euclidean"`` geometry, over the floored simplex; the algorithm, its
step-size rule and its stopping rule are described in :mod:`guardrail.vsd._design`,
which re-exports everything here that other code uses.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from .._errors import ConfigError
from ._problem import _as_tensor, _check_params, _device, _import_torch, _Problem

if TYPE_CHECKING:
    import torch

__all__ = ["VSDResult"]

# Logged under the name of the public module, guardrail.vsd._design.
logger = logging.getLogger("guardrail.vsd._design")

FloatArray = npt.NDArray[np.float64]
Geometry = Literal["scaled", "euclidean"]

_ARMIJO = 1e-4  # sufficient-decrease constant of the line search
_MAX_HALVINGS = 50
_TINY_SLOPE = 1e-15  # a predicted decrease below this counts as a vanished step


# --------------------------------------------------------------------------- #
# Result
# --------------------------------------------------------------------------- #


@dataclass(frozen=True, eq=False)
class VSDResult:
    """Outcome of :func:`vsd`.

    ``skeleton``: the fitted ``S`` (read-only float64, ``>= floor``, sums to 1
    up to rounding). ``objective``: ``J`` at the start and after each accepted
    step (``iterations + 1`` values, non-increasing). ``converged``: stopped by
    the ``tol`` rule or at a stationary point (``stop_reason`` ``"tol"`` or
    ``"stationary"``), not by ``"max_iter"`` or a failed ``"line_search"``.
    ``evaluations``: passes over ``P`` (one per line-search trial, plus the
    start). ``seconds``: wall time of the whole call.

    Examples
    --------
        >>> import numpy as np
        >>> P = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1]])
        >>> result = vsd(P, max_iter=50)
        >>> result.skeleton.shape, result.vocab_size, round(float(result.skeleton.sum()), 6)
        ((3,), 3, 1.0)
    """

    skeleton: FloatArray
    objective: list[float]
    iterations: int
    converged: bool
    stop_reason: str
    seconds: float
    device: str
    lam: float
    clip: float
    floor: float
    geometry: str
    evaluations: int
    warm_start: bool
    n_contexts: int
    vocab_size: int

    def log_skeleton(self) -> FloatArray:
        """``log S`` (float64)."""
        return np.asarray(np.log(self.skeleton), dtype=np.float64)

    def to_dict(self) -> dict[str, Any]:
        """Everything but the vector, as JSON data (for a skeleton-store manifest)."""
        return {
            "objective": [float(x) for x in self.objective],
            "iterations": self.iterations,
            "converged": self.converged,
            "stop_reason": self.stop_reason,
            "seconds": self.seconds,
            "device": self.device,
            "lam": self.lam,
            "clip": self.clip,
            "floor": self.floor,
            "geometry": self.geometry,
            "evaluations": self.evaluations,
            "warm_start": self.warm_start,
            "n_contexts": self.n_contexts,
            "vocab_size": self.vocab_size,
        }

    def __repr__(self) -> str:
        return (
            f"VSDResult(iterations={self.iterations}, converged={self.converged}, "
            f"stop_reason={self.stop_reason!r}, objective={self.objective[-1]:.6g}, "
            f"seconds={self.seconds:.3g}, device={self.device!r}, V={self.vocab_size})"
        )


# --------------------------------------------------------------------------- #
# Projection onto the floored simplex
# --------------------------------------------------------------------------- #


def _project(v: torch.Tensor, d: torch.Tensor, floor: float) -> torch.Tensor:
    """``argmin_s sum_y (s_y - v_y)^2 / d_y`` over ``{s >= floor, sum s = 1}`` (``d > 0``).

    The solution is ``max(v - theta d, floor)``. With ``b = (v - floor)/d``
    sorted descending, coordinate ``k`` is above the floor iff ``b_k >
    theta*``, and ``theta_k`` (the level if the first ``k`` are above it) is
    ``< b_k`` exactly for those ``k``: the last such ``k`` gives ``theta*``.
    ``d = 1`` is the Euclidean projection.
    """
    import torch

    n = v.shape[0]
    b = (v - floor) / d
    order = torch.argsort(b, descending=True)
    k = torch.arange(1, n + 1, dtype=v.dtype, device=v.device)
    theta = (torch.cumsum(v[order], 0) - 1.0 + (n - k) * floor) / torch.cumsum(d[order], 0)
    j = int(torch.nonzero(theta < b[order])[-1])
    return torch.clamp(v - theta[j] * d, min=floor)


# --------------------------------------------------------------------------- #
# The optimiser
# --------------------------------------------------------------------------- #


def _init_vector(init: Any, n: int, floor: float, dev: torch.device) -> torch.Tensor:
    import torch

    if init is None:
        return torch.full((n,), 1.0 / n, dtype=torch.float64, device=dev)
    if isinstance(init, torch.Tensor):
        s = init.detach().to(device=dev, dtype=torch.float64).reshape(-1)
    else:
        s = torch.as_tensor(np.array(init, dtype=np.float64).ravel(), device=dev)
    if s.shape[0] != n:
        raise ConfigError(f"init has {s.shape[0]} entries, P has {n} columns")
    if not bool(torch.isfinite(s).all()) or bool((s < 0).any()) or float(s.sum()) <= 0:
        raise ConfigError("init must be finite, non-negative and not all zero")
    return _project(s / s.sum(), torch.ones_like(s), floor)


def _run(
    P: Any,
    *,
    lam: float,
    clip: float,
    lr: float | None,
    max_iter: int,
    tol: float,
    init: Any,
    device: Any,
    floor: float,
    geometry: Geometry,
    chunk_rows: int | None,
) -> VSDResult:
    """:func:`vsd` without the check that ``lam`` lies in the paper's range (tests use 0)."""
    _import_torch()
    import torch

    start = time.perf_counter()
    _check_params(lam, clip, tol, max_iter, floor)
    if geometry not in ("scaled", "euclidean"):
        raise ConfigError(f"geometry must be 'scaled' or 'euclidean', got {geometry!r}")
    if lr is not None and not (math.isfinite(lr) and lr > 0):
        raise ConfigError(f"lr must be a finite number > 0, got {lr!r}")
    dev = _device(device)
    prob = _Problem(_as_tensor(P, dev), lam, clip, chunk_rows)
    if floor * prob.v >= 1.0:
        raise ConfigError(f"floor * V must be < 1, got {floor} * {prob.v}")
    S = _init_vector(init, prob.v, floor, dev)
    J, g = prob.evaluate(S)
    trace = [J]
    ones = torch.ones_like(S)
    eta = 0.0
    stop = "max_iter"
    for it in range(max_iter):
        if geometry == "scaled":
            d = S
            eta = lr if lr is not None else 1.0 / float((S * g.abs()).sum())
        else:
            d = ones
            eta = (lr if lr is not None else 1.0 / float(g.abs().max())) if it == 0 else 2 * eta
        for _ in range(_MAX_HALVINGS):
            S_new = _project(S - eta * d * g, d, floor)
            slope = float(torch.dot(g, S_new - S))
            if not slope < -_TINY_SLOPE:  # the projected step vanished: a stationary point
                stop = "stationary"
                break
            J_new, g_new = prob.evaluate(S_new)
            if J_new <= J + _ARMIJO * slope:
                break
            eta *= 0.5
        else:
            stop = "line_search"
        if stop != "max_iter":
            break
        change = J - J_new
        S, J, g = S_new, J_new, g_new
        trace.append(J)
        logger.debug("vsd iteration %d: J=%.6f change=%.3g eta=%.3g", it + 1, J, change, eta)
        if change < tol:
            stop = "tol"
            break
    skeleton = S.to("cpu", torch.float64).numpy().copy()
    skeleton /= skeleton.sum()
    skeleton.flags.writeable = False
    result = VSDResult(
        skeleton=skeleton,
        objective=trace,
        iterations=len(trace) - 1,
        converged=stop in ("tol", "stationary"),
        stop_reason=stop,
        seconds=time.perf_counter() - start,
        device=str(dev),
        lam=float(lam),
        clip=float(clip),
        floor=float(floor),
        geometry=geometry,
        evaluations=prob.evaluations,
        warm_start=init is not None,
        n_contexts=prob.n,
        vocab_size=prob.v,
    )
    logger.info("%s", result)
    return result
