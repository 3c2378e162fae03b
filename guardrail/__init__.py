"""liftguard core: information lift, anytime-valid boundaries and risk-controlled calibration.

Pure math and small stateful objects; no network, no vendor SDKs. Provider
integrations live in :mod:`adapters`, storage in :mod:`skeleton_store`.
"""

from __future__ import annotations

from ._boundaries import (
    BettingTrajectory,
    betting_bets,
    betting_confidence_sequence,
    betting_log_wealth,
    paper_radius,
)
from ._bounds import (
    binomial_pvalue,
    clopper_pearson_interval,
    clopper_pearson_upper,
    eta_budget_shift_bound,
    kappa_answer_rate_bound,
    min_answered_for_risk,
    mutual_information,
    pac_bayes_bound,
    paper_calibration_threshold,
    tv_distance,
)
from ._calibration import Calibration, LTTOutcome, calibrate, calibrate_policy, ltt_threshold
from ._errors import (
    ConfigError,
    GuardrailBlocked,
    GuardrailError,
    InsufficientDataError,
    MissingLogprobsError,
    TraceFormatError,
)
from ._lift import DEFAULT_CLIP, budget, clipped_lift, clipped_lifts
from ._monitor import (
    CertificateMonitor,
    GuardedText,
    Skeleton,
    State,
    TokenEvent,
    UniformSkeleton,
    Verdict,
)
from ._policy import ReplayResult, StreamPolicy, critical_thresholds, replay, threshold_grid
from ._scores import (
    BASELINES,
    TRACE_SKELETONS,
    baseline_score,
    trace_clipped_lifts,
    trace_skeleton_logprobs,
)
from ._subgamma import (
    GammaFit,
    ModelCheck,
    SubGammaParams,
    bernstein_params,
    fit_gamma,
    inflate,
    inflation_factor,
    model_check,
    subgamma_from_gamma,
    subgamma_moments,
)
from ._traces import (
    Trace,
    dump_trace_line,
    iter_traces,
    parse_trace,
    parse_trace_lines,
    read_traces,
    trace_to_dict,
)

__version__ = "0.1.0"

__all__ = [
    "BASELINES",
    "DEFAULT_CLIP",
    "TRACE_SKELETONS",
    "BettingTrajectory",
    "Calibration",
    "CertificateMonitor",
    "ConfigError",
    "GammaFit",
    "GuardedText",
    "GuardrailBlocked",
    "GuardrailError",
    "InsufficientDataError",
    "LTTOutcome",
    "MissingLogprobsError",
    "ModelCheck",
    "ReplayResult",
    "Skeleton",
    "State",
    "StreamPolicy",
    "SubGammaParams",
    "TokenEvent",
    "Trace",
    "TraceFormatError",
    "UniformSkeleton",
    "Verdict",
    "__version__",
    "baseline_score",
    "bernstein_params",
    "betting_bets",
    "betting_confidence_sequence",
    "betting_log_wealth",
    "binomial_pvalue",
    "budget",
    "calibrate",
    "calibrate_policy",
    "clipped_lift",
    "clipped_lifts",
    "clopper_pearson_interval",
    "clopper_pearson_upper",
    "critical_thresholds",
    "dump_trace_line",
    "eta_budget_shift_bound",
    "fit_gamma",
    "inflate",
    "inflation_factor",
    "iter_traces",
    "kappa_answer_rate_bound",
    "ltt_threshold",
    "min_answered_for_risk",
    "model_check",
    "mutual_information",
    "pac_bayes_bound",
    "paper_calibration_threshold",
    "paper_radius",
    "parse_trace",
    "parse_trace_lines",
    "read_traces",
    "replay",
    "subgamma_from_gamma",
    "subgamma_moments",
    "threshold_grid",
    "trace_clipped_lifts",
    "trace_skeleton_logprobs",
    "trace_to_dict",
    "tv_distance",
]
