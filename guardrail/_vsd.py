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
so ``import guardrail`` stays torch-free. ``P`` is used in place on the CPU (a
numpy array is wrapped, not copied, when it is float32 or float64, C-ordered)
or copied once to a CUDA device; every pass over it goes through ``chunk_rows``
contexts at a time into preallocated work buffers, so temporary memory is
``O(chunk_rows * V)`` whatever ``N``. One pass (objective and gradient
together) per line-search trial. float32 ``P`` is computed in float32 with
float64 accumulators; ``S``, the gradient and the projection are float64.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from ._errors import ConfigError, MissingDependencyError
from ._lift import DEFAULT_CLIP
from ._topk import DEFAULT_R2_MIN, TailRule, _check_top, _fit
from ._traces import Trace

if TYPE_CHECKING:
    import torch

__all__ = [
    "INSTALL_HINT",
    "VSDResult",
    "distributions_from_logits",
    "distributions_from_traces",
    "vsd",
    "vsd_objective",
]

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]
Geometry = Literal["scaled", "euclidean"]

INSTALL_HINT = 'VSD needs PyTorch: pip install "liftguard[vsd]"'
LAMBDA_RANGE = (0.3, 0.7)
DEFAULT_FLOOR = 1e-8
_ARMIJO = 1e-4  # sufficient-decrease constant of the line search
_MAX_HALVINGS = 50
_TINY_SLOPE = 1e-15  # a predicted decrease below this counts as a vanished step
_ROW_SUM_TOL = 1e-3  # rows of P must sum to 1 within this (float32 rounding over large V)
_CPU_CHUNK = 1 << 19  # elements per chunk: work buffers of a few MB
_CUDA_CHUNK = 1 << 26


def _import_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependencyError(INSTALL_HINT) from exc


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
# Inputs
# --------------------------------------------------------------------------- #


def _device(device: Any) -> torch.device:
    import torch

    if isinstance(device, str) and device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(f"not a torch device: {device!r}") from exc
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"device must be 'cpu', 'cuda[:i]' or 'auto', got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device='cuda' was asked for but CUDA is not available")
    return dev


def _as_tensor(P: Any, dev: torch.device) -> torch.Tensor:
    """``P`` as a 2-d float32/float64 tensor on ``dev`` (no copy when it already is one)."""
    import torch

    if isinstance(P, torch.Tensor):
        t = P.detach()
        if t.dtype not in (torch.float32, torch.float64):
            t = t.to(torch.float64)
    else:
        arr = np.asarray(P)
        if arr.dtype not in (np.float32, np.float64):
            arr = arr.astype(np.float64)
        with warnings.catch_warnings():  # a read-only array is fine: P is never written
            warnings.simplefilter("ignore", UserWarning)
            t = torch.from_numpy(np.ascontiguousarray(arr))
    if t.ndim != 2 or t.shape[0] < 1 or t.shape[1] < 2:
        raise ConfigError(f"P must be an (N, V) array with N >= 1, V >= 2, got {tuple(t.shape)}")
    return t.to(dev).contiguous()


def _check_params(lam: float, clip: float, tol: float, max_iter: int, floor: float) -> None:
    if not (math.isfinite(lam) and 0.0 <= lam < 1.0):
        raise ConfigError(f"lam must lie in [0, 1), got {lam!r}")
    if not (math.isfinite(clip) and clip > 0):
        raise ConfigError(f"clip must be a finite number > 0, got {clip!r}")
    if not (math.isfinite(tol) and tol >= 0):
        raise ConfigError(f"tol must be a finite number >= 0, got {tol!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 0:
        raise ConfigError(f"max_iter must be an integer >= 0, got {max_iter!r}")
    if not (math.isfinite(floor) and floor > 0):
        raise ConfigError(f"floor must be a finite number > 0, got {floor!r}")


# --------------------------------------------------------------------------- #
# Objective and gradient: one chunked pass over P
# --------------------------------------------------------------------------- #


class _Problem:
    """``P`` on its device, the sums every evaluation reuses, and the work buffers."""

    def __init__(self, P: torch.Tensor, lam: float, clip: float, chunk_rows: int | None) -> None:
        import torch

        self.P, self.lam, self.clip = P, lam, clip
        self.n, self.v = int(P.shape[0]), int(P.shape[1])
        per = _CUDA_CHUNK if P.device.type == "cuda" else _CPU_CHUNK
        rows = max(1, per // self.v) if chunk_rows is None else chunk_rows
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise ConfigError(f"chunk_rows must be an integer >= 1, got {chunk_rows!r}")
        self.rows = min(rows, self.n)
        kw: dict[str, Any] = {"dtype": P.dtype, "device": P.device}
        self._r = torch.empty(self.rows, self.v, **kw)
        self._t = torch.empty(self.rows, self.v, **kw)
        self._mask = torch.empty(self.rows, self.v, dtype=torch.bool, device=P.device)
        self._col = torch.empty(self.v, **kw)
        # One validating pass: column sums m_y and sum P log P (the KL's constant).
        f64: dict[str, Any] = {"dtype": torch.float64, "device": P.device}
        self.m = torch.zeros(self.v, **f64)
        plogp = torch.zeros((), **f64)
        for i in range(0, self.n, self.rows):
            p = P[i : i + self.rows]
            r = self._r[: p.shape[0]]
            if not bool(p.min() >= 0):  # False for NaN too; +inf fails the row sums
                raise ConfigError("P must hold finite, non-negative probabilities")
            sums = p.sum(dim=1).double()
            bad = ~((sums - 1.0).abs() <= _ROW_SUM_TOL)
            if bool(bad.any()):
                j = int(torch.nonzero(bad)[0])
                raise ConfigError(
                    f"rows of P must be distributions: row {i + j} sums to {float(sums[j]):.6g}"
                )
            torch.sum(p, dim=0, out=self._col)
            self.m += self._col
            torch.xlogy(p, p, out=r)
            plogp += r.sum(dtype=torch.float64)
        self.plogp = float(plogp)
        self.evaluations = 0

    def evaluate(self, S: torch.Tensor) -> tuple[float, torch.Tensor]:
        """``J(S)`` and its gradient (float64, length ``V``)."""
        import torch

        self.evaluations += 1
        clip, lam = self.clip, self.lam
        log_s = torch.log(S)
        log_s_p = log_s.to(self.P.dtype)
        inside = torch.zeros_like(self.m)  # A_y = sum_x P 1{0 <= log P/S <= B}
        lifted = torch.zeros_like(self.m)  # C_y = sum_x P clip(log P/S, 0, B)
        for i in range(0, self.n, self.rows):
            p = self.P[i : i + self.rows]
            k = p.shape[0]
            r, t, mask = self._r[:k], self._t[:k], self._mask[:k]
            torch.log(p, out=r)
            r.sub_(log_s_p)  # log P/S (-inf where P = 0)
            torch.clamp(r, 0.0, clip, out=t)
            torch.eq(t, r, out=mask)  # 0 <= log P/S <= B exactly where clipping changes nothing
            t.mul_(p)
            torch.sum(t, dim=0, out=self._col)
            lifted += self._col
            torch.mul(p, mask, out=t)
            torch.sum(t, dim=0, out=self._col)
            inside += self._col
        kl = self.plogp - float(torch.dot(self.m, log_s))
        obj = (kl - lam * float(lifted.sum())) / self.n
        grad = -(self.m - lam * inside) / (self.n * S)
        return obj, grad


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


# --------------------------------------------------------------------------- #
# Building P
# --------------------------------------------------------------------------- #


def distributions_from_traces(
    traces: Iterable[Trace],
    *,
    rule: TailRule = "anchored",
    max_contexts: int | None = None,
    dtype: npt.DTypeLike = np.float64,
) -> npt.NDArray[Any]:
    """Next-token distributions of every answer step of ``traces``: an ``(N, V)`` array.

    Each step (one context: question plus the answer so far) becomes one row:
    its top-k probabilities at their token ids, the emitted token's probability
    at its id when it is not among them, and the rest of the mass spread
    *uniformly* over the other ids. The rest is the compensated tail mass of
    :func:`guardrail.fit_tail` (``1 - sum(top-k)``, less where ``rule`` caps the
    tail at ``p_k`` per token); rows are renormalised to sum to 1. Uniform,
    because a trace says how much mass lies outside the top k (and the fitted
    law says how it falls with rank) but not *which* ids hold it: spreading it
    evenly is the maximum-entropy choice, and it only affects ids that are in
    no context's top k. ``max_contexts``: keep that many steps, evenly spaced
    over all steps in order (deterministic). ``dtype`` float32 halves memory
    (``N * V`` values).
    """
    items = [t for t in traces if t.n_tokens > 0]
    if not items:
        raise ConfigError("no trace with at least one token")
    vocab = {t.vocab_size for t in items}
    if len(vocab) != 1:
        raise ConfigError(f"traces have different vocabulary sizes: {sorted(vocab)}")
    n_vocab = vocab.pop()
    total = sum(t.n_tokens for t in items)
    if max_contexts is not None and (
        isinstance(max_contexts, bool) or not isinstance(max_contexts, int) or max_contexts < 1
    ):
        raise ConfigError(f"max_contexts must be an integer >= 1, got {max_contexts!r}")
    if max_contexts is None or max_contexts >= total:
        keep = np.arange(total)
    else:
        keep = np.unique(np.linspace(0, total - 1, max_contexts).round().astype(np.int64))
    out = np.empty((keep.size, n_vocab), dtype=dtype)
    row, offset = 0, 0
    for t in items:
        steps = keep[(keep >= offset) & (keep < offset + t.n_tokens)] - offset
        offset += t.n_tokens
        if steps.size == 0:
            continue
        lp = _check_top(t.top_logprobs[steps], n_vocab, 2)
        k = lp.shape[1]
        mass = _fit(lp, n_vocab, DEFAULT_R2_MIN, rule)[4]
        ids = t.top_ids[steps]
        emitted = t.token_ids[steps]
        extra = ~(ids == emitted[:, None]).any(axis=1)  # emitted token outside the top k
        p_emit = np.where(extra, np.exp(np.minimum(t.logprobs[steps], 0.0)), 0.0)
        others = n_vocab - k - extra
        tail = np.where(others > 0, np.maximum(mass - p_emit, 0.0) / np.maximum(others, 1), 0.0)
        block = out[row : row + steps.size]
        block[:] = tail[:, None]
        r = np.arange(steps.size)
        block[r[extra], emitted[extra]] = p_emit[extra]
        block[r[:, None], ids] = np.exp(lp)
        block /= block.sum(axis=1, keepdims=True, dtype=np.float64)
        row += steps.size
    return out


def distributions_from_logits(
    logits: npt.ArrayLike, *, dtype: npt.DTypeLike = np.float64
) -> npt.NDArray[Any]:
    """Softmax of each row of an ``(N, V)`` array of logits or log-probabilities.

    For a local model that exposes its full output: full-vocabulary rows need
    no tail model. ``-inf`` entries (probability 0) are allowed.
    """
    x = np.array(logits, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 2:
        raise ConfigError(f"logits must be an (N, V) array with V >= 2, got shape {x.shape}")
    if np.isnan(x).any() or (x == np.inf).any():
        raise ConfigError("logits contain NaN or +inf")
    top = x.max(axis=1, keepdims=True)
    if not np.isfinite(top).all():
        raise ConfigError("a row of logits is entirely -inf")
    x -= top
    np.exp(x, out=x)
    x /= x.sum(axis=1, keepdims=True)
    return x.astype(dtype, copy=False)
