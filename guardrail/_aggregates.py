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

A **scoped** feature, ``"scope:base.aggregate"`` (``"final:logprob.min"``,
``"code:entropy.mean"``, ``"final:length.count"``), aggregates over the tokens of one
part of the answer only (:mod:`guardrail._scopes`: ``final``, after the final-answer
marker; ``code``, inside a fenced block). Before its first token the scope is empty and
the feature reads :meth:`Feature.empty`: the top ``hi`` of the base's range for
``mean``, ``min`` and ``lowest2``, the bottom ``lo`` for ``max``, 0 for sums, counts and
the length. ``first`` and ``frac_below`` take no scope.

One object per aggregate (:mod:`guardrail._aggregate_kinds`) keeps it in O(1) per
token and says what it can still reach after at most ``m`` more tokens whose values
lie in the base's range ``[lo, hi]`` (stopping now included). Each such bound is
attained or exceeded by some continuation, so a score that combines aggregates
linearly can be bounded term by term (a valid, if conservative, bound).
:func:`aggregate_path` and :func:`reach_path` are the batch twins: the value, and the
reachable end, after every token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ._errors import ConfigError
from ._features import BASES
from ._scopes import SCOPES

__all__ = ["AGGREGATES", "Feature", "aggregate_path", "reach_path", "scoped_path"]

FloatArray = npt.NDArray[np.float64]

AGGREGATES = ("mean", "sum", "min", "max", "first", "lowest2", "count_below", "frac_below")
LENGTH_AGGREGATES = ("count", "log")
_LEVELLED = ("count_below", "frac_below")
_UNSCOPED = ("first", "frac_below")


@dataclass(frozen=True)
class Feature:
    """One answer-level feature: ``aggregate`` of ``base`` (``level`` for the counts).

    Examples
    --------
        >>> feature = Feature.parse("logprob.count_below@-2.0")
        >>> feature.base, feature.aggregate, feature.level
        ('logprob', 'count_below', -2.0)
        >>> feature.name
        'logprob.count_below@-2.0'
    """

    base: str
    aggregate: str
    level: float | None = None
    scope: str | None = None
    """The part of the answer it reads (:data:`guardrail._scopes.SCOPES`); None: all."""

    def __post_init__(self) -> None:
        if self.scope is not None and (self.scope not in SCOPES or self.aggregate in _UNSCOPED):
            raise ConfigError(
                f"feature {self.name!r}: a scope is one of {', '.join(SCOPES)}, over any "
                f"aggregate but {' and '.join(_UNSCOPED)}"
            )
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
        out = out if self.scope is None else f"{self.scope}:{out}"
        return out if self.level is None else f"{out}@{self.level!r}"

    @classmethod
    def parse(cls, name: str) -> Feature:
        """The feature named ``"[scope:]base.aggregate[@level]"``."""
        if not isinstance(name, str):
            raise ConfigError(f"a feature name is a string, got {name!r}")
        scope, colon, rest = name.partition(":")
        if colon:
            return cls.parse(rest).scoped(scope)
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

    def scoped(self, scope: str | None) -> Feature:
        """The same feature over ``scope`` (None: the whole answer)."""
        return Feature(self.base, self.aggregate, self.level, scope)

    def empty(self, lo: float, hi: float) -> float:
        """What the feature reads before its scope's first token (see the module docstring;
        ``[lo, hi]``: the base's range)."""
        if self.aggregate in ("mean", "min", "lowest2"):
            return hi
        return lo if self.aggregate == "max" else 0.0

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


def aggregate_path(values: npt.ArrayLike, feature: Feature, hi: float) -> FloatArray:
    """Batch twin of the running aggregates (:mod:`guardrail._aggregate_kinds`):
    ``feature`` after each token of one answer whose base-feature values (already
    clamped to a range with top ``hi``) are ``values``."""
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


def scoped_path(
    values: npt.ArrayLike, mask: npt.ArrayLike, feature: Feature, lo: float, hi: float
) -> FloatArray:
    """Batch twin of a scoped feature: its value after each token, the aggregate of the
    values of the tokens in ``mask`` so far (:meth:`Feature.empty` before the first)."""
    x = np.asarray(values, dtype=np.float64)
    inside = np.asarray(mask, dtype=bool)
    seen = np.cumsum(inside)
    out = np.full(inside.size, feature.empty(lo, hi))
    if seen.size and seen[-1]:
        path = aggregate_path(x[inside], feature.scoped(None), hi)
        out[seen > 0] = path[seen[seen > 0] - 1]
    return out


def reach_path(
    values: npt.ArrayLike, feature: Feature, lo: float, hi: float, m: float, *, up: bool
) -> FloatArray:
    """Batch twin of ``upper_end(m)`` (``up``) or ``lower_end(m)`` of the running
    aggregates: after each token of ``values`` (clamped to ``[lo, hi]``), the farthest
    end value the aggregate can reach that way within ``m`` more tokens."""
    x = np.asarray(values, dtype=np.float64)
    t = np.arange(1, x.size + 1, dtype=np.float64)
    v = aggregate_path(x, feature, hi)
    agg, inf = feature.aggregate, m == math.inf
    if feature.base == "length":
        if not up:
            return v
        if agg == "count":
            return t + m
        return np.full(x.size, math.inf) if inf else np.log1p(t + m)
    if agg == "mean":
        bound = hi if up else lo
        e = np.full(x.size, bound) if inf else (np.cumsum(x) + m * bound) / (t + m)
        return np.maximum(e, v) if up else np.minimum(e, v)
    if agg == "frac_below":
        assert feature.level is not None
        below = np.cumsum(x < feature.level).astype(np.float64)
        if up:
            return np.maximum(np.full(x.size, 1.0) if inf else (below + m) / (t + m), v)
        if not hi >= feature.level:  # no value can be at or above the level
            return v
        return np.minimum(np.zeros(x.size) if inf else below / (t + m), v)
    if agg == "sum":
        moves = hi > 0.0 if up else lo < 0.0
        return v + m * (hi if up else lo) if moves else v
    if agg == "count_below":
        assert feature.level is not None
        return v + m if up and lo < feature.level else v
    if up:
        return np.full(x.size, hi) if agg == "max" else v
    if agg == "min":
        return np.full(x.size, lo)
    if agg == "lowest2":
        return np.full(x.size, lo) if m >= 2 else (lo + np.minimum.accumulate(x)) / 2.0
    return v
