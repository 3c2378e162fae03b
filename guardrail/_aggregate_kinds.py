"""One small object per aggregate of a per-token feature (river style).

Each class keeps one aggregate of one base feature in O(1) per token:
:meth:`~Aggregate.update` adds a token's value (already clamped to the base's
range ``[lo, hi]``) and returns the aggregate, which :attr:`~Aggregate.value`
then holds (the contract of :mod:`guardrail._streaming`; :attr:`~Aggregate.start`
before the first token, or a scoped feature's empty value). For the fitted rule's
early verdicts each also says whether it :attr:`~Aggregate.rises` or
:attr:`~Aggregate.falls` as tokens arrive, and what it can reach after at most ``m``
more tokens (``m`` may be ``inf``; ``m >= 1`` where the fitted rule asks):
:meth:`~Aggregate.upper_end` is at least, and :meth:`~Aggregate.lower_end` at most, the
value any such continuation ends with (stopping now included). The batch twins are
:func:`guardrail._aggregates.aggregate_path` and
:func:`guardrail._aggregates.reach_path`.

The bounds' arithmetic is the fitted score's contract with calibration: a certificate's
replayed bounds (:mod:`guardrail._fit._replay`) and a monitor's must be the same
floats, so change it only together with a recalibration.
"""

from __future__ import annotations

import math

from ._aggregates import Feature
from ._errors import ConfigError

__all__ = [
    "AGGREGATE_CLASSES",
    "Aggregate",
    "Count",
    "CountBelow",
    "First",
    "FracBelow",
    "LogCount",
    "Lowest2",
    "Max",
    "Mean",
    "Min",
    "Sum",
    "aggregate_of",
]

_INF = math.inf


class Aggregate:
    """The interface: ``update(x) -> value``, ``value`` (:attr:`start` before the first
    token), whether it can ever rise or fall as tokens arrive (:attr:`rises`,
    :attr:`falls`), and the reachable ends ``upper_end(m)`` / ``lower_end(m)``.

    Examples
    --------
        >>> agg = aggregate_of(Feature.parse("logprob.min"), lo=-20.0, hi=0.0)
        >>> [agg.update(x) for x in [-0.5, -2.0, -1.0]]
        [-0.5, -2.0, -2.0]
        >>> agg.rises, agg.falls
        (False, True)
    """

    __slots__ = ("hi", "lo", "value")
    value: float
    """The aggregate after the tokens so far (what :meth:`update` returned last)."""
    start = math.nan
    """:attr:`value` before the first token."""

    def __init__(self, lo: float, hi: float) -> None:
        if not (lo <= hi):
            raise ConfigError(f"empty range [{lo}, {hi}]")
        self.lo, self.hi, self.value = float(lo), float(hi), self.start

    def update(self, x: float) -> float:
        """Add one token's value; the aggregate after it (:attr:`value`)."""
        raise NotImplementedError

    @property
    def rises(self) -> bool:
        return True

    @property
    def falls(self) -> bool:
        return True

    def upper_end(self, m: float) -> float:
        """At least the value any continuation of at most ``m`` more tokens ends with."""
        return self.value

    def lower_end(self, m: float) -> float:
        """At most the value any continuation of at most ``m`` more tokens ends with."""
        return self.value


class Mean(Aggregate):
    """The mean; moves either way."""

    __slots__ = ("t", "total")

    def __init__(self, lo: float, hi: float) -> None:
        Aggregate.__init__(self, lo, hi)
        self.t, self.total = 0, 0.0

    def update(self, x: float) -> float:
        self.t = t = self.t + 1
        self.total += x
        self.value = v = self.total / t
        return v

    def upper_end(self, m: float) -> float:
        # the end value moves monotonically with the number of added tokens
        e = self.hi if m == _INF else (self.total + m * self.hi) / (self.t + m)
        v = self.value
        return e if e > v else v

    def lower_end(self, m: float) -> float:
        e = self.lo if m == _INF else (self.total + m * self.lo) / (self.t + m)
        v = self.value
        return e if e < v else v


class Sum(Aggregate):
    """The sum; falls if ``hi <= 0``, rises if ``lo >= 0``."""

    __slots__ = ()
    start = 0.0

    def update(self, x: float) -> float:
        self.value = v = self.value + x
        return v

    @property
    def rises(self) -> bool:
        return self.hi > 0.0

    @property
    def falls(self) -> bool:
        return self.lo < 0.0

    def upper_end(self, m: float) -> float:
        return self.value + m * self.hi if self.hi > 0.0 else self.value

    def lower_end(self, m: float) -> float:
        return self.value + m * self.lo if self.lo < 0.0 else self.value


class Min(Aggregate):
    """The minimum; only falls."""

    __slots__ = ()
    start = _INF
    rises = False

    def update(self, x: float) -> float:
        if x < self.value:
            self.value = x
        return self.value

    def lower_end(self, m: float) -> float:
        return self.lo


class Max(Aggregate):
    """The maximum; only rises."""

    __slots__ = ()
    start = -_INF
    falls = False

    def update(self, x: float) -> float:
        if x > self.value:
            self.value = x
        return self.value

    def upper_end(self, m: float) -> float:
        return self.hi


class First(Aggregate):
    """The first token's value; fixed after it."""

    __slots__ = ("seen",)
    rises = falls = False

    def __init__(self, lo: float, hi: float) -> None:
        Aggregate.__init__(self, lo, hi)
        self.seen = False

    def update(self, x: float) -> float:
        if not self.seen:
            self.seen, self.value = True, x
        return self.value


class Lowest2(Aggregate):
    """The mean of the two lowest values, a missing one counted as ``hi``; only falls."""

    __slots__ = ("low1", "low2")
    rises = False

    def __init__(self, lo: float, hi: float) -> None:
        Aggregate.__init__(self, lo, hi)
        self.low1 = self.low2 = self.hi

    def update(self, x: float) -> float:
        if x < self.low2:
            if x < self.low1:
                self.low2, self.low1 = self.low1, x
            else:
                self.low2 = x
            self.value = (self.low1 + self.low2) / 2.0
        elif self.value != self.value:  # the first token, at the top of the range
            self.value = (self.low1 + self.low2) / 2.0
        return self.value

    def lower_end(self, m: float) -> float:
        return self.lo if m >= 2 else (self.lo + self.low1) / 2.0


class CountBelow(Aggregate):
    """The number of values ``< level``; only rises (if some value can be below)."""

    __slots__ = ("level",)
    start = 0.0
    falls = False

    def __init__(self, lo: float, hi: float, level: float) -> None:
        Aggregate.__init__(self, lo, hi)
        self.level = float(level)

    def update(self, x: float) -> float:
        if x < self.level:
            self.value += 1.0
        return self.value

    @property
    def rises(self) -> bool:
        return self.lo < self.level

    def upper_end(self, m: float) -> float:
        return self.value + m if self.lo < self.level else self.value


class FracBelow(Aggregate):
    """The share of values ``< level``; moves either way."""

    __slots__ = ("count", "level", "t")

    def __init__(self, lo: float, hi: float, level: float) -> None:
        Aggregate.__init__(self, lo, hi)
        self.level, self.count, self.t = float(level), 0, 0

    def update(self, x: float) -> float:
        self.t = t = self.t + 1
        if x < self.level:
            self.count += 1
        self.value = v = self.count / t
        return v

    def upper_end(self, m: float) -> float:
        # every further token below the level (conservative when none can be)
        e = 1.0 if m == _INF else (self.count + m) / (self.t + m)
        v = self.value
        return e if e > v else v

    def lower_end(self, m: float) -> float:
        v = self.value
        if not self.hi >= self.level:  # no further token can be at or above the level
            return v
        e = 0.0 if m == _INF else self.count / (self.t + m)
        return e if e < v else v


class Count(Aggregate):
    """The length ``t`` (the value is ignored); only rises."""

    __slots__ = ()
    start = 0.0
    falls = False

    def __init__(self, lo: float = 0.0, hi: float = 0.0) -> None:
        Aggregate.__init__(self, lo, hi)

    def update(self, x: float = 0.0) -> float:
        self.value = v = self.value + 1.0
        return v

    def upper_end(self, m: float) -> float:
        return self.value + m


class LogCount(Aggregate):
    """``log(1 + t)`` (the value is ignored); only rises."""

    __slots__ = ("t",)
    start = 0.0
    falls = False

    def __init__(self, lo: float = 0.0, hi: float = 0.0) -> None:
        Aggregate.__init__(self, lo, hi)
        self.t = 0

    def update(self, x: float = 0.0) -> float:
        self.t = t = self.t + 1
        self.value = v = math.log1p(t)
        return v

    def upper_end(self, m: float) -> float:
        return _INF if m == _INF else math.log1p(self.t + m)


AGGREGATE_CLASSES: tuple[type[Aggregate], ...] = (
    Mean,
    Sum,
    Min,
    Max,
    First,
    Lowest2,
    CountBelow,
    FracBelow,
    Count,
    LogCount,
)
"""Every class, in the order a fitted score sums its terms (kept: the order sets the
score's last bits, which calibration replayed)."""

_BY_NAME: dict[str, type[Aggregate]] = {
    "mean": Mean,
    "sum": Sum,
    "min": Min,
    "max": Max,
    "first": First,
    "lowest2": Lowest2,
}


def aggregate_of(feature: Feature, lo: float = 0.0, hi: float = 0.0) -> Aggregate:
    """A fresh running ``feature`` whose base values lie in ``[lo, hi]``. A scoped one
    starts at :meth:`~guardrail._aggregates.Feature.empty` (its caller updates it with
    the scope's tokens only); its ends stay valid, since a continuation of ``m`` more
    tokens brings at most ``m`` of the scope's."""
    agg = feature.aggregate
    out: Aggregate
    if feature.base == "length":
        out = Count() if agg == "count" else LogCount()
    elif feature.level is not None:
        cls = CountBelow if agg == "count_below" else FracBelow
        out = cls(lo, hi, feature.level)
    else:
        out = _BY_NAME[agg](lo, hi)
    if feature.scope is not None:
        out.value = feature.empty(lo, hi)
    return out
