"""VSD's inputs and objective: argument checks, ``P`` as a tensor, one chunked pass.

:class:`_Problem` evaluates the objective ``J`` of :mod:`guardrail.vsd._design` and
its gradient.

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

import math
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import ConfigError, MissingDependencyError

if TYPE_CHECKING:
    import torch

__all__ = ["INSTALL_HINT"]

INSTALL_HINT = 'VSD needs PyTorch: pip install "liftguard[vsd]"'
_ROW_SUM_TOL = 1e-3  # rows of P must sum to 1 within this (float32 rounding over large V)
_CPU_CHUNK = 1 << 19  # elements per chunk: work buffers of a few MB
_CUDA_CHUNK = 1 << 26


def _import_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependencyError(INSTALL_HINT) from exc


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
