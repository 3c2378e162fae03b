"""Anytime-valid boundaries for a running mean of bounded evidence.

Two families, both pure functions of (time, running sums, confidence level):

``paper``
    The sub-gamma law-of-the-iterated-logarithm boundary of the source paper
    (Thm 2.8): ``mean_t -/+ r_t`` with
    ``r_t = sqrt(2 v (loglog(e t) + log(1/d)) / t) + c (loglog(e t) + log(1/d)) / t``.
    Its validity rests on the sub-gamma parameters ``(v, c)``; with ``(v, c)``
    estimated from data it can under-cover (see the tests for a case).

``betting``
    A betting confidence sequence for variables in ``[0, B]`` (Waudby-Smith &
    Ramdas 2023). Lifts are scaled to ``[0, 1]`` by ``/B``. For a candidate mean
    ``m`` two wealth processes are tracked::

        K+_t(m) = prod_i (1 + l+_i(m) (x_i - m))   evidence that the mean is > m
        K-_t(m) = prod_i (1 - l-_i(m) (x_i - m))   evidence that the mean is < m

    with the predictable plug-in bet ``l_i = sqrt(2 log(2/d) / (s2_{i-1} i log(1+i)))``
    (from the past only), truncated to ``[0, c/m]`` resp. ``[0, c/(1-m)]``,
    ``c <= 1/2``. ``K+(m)`` is a non-negative supermartingale whenever every
    token's conditional mean given the past is ``<= m``, and ``K-(m)`` whenever
    every one is ``>= m`` -- no independence and no parametric assumption. By
    Ville's inequality each reaches ``2/d`` with probability at most ``d/2``.
    For i.i.d. (or constant-conditional-mean) data the set
    ``{m : K+ < 2/d and K- < 2/d}`` is a ``1 - d`` confidence sequence for the
    mean. With dependent tokens whose conditional means vary, the guarantee is
    the pair of tests above: certifying ``mean > m`` is an error only if all
    conditional means were ``<= m``; it does not cover their running average.

    Because the untruncated bet does not depend on ``m``, ``K+_t(m)`` is
    non-increasing and ``K-_t(m)`` non-decreasing in ``m``. Hence a stream that is
    certified at threshold ``tau`` is certified at every smaller threshold (and
    blocked at every larger one): the policy's answer set is monotone in ``tau``,
    which calibration relies on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ._errors import ConfigError

__all__ = [
    "BettingTrajectory",
    "betting_bets",
    "betting_confidence_sequence",
    "betting_log_wealth",
    "paper_radius",
]

FloatArray = npt.NDArray[np.float64]


def _check_delta(delta: float) -> None:
    if not (0.0 < delta < 1.0):
        raise ConfigError(f"delta must be in (0, 1), got {delta!r}")


def paper_radius(t: npt.ArrayLike, v: float, c: float, delta: float) -> FloatArray:
    """Half-width ``r_t`` of the paper's sub-gamma LIL boundary at time ``t >= 1``.

    ``r_t = sqrt(2 v (loglog(e t) + log(1/delta)) / t) + c (loglog(e t) + log(1/delta)) / t``
    with ``loglog(e t) = log(1 + log t)``. Use ``delta/2`` per side for a
    two-sided sequence.
    """
    _check_delta(delta)
    if not (v > 0 and c > 0 and math.isfinite(v) and math.isfinite(c)):
        raise ConfigError(f"sub-gamma parameters must be finite and > 0, got v={v!r}, c={c!r}")
    tt = np.asarray(t, dtype=np.float64)
    if (tt < 1).any():
        raise ConfigError("time t must be >= 1")
    level = np.log1p(np.log(tt)) + math.log(1.0 / delta)
    return np.asarray(np.sqrt(2.0 * v * level / tt) + c * level / tt, dtype=np.float64)


def betting_bets(x: npt.ArrayLike, delta: float) -> FloatArray:
    """Untruncated predictable plug-in bets ``l_1..l_T`` for scaled data ``x`` in [0, 1].

    ``l_t = sqrt(2 log(2/delta) / (s2_{t-1} t log(1 + t)))`` where
    ``s2_t = (1/4 + sum_{i<=t} (x_i - mu_i)^2) / (t + 1)`` and
    ``mu_i = (1/2 + sum_{j<=i} x_j) / (i + 1)`` (Waudby-Smith & Ramdas 2023,
    eq. for the predictable plug-in). ``l_t`` uses ``x_1..x_{t-1}`` only.
    """
    _check_delta(delta)
    xs = np.asarray(x, dtype=np.float64)
    n = xs.shape[-1]
    t = np.arange(1, n + 1, dtype=np.float64)
    mu = (0.5 + np.cumsum(xs, axis=-1)) / (t + 1.0)
    sq = np.cumsum((xs - mu) ** 2, axis=-1)
    # s2_{t-1}: s2_0 = 1/4, s2_t = (1/4 + sq_t) / (t + 1)
    s2_prev = np.concatenate(
        [np.full((*xs.shape[:-1], 1), 0.25), (0.25 + sq[..., :-1]) / (t[:-1] + 1.0)], axis=-1
    )
    return np.asarray(
        np.sqrt(2.0 * math.log(2.0 / delta) / (s2_prev * t * np.log1p(t))), dtype=np.float64
    )


@dataclass(frozen=True)
class BettingTrajectory:
    """Log-wealth of both processes at every time (rows) and candidate mean (columns).

    Examples
    --------
        >>> traj = betting_log_wealth([0.9, 0.8, 0.95], m=[0.25, 0.5], delta=0.05)
        >>> traj.log_wealth_up.shape
        (3, 2)
    """

    log_wealth_up: FloatArray
    log_wealth_down: FloatArray


def betting_log_wealth(
    x: npt.ArrayLike, m: npt.ArrayLike, delta: float, cap: float = 0.5
) -> BettingTrajectory:
    """Log-wealth ``log K+_t(m)`` and ``log K-_t(m)`` for scaled data ``x`` in [0, 1].

    ``x`` has shape ``(T,)`` and ``m`` shape ``(G,)`` with ``0 < m < 1``; the
    result arrays have shape ``(T, G)`` (cumulative over time).
    """
    if not (0.0 < cap <= 0.5):
        raise ConfigError(f"bet cap must be in (0, 1/2], got {cap!r}")
    xs = np.asarray(x, dtype=np.float64)
    ms = np.atleast_1d(np.asarray(m, dtype=np.float64))
    if xs.ndim != 1:
        raise ConfigError("x must be one-dimensional")
    if xs.size and (np.isnan(xs).any() or xs.min() < 0.0 or xs.max() > 1.0):
        raise ConfigError("scaled observations must lie in [0, 1]")
    if ((ms <= 0.0) | (ms >= 1.0)).any():
        raise ConfigError("candidate means must lie strictly inside (0, 1)")
    lam = betting_bets(xs, delta)[:, None]
    diff = xs[:, None] - ms[None, :]
    lam_up = np.minimum(lam, cap / ms[None, :])
    lam_down = np.minimum(lam, cap / (1.0 - ms[None, :]))
    up = np.cumsum(np.log1p(lam_up * diff), axis=0)
    down = np.cumsum(np.log1p(-lam_down * diff), axis=0)
    return BettingTrajectory(log_wealth_up=up, log_wealth_down=down)


def betting_confidence_sequence(
    x: npt.ArrayLike,
    delta: float,
    *,
    grid_size: int = 999,
    cap: float = 0.5,
) -> tuple[FloatArray, FloatArray]:
    """Running lower and upper bounds of the mean of scaled data ``x`` in [0, 1].

    Inverts the two wealth processes on a grid of candidate means: the bound at
    time ``t`` is the hull of ``{m : K+_t(m) < 2/delta and K-_t(m) < 2/delta}``
    intersected over the past (a running intersection, which keeps the
    guarantee). Bounds are conservative to the grid spacing.
    """
    _check_delta(delta)
    grid = np.linspace(0.0, 1.0, grid_size + 2)[1:-1]
    traj = betting_log_wealth(x, grid, delta, cap)
    thr = math.log(2.0 / delta)
    excluded_low = traj.log_wealth_up >= thr  # mean > m shown: m excluded from below
    excluded_high = traj.log_wealth_down >= thr
    excluded_low = np.maximum.accumulate(excluded_low, axis=0)
    excluded_high = np.maximum.accumulate(excluded_high, axis=0)
    n = traj.log_wealth_up.shape[0]
    lower = np.zeros(n)
    upper = np.ones(n)
    for t in range(n):
        # K+ is monotone in m, so excluded_low is a prefix of the grid
        k_low = int(excluded_low[t].sum())
        if k_low:
            lower[t] = grid[k_low - 1]
        k_high = int(excluded_high[t].sum())
        if k_high:
            upper[t] = grid[grid_size - k_high]
    return lower, upper
