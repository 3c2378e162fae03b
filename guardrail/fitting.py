"""Fitted certificates: :func:`fit_certificate`, the whole recipe from labelled traces to
a calibrated :class:`~guardrail.Certificate` (:class:`FitOptions` in, a :class:`FitReport`
beside it); and the parts a study of the recipe takes apart: the per-token features
(:class:`Feature`, :func:`preset_features`, :func:`answer_features`), the fitted statistic
(:func:`fit_statistic`), the cross-validated choice between candidates
(:class:`Candidate`, :class:`Deployment`, :func:`cv_coverage`), the exact streaming replay
(:func:`replay_fitted`, :class:`FittedState` over :func:`trace_events`) and the early-block
margins (:func:`block_margins`, :func:`with_margins`).

The running aggregates and the scopes a feature can read are the library's own, in
:mod:`guardrail._aggregate_kinds`, :mod:`guardrail._aggregates` and
:mod:`guardrail._scopes`.

``liftguard fit`` is :func:`fit_certificate` behind a command line; a fitted statistic is
stored in a :class:`~guardrail.Certificate` and deployed through ``certificate.monitor()``
like any other rule.
"""

from __future__ import annotations

from ._aggregates import Feature
from ._fit._cv_coverage import Candidate, Deployment, cv_coverage
from ._fit._logistic import answer_features, fit_statistic, token_ranges
from ._fit._options import FitOptions, FitReport
from ._fit._recipe import fit_certificate
from ._fit._replay import (
    FittedPath,
    block_margins,
    critical_score,
    margins_from_scores,
    replay_fitted,
    stop_at,
    with_margins,
)
from ._fit._state import EventReader, FittedState, RecordedSkeleton, trace_events
from ._fit._statistic import (
    FittedStatistic,
    preset_features,
)

__all__ = [
    "Candidate",
    "Deployment",
    "EventReader",
    "Feature",
    "FitOptions",
    "FitReport",
    "FittedPath",
    "FittedState",
    "FittedStatistic",
    "RecordedSkeleton",
    "answer_features",
    "block_margins",
    "critical_score",
    "cv_coverage",
    "fit_certificate",
    "fit_statistic",
    "margins_from_scores",
    "preset_features",
    "replay_fitted",
    "stop_at",
    "token_ranges",
    "trace_events",
    "with_margins",
]
