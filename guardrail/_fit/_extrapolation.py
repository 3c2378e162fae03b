"""How far a fitted statistic would extrapolate on other answers: the feature whose values
on them lie farthest, in the fitting answers' standard deviations, from its fitting mean.

A logistic statistic is fitted on the range of answers it saw. Fitted on TriviaQA's answers
(a median of 2 tokens) and run on GSM8K's (285), its sums and counts sit a hundred standard
deviations out; unclamped, it ranked the answers at chance (``python -m studies.shift``).
A statistic with clamps (the default fit) holds such a feature at its fitting range's edge
and ranks by the others, which held its ranking there, but that rests on features it was
fitted beside, not on answers like these. The check reads nothing but the statistic's own
normalisation (``center``, ``scale``) and the new answers' features, so ``liftguard
calibrate --certificate`` can say so before a user relies on the ranking.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._trace_format import Trace
from ._logistic import answer_features
from ._statistic import FittedStatistic

FAR = 10.0
"""A median this many fitting standard deviations out is reported. On the shift study's
rows the largest median was at most 7.0 where the fitted certificate kept its ranking
(in-domain, length and task-family shifts within MBPP and GSM8K; MBPP -> GSM8K 7.0) and
10.7 and 112 where it lost it (fitted on TriviaQA, run on MBPP and on GSM8K)."""


@dataclass(frozen=True)
class Extrapolation:
    """The feature whose values on the answers lie farthest from the fitting answers':
    ``median_z``, the median over the answers of ``|x - center| / scale``; ``far`` when
    that is at least :data:`FAR`."""

    feature: str
    median_z: float
    answers: int
    clamped: bool = False
    """Whether the statistic holds its features to their fitting range (it does not
    extrapolate; the feature stops telling these answers apart)."""

    @property
    def far(self) -> bool:
        return self.median_z >= FAR

    def warning(self) -> str:
        """One line for a user: what lies how far out, and what to do."""
        where = (
            f"their {self.feature} lies a median of {self.median_z:.0f} standard deviations "
            "from the fitting answers' mean"
        )
        if self.clamped:
            return (
                f"these answers lie outside what the statistic was fitted on: {where}, "
                "where the statistic holds it at its fitting range's edge and ranks by its "
                "other features; fit on answers like these (or compare with 'liftguard "
                "eval --certificate')"
            )
        return (
            f"the statistic extrapolates on these answers: {where}, and a statistic "
            "fitted on much shorter or otherwise unlike answers can rank them worse than a "
            "single score; fit on answers like these (or compare with 'liftguard eval "
            "--certificate')"
        )


def farthest_feature(
    stat: FittedStatistic, traces: Sequence[Trace], skeleton: Any = None
) -> Extrapolation | None:
    """The :class:`Extrapolation` of ``stat`` on the non-empty ``traces`` (``skeleton`` as
    :func:`~guardrail.fitting.answer_features` takes it); ``None`` where none has a token.

    Examples
    --------
        >>> from guardrail.fitting import Feature
        >>> from guardrail.traces import parse_trace
        >>> stat = FittedStatistic(features=(Feature("length", "count"),), weights=(1.0,),
        ...                        intercept=0.0, center=(3.0,), scale=(2.0,), vocab_size=1000)
        >>> tokens = [{"id": 1, "text": "x", "logprob": -0.1, "top": [[1, -0.1]]}] * 43
        >>> long = parse_trace({"id": "q1", "dataset": "demo", "model": "m", "question": "?",
        ...     "references": ["x"], "prompt": "?", "answer": "x" * 43, "correct": True,
        ...     "vocab_size": 1000, "top_k": 1, "tokens": tokens})
        >>> found = farthest_feature(stat, [long])
        >>> found.feature, found.median_z, found.far
        ('length.count', 20.0, True)
    """
    kept = [t for t in traces if t.n_tokens]
    if not kept:
        return None
    x = answer_features(kept, stat.features, skeleton=skeleton, ranges=stat.ranges,
                        alternatives=stat.alternatives, temperature=stat.temperature)  # fmt: skip
    z = np.abs((x - np.asarray(stat.center)) / np.asarray(stat.scale))
    median = np.nanmedian(z, axis=0)
    j = int(np.nanargmax(median))
    return Extrapolation(stat.features[j].name, float(median[j]), len(kept), bool(stat.clamps))
