"""The streaming decision rule, and its exact replay on recorded lifts.

A :class:`StreamPolicy` says how a stream of clipped lifts becomes a verdict at
threshold ``tau``: certify as soon as the boundary shows the mean lift is above
``tau``, block as soon as it shows it is below, and at the end of the stream
apply the final rule (``mean_T >= tau``, or block when ``final_rule="block"``).
No verdict is given before ``min_tokens`` tokens.

:func:`replay` evaluates the policy on one recorded answer for many thresholds
at once (numpy, vectorised over thresholds); the streaming monitor applies the
same arithmetic one token at a time (its statistics live in
:mod:`guardrail._statistics`). :func:`shown_at` is the one answer to "is this
answer shown at ``tau``": calibration, evaluation and the command line all ask
it, so the risk guarantee covers the rule that is deployed, early exits included.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ._boundaries import betting_log_wealth, paper_radius
from ._errors import ConfigError
from ._lift import DEFAULT_CLIP
from ._statistics import LowestK

__all__ = [
    "ReplayResult",
    "StreamPolicy",
    "critical_thresholds",
    "replay",
    "running_statistic",
    "shown_at",
    "threshold_grid",
]

FloatArray = npt.NDArray[np.float64]
Boundary = Literal["betting", "paper"]
FinalRule = Literal["mean", "block"]
Aggregate = Literal["mean", "min", "lowest"]
OnLength = Literal["answer", "block"]
OnMissing = Literal["block", "pass", "error"]


@dataclass(frozen=True)
class StreamPolicy:
    """How a stream of clipped lifts becomes a verdict (validated on construction).

    Attributes:
        boundary: ``"betting"`` (default, assumption-free for bounded lifts) or
            ``"paper"`` (sub-gamma LIL boundary; needs ``v`` and ``c``).
        delta: evidence level of the in-stream boundary, split over its two
            sides. It sets how early verdicts come; the risk guarantee itself
            comes from calibration, which replays this policy.
        clip: clipping bound ``B`` of the lifts.
        min_tokens: no verdict before this many tokens.
        bet_cap: truncation ``c <= 1/2`` of the betting fractions.
        final_rule: end of stream while undecided: ``"mean"`` answers iff
            ``mean_T >= tau``; ``"block"`` fails closed.
        v, c: sub-gamma parameters for the paper boundary.
        early: give verdicts mid-stream; ``False`` decides only at the end by
            the final rule (the ``final`` streaming mode).
        aggregate: ``"mean"`` (default) certifies on the running mean lift with
            the anytime boundary above; ``"min"`` requires every token's lift to
            reach ``tau`` ("the answer is as well supported as its weakest
            token"): it blocks at the first token below ``tau`` and certifies
            at the end. ``"lowest"`` generalises ``"min"`` to the mean of the
            ``lowest_k`` smallest lifts so far, a shorter answer counting the
            missing ones as ``clip`` (so the statistic only falls as tokens
            arrive): one weak token no longer decides alone, two do. The
            boundary settings do not apply to ``"min"`` and ``"lowest"``, and
            ``final_rule="mean"`` then compares their statistic with ``tau``.
        lowest_k: how many of the weakest tokens ``"lowest"`` averages.
        on_length: what an answer cut at the token limit (finish reason
            ``"length"``) is: ``"block"`` (default) treats it as cut off, never
            certified; ``"answer"`` judges it like a finished answer, which is
            right only when the calibration answers were cut the same way and
            labelled as answers (as in the shared traces, cut at 24 tokens).
            Every other end without the provider's ``"stop"`` is never certified.
        on_missing_logprobs: a token without a usable log-probability (or a
            non-finite lift): ``"block"`` (default) blocks the answer there,
            ``"pass"`` skips the token, ``"error"`` raises
            :class:`~guardrail.MissingLogprobsError`. Policies recorded before
            this field existed load with the default.

    Examples
    --------
        >>> policy = StreamPolicy(boundary="betting", delta=0.05, min_tokens=4)
        >>> StreamPolicy.from_dict(policy.to_dict()) == policy
        True
    """

    boundary: Boundary = "betting"
    delta: float = 0.05
    clip: float = DEFAULT_CLIP
    min_tokens: int = 1
    bet_cap: float = 0.5
    final_rule: FinalRule = "mean"
    v: float | None = None
    c: float | None = None
    early: bool = True
    aggregate: Aggregate = "mean"
    lowest_k: int = 2
    on_length: OnLength = "block"
    on_missing_logprobs: OnMissing = "block"

    def __post_init__(self) -> None:
        if self.on_missing_logprobs not in ("block", "pass", "error"):
            raise ConfigError(
                f"on_missing_logprobs must be 'block', 'pass' or 'error', "
                f"got {self.on_missing_logprobs!r}"
            )
        if self.on_length not in ("answer", "block"):
            raise ConfigError(f"on_length must be 'answer' or 'block', got {self.on_length!r}")
        if self.aggregate not in ("mean", "min", "lowest"):
            raise ConfigError(
                f"aggregate must be 'mean', 'min' or 'lowest', got {self.aggregate!r}"
            )
        k = self.lowest_k
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"lowest_k must be an integer >= 1, got {k!r}")
        if self.boundary not in ("betting", "paper"):
            raise ConfigError(f"boundary must be 'betting' or 'paper', got {self.boundary!r}")
        if not (0.0 < self.delta < 1.0):
            raise ConfigError(f"delta must be in (0, 1), got {self.delta!r}")
        if not (math.isfinite(self.clip) and self.clip > 0):
            raise ConfigError(f"clip must be a finite number > 0, got {self.clip!r}")
        if not (isinstance(self.min_tokens, int) and self.min_tokens >= 1):
            raise ConfigError(f"min_tokens must be an integer >= 1, got {self.min_tokens!r}")
        if not (0.0 < self.bet_cap <= 0.5):
            raise ConfigError(f"bet_cap must be in (0, 0.5], got {self.bet_cap!r}")
        if self.final_rule not in ("mean", "block"):
            raise ConfigError(f"final_rule must be 'mean' or 'block', got {self.final_rule!r}")
        if self.boundary == "paper" and self.aggregate == "mean":
            for name in ("v", "c"):
                val = getattr(self, name)
                if val is None or not (math.isfinite(val) and val > 0):
                    raise ConfigError(
                        f"the paper boundary needs sub-gamma parameter {name} > 0, got {val!r}"
                    )

    @property
    def order_based(self) -> bool:
        """``True`` for ``"min"`` and ``"lowest"``: the statistic only falls as
        tokens arrive, so the policy blocks early and certifies at the end."""
        return self.aggregate != "mean"

    @property
    def n_lowest(self) -> int:
        """Number of weakest lifts the order-based statistic averages (1 for ``"min"``)."""
        return 1 if self.aggregate == "min" else self.lowest_k

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StreamPolicy:
        """The policy of :meth:`to_dict`; unknown fields are a :class:`ConfigError`, missing
        ones take their defaults (older records lack the newer fields)."""
        if not isinstance(data, dict):
            raise ConfigError(f"a policy must be a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigError(f"unknown policy field(s): {', '.join(map(repr, unknown))}")
        return cls(**data)


@dataclass(frozen=True)
class ReplayResult:
    """Outcome of one answer at each threshold of a grid.

    ``answered[g]``: the answer is shown at ``taus[g]``; ``stop[g]``: number of
    tokens read when the verdict was reached (the length if it came at the end);
    ``early[g]``: the verdict came before the end of the stream.

    Examples
    --------
        >>> from guardrail import StreamPolicy
        >>> result = replay(StreamPolicy(), [8.0] * 30, taus=[2.0, 11.0])
        >>> result.answered.tolist(), result.stop.tolist(), result.early.tolist()
        ([True, False], [5, 5], [True, True])
    """

    taus: FloatArray
    answered: npt.NDArray[np.bool_]
    stop: npt.NDArray[np.int64]
    early: npt.NDArray[np.bool_]


def threshold_grid(clip: float = DEFAULT_CLIP, step: float = 0.01) -> FloatArray:
    """The fixed grid of thresholds ``step, 2 step, ... < clip`` used for replay."""
    n = math.floor(clip / step + 1e-9)
    grid = step * np.arange(1, n, dtype=np.float64)
    return grid[grid < clip]


def running_statistic(policy: StreamPolicy, lifts: npt.ArrayLike) -> FloatArray:
    """The policy's aggregate statistic after each token of one answer's clipped lifts.

    ``"mean"``: the running mean; ``"min"``: the running minimum; ``"lowest"``:
    the running mean of the ``lowest_k`` smallest lifts, missing ones counted as
    ``clip``. Its last entry is what the final rule compares with ``tau``.
    """
    x = np.asarray(lifts, dtype=np.float64)
    if x.size == 0:
        return np.zeros(0, dtype=np.float64)
    if policy.aggregate == "mean":
        return np.asarray(np.cumsum(x) / np.arange(1, x.size + 1), dtype=np.float64)
    stat = LowestK(policy.n_lowest, policy.clip)  # the monitor's object: its arithmetic
    return np.array([stat.update(v) for v in x.tolist()], dtype=np.float64)


def _first_true(mask: npt.NDArray[np.bool_], start: int) -> npt.NDArray[np.int64]:
    """Index of the first True at or after row ``start`` per column (``T`` if none)."""
    n = mask.shape[0]
    if start >= n:
        return np.full(mask.shape[1], n, dtype=np.int64)
    sub = mask[start:]
    hit = sub.any(axis=0)
    idx = np.where(hit, sub.argmax(axis=0) + start, n)
    return np.asarray(idx, dtype=np.int64)


def replay(policy: StreamPolicy, lifts: npt.ArrayLike, taus: npt.ArrayLike) -> ReplayResult:
    """Evaluate ``policy`` on one answer's clipped lifts at every threshold in ``taus``."""
    x = np.asarray(lifts, dtype=np.float64)
    tau = np.atleast_1d(np.asarray(taus, dtype=np.float64))
    if x.ndim != 1:
        raise ConfigError("lifts must be one-dimensional")
    if x.size and (np.isnan(x).any() or x.min() < 0.0 or x.max() > policy.clip):
        raise ConfigError(f"clipped lifts must lie in [0, {policy.clip}]")
    if ((tau <= 0.0) | (tau >= policy.clip)).any():
        raise ConfigError(f"thresholds must lie strictly inside (0, {policy.clip})")
    n = x.size
    g = tau.size
    if n == 0:  # an empty answer carries no evidence: never shown
        return ReplayResult(
            tau, np.zeros(g, dtype=bool), np.zeros(g, dtype=np.int64), np.zeros(g, dtype=bool)
        )
    start = policy.min_tokens - 1
    if policy.order_based:
        stat_t = running_statistic(policy, x)
        up_hit = np.zeros((n, g), dtype=bool)  # a later token may still pull it below tau
        down_hit = stat_t[:, None] < tau[None, :]
    elif policy.boundary == "betting":
        traj = betting_log_wealth(x / policy.clip, tau / policy.clip, policy.delta, policy.bet_cap)
        thr = math.log(2.0 / policy.delta)
        up_hit = traj.log_wealth_up >= thr
        down_hit = traj.log_wealth_down >= thr
    else:
        assert policy.v is not None and policy.c is not None  # checked in __post_init__
        t = np.arange(1, n + 1, dtype=np.float64)
        mean = np.cumsum(x) / t
        r = paper_radius(t, policy.v, policy.c, policy.delta / 2.0)
        up_hit = (mean - r)[:, None] > tau[None, :]
        down_hit = (mean + r)[:, None] < tau[None, :]
    if not policy.early:
        start = n  # no crossing counts: the final rule decides
    t_up = _first_true(up_hit, start)
    t_down = _first_true(down_hit, start)
    certified = (t_up < n) & (t_up < t_down)
    blocked = (t_down < n) & (t_down < t_up)
    undecided = ~(certified | blocked)
    stat = float(stat_t[-1]) if policy.order_based else float(x.mean())
    final_ok = stat >= tau if policy.final_rule == "mean" else np.zeros(g, dtype=bool)
    answered = certified | (undecided & final_ok)
    stop = np.where(certified, t_up + 1, np.where(blocked, t_down + 1, n)).astype(np.int64)
    early = (certified | blocked) & (stop < n)
    return ReplayResult(tau, answered, stop, early)


def shown_at(
    policy: StreamPolicy, lifts: Sequence[npt.ArrayLike], taus: npt.ArrayLike
) -> npt.NDArray[np.bool_]:
    """Whether the deployed rule shows each answer at each threshold: shape ``(answers, taus)``.

    For ``0 < tau < clip`` this is :func:`replay`'s ``answered``; outside, the
    limits: at ``tau <= 0`` every non-empty answer is shown, at ``tau >= clip``
    none (the paper calibration method can give such a ``tau``).
    """
    tau = np.atleast_1d(np.asarray(taus, dtype=np.float64))
    if tau.ndim != 1 or np.isnan(tau).any():
        raise ConfigError("thresholds must be a 1-d array of numbers")
    inside = (tau > 0.0) & (tau < policy.clip)
    low = tau <= 0.0
    out = np.zeros((len(lifts), tau.size), dtype=bool)
    for i, x in enumerate(lifts):
        res = replay(policy, x, tau[inside])
        out[i, inside] = res.answered
        out[i, low] = np.asarray(x).size > 0
    return out


def critical_thresholds(
    policy: StreamPolicy, lifts: Sequence[npt.ArrayLike], taus: npt.ArrayLike | None = None
) -> FloatArray:
    """Largest grid threshold at which each answer is shown (``-inf`` if never).

    The policy's answer set is monotone in ``tau`` (see
    :mod:`guardrail._boundaries`), so an answer is shown at threshold ``tau``
    exactly when its critical threshold is ``>= tau``: the policy becomes a
    threshold rule on this scalar score, which calibration tests.
    """
    grid = threshold_grid(policy.clip) if taus is None else np.asarray(taus, dtype=np.float64)
    if grid.ndim != 1 or grid.size == 0 or (np.diff(grid) <= 0).any():
        raise ConfigError("threshold grid must be a non-empty increasing 1-d array")
    shown = shown_at(policy, lifts, grid)
    last = grid.size - 1 - np.argmax(shown[:, ::-1], axis=1)
    return np.asarray(np.where(shown.any(axis=1), grid[last], -np.inf), dtype=np.float64)
