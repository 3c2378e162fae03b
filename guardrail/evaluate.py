"""Testing thresholds and comparing rules on recorded answers: the Learn-then-Test
threshold (:func:`ltt_threshold`), conformal selection (:func:`conformal_select`), the
escalation to samples (:class:`Escalation`, :func:`in_sample_ceiling`), AUROC, whether a
fitted statistic ranks labelled answers as well as the single scores (:func:`ranking_check`),
and the repeated-split evaluation behind ``liftguard eval`` (:func:`evaluate_methods` over
the rules :func:`lift_method` and :func:`fitted_method` build, each a
:class:`MethodScores` of :func:`critical_thresholds`).

The exact replay calibration relies on and "shown at tau" are the library's own, in
:mod:`guardrail._policy`; the bootstrap intervals in :mod:`guardrail._evaluate`."""

from __future__ import annotations

from ._calibration import ltt_threshold
from ._conformal_selection import ConformalSelection, conformal_select
from ._escalation import Escalation, in_sample_ceiling
from ._evaluate import (
    MethodScores,
    auroc,
    evaluate_methods,
    fitted_method,
    lift_method,
)
from ._policy import (
    critical_thresholds,
)
from ._ranking_check import RankingCheck, ranking_check

__all__ = [
    "ConformalSelection",
    "Escalation",
    "MethodScores",
    "RankingCheck",
    "auroc",
    "conformal_select",
    "critical_thresholds",
    "evaluate_methods",
    "fitted_method",
    "in_sample_ceiling",
    "lift_method",
    "ltt_threshold",
    "ranking_check",
]
