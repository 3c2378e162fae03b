"""Replaying a streaming rule on recorded answers, testing thresholds, and comparing rules:
the exact replay calibration relies on, "shown at tau", the Learn-then-Test threshold,
AUROC, the repeated-split evaluation behind ``liftguard eval`` and its bootstrap intervals."""

from __future__ import annotations

from ._calibration import LTTOutcome, first_test_level, ltt_threshold
from ._conformal_selection import ConformalSelection, conformal_select
from ._evaluate import (
    MethodScores,
    auroc,
    baseline_method,
    bootstrap_intervals,
    evaluate_methods,
    fitted_method,
    lift_method,
)
from ._policy import (
    ReplayResult,
    critical_thresholds,
    replay,
    running_statistic,
    shown_at,
    threshold_grid,
)

__all__ = [
    "ConformalSelection",
    "LTTOutcome",
    "MethodScores",
    "ReplayResult",
    "auroc",
    "baseline_method",
    "bootstrap_intervals",
    "conformal_select",
    "critical_thresholds",
    "evaluate_methods",
    "first_test_level",
    "fitted_method",
    "lift_method",
    "ltt_threshold",
    "replay",
    "running_statistic",
    "shown_at",
    "threshold_grid",
]
