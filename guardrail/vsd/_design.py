"""Variational Skeleton Design (VSD): one skeleton vector fitted to many contexts.

Given next-token distributions ``P_x`` of ``N`` contexts (rows of an ``(N, V)``
array), :func:`vsd` finds the skeleton ``S`` on the probability simplex that
minimises the paper's objective (Alg. 2, App. "VSD Convergence Analysis")::

    J(S) = mean_x [ KL(P_x || S) - lam * E_{y ~ P_x} L_B(y; x, S) ],
    L_B = min(max(log P_x(y) - log S(y), 0), B),

with the closed-form gradient ``dJ/dS_y = -mean_x P_x(y)/S_y (1 - lam 1{0 <= log
P_x(y)/S_y <= B})`` (the indicator's interval is closed, as printed; at its two
ends ``J`` has kinks and this is one of the one-sided derivatives). Every
iterate lies in ``{S : S >= floor, sum S = 1}``: the paper's "project onto the
simplex, floor at 1e-8, renormalise" is done as one exact projection onto that
set (sort-based), since renormalising after the floor is not a projection and
can push floored entries below the floor again.

Note: ``J`` is *not* convex, whatever the paper's appendix says: on each
coordinate the lift term bends the KL term down by ``lam`` between ``S = P e^-B``
and ``S = P``, which leaves a concave kink at ``S_y = P_x(y)``. Projected
gradient with a monotone line search still decreases ``J`` at every step and
stops at a stationary point; ``lam = 0`` is the convex special case whose
minimiser is the mean of the rows (the KL "centroid").

Geometry and step size (``geometry=``):

``"scaled"`` (default)
    Scaled gradient projection (Bonettini, Zanella & Zanni 2009) with the
    diagonal scaling ``D = diag(S)``: ``S <- Pi_D(S - eta S * grad)``, where
    ``Pi_D`` is the projection in the ``D^-1``-weighted norm onto the floored
    simplex (exact, sort-based, same code as the Euclidean one). The scaled
    gradient ``S * grad = -mean_x P_x (1 - lam 1{...})`` is bounded by 1 whatever
    ``S`` is, so the step is well conditioned: each iteration first tries
    ``eta = 1 / sum_y S_y |grad_y|``, the fixed-point step
    ``S <- w / sum(w)`` with ``w = mean_x P_x (1 - lam 1{...})`` (which gives the
    mean of the rows in one step when ``lam = 0``).
``"euclidean"``
    The paper's Algorithm 2 as printed: Euclidean projection, first trial step
    ``lr`` (default ``1 / max|grad|``), then twice the last accepted step. It
    is badly conditioned here: the curvature ``P/S^2`` of coordinates with
    little mass is ~1e4 times that of the frequent tokens, so the line search
    keeps the step tiny and the objective-change rule stops far from the
    optimum. On 256 steps of SmolLM2 traces (``benchmarks/bench_vsd.py``) it
    stops after 7 iterations (32 passes) 0.43 nats above the optimum, where
    ``"scaled"`` stops after 2 iterations (3 passes) 0.0003 above it. Kept to
    compare with the paper.

Both accept a step by backtracking (Armijo along the projection arc:
``J(S_new) <= J(S) + 1e-4 <grad, S_new - S>``, halving ``eta`` up to 50 times),
so the objective never increases. The run stops when an accepted step lowers
``J`` by less than ``tol`` (the paper's rule), when the projected step vanishes
(a stationary point), when no step passes the line search, or at ``max_iter``.

Memory and devices: torch is imported lazily (``pip install "liftguard[vsd]"``),
so ``import guardrail`` stays torch-free; how ``P`` is held and passed over in
chunks (``chunk_rows``) is described in :mod:`guardrail.vsd._problem`.

The code lies in private modules, re-exported here: the input checks and the
objective in :mod:`guardrail.vsd._problem`, the optimiser and
:class:`VSDResult` in :mod:`guardrail.vsd._solver`, and the builders of ``P``
in :mod:`guardrail.vsd._data`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import ConfigError
from .._lift import DEFAULT_CLIP
from ._data import distributions_from_logits, distributions_from_traces
from ._problem import INSTALL_HINT, _as_tensor, _check_params, _device, _import_torch, _Problem
from ._solver import FloatArray, VSDResult
from ._solver import Geometry as Geometry
from ._solver import _project as _project
from ._solver import _run as _run

__all__ = [
    "INSTALL_HINT",
    "VSDResult",
    "distributions_from_logits",
    "distributions_from_traces",
    "vsd",
    "vsd_objective",
]

LAMBDA_RANGE = (0.3, 0.7)
DEFAULT_FLOOR = 1e-8


def vsd(
    P: Any,
    *,
    lam: float = 0.5,
    clip: float = DEFAULT_CLIP,
    lr: float | None = None,
    max_iter: int = 200,
    tol: float = 0.01,
    init: Any = None,
    device: Any = "cpu",
    floor: float = DEFAULT_FLOOR,
    geometry: Geometry = "scaled",
    chunk_rows: int | None = None,
) -> VSDResult:
    """Fit one skeleton vector to the next-token distributions ``P`` (paper Alg. 2).

    ``P``: an ``(N, V)`` numpy array or torch tensor whose rows are the
    distributions of ``N`` contexts (from :func:`distributions_from_traces`,
    :func:`distributions_from_logits`, or a local model's full softmax).
    ``lam`` must lie in the paper's range ``[0.3, 0.7]`` (ConfigError
    otherwise); ``clip`` is the lift bound ``B``. ``init``: ``None`` starts
    from the uniform distribution (cold); a length-``V`` vector (e.g. a stored
    skeleton) is a warm start (normalised and projected onto the floored
    simplex first). ``lr`` overrides the first trial step of the line search
    (``"scaled"``: of every iteration, default ``1 / sum_y S_y |grad_y|``;
    ``"euclidean"``: of the first, default ``1 / max|grad|``; later ones try
    twice the last accepted step). ``device``: ``"cpu"``, ``"cuda[:i]"``
    (ConfigError if CUDA is not available) or ``"auto"``. ``chunk_rows``:
    contexts per chunk of a pass (default ``2^19 / V`` on CPU, ``2^26 / V``
    on CUDA). The module docstring describes the algorithm, its step-size
    rule and its stopping rule.
    """
    lo, hi = LAMBDA_RANGE
    try:
        lam_f = float(lam)
    except (TypeError, ValueError):
        lam_f = math.nan
    if not lo <= lam_f <= hi:
        raise ConfigError(f"lam must lie in the paper's range [{lo}, {hi}], got {lam!r}")
    return _run(
        P,
        lam=lam_f,
        clip=clip,
        lr=lr,
        max_iter=max_iter,
        tol=tol,
        init=init,
        device=device,
        floor=floor,
        geometry=geometry,
        chunk_rows=chunk_rows,
    )


def vsd_objective(
    P: Any,
    skeleton: npt.ArrayLike,
    *,
    lam: float = 0.5,
    clip: float = DEFAULT_CLIP,
    device: Any = "cpu",
) -> tuple[float, FloatArray]:
    """``J(S)`` and its closed-form gradient for a given skeleton ``S`` (as in :func:`vsd`).

    ``skeleton`` must be positive; it is used as given (not projected), so that
    the value can be checked against other implementations. Any ``lam`` in
    ``[0, 1)`` is accepted here (``0``: the mean KL alone).
    """
    _import_torch()
    import torch

    _check_params(lam, clip, 0.0, 0, DEFAULT_FLOOR)
    dev = _device(device)
    prob = _Problem(_as_tensor(P, dev), lam, clip, None)
    s = torch.as_tensor(np.array(skeleton, dtype=np.float64), device=dev)
    if s.shape != (prob.v,) or not bool((s > 0).all()):
        raise ConfigError(f"skeleton must be a positive vector of length {prob.v}")
    obj, grad = prob.evaluate(s)
    return obj, grad.to("cpu").numpy()
