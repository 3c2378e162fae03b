"""A simultaneous binomial boundary: test every candidate threshold at once.

Fixed-sequence testing (the default of :func:`guardrail.evaluate.ltt_threshold`)
tests candidates from a start count downwards and stops at the first failure, so a
cluster of errors just below the start refuses a ranking whose later candidates would
pass. The simultaneous procedure has no start and no order: candidate ``m`` (the
``m`` highest-scored calibration answers, ``k`` of them wrong) passes iff
``k <= c[m]``, where the boundary ``c`` is chosen so that a Bernoulli(``risk``) random
walk ``B`` crosses it anywhere with probability at most ``delta``:

    P(exists m in 1..n: B_m <= c[m]) <= delta.

``c[m]`` is the largest ``k`` with ``P(Binomial(m, risk) <= k) <= a``, one per-test
level ``a`` for every ``m``, the largest that keeps the crossing probability (computed
exactly by dynamic programming over the walk) within ``delta``. About ``delta / 6``
for 100 answers and ``delta / 10`` for 1,000 at risk 0.2: the price of not stopping.
The deployed threshold is the lowest candidate that passes.

Guarantee (the same assumption as the fixed sequence: the error rate does not rise
with the score). Write ``t*`` for the highest threshold whose selective risk exceeds
``risk`` and ``N`` for the calibration answers above it. Given ``N`` their errors are
i.i.d. Bernoulli(``R(t*) = risk``); each answer below ``t*`` is wrong with probability
at least ``risk``, independently. So the error counts ``S_m`` of the candidates below
``t*`` (``m > N``) are jointly stochastically at least the walk ``B_m`` (couple each
Bernoulli(``>= risk``) with a Bernoulli(``risk``) below it), and a bad candidate passes
only if the walk crosses the boundary: probability at most ``delta``.

:func:`labels_needed` turns a refusal into a number: the calibration size at which the
error rates seen in the ranking would pass.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import numpy.typing as npt

__all__ = ["crossing_probability", "labels_needed", "simultaneous_boundary"]

IntArray = npt.NDArray[np.int64]

_TAIL_SD = 12.0
"""The walk's mass more than this many standard deviations above its mean is dropped
from the recursion: it cannot reach a boundary that lies below the mean within the
horizon (its share is below 1e-30)."""


def _boundary_at_level(n: int, risk: float, level: float) -> IntArray:
    from scipy import stats

    m = np.arange(1, n + 1)
    k = stats.binom.ppf(level, m, risk)
    k = np.where(np.isfinite(k), k, -1).astype(np.int64)
    below = stats.binom.cdf(k, m, risk) <= level
    return np.where(below, k, k - 1)


def crossing_probability(boundary: npt.ArrayLike, risk: float) -> float:
    """``P(exists m: B_m <= boundary[m - 1])`` for a Bernoulli(``risk``) random walk
    ``B`` (``B_0 = 0``), exactly up to a mass below 1e-30.

    Examples
    --------
        >>> crossing_probability([0], 0.3)  # one step: wrong with probability 0.3
        0.7
        >>> round(crossing_probability([-1, 0], 0.5), 6)
        0.25
    """
    c = np.asarray(boundary, dtype=np.int64)
    n = int(c.size)
    width = int(min(n, risk * n + _TAIL_SD * math.sqrt(n * risk * (1 - risk)) + 2)) + 2
    p = np.zeros(width)
    p[0] = 1.0
    total = 0.0
    q = 1.0 - risk
    for m in range(n):
        nxt = p * q
        nxt[1:] += p[:-1] * risk
        p = nxt
        cm = int(c[m])
        if cm >= 0:
            top = min(cm + 1, width)
            total += float(p[:top].sum())
            p[:top] = 0.0
    return min(total, 1.0)


@lru_cache(maxsize=256)
def _boundary(n: int, risk: float, delta: float) -> tuple[float, bytes]:
    lo, hi = delta / n, delta
    if crossing_probability(_boundary_at_level(n, risk, hi), risk) <= delta:
        lo = hi
    else:
        for _ in range(24):
            mid = math.sqrt(lo * hi)
            if crossing_probability(_boundary_at_level(n, risk, mid), risk) <= delta:
                lo = mid
            else:
                hi = mid
            if hi / lo < 1.01:
                break
    return lo, _boundary_at_level(n, risk, lo).tobytes()


def simultaneous_boundary(n: int, risk: float, delta: float) -> tuple[float, IntArray]:
    """``(a, c)``: the per-test level and the boundary ``c[m - 1]`` (the most errors
    candidate ``m`` may hold; ``-1``: it cannot pass) of ``n`` calibration answers.

    Cached per ``(n, risk, delta)``: splits of one size share one computation.

    Examples
    --------
        >>> a, c = simultaneous_boundary(100, 0.2, 0.05)
        >>> 0.005 < a < 0.05, int((c < 0).sum()), int(c[-1])
        (True, 19, 11)
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    level, raw = _boundary(int(n), float(risk), float(delta))
    return level, np.frombuffer(raw, dtype=np.int64).copy()


def labels_needed(
    n_answered: npt.ArrayLike, n_errors: npt.ArrayLike, n: int, risk: float, delta: float
) -> int | None:
    """The calibration size at which the ranking's candidates, with the error rates seen
    (``(n_errors + 1) / (n_answered + 2)`` of each candidate, out of ``n`` answers), would
    pass the simultaneous test; ``None`` when no candidate's error rate is below ``risk``.

    An estimate, not a promise: it assumes the shares and error rates seen hold, and
    extrapolates the per-test level as ``a(n) * sqrt(n / n')`` (the level falls more
    slowly than that, so the estimate errs high).

    Examples
    --------
        >>> labels_needed([20, 40, 60], [2, 4, 9], 100, 0.2, 0.05)
        320
    """
    from scipy import stats

    m = np.asarray(n_answered, dtype=np.float64)
    k = np.asarray(n_errors, dtype=np.float64)
    rate = (k + 1.0) / (m + 2.0)  # Laplace: a lucky error-free top holds no promise
    keep = (m > 0) & (rate < risk)
    if not keep.any():
        return None
    share, rate = m[keep] / n, rate[keep]
    level, _ = simultaneous_boundary(n, risk, delta)
    size = float(n)
    for _ in range(80):
        size *= 1.1
        answered = np.maximum(np.floor(share * size), 1.0)
        lev = level * math.sqrt(n / size)
        if (stats.binom.cdf(np.floor(rate * answered), answered, risk) <= lev).any():
            return int(math.ceil(size / 10.0) * 10)
    return None
