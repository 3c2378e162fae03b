"""Running aggregates of a per-token feature, their bounds, and their batch twins.

An answer-level feature is an aggregate of one base feature
(:mod:`guardrail._features`) over the tokens so far, named ``"base.aggregate"``
(``"logprob.mean"``, ``"entropy.max"``, ``"logprob.count_below@-0.693"``), or a
function of the length (``"length.count"``, ``"length.log"``):

==============  ==========================================  ===================
aggregate       value after ``t`` tokens                    as tokens arrive
==============  ==========================================  ===================
``mean``        mean                                        moves either way
``sum``         sum                                         falls if ``hi <= 0``,
                                                            rises if ``lo >= 0``
``min``         minimum                                     only falls
``max``         maximum                                     only rises
``first``       the first token's value                     fixed after token 1
``lowest2``     mean of the two lowest, a missing one       only falls
                counted as the range's top ``hi``
``count_below`` tokens with value ``< level``               only rises
``frac_below``  share of tokens with value ``< level``      moves either way
length ``count`` ``t``; ``log``: ``log(1 + t)``              only rise
==============  ==========================================  ===================

:class:`RunningAggregates` keeps every aggregate of one base feature in O(1)
per token; :meth:`RunningAggregates.bounds` gives the interval an aggregate can
still reach after at most ``m`` more tokens whose values lie in the base's range
``[lo, hi]`` (stopping now included). Each bound is attained or exceeded by some
continuation, so a score that combines aggregates linearly can be bounded term
by term (a valid, if conservative, bound). :func:`aggregate_path` is the batch
twin: the value after every token.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ._errors import ConfigError
from ._features import BASES

__all__ = ["AGGREGATES", "Feature", "RunningAggregates", "aggregate_path"]

FloatArray = npt.NDArray[np.float64]

AGGREGATES = ("mean", "sum", "min", "max", "first", "lowest2", "count_below", "frac_below")
LENGTH_AGGREGATES = ("count", "log")
_LEVELLED = ("count_below", "frac_below")


@dataclass(frozen=True)
class Feature:
    """One answer-level feature: ``aggregate`` of ``base`` (``level`` for the counts)."""

    base: str
    aggregate: str
    level: float | None = None

    def __post_init__(self) -> None:
        if self.base == "length":
            if self.aggregate not in LENGTH_AGGREGATES or self.level is not None:
                raise ConfigError(f"feature {self.name!r}: length takes 'count' or 'log'")
            return
        if self.base not in BASES:
            raise ConfigError(f"feature {self.name!r}: unknown base feature {self.base!r}")
        if self.aggregate not in AGGREGATES:
            raise ConfigError(
                f"feature {self.name!r}: unknown aggregate {self.aggregate!r}; "
                f"choose one of {', '.join(AGGREGATES)}"
            )
        levelled = self.aggregate in _LEVELLED
        level = self.level
        if levelled != (level is not None):
            raise ConfigError(f"feature {self.name!r}: only counts take a level (name@level)")
        if level is not None and (isinstance(level, bool) or not math.isfinite(level)):
            raise ConfigError(f"feature {self.name!r}: the level must be a finite number")

    @property
    def name(self) -> str:
        out = f"{self.base}.{self.aggregate}"
        return out if self.level is None else f"{out}@{self.level!r}"

    @classmethod
    def parse(cls, name: str) -> Feature:
        """The feature named ``"base.aggregate"`` or ``"base.aggregate@level"``."""
        if not isinstance(name, str):
            raise ConfigError(f"a feature name is a string, got {name!r}")
        head, at, tail = name.partition("@")
        base, dot, agg = head.partition(".")
        if not dot:
            raise ConfigError(f"feature {name!r}: expected 'base.aggregate[@level]'")
        level = None
        if at:
            try:
                level = float(tail)
            except ValueError:
                raise ConfigError(f"feature {name!r}: the level is not a number") from None
        return cls(base, agg, level)

    def direction(self, lo: float, hi: float) -> int | None:
        """+1 if the aggregate can only rise as tokens arrive, -1 if only fall, 0 if it is
        fixed after the first token, ``None`` if it moves either way (``[lo, hi]``: the
        range of the base feature's values)."""
        agg = self.aggregate
        if self.base == "length" or agg in ("max", "count_below"):
            return 1
        if agg in ("min", "lowest2"):
            return -1
        if agg == "first":
            return 0
        if agg == "sum":
            return -1 if hi <= 0.0 else (1 if lo >= 0.0 else None)
        return None


class RunningAggregates:
    """Every aggregate of one base feature, updated in O(1) per token (levels: O(levels)).

    Values are assumed to lie in ``[lo, hi]`` (the caller clamps them).
    """

    __slots__ = ("counts", "first", "hi", "high", "levels", "lo", "low", "low1", "low2", "t",
                 "total")  # fmt: skip

    def __init__(self, lo: float, hi: float, levels: Sequence[float] = ()) -> None:
        if not (lo <= hi):
            raise ConfigError(f"empty range [{lo}, {hi}]")
        self.lo, self.hi = float(lo), float(hi)
        self.levels = tuple(float(v) for v in levels)
        self.counts = [0] * len(self.levels)
        self.t = 0
        self.total = self.first = 0.0
        self.low, self.high = math.inf, -math.inf
        self.low1 = self.low2 = self.hi

    def update(self, x: float) -> None:
        t = self.t
        self.t = t + 1
        self.total += x
        if not t:
            self.first = x
        if x < self.low:
            self.low = x
        if x > self.high:
            self.high = x
        if x < self.low2:
            if x < self.low1:
                self.low2, self.low1 = self.low1, x
            else:
                self.low2 = x
        if self.levels:
            counts = self.counts
            for i, level in enumerate(self.levels):
                if x < level:
                    counts[i] += 1

    def value(self, aggregate: str, level_index: int = -1) -> float:
        """The aggregate after the tokens so far (``t >= 1``)."""
        t = self.t
        if aggregate == "mean":
            return self.total / t
        if aggregate == "sum":
            return self.total
        if aggregate == "min":
            return self.low
        if aggregate == "max":
            return self.high
        if aggregate == "first":
            return self.first
        if aggregate == "lowest2":
            return (self.low1 + self.low2) / 2.0
        if aggregate == "count_below":
            return float(self.counts[level_index])
        if aggregate == "frac_below":
            return self.counts[level_index] / t
        raise ConfigError(f"unknown aggregate {aggregate!r}")

    def bounds(self, aggregate: str, m: float, level_index: int = -1) -> tuple[float, float]:
        """``(low, high)``: what the aggregate can reach after at most ``m`` more tokens
        (``m`` may be ``inf``), including stopping now (``t >= 1``)."""
        v = self.value(aggregate, level_index)
        if m <= 0:
            return v, v
        lo, hi, t = self.lo, self.hi, self.t
        if aggregate == "mean":
            if m == math.inf:
                return min(v, lo), max(v, hi)
            s = self.total
            return min(v, (s + m * lo) / (t + m)), max(v, (s + m * hi) / (t + m))
        if aggregate == "sum":
            return v + (m * lo if lo < 0.0 else 0.0), v + (m * hi if hi > 0.0 else 0.0)
        if aggregate == "min":
            return min(v, lo), v
        if aggregate == "max":
            return v, max(v, hi)
        if aggregate == "first":
            return v, v
        if aggregate == "lowest2":
            if m >= 2:
                return lo, v
            return (lo + self.low1) / 2.0, v
        level = self.levels[level_index]
        c = self.counts[level_index]
        can_below, can_above = lo < level, hi >= level
        if aggregate == "count_below":
            return v, (c + m if can_below else v)
        # frac_below: monotone in the number of added tokens, extremes at 0 or m
        if m == math.inf:
            low = 0.0 if can_above else v
            high = 1.0 if can_below else v
        else:
            low = c / (t + m) if can_above else v
            high = (c + m) / (t + m) if can_below else v
        return min(v, low), max(v, high)


def length_value(aggregate: str, t: int) -> float:
    return float(t) if aggregate == "count" else math.log1p(t)


def length_bounds(aggregate: str, t: int, m: float) -> tuple[float, float]:
    end = t + m
    if aggregate == "count":
        return float(t), float(end)
    return math.log1p(t), (math.inf if end == math.inf else math.log1p(end))


def aggregate_path(values: npt.ArrayLike, feature: Feature, hi: float) -> FloatArray:
    """Batch twin of :class:`RunningAggregates`: ``feature`` after each token of one
    answer whose base-feature values (already clamped to a range with top ``hi``) are
    ``values``."""
    x = np.asarray(values, dtype=np.float64)
    n = x.size
    t = np.arange(1, n + 1, dtype=np.float64)
    agg = feature.aggregate
    if feature.base == "length":
        return t if agg == "count" else np.log1p(t)
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    if agg in ("mean", "sum"):
        total = np.cumsum(x)
        return total / t if agg == "mean" else total
    if agg == "min":
        return np.minimum.accumulate(x)
    if agg == "max":
        return np.maximum.accumulate(x)
    if agg == "first":
        return np.full(n, x[0])
    if agg == "lowest2":
        rows = np.where(np.tri(n, dtype=bool), x[None, :], hi)
        low = np.sort(np.concatenate([rows, np.full((n, 2), hi)], axis=1), axis=1)[:, :2]
        return np.asarray((low[:, 0] + low[:, 1]) / 2.0, dtype=np.float64)
    assert feature.level is not None
    below = np.cumsum(x < feature.level).astype(np.float64)
    return below if agg == "count_below" else below / t
