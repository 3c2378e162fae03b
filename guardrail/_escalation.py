"""Escalation: one pass first, K samples only where the one pass is undecided.

Self-consistency (Wang et al., 2023: sample K more solutions and trust an answer as far
as their final answers agree with it) ranks answers better than any single-pass score
(on GSM8K, ``docs/results/self_consistency.md``), but it costs K more generations on
every question. Most answers need none of them: a single-pass score far above the
threshold a risk calls for decides alone, as does one far below it. An
:class:`Escalation` asks for samples only for answers whose single-pass score lies in a
*band* around where that threshold falls, and ranks every answer on one combined scale:

- above the band: by the single-pass score, above every answer in or below it;
- in the band: by the samples' agreement (:meth:`Escalation.agreement`), ties broken by
  the single-pass score;
- below the band: by the single-pass score, below every answer in the band.

The combined score is a fixed function of the two scores once the band is fixed, so the
threshold on it is calibrated like any other (:func:`guardrail.evaluate.ltt_threshold`),
with the same **high-probability** promise, provided the band was chosen without the
calibration answers: :meth:`Escalation.band` takes it from separate fitting answers
(with their labels: the band is centred on where the single pass's calibrated threshold
falls among them). The calibration answers in the band need their samples; the
others do not. When the calibrated threshold lies above the band's part of the scale,
no answer in the band is shown and none needs samples (and likewise below it, where
every answer in the band is shown): :meth:`Escalation.needs_samples` says so.

This module is the rule and its calibration; drawing the samples is the caller's (an
adapter's) business, as is reading a final answer out of each (e.g. the last number of a
worked solution, :func:`adapters.final_number`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ._calibration import Procedure, ltt_threshold
from ._errors import ConfigError, InsufficientDataError

FloatArray = npt.NDArray[np.float64]

_BELOW, _BAND, _ABOVE = 0.0, 1.0, 3.0
"""Where each part of the combined scale starts: below the band in (0, 1), in the band
in [1, 2 + 1e-9), above it in (3, 4)."""
_TIE = 1e-9
"""The weight of the single-pass score breaking ties of agreement in the band."""


def _squash(x: FloatArray) -> FloatArray:
    """A strictly increasing map of the reals into (0, 1)."""
    return 0.5 + 0.5 * x / (1.0 + np.abs(x))


def in_sample_ceiling(scores: npt.ArrayLike, errors: npt.ArrayLike, risk: float) -> float:
    """The largest top share of ``scores`` (whole groups of ties, as a threshold shows
    them) whose mean of ``errors`` is at most ``risk``: what a threshold chosen with
    these very labels could show, with no guarantee; 0 when no top share qualifies.

    Examples
    --------
        >>> in_sample_ceiling([4.0, 3.0, 2.0, 1.0], [0, 0, 1, 1], risk=0.34)
        0.75
        >>> in_sample_ceiling([1.0, 1.0], [1, 0], risk=0.2)
        0.0
    """
    s = np.asarray(scores, dtype=np.float64)
    e = np.asarray(errors, dtype=np.float64)
    if s.ndim != 1 or s.shape != e.shape or s.size == 0:
        raise ConfigError("scores and errors must be non-empty 1-d arrays of the same length")
    if np.isnan(s).any():
        raise ConfigError("scores contain NaN")
    order = np.argsort(-s, kind="stable")
    ss = s[order]
    ends = np.r_[ss[1:] != ss[:-1], True]
    m = np.flatnonzero(ends) + 1
    rate = np.cumsum(e[order])[ends] / m
    good = np.flatnonzero(rate <= risk)
    return float(m[good[-1]] / s.size) if good.size else 0.0


@dataclass(frozen=True)
class Escalation:
    """A calibrated escalation rule (module docstring): answers with a single-pass score
    in ``[low, high]`` are sampled and ranked by agreement; ``tau`` is the threshold on
    the combined scale (:meth:`score`), certified by :meth:`calibrate` at ``risk`` with
    probability ``1 - delta``.

    Examples
    --------
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> right = rng.random(2000) < 0.6
        >>> single = rng.normal(right * 1.0, 1.0)  # a weak one-pass score
        >>> agree = np.clip(rng.normal(right * 0.6 + 0.2, 0.2), 0, 1)  # a strong one
        >>> band = Escalation.band(single[:1000], right[:1000], risk=0.2)
        >>> rule = Escalation.calibrate(single[1000:], agree[1000:], ~right[1000:],
        ...                             band=band, risk=0.2)
        >>> rule.needs_samples(float(band[0]) - 1.0), rule.needs_samples(sum(band) / 2)
        (False, True)
        >>> rule.shows(float(band[1]) + 1.0), rule.shows(sum(band) / 2, consistency=1.0)
        (True, True)
    """

    low: float
    high: float
    tau: float
    risk: float
    delta: float

    def __post_init__(self) -> None:
        if not (np.isfinite(self.low) and np.isfinite(self.high)) or self.low > self.high:
            raise ConfigError(f"the band must be finite with low <= high, got "
                              f"({self.low!r}, {self.high!r})")  # fmt: skip

    @staticmethod
    def agreement(answer: Hashable | None, samples: Sequence[Hashable | None]) -> float:
        """The share of ``samples`` whose final answer equals ``answer``'s (``None``: no
        final answer, which agrees with nothing).

        Examples
        --------
            >>> Escalation.agreement(18.0, [18.0, 18.0, 20.0, None, 18.0])
            0.6
        """
        if not samples:
            raise ConfigError("agreement needs at least one sample")
        if answer is None:
            return 0.0
        return sum(s is not None and s == answer for s in samples) / len(samples)

    @staticmethod
    def band(
        scores: npt.ArrayLike, correct: npt.ArrayLike, risk: float, delta: float = 0.05
    ) -> tuple[float, float]:
        """Where the single pass is undecided at ``risk``, read off fitting answers (their
        single-pass ``scores`` and labels): from the lowest score a threshold chosen with
        their labels in hindsight would show (the bottom of their
        :func:`in_sample_ceiling`; nothing below it is worth sampling) up to the threshold
        the high-probability calibration certifies on them
        (:func:`~guardrail.evaluate.ltt_threshold` at ``delta``; above it the single pass
        decides alone; their top score where it certifies none). Use answers other than
        the ones the escalation is calibrated on, about as many.

        Examples
        --------
            >>> scores = [float(i) for i in range(100)]
            >>> correct = [i >= 30 for i in range(100)]  # the top 70 right, the rest wrong
            >>> Escalation.band(scores, correct, risk=0.1)  # the top 77 hold 10% wrong
            (23.0, 28.0)
        """
        s = np.asarray(scores, dtype=np.float64)
        wrong = ~np.asarray(correct, dtype=bool)
        shown = round(in_sample_ceiling(s, wrong, risk) * s.size)  # (refuses no scores)
        top = float(s.max())
        low = float(np.sort(s)[::-1][shown - 1]) if shown else top
        try:
            high = float(ltt_threshold(s, wrong, risk, delta).tau)
        except InsufficientDataError:
            high = top
        return low, max(low, high)

    def in_band(self, single: float) -> bool:
        """Whether a single-pass score lies in the band."""
        return self.low <= single <= self.high

    def needs_samples(self, single: float) -> bool:
        """Whether an answer with this single-pass score needs its samples to be decided:
        in the band, and ``tau`` within the band's part of the scale."""
        return self.in_band(single) and _BAND <= self.tau < _ABOVE

    def scores(self, single: npt.ArrayLike, consistency: npt.ArrayLike) -> FloatArray:
        """The combined scores of many answers (:meth:`score`'s batch twin);
        ``consistency`` may be NaN outside the band."""
        s = np.asarray(single, dtype=np.float64)
        c = np.asarray(consistency, dtype=np.float64)
        if s.shape != c.shape:
            raise ConfigError("single and consistency must have the same shape")
        if np.isnan(s).any():
            raise ConfigError("single-pass scores contain NaN")
        inside = (s >= self.low) & (s <= self.high)
        bad = inside & ~((c >= 0.0) & (c <= 1.0))
        if bad.any():
            raise ConfigError(f"{int(bad.sum())} answers in the band have no agreement in "
                              "[0, 1] (sample them first)")  # fmt: skip
        q = _squash(s)
        return np.where(s > self.high, _ABOVE + q,
                        np.where(s < self.low, _BELOW + q, _BAND + c + _TIE * q))  # fmt: skip

    def score(self, single: float, consistency: float | None = None) -> float:
        """One answer's combined score; ``consistency`` (its samples' agreement) is needed
        in the band only."""
        c = np.nan if consistency is None else consistency
        return float(self.scores(np.array([single]), np.array([c]))[0])

    def shows(self, single: float, consistency: float | None = None) -> bool:
        """Whether the rule shows the answer: its combined score at least ``tau``. An
        answer that :meth:`needs_samples` without ``consistency`` raises."""
        if consistency is None and not self.needs_samples(single) and self.in_band(single):
            return self.tau < _BAND  # every answer in the band is shown, or none
        return self.score(single, consistency) >= self.tau

    @classmethod
    def calibrate(
        cls,
        single: npt.ArrayLike,
        consistency: npt.ArrayLike,
        errors: npt.ArrayLike,
        *,
        band: tuple[float, float],
        risk: float,
        delta: float = 0.05,
        procedure: Procedure = "fixed-sequence",
    ) -> Escalation:
        """Calibrate ``tau`` on labelled answers (``errors``: True where wrong) with their
        single-pass scores and, for those in ``band``, their samples' agreement (NaN
        elsewhere): :func:`~guardrail.evaluate.ltt_threshold` on the combined scores.
        Raises :class:`~guardrail.InsufficientDataError` when no threshold passes."""
        low, high = band
        probe = cls(low=float(low), high=float(high), tau=np.inf, risk=risk, delta=delta)
        out = ltt_threshold(probe.scores(single, consistency), errors, risk, delta,
                            procedure=procedure)  # fmt: skip
        return cls(low=probe.low, high=probe.high, tau=float(out.tau), risk=risk, delta=delta)
