"""The betting confidence sequence of the mean lift: bounds from the two wealth processes
of :class:`~guardrail._statistics.BettingMean` on a grid of candidate means."""

from __future__ import annotations

import math
from math import log1p, sqrt

from ._errors import ConfigError
from ._lift import DEFAULT_CLIP
from ._statistics import check_settings

__all__ = ["BettingConfidenceSequence"]


class BettingConfidenceSequence:
    """Bounds on the mean lift from the two wealth processes on a grid of candidate means.

    The grid is ``clip * (1..G) / (G + 1)``; a candidate whose ``K+`` (``K-``)
    reaches ``2/delta`` is excluded from below (above) for good, and only the
    candidates still inside are updated. Its value (:meth:`update`'s return,
    :attr:`value`) is the interval ``(lower, upper)``: as
    :func:`guardrail._boundaries.betting_confidence_sequence` times ``clip`` while that hull
    is not empty, else one grid cell wide; ``(0, clip)`` before any lift. Conservative
    to the grid; a confidence sequence for a mean shared by all tokens.

    Examples
    --------
        >>> cs = BettingConfidenceSequence(clip=12.0, delta=0.05)
        >>> for x in [6.0] * 50:
        ...     lower, upper = cs.update(x)
        >>> cs.t, round(lower, 2), round(upper, 2)
        (50, 5.04, 6.96)
    """

    __slots__ = (
        "_c2",
        "_cand",
        "_clip",
        "_down",
        "_grid",
        "_hi",
        "_lo",
        "_sq",
        "_t",
        "_thr",
        "_total",
        "_up",
    )

    def __init__(
        self,
        clip: float = DEFAULT_CLIP,
        delta: float = 0.05,
        bet_cap: float = 0.5,
        grid_size: int = 49,
    ) -> None:
        check_settings(clip, delta, bet_cap)
        if isinstance(grid_size, bool) or not isinstance(grid_size, int) or grid_size < 1:
            raise ConfigError(f"grid_size must be an integer >= 1, got {grid_size!r}")
        self._clip, self._thr = clip, math.log(2.0 / delta)
        self._c2 = 2.0 * self._thr
        step = 1.0 / (grid_size + 1)  # = np.linspace(0, 1, G + 2)[1:-1], bit for bit
        self._grid = g = [(i + 1) * step for i in range(grid_size)]
        self._cand = [(v, bet_cap / v, bet_cap / (1.0 - v)) for v in g]  # caps: falls, rises
        self._up, self._down = [0.0] * grid_size, [0.0] * grid_size
        self._t, self._lo, self._hi = 0, 0, grid_size
        self._total = self._sq = 0.0

    def update(self, x: float) -> tuple[float, float]:
        """Bet on ``x`` at every candidate still inside; :attr:`value`, the bounds
        ``(lower, upper)``."""
        t = self._t + 1
        self._t = t
        xs = x / self._clip
        lam = sqrt(self._c2 / ((0.25 + self._sq) / t * t * log1p(t)))  # as BettingMean
        gu, gd, cand = self._up, self._down, self._cand
        lo, hi = self._lo, self._hi
        if lo < hi and lam < cand[hi - 1][1] and lam < cand[lo][2]:  # no cap binds
            for k in range(lo, hi):
                e = lam * (xs - cand[k][0])
                gu[k] += log1p(e)
                gd[k] += log1p(-e)
        else:
            for k in range(lo, hi):
                m, a, c = cand[k]  # candidate mean, cap / m, cap / (1 - m)
                d = xs - m
                gu[k] += log1p((lam if lam < a else a) * d)
                gd[k] += log1p(-(lam if lam < c else c) * d)
        thr = self._thr
        while lo < hi and gu[lo] >= thr:  # K+ is non-increasing in m: a prefix is excluded
            lo += 1
        while hi > lo and gd[hi - 1] >= thr:
            hi -= 1
        self._lo, self._hi = lo, hi
        total = self._total + xs
        self._total = total
        dev = xs - (0.5 + total) / (t + 1)
        self._sq += dev * dev
        b, grid = self._clip, self._grid
        return (grid[lo - 1] * b if lo else 0.0), (grid[hi] * b if hi < len(grid) else b)

    @property
    def value(self) -> tuple[float, float]:
        """``(lower, upper)``: :attr:`lower` and :attr:`upper` (``(0, clip)`` before any lift)."""
        return self.lower, self.upper

    @property
    def t(self) -> int:
        return self._t

    @property
    def lower(self) -> float:
        lo = self._lo
        return self._grid[lo - 1] * self._clip if lo else 0.0

    @property
    def upper(self) -> float:
        hi = self._hi
        return self._grid[hi] * self._clip if hi < len(self._grid) else self._clip
