"""Fitted certificates: :func:`fit_certificate`, the whole recipe from labelled traces to
a calibrated :class:`~guardrail.Certificate` (:class:`FitOptions` in, a :class:`FitReport`
beside it); and its parts: per-token features a stream carries, their running aggregates
(one small object per aggregate, :func:`aggregate_of`, each beside its batch twin), the
fitted statistic and its exact streaming replay; the scopes a feature can read (the final
answer, the code block, the numbers), each told token by token (:func:`scope_tracker`,
beside its batch twin :func:`scope_mask`).

``liftguard fit`` is :func:`fit_certificate` behind a command line; a fitted statistic is
stored in a :class:`~guardrail.Certificate` and deployed through ``certificate.monitor()``
like any other rule.
"""

from __future__ import annotations

from ._aggregate_kinds import Aggregate, aggregate_of
from ._aggregates import Feature, aggregate_path, reach_path, scoped_path
from ._features import SOURCES as FEATURE_SOURCES
from ._features import TokenFeaturizer
from ._features_batch import base_features_batch
from ._fit_recipe import FitOptions, FitReport, fit_certificate
from ._fitted import (
    DEFAULT_ALTERNATIVES,
    DEFAULT_L2,
    FEATURE_PRESETS,
    FittedStatistic,
    moves_one_way,
    preset_features,
)
from ._fitted_replay import (
    FittedPath,
    MarginAnswers,
    block_margins,
    calibrate_fitted,
    critical_score,
    margin_cost,
    margin_scale,
    margins_from_scores,
    replay_fitted,
    stop_at,
    with_margins,
)
from ._fitted_state import EventReader, FittedState, RecordedSkeleton, trace_events
from ._fitting import answer_features, fit_statistic, token_ranges
from ._scopes import SCOPES, CodeScope, FinalAnswerScope, NumberScope, scope_mask, scope_tracker
from ._selection import Candidate, CandidateScore, Deployment, cv_coverage, select_statistic

__all__ = [
    "DEFAULT_ALTERNATIVES",
    "DEFAULT_L2",
    "FEATURE_PRESETS",
    "FEATURE_SOURCES",
    "SCOPES",
    "Aggregate",
    "Candidate",
    "CandidateScore",
    "CodeScope",
    "Deployment",
    "EventReader",
    "Feature",
    "FinalAnswerScope",
    "FitOptions",
    "FitReport",
    "FittedPath",
    "FittedState",
    "FittedStatistic",
    "MarginAnswers",
    "NumberScope",
    "RecordedSkeleton",
    "TokenFeaturizer",
    "aggregate_of",
    "aggregate_path",
    "answer_features",
    "base_features_batch",
    "block_margins",
    "calibrate_fitted",
    "critical_score",
    "cv_coverage",
    "fit_certificate",
    "fit_statistic",
    "margin_cost",
    "margin_scale",
    "margins_from_scores",
    "moves_one_way",
    "preset_features",
    "reach_path",
    "replay_fitted",
    "scope_mask",
    "scope_tracker",
    "scoped_path",
    "select_statistic",
    "stop_at",
    "token_ranges",
    "trace_events",
    "with_margins",
]
