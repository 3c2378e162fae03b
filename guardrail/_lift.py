"""Information lift: the per-token evidence the certificate accumulates.

``L_t = log P(y_t | x, y_<t) - log S(y_t | .)`` compares the model's probability
of the emitted token with a skeleton baseline ``S``. The clipped lift
``X_t = min(max(L_t, 0), B)`` lies in ``[0, B]``; its running mean is the
budget. Natural logarithms throughout.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ._errors import ConfigError

__all__ = [
    "DEFAULT_CLIP",
    "DEFAULT_SUPPORT",
    "budget",
    "clipped_lift",
    "clipped_lifts",
    "support_clip",
]

DEFAULT_CLIP = 12.0
"""Default clipping bound ``B`` (the paper's choice, flat for B in [8, 16])."""


DEFAULT_SUPPORT = 0.8
"""Probability at which :func:`support_clip` counts a token as fully supported."""


def support_clip(vocab_size: int, support: float = DEFAULT_SUPPORT) -> float:
    """Clip ``B = log(support * |V|)`` for a uniform skeleton.

    With ``S = 1/|V|`` the lift of a token is ``log P + log |V|``, so clipping at
    this ``B`` saturates every token the model gave probability ``>= support``:
    confident tokens count as fully supported and only the shortfall of the
    others, ``log P - log support``, moves an order-based statistic
    (``aggregate="min"`` or ``"lowest"``). ``support=0.8`` is the default
    certificate's choice (measured on the shared traces; see ``docs/results/index.md``).
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2:
        raise ConfigError(f"vocab_size must be an integer >= 2, got {vocab_size!r}")
    if not (isinstance(support, int | float) and 1.0 / vocab_size < support <= 1.0):
        raise ConfigError(f"support must lie in (1/|V|, 1], got {support!r}")
    return math.log(support * vocab_size)


def _check_clip(clip: float) -> None:
    if not (math.isfinite(clip) and clip > 0):
        raise ConfigError(f"clip bound B must be a finite number > 0, got {clip!r}")


def clipped_lift(logprob: float, skeleton_logprob: float, clip: float = DEFAULT_CLIP) -> float:
    """Clipped lift ``min(max(logprob - skeleton_logprob, 0), clip)`` of one token.

    Both arguments are natural-log probabilities. NaN inputs are refused
    (a NaN lift would silently poison the running mean).
    """
    lift = logprob - skeleton_logprob
    if math.isnan(lift):
        raise ConfigError(
            f"lift is NaN (logprob={logprob!r}, skeleton_logprob={skeleton_logprob!r})"
        )
    if lift <= 0.0:
        return 0.0
    return clip if lift >= clip else lift


def clipped_lifts(
    logprobs: npt.ArrayLike, skeleton_logprobs: npt.ArrayLike, clip: float = DEFAULT_CLIP
) -> npt.NDArray[np.float64]:
    """Vectorised :func:`clipped_lift` (arrays broadcast against each other)."""
    _check_clip(clip)
    lp = np.asarray(logprobs, dtype=np.float64)
    ls = np.asarray(skeleton_logprobs, dtype=np.float64)
    lift = lp - ls
    if np.isnan(lift).any():
        raise ConfigError("lift contains NaN values (check the logprobs and the skeleton)")
    return np.clip(lift, 0.0, clip)


def budget(lifts: npt.ArrayLike) -> float:
    """Mean of clipped lifts (the budget ``mean_t``); 0.0 for an empty answer."""
    arr = np.asarray(lifts, dtype=np.float64)
    return float(arr.mean()) if arr.size else 0.0
