"""Conformal selection: a batch of answers shown with the expected share of wrong ones bounded.

The certificate's calibration (:func:`guardrail.evaluate.ltt_threshold`) makes a
**high-probability** promise about one threshold used forever: with probability at
least ``1 - delta`` over the draw of the calibration answers, the error rate among the
answers it shows is at most ``risk``. That promise has to survive the worst draws, and
with a few hundred labels it can afford only a small share of what the ranking allows.

Conformal selection (Jin and Candes, "Selection by prediction with conformal p-values",
JMLR 2023) makes a different, cheaper promise **in expectation**, about one batch of
unlabelled answers scored together: the expected share of wrong answers among those it
shows (the false discovery rate; 0 when it shows none) is at most ``level``. Averaged
over calibration draws and batches, not for every draw: a given batch may hold more.

The recipe, for calibration scores ``s_i`` with labels and a batch of ``m`` scores
``t_j``, every answer drawn i.i.d. (exchangeable) from the same distribution:

- each batch answer gets the conformal p-value of "this answer is wrong",
  ``p_j = (1 + #{i : answer i wrong and s_i >= t_j}) / (n + 1)``; only wrong
  calibration answers count, ties count against the batch answer (the deterministic,
  conservative form of the clipped score ``V = inf * 1{right} - s``);
- Benjamini-Hochberg at ``level`` over the batch: with ``k`` the largest count such that
  ``k`` p-values are at most ``level * k / m``, the answers with ``p_j <= level * k / m``
  are shown.

Guarantee (Jin and Candes, Theorem 2.3 with the clipped score): ``E[#wrong shown /
max(#shown, 1)] <= level``. It needs no model of how the score relates to errors and no
monotonicity; the seeded simulations in the test suite count it against a binomial
interval (one shown answer drawn at random per run is wrong with probability equal to
the expected share).

What it is not: a threshold for a stream. The cut-off depends on the whole batch, so it
fits triage of a batch of finished answers (an evaluation set, an agent's queued tool
results, a day's answers to publish), not a decision on one answer while it streams.

Its stream twin, :func:`conformal_threshold` (``calibrate(..., procedure="conformal")``),
runs the same selection on a *reference* batch of scores (the calibration answers' own
scores, and any unlabelled answers' scores a user adds) and keeps the lowest score it
shows as a fixed threshold ``tau``: a new answer is shown iff its score is at least
``tau``. Benjamini-Hochberg's cut-off compares each p-value with ``level`` times the
share of the batch at or above it, so ``tau`` is the lowest score ``t`` with
``(1 + #{wrong calibration answers scoring >= t}) / (n + 1) <= level * G(t)``, ``G`` the
reference batch's share of scores ``>= t``; as the reference batch grows, ``G`` tends to
the stream's own share and the batch promise to one about the stream: the expected
(over calibration draws) error rate among the answers the fixed threshold shows is at
most ``level``. That is the limit of the theorem, not the theorem: with the calibration
answers as the whole reference batch the bound is approximate, and the seeded
simulations in the test suite count it against a binomial interval. It is an
**in-expectation** promise: about half of all calibration draws give a threshold whose
error rate is above ``level`` (offset by draws below it), where the default calibration
bounds that share by ``delta``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ._errors import ConfigError

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class ConformalSelection:
    """The answers of a batch that conformal selection shows.

    ``selected``: one flag per batch answer. ``pvalues``: each answer's conformal
    p-value of being wrong. ``cutoff``: the Benjamini-Hochberg cut-off ``level * k / m``
    (0 when nothing is shown). ``level``: the bound on the expected share of wrong
    answers among those shown.

    Examples
    --------
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> cal = rng.normal(size=400)
        >>> wrong = rng.random(400) < 1 / (1 + np.exp(3 * cal))
        >>> out = conformal_select(cal, wrong, rng.normal(size=200), level=0.2)
        >>> out.n_selected, round(out.cutoff, 3)
        (101, 0.101)
    """

    selected: BoolArray
    pvalues: FloatArray
    cutoff: float
    level: float

    @property
    def n_selected(self) -> int:
        """How many batch answers are shown."""
        return int(self.selected.sum())


def conformal_pvalues(
    scores: npt.ArrayLike, errors: npt.ArrayLike, batch: npt.ArrayLike
) -> FloatArray:
    """Each batch answer's conformal p-value of being wrong, from labelled scores.

    ``p_j = (1 + #{i : errors[i] and scores[i] >= batch[j]}) / (n + 1)`` with ``n`` all
    calibration answers, right and wrong: a wrong batch answer's p-value is (super-)
    uniform when the answers are exchangeable.
    """
    s = np.asarray(scores, dtype=np.float64)
    e = np.asarray(errors, dtype=bool)
    t = np.asarray(batch, dtype=np.float64)
    if s.ndim != 1 or s.shape != e.shape:
        raise ConfigError("scores and errors must be 1-d arrays of the same length")
    if t.ndim != 1:
        raise ConfigError("the batch's scores must be a 1-d array")
    if s.size == 0:
        raise ConfigError("no calibration examples")
    if np.isnan(s).any() or np.isnan(t).any():
        raise ConfigError("scores contain NaN")
    wrong = np.sort(s[e])
    at_or_above = wrong.size - np.searchsorted(wrong, t, side="left")
    return np.asarray((1.0 + at_or_above) / (s.size + 1.0), dtype=np.float64)


def conformal_select(
    scores: npt.ArrayLike, errors: npt.ArrayLike, batch: npt.ArrayLike, level: float
) -> ConformalSelection:
    """Show the batch answers Benjamini-Hochberg keeps at ``level`` on conformal p-values.

    ``scores``/``errors``: the labelled calibration answers (a higher score is meant to
    be more trustworthy; ``errors`` True where wrong). ``batch``: the scores of the
    answers to triage. The expected share of wrong answers among those shown is at most
    ``level`` (see the module docstring for the conditions and what it is not).
    """
    if not (0.0 < level < 1.0):
        raise ConfigError(f"level must be in (0, 1), got {level!r}")
    p = conformal_pvalues(scores, errors, batch)
    m = p.size
    if m == 0:
        return ConformalSelection(np.zeros(0, dtype=bool), p, 0.0, level)
    ranked = np.sort(p)
    passing = np.flatnonzero(ranked <= level * np.arange(1, m + 1) / m)
    cutoff = level * (int(passing[-1]) + 1) / m if passing.size else 0.0
    return ConformalSelection(p <= cutoff, p, cutoff, level)


def conformal_threshold(
    scores: npt.ArrayLike,
    errors: npt.ArrayLike,
    level: float,
    reference: npt.ArrayLike | None = None,
) -> float:
    """A fixed threshold for a stream: the lowest score :func:`conformal_select` shows when
    the batch is the reference scores (the calibration scores by default, with any
    unlabelled answers' scores a caller passes as ``reference``); ``inf`` where it shows
    none. See the module docstring for the promise (in expectation, and in the limit of a
    large reference batch).
    """
    s = np.asarray(scores, dtype=np.float64)
    ref = s if reference is None else np.asarray(reference, dtype=np.float64)
    picked = conformal_select(s, errors, ref, level)
    return float(ref[picked.selected].min()) if picked.n_selected else math.inf
