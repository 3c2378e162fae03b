"""Streaming statistics of clipped lifts: one small object per statistic, beside its batch twin.

Each object takes one clipped lift ``x`` in ``[0, clip]`` per ``update(x)``
(not checked: :class:`~guardrail.LiftRule` validates its input) in
O(1) pure-Python time (O(k) for :class:`LowestK`, O(grid) for
:class:`BettingConfidenceSequence`), returns its value, which ``value`` reads again
(the contract of :mod:`guardrail._streaming`), and shows the rest of its state as
read-only properties. Its batch twin is a pure numpy function of a whole recorded answer
that gives the same state after every token; the tests compare the two at
every step.

- :class:`BettingMean`: ``log K+`` and ``log K-`` at ``m = tau/B`` (the ``betting``
  boundary); its value is which of them is at ``2/delta`` now; twin :func:`betting_mean_path`.
- :class:`PaperMean`: the mean and its interval ``mean -/+ r_t`` in ``[0, B]`` (the
  ``paper`` boundary), which is its value; twin :func:`paper_mean_path`.
- :class:`LowestK`: the mean of the ``k`` lowest lifts (``"min"`` is ``k = 1``,
  ``"lowest"`` is ``lowest_k``); twin :func:`lowest_k_path`.
- :class:`BettingConfidenceSequence`: bounds from the wealth on a grid of means
  (``track_bounds``); twin :func:`guardrail._boundaries.betting_confidence_sequence` times ``B``.

The arithmetic (and its order) is that of :func:`guardrail._policy.replay`, so the
monitor that composes these objects gives replay's verdicts exactly.
"""

from __future__ import annotations

import math
from bisect import insort
from math import log, log1p, sqrt

import numpy as np
import numpy.typing as npt

from ._boundaries import betting_log_wealth, paper_radius
from ._errors import ConfigError
from ._lift import DEFAULT_CLIP

__all__ = [
    "ABOVE",
    "BELOW",
    "BettingMean",
    "LowestK",
    "PaperMean",
    "betting_mean_path",
    "check_settings",
    "lowest_k_path",
    "paper_mean_path",
]

FloatArray = npt.NDArray[np.float64]
ABOVE = 1
"""Bit of :attr:`BettingMean.value`: ``K+`` is at ``2/delta`` (mean > tau shown)."""
BELOW = 2
"""Bit of :attr:`BettingMean.value`: ``K-`` is at ``2/delta`` (mean < tau shown)."""


def _check_clip(clip: float) -> None:
    if not (math.isfinite(clip) and clip > 0):
        raise ConfigError(f"clip must be a finite number > 0, got {clip!r}")


def check_settings(clip: float, delta: float, bet_cap: float = 0.5) -> None:
    """``clip``, ``delta`` and ``bet_cap`` of a statistic, else a ConfigError naming one."""
    _check_clip(clip)
    if not (0.0 < delta < 1.0):
        raise ConfigError(f"delta must be in (0, 1), got {delta!r}")
    if not (0.0 < bet_cap <= 0.5):
        raise ConfigError(f"bet_cap must be in (0, 0.5], got {bet_cap!r}")


class BettingMean:
    """Betting test of the mean lift against ``tau``: two wealth processes at ``m = tau/clip``.

    ``log K+ = sum log(1 + min(l_i, cap/m) (x_i/B - m))`` (evidence mean > tau) and
    ``log K- = sum log(1 - min(l_i, cap/(1-m)) (x_i/B - m))`` (evidence mean < tau),
    with the predictable plug-in bet ``l_i`` of :func:`guardrail._boundaries.betting_bets`.
    Its value (:meth:`update`'s return, :attr:`value`) is which wealth is at least
    ``2/delta`` now: a sum of :data:`ABOVE` and :data:`BELOW` (0 if neither, as before
    any lift).

    Examples
    --------
        >>> test = BettingMean(tau=2.0)
        >>> for _ in range(20):
        ...     decided = test.update(8.0)
        >>> test.t, test.log_wealth_up >= test.threshold, decided != 0
        (20, True, True)
    """

    __slots__ = (
        "_c2",
        "_cd",
        "_clip",
        "_cu",
        "_down",
        "_m",
        "_sq",
        "_t",
        "_tau",
        "_thr",
        "_total",
        "_up",
    )

    def __init__(
        self, tau: float, clip: float = DEFAULT_CLIP, delta: float = 0.05, bet_cap: float = 0.5
    ) -> None:
        check_settings(clip, delta, bet_cap)
        if not (0.0 < tau < clip):
            raise ConfigError(f"tau must lie strictly inside (0, {clip}), got {tau!r}")
        self._tau, self._clip = float(tau), clip
        self._m = m = self._tau / clip  # the same constants, computed the same way, as replay()
        self._thr = thr = math.log(2.0 / delta)
        self._c2 = 2.0 * thr
        self._cu, self._cd = bet_cap / m, bet_cap / (1.0 - m)
        self._t = 0
        self._total = self._sq = self._up = self._down = 0.0

    def update(self, x: float) -> int:
        """Bet on ``x``, then update the plug-in variance; :attr:`value`."""
        t = self._t + 1
        self._t = t
        xs = x / self._clip
        # the plug-in bet from the past: s2_{t-1} = (1/4 + sq_{t-1}) / t, times t log(1 + t)
        lam = sqrt(self._c2 / ((0.25 + self._sq) / t * t * log1p(t)))
        d = xs - self._m
        cu, cd = self._cu, self._cd
        up = self._up + log1p((lam if lam < cu else cu) * d)
        down = self._down + log1p(-(lam if lam < cd else cd) * d)
        self._up, self._down = up, down
        total = self._total + xs
        self._total = total
        dev = xs - (0.5 + total) / (t + 1)
        self._sq += dev * dev
        thr = self._thr
        if up >= thr:  # literals: ABOVE | BELOW, ABOVE, BELOW, neither
            return 3 if down >= thr else 1
        return 2 if down >= thr else 0

    @property
    def value(self) -> int:
        """Which wealth is at ``2/delta`` now: :data:`ABOVE` | :data:`BELOW`, 0 if neither."""
        thr = self._thr
        return (ABOVE if self._up >= thr else 0) | (BELOW if self._down >= thr else 0)

    @property
    def t(self) -> int:
        return self._t

    @property
    def tau(self) -> float:
        return self._tau

    @property
    def log_wealth_up(self) -> float:
        """``log K+_t(tau/clip)``: evidence that the mean lift is above ``tau``."""
        return self._up

    @property
    def log_wealth_down(self) -> float:
        """``log K-_t(tau/clip)``: evidence that the mean lift is below ``tau``."""
        return self._down

    @property
    def threshold(self) -> float:
        """``log(2/delta)``: the log-wealth at which a side has shown its claim."""
        return self._thr

    @property
    def variance(self) -> float:
        """Plug-in variance ``s2_t`` of the scaled lifts (the next bet uses it)."""
        return (0.25 + self._sq) / (self._t + 1)


def betting_mean_path(
    lifts: npt.ArrayLike,
    tau: float,
    clip: float = DEFAULT_CLIP,
    delta: float = 0.05,
    bet_cap: float = 0.5,
) -> tuple[FloatArray, FloatArray]:
    """Batch twin of :class:`BettingMean`: ``(log K+, log K-)`` after every token."""
    check_settings(clip, delta, bet_cap)
    x = np.asarray(lifts, dtype=np.float64)
    traj = betting_log_wealth(x / clip, [tau / clip], delta, bet_cap)
    return traj.log_wealth_up[:, 0], traj.log_wealth_down[:, 0]


class PaperMean:
    """Running mean with the paper's sub-gamma LIL radius (``delta`` split over two sides).

    ``r_t = sqrt(2 v level / t) + c level / t``, ``level = log(1 + log t) + log(2/delta)``
    (:func:`guardrail._boundaries.paper_radius` at ``delta/2``). Its value (:meth:`update`'s
    return, :attr:`value`) is the interval ``(lower, upper) = (mean - r_t, mean + r_t)``
    clamped to ``[0, clip]`` (``(0, clip)`` before any lift); for
    ``0 < tau < clip`` the mean is shown above ``tau`` iff ``lower > tau`` and
    below iff ``upper < tau``, clamped or not.

    Examples
    --------
        >>> mean = PaperMean(v=4.0, c=2.0, clip=12.0, delta=0.05)
        >>> for x in [6.0] * 100:
        ...     lower, upper = mean.update(x)
        >>> mean.t, mean.mean, round(lower, 2), round(upper, 2)
        (100, 6.0, 5.23, 6.77)
    """

    __slots__ = ("_c", "_clip", "_lvl0", "_t", "_total", "_v2")

    def __init__(self, v: float, c: float, clip: float = DEFAULT_CLIP, delta: float = 0.05) -> None:
        check_settings(clip, delta)
        if not (v > 0 and c > 0 and math.isfinite(v) and math.isfinite(c)):
            raise ConfigError(f"sub-gamma parameters must be finite and > 0, got v={v!r}, c={c!r}")
        self._clip, self._v2, self._c = clip, 2.0 * v, c
        self._lvl0 = math.log(1.0 / (delta / 2.0))
        self._t, self._total = 0, 0.0

    def update(self, x: float) -> tuple[float, float]:
        """Add ``x``; :attr:`value`, the clamped bounds ``(lower, upper)``."""
        t = self._t + 1
        self._t = t
        total = self._total + x
        self._total = total
        mean = total / t
        level = log1p(log(t)) + self._lvl0
        r = sqrt(self._v2 * level / t) + self._c * level / t
        lower, upper, b = mean - r, mean + r, self._clip
        return (lower if lower > 0.0 else 0.0), (upper if upper < b else b)

    @property
    def value(self) -> tuple[float, float]:
        """``(lower, upper)``: :attr:`lower` and :attr:`upper` (``(0, clip)`` before any lift)."""
        return self.lower, self.upper

    @property
    def t(self) -> int:
        return self._t

    @property
    def mean(self) -> float:
        """Running mean lift (0 before any token)."""
        return self._total / self._t if self._t else 0.0

    @property
    def radius(self) -> float:
        """``r_t`` (``inf`` before any token)."""
        t = self._t
        if not t:
            return math.inf
        level = log1p(log(t)) + self._lvl0
        return sqrt(self._v2 * level / t) + self._c * level / t

    @property
    def lower(self) -> float:
        """``mean - r_t`` clamped to ``[0, clip]`` (0 before any token)."""
        low = self.mean - self.radius
        return low if low > 0.0 else 0.0

    @property
    def upper(self) -> float:
        """``mean + r_t`` clamped to ``[0, clip]`` (``clip`` before any token)."""
        up = self.mean + self.radius
        return up if up < self._clip else self._clip


def paper_mean_path(
    lifts: npt.ArrayLike, v: float, c: float, clip: float = DEFAULT_CLIP, delta: float = 0.05
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Batch twin of :class:`PaperMean`: ``(mean, lower, upper)`` after every token."""
    check_settings(clip, delta)
    x = np.asarray(lifts, dtype=np.float64)
    t = np.arange(1, x.size + 1, dtype=np.float64)
    mean = np.cumsum(x) / t
    r = paper_radius(t, v, c, delta / 2.0)
    return mean, np.clip(mean - r, 0.0, clip), np.clip(mean + r, 0.0, clip)


class LowestK:
    """Mean of the ``k`` lowest lifts so far, missing ones counted as ``clip`` (``k=1``: the min).

    The value only falls as lifts arrive; it is ``clip`` before the first one.
    :meth:`update` returns it; :attr:`value` reads it.

    Examples
    --------
        >>> lowest = LowestK(k=2, clip=12.0)
        >>> [lowest.update(x) for x in [5.0, 3.0, 7.0, 1.0]]
        [8.5, 4.0, 4.0, 2.0]
    """

    __slots__ = ("_clip", "_k", "_low", "_t", "_value")

    def __init__(self, k: int = 1, clip: float = DEFAULT_CLIP) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"k must be an integer >= 1, got {k!r}")
        _check_clip(clip)
        self._k, self._clip, self._t, self._value = k, clip, 0, clip
        self._low = [clip] * k  # ascending

    def update(self, x: float) -> float:
        """Add ``x``; the mean of the ``k`` lowest lifts (summed in ascending order)."""
        self._t += 1
        lows = self._low
        if x <= lows[-1]:  # <=: the first lift always sets the value to sum(lows) / k
            if self._k == 1:
                lows[0] = x
                self._value = x
            else:
                insort(lows, x)
                lows.pop()
                self._value = sum(lows) / self._k
        return self._value

    @property
    def k(self) -> int:
        return self._k

    @property
    def t(self) -> int:
        return self._t

    @property
    def value(self) -> float:
        """The mean of the ``k`` lowest lifts so far (``clip`` before any)."""
        return self._value

    @property
    def lowest(self) -> tuple[float, ...]:
        """The ``k`` lowest lifts so far, ascending, padded with ``clip``."""
        return tuple(self._low)


def lowest_k_path(lifts: npt.ArrayLike, k: int = 1, clip: float = DEFAULT_CLIP) -> FloatArray:
    """Batch twin of :class:`LowestK`: its value after every token (O(T^2 log T))."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"k must be an integer >= 1, got {k!r}")
    x = np.asarray(lifts, dtype=np.float64)
    n = x.size
    seen = np.tril(np.ones((n, n), dtype=bool))  # row t: tokens 0..t
    rows = np.concatenate([np.where(seen, x[None, :], clip), np.full((n, k), clip)], axis=1)
    low = np.sort(rows, axis=1)[:, :k]
    return np.asarray(np.cumsum(low, axis=1)[:, -1] / k, dtype=np.float64)
