"""The statistics behind a certificate: anytime boundaries, the streaming statistics and
their batch twins, finite-sample bounds and the sub-gamma fit.

Everything a guarded stream needs at run time is in :mod:`guardrail` itself; this
module is for auditing a certificate and building new rules. The source paper's own
boundary and bounds, to reproduce its numbers, are in :mod:`guardrail.paper`.
"""

from __future__ import annotations

from ._boundaries import (
    BettingTrajectory,
    betting_bets,
    betting_confidence_sequence,
    betting_log_wealth,
)
from ._bounds import (
    binomial_pvalue,
    clopper_pearson_interval,
    clopper_pearson_upper,
    min_answered_for_risk,
    mutual_information,
    tv_distance,
)
from ._confidence_sequence import BettingConfidenceSequence
from ._lift import DEFAULT_CLIP, budget, clipped_lift, clipped_lifts, support_clip
from ._statistics import (
    BettingMean,
    LowestK,
    betting_mean_path,
    lowest_k_path,
)
from ._subgamma import (
    GammaFit,
    ModelCheck,
    SubGammaParams,
    bernstein_params,
    checked_subgamma,
    fit_gamma,
    inflate,
    inflation_factor,
    model_check,
    subgamma_from_gamma,
    subgamma_moments,
)

__all__ = [
    "DEFAULT_CLIP",
    "BettingConfidenceSequence",
    "BettingMean",
    "BettingTrajectory",
    "GammaFit",
    "LowestK",
    "ModelCheck",
    "SubGammaParams",
    "bernstein_params",
    "betting_bets",
    "betting_confidence_sequence",
    "betting_log_wealth",
    "betting_mean_path",
    "binomial_pvalue",
    "budget",
    "checked_subgamma",
    "clipped_lift",
    "clipped_lifts",
    "clopper_pearson_interval",
    "clopper_pearson_upper",
    "fit_gamma",
    "inflate",
    "inflation_factor",
    "lowest_k_path",
    "min_answered_for_risk",
    "model_check",
    "mutual_information",
    "subgamma_from_gamma",
    "subgamma_moments",
    "support_clip",
    "tv_distance",
]
