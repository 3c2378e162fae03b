"""Top-k compensation: what a stream with only the k most likely alternatives can say
about the full-vocabulary distribution (entropy, log Z_T, a censored token's probability).
"""

from __future__ import annotations

from ._topk import (
    TailRule,
    censored_logprob_batch,
    estimate_entropy,
    estimate_entropy_batch,
    estimate_logz,
    estimate_logz_batch,
    fit_tail,
)

__all__ = [
    "TailRule",
    "censored_logprob_batch",
    "estimate_entropy",
    "estimate_entropy_batch",
    "estimate_logz",
    "estimate_logz_batch",
    "fit_tail",
]
