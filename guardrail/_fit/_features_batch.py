"""Batch twin of :class:`~guardrail._features.TokenFeaturizer`: the base features of every
token of a recorded answer at once (numpy), by the same formulas and the same tail
tables, so that the two agree to rounding (tested at every token)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .._errors import ConfigError
from .._features import (
    _MASS_FLOOR,
    _N_GRID,
    _RANK_TOL,
    _STEP,
    DEFAULT_TEMPERATURE,
    TopKTables,
    base_range,
)
from .._topk import DEFAULT_R2_MIN

__all__ = ["base_features_batch"]

FloatArray = npt.NDArray[np.float64]


def _interp_batch(table: FloatArray, b: FloatArray) -> FloatArray:
    u = np.minimum(-b / _STEP, _N_GRID - 1.0)
    i = np.minimum(u.astype(np.int64), _N_GRID - 2)
    out = table[i] + (u - i) * (table[i + 1] - table[i])
    return np.asarray(np.where(u >= _N_GRID - 1, table[-1], out), dtype=np.float64)


def base_features_batch(
    bases: Sequence[str],
    vocab_size: int,
    logprobs: npt.ArrayLike,
    top_logprobs: npt.ArrayLike | None = None,
    *,
    skeleton_logprobs: npt.ArrayLike | None = None,
    exact_entropy: npt.ArrayLike | None = None,
    temperature: float = DEFAULT_TEMPERATURE,
    tables: TopKTables | None = None,
) -> dict[str, FloatArray]:
    """Batch twin of :class:`TokenFeaturizer`: each base feature of every token of one
    answer (``top_logprobs``: ``(T, k)``, descending rows)."""
    tables = TopKTables(vocab_size) if tables is None else tables
    lp_raw = np.asarray(logprobs, dtype=np.float64)
    n = lp_raw.size
    out: dict[str, FloatArray] = {}
    top = None if top_logprobs is None else np.asarray(top_logprobs, dtype=np.float64)
    if top is not None and top.shape == (0,):
        top = top.reshape(0, 0)
    tail = None
    k = 0 if top is None else top.shape[1]
    if top is not None and vocab_size > k:
        tail = _tail_batch(top, vocab_size, tables)
    for base in bases:
        lo, hi = base_range(base, vocab_size)
        if base == "logprob":
            vals = lp_raw
        elif base == "exact_entropy":
            vals = np.asarray(exact_entropy, dtype=np.float64)
        elif base == "lift":
            vals = lp_raw - np.asarray(skeleton_logprobs, dtype=np.float64)
        else:
            if top is None:
                raise ConfigError(f"base feature {base!r} needs the alternatives")
            vals = _from_alternatives(base, lp_raw, top, tail, vocab_size, temperature, tables)
        if vals.shape != (n,):
            raise ConfigError(f"base feature {base!r}: expected {n} values, got {vals.shape}")
        out[base] = np.clip(vals, lo, hi)
    return out


_Tail = tuple[FloatArray, FloatArray, "npt.NDArray[np.bool_]", FloatArray, FloatArray]


def _tail_batch(top: FloatArray, vocab_size: int, tables: TopKTables) -> _Tail:
    n, k = top.shape
    ps = np.exp(top)
    mass = np.maximum(1.0 - ps.sum(axis=1), _MASS_FLOOR)
    h_top = -(ps * top).sum(axis=1)
    b = np.zeros(n)
    power = np.zeros(n, dtype=bool)
    if k >= 2:
        x = np.log(np.arange(1, k + 1, dtype=np.float64))
        xc = x - x.mean()
        mean = top.sum(axis=1) / k
        syx = (top * xc).sum(axis=1)
        syy = (top * top).sum(axis=1) - k * mean * mean
        ok = syy > 0
        slope = syx / float((xc * xc).sum())  # not BLAS: one order on every CPU
        with np.errstate(divide="ignore", invalid="ignore"):
            power = ok & (slope * syx / np.where(ok, syy, 1.0) > DEFAULT_R2_MIN)
        b = np.where(ok, np.minimum(slope, 0.0), 0.0)
    n_tail = vocab_size - k
    cap = top[:, -1] if k else np.full(n, np.inf)
    log_mass = np.log(mass)
    la = np.zeros(n)
    if k >= 2 and power.any():
        la = log_mass - _interp_batch(tables.arrays(k)[0], b)
        power &= la <= cap + 1e-12
    b = np.where(power, b, 0.0)
    uni = np.minimum(log_mass - math.log(n_tail), cap)
    la = np.where(power, la, uni)
    mass = np.where(power, mass, np.minimum(mass, np.exp(cap) * n_tail))
    return la, b, power, mass, h_top


def _from_alternatives(
    base: str,
    lp: FloatArray,
    top: FloatArray,
    tail: _Tail | None,
    vocab_size: int,
    temperature: float,
    tables: TopKTables,
) -> FloatArray:
    n, k = top.shape
    if base == "rank":
        return np.asarray((top > (lp + _RANK_TOL)[:, None]).sum(axis=1), dtype=np.float64)
    if base == "margin":
        if k >= 2:
            return np.asarray(np.exp(top[:, 0]) - np.exp(top[:, 1]), dtype=np.float64)
        p1 = np.exp(top[:, 0] if k else lp)
        p2 = np.exp(tail[0]) if tail is not None else np.zeros(n)
        return np.asarray(np.maximum(p1 - p2, 0.0), dtype=np.float64)
    if base == "entropy":
        if tail is None:
            return np.asarray(-(np.exp(top) * top).sum(axis=1), dtype=np.float64)
        la, b, power, mass, h = tail
        ratio = _interp_batch(tables.arrays(k)[1], b)
        tail_h = np.where(power, -mass * (la + b * ratio), -np.exp(la) * la * (vocab_size - k))
        return np.asarray(np.clip(h + tail_h, 0.0, math.log(vocab_size)), dtype=np.float64)
    # temperature_lift
    t = temperature
    z = np.exp(top / t).sum(axis=1)
    if tail is not None:
        la, b, power, _, _ = tail
        log_s = _interp_batch(tables.arrays(k)[0], b / t)
        z = z + np.where(power, np.exp(la / t + log_s), (vocab_size - k) * np.exp(la / t))
    bound = (1.0 - 1.0 / t) * math.log(vocab_size)
    logz = np.clip(np.log(z), min(0.0, bound), max(0.0, bound))
    return np.asarray(lp - (lp / t - logz), dtype=np.float64)
