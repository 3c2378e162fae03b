"""The source paper's own procedures, kept to reproduce its numbers
(``paper/selective_risk_certification.tex``; the section or theorem is in each docstring).

Several of them do not deliver the guarantee the paper claims (DESIGN.md marks the
fixes): the ``paper`` boundary rests on sub-gamma parameters estimated from data, and
the paper's calibration threshold bounds the mean lift, not the selective risk.

- the ``paper`` boundary (``StreamPolicy(boundary="paper")``), the sub-gamma
  law-of-the-iterated-logarithm boundary (Thm 2.8): its half-width
  :func:`paper_radius`, the streaming :class:`PaperMean` and its batch twin
  :func:`paper_mean_path`;
- bounds on the mean lift: :func:`pac_bayes_bound` (upper, Thm 2.5) and
  :func:`mean_lift_lower_bound` (the paper's calibration threshold, Algorithm 1);
- :func:`kappa_answer_rate_bound`: the answer rate that mutual information ``kappa``
  allows at a risk (Thm 2.7);
- :func:`eta_budget_shift_bound`: how far a budget moves when the skeleton moves by
  ``eta`` in total variation (Thm 2.6);
- :func:`topk_compensated_lift`: the appendix's top-k compensated lift.
"""

from __future__ import annotations

from ._boundaries import paper_radius
from ._bounds import (
    eta_budget_shift_bound,
    kappa_answer_rate_bound,
    mean_lift_lower_bound,
    pac_bayes_bound,
)
from ._statistics import PaperMean, paper_mean_path
from ._topk import topk_compensated_lift

__all__ = [
    "PaperMean",
    "eta_budget_shift_bound",
    "kappa_answer_rate_bound",
    "mean_lift_lower_bound",
    "pac_bayes_bound",
    "paper_mean_path",
    "paper_radius",
    "topk_compensated_lift",
]
