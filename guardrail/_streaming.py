"""The one contract of a streaming statistic: ``update(x)`` returns the value, ``value`` reads it.

A streaming statistic takes one observation per :meth:`~StreamingStatistic.update`
(a token's lift, a token's features, a token's text, a label) and returns the
statistic's value after it; :attr:`~StreamingStatistic.value` reads that same value
again without taking anything (before the first update: the initial value each class
documents). There is one meaning per class, so a caller never needs to know which of
several results an ``update`` happens to return:

- :class:`~guardrail._statistics.BettingMean`: which claims the wealth shows now
  (``int``, :data:`~guardrail._statistics.ABOVE` | :data:`~guardrail._statistics.BELOW`);
- :class:`~guardrail._statistics.PaperMean`,
  :class:`~guardrail._confidence_sequence.BettingConfidenceSequence`: the interval
  ``(lower, upper)`` on the mean lift;
- :class:`~guardrail._statistics.LowestK`, the aggregates of
  :mod:`guardrail._aggregate_kinds`: the aggregate (``float``);
- the scopes of :mod:`guardrail._scopes`: whether the token just taken is in the
  scope (``bool``);
- :class:`~guardrail.fitting.FittedState`: the fitted score (``float``);
- :class:`~guardrail.RiskMonitor`: whether the alarm is on (``bool``); its detector's
  value is ``log M_t`` at each of its levels (an array).

``update`` does the per-token work and returns what it computed; ``value`` only reads
the state ``update`` left, so the contract costs the hot path nothing.
``tests/guardrail/test_streaming_contract.py`` holds every class in :mod:`guardrail`
with an ``update`` method to it.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, runtime_checkable

__all__ = ["StreamingStatistic"]

V_co = TypeVar("V_co", covariant=True)


@runtime_checkable
class StreamingStatistic(Protocol[V_co]):
    """A statistic updated one observation at a time (river style, with one return).

    Examples
    --------
        >>> from guardrail._statistics import LowestK
        >>> stat = LowestK(k=1, clip=12.0)
        >>> isinstance(stat, StreamingStatistic), stat.value
        (True, 12.0)
        >>> stat.update(3.0) == stat.value == 3.0
        True
    """

    def update(self, *args: Any, **kwargs: Any) -> V_co:
        """Take one observation; the statistic's value after it (what :attr:`value` reads)."""
        ...

    @property
    def value(self) -> V_co:
        """The value after the observations so far (its documented initial value before any)."""
        ...
