"""liftguard core: information lift, anytime-valid boundaries and risk-controlled calibration.

Pure math and small stateful objects; no network, no vendor SDKs. Provider
integrations live in :mod:`adapters`, storage in :mod:`skeleton_store`.

The runtime surface (``__all__``): the :class:`Certificate` and what it holds,
the per-answer monitor and its verdicts, skeletons, calibration and the errors.
The math and the diagnostics live in public submodules:

- :mod:`guardrail.stats`: anytime boundaries, the streaming statistics and their
  batch twins, Clopper-Pearson and binomial bounds, the sub-gamma fit, the
  paper's PAC-Bayes, kappa and eta bounds;
- :mod:`guardrail.topk`: top-k compensation (entropy, log Z_T, censored tokens);
- :mod:`guardrail.traces`: the trace format, labels, trace scores and baselines;
- :mod:`guardrail.evaluate`: replay, ``shown_at``, Learn-then-Test, AUROC and
  the repeated-split evaluation;
- :mod:`guardrail.fitting`: per-token features, aggregates and the fitted statistic;
- :mod:`guardrail.vsd`: Variational Skeleton Design (PyTorch, imported lazily).

Their names are also importable from :mod:`guardrail` itself for compatibility,
but are not part of its ``__all__``. ``import guardrail`` imports neither scipy
nor torch.
"""

from __future__ import annotations

# a name imported "as" itself is a compatibility re-export of a public submodule (not in __all__)
from ._boundaries import BettingTrajectory as BettingTrajectory
from ._boundaries import betting_bets as betting_bets
from ._boundaries import betting_confidence_sequence as betting_confidence_sequence
from ._boundaries import betting_log_wealth as betting_log_wealth
from ._boundaries import paper_radius as paper_radius
from ._bounds import binomial_pvalue as binomial_pvalue
from ._bounds import clopper_pearson_interval as clopper_pearson_interval
from ._bounds import clopper_pearson_upper as clopper_pearson_upper
from ._bounds import eta_budget_shift_bound as eta_budget_shift_bound
from ._bounds import kappa_answer_rate_bound as kappa_answer_rate_bound
from ._bounds import min_answered_for_risk as min_answered_for_risk
from ._bounds import mutual_information as mutual_information
from ._bounds import pac_bayes_bound as pac_bayes_bound
from ._bounds import paper_calibration_threshold as paper_calibration_threshold
from ._bounds import tv_distance as tv_distance
from ._calibration import Calibration, calibrate, calibrate_policy
from ._calibration import LTTOutcome as LTTOutcome
from ._calibration import ltt_threshold as ltt_threshold
from ._certificate import (
    Certificate,
    ContextMismatchWarning,
    GenerationContext,
    ModelIdentity,
    SkeletonSpec,
)
from ._errors import (
    ConfigError,
    GuardrailBlocked,
    GuardrailError,
    InsufficientDataError,
    MissingDependencyError,
    MissingLogprobsError,
    StreamTruncated,
    TraceFormatError,
)
from ._fitted import FittedStatistic
from ._guarded import Guarded, GuardedText
from ._labels import is_correct as is_correct
from ._labels import normalize_answer as normalize_answer
from ._lift import DEFAULT_CLIP as DEFAULT_CLIP
from ._lift import budget as budget
from ._lift import clipped_lift as clipped_lift
from ._lift import clipped_lifts as clipped_lifts
from ._lift import support_clip as support_clip
from ._monitor import Monitor
from ._policy import ReplayResult as ReplayResult
from ._policy import StreamPolicy
from ._policy import critical_thresholds as critical_thresholds
from ._policy import replay as replay
from ._policy import running_statistic as running_statistic
from ._policy import shown_at as shown_at
from ._policy import threshold_grid as threshold_grid
from ._reads import Reads, Skeleton, skeleton_reads
from ._rules import EvidenceRule, FittedRule, LiftRule
from ._scores import BASELINES as BASELINES
from ._scores import TRACE_SKELETONS as TRACE_SKELETONS
from ._scores import baseline_score as baseline_score
from ._scores import trace_clipped_lifts as trace_clipped_lifts
from ._scores import trace_skeleton_logprobs as trace_skeleton_logprobs
from ._skeleton_spec import SkeletonResolver
from ._skeletons import (
    NGramSkeleton,
    TemperatureSkeleton,
    TokenIds,
    UniformSkeleton,
    WithTokenIds,
)
from ._skeletons import select_skeleton_kind as select_skeleton_kind
from ._skeletons import type_token_ratio as type_token_ratio
from ._statistics import BettingConfidenceSequence as BettingConfidenceSequence
from ._statistics import BettingMean as BettingMean
from ._statistics import LowestK as LowestK
from ._statistics import PaperMean as PaperMean
from ._statistics import betting_mean_path as betting_mean_path
from ._statistics import lowest_k_path as lowest_k_path
from ._statistics import paper_mean_path as paper_mean_path
from ._subgamma import GammaFit as GammaFit
from ._subgamma import ModelCheck as ModelCheck
from ._subgamma import SubGammaParams as SubGammaParams
from ._subgamma import bernstein_params as bernstein_params
from ._subgamma import fit_gamma as fit_gamma
from ._subgamma import inflate as inflate
from ._subgamma import inflation_factor as inflation_factor
from ._subgamma import model_check as model_check
from ._subgamma import subgamma_from_gamma as subgamma_from_gamma
from ._subgamma import subgamma_moments as subgamma_moments
from ._topk import DEFAULT_R2_MIN as DEFAULT_R2_MIN
from ._topk import TailModel as TailModel
from ._topk import censored_logprob as censored_logprob
from ._topk import censored_logprob_batch as censored_logprob_batch
from ._topk import estimate_entropy as estimate_entropy
from ._topk import estimate_entropy_batch as estimate_entropy_batch
from ._topk import estimate_logz as estimate_logz
from ._topk import estimate_logz_batch as estimate_logz_batch
from ._topk import fit_tail as fit_tail
from ._topk import paper_lift_correction as paper_lift_correction
from ._traces import Trace as Trace
from ._traces import dump_trace_line as dump_trace_line
from ._traces import iter_traces as iter_traces
from ._traces import parse_trace as parse_trace
from ._traces import parse_trace_lines as parse_trace_lines
from ._traces import read_traces as read_traces
from ._traces import trace_to_dict as trace_to_dict
from ._vector import VectorSkeleton
from ._verdict import Cause, State, TokenEvent, Verdict, end_cause
from ._vsd import VSDResult as VSDResult
from ._vsd import distributions_from_logits as distributions_from_logits
from ._vsd import distributions_from_traces as distributions_from_traces
from ._vsd import vsd as vsd
from ._vsd import vsd_objective as vsd_objective

__version__ = "0.1.0"

__all__ = [
    "Calibration",
    "Cause",
    "Certificate",
    "ConfigError",
    "ContextMismatchWarning",
    "EvidenceRule",
    "FittedRule",
    "FittedStatistic",
    "GenerationContext",
    "Guarded",
    "GuardedText",
    "GuardrailBlocked",
    "GuardrailError",
    "InsufficientDataError",
    "LiftRule",
    "MissingDependencyError",
    "MissingLogprobsError",
    "ModelIdentity",
    "Monitor",
    "NGramSkeleton",
    "Reads",
    "Skeleton",
    "SkeletonResolver",
    "SkeletonSpec",
    "State",
    "StreamPolicy",
    "StreamTruncated",
    "TemperatureSkeleton",
    "TokenEvent",
    "TokenIds",
    "TraceFormatError",
    "UniformSkeleton",
    "VectorSkeleton",
    "Verdict",
    "WithTokenIds",
    "__version__",
    "calibrate",
    "calibrate_policy",
    "end_cause",
    "skeleton_reads",
]
