"""Evaluation of certification rules on labelled traces over repeated splits.

Every method is calibrated by the same risk-control procedure
(:func:`guardrail.ltt_threshold`) on the same random calibration/test splits,
then measured on the test half: coverage, selective risk, whether the risk is
above the target beyond sampling noise, AUROC of the method's final sequence
score, and the share of each answer's tokens read before the verdict.

Methods: the streaming lift certificate (:func:`lift_method`), the single-pass
baselines of :data:`guardrail.BASELINES` (:func:`baseline_method`), and a
certificate's fitted statistic held fixed (:func:`fitted_method`: only ``tau`` is
recalibrated on each split, like every other method).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from scipy import stats

from ._bounds import clopper_pearson_interval
from ._calibration import ltt_threshold
from ._errors import ConfigError, InsufficientDataError
from ._fitted_monitor import FittedPath, critical_score, replay_fitted, stop_at
from ._policy import StreamPolicy, critical_thresholds, replay, running_statistic, shown_at
from ._scores import BASELINES, baseline_score, trace_clipped_lifts
from ._traces import Trace

if TYPE_CHECKING:
    from ._certificate import Certificate

__all__ = [
    "MethodScores",
    "auroc",
    "baseline_method",
    "evaluate_methods",
    "fitted_method",
    "lift_method",
]

Progress = Callable[[int, int], None]
"""``progress(done, total)``: called as work advances (the command line draws it)."""

FloatArray = npt.NDArray[np.float64]


def auroc(scores: npt.ArrayLike, labels: npt.ArrayLike) -> float:
    """Area under the ROC curve of ``scores`` for ``labels`` (True = positive).

    Ties count one half (Mann-Whitney). ``-inf`` scores rank lowest. NaN if one
    class is empty.
    """
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    n1 = int(y.sum())
    n0 = y.size - n1
    if n1 == 0 or n0 == 0:
        return float("nan")
    finite_min = s[np.isfinite(s)].min() if np.isfinite(s).any() else 0.0
    s = np.where(np.isneginf(s), finite_min - 1.0, s)
    ranks = stats.rankdata(s)
    return float((ranks[y].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


@dataclass(frozen=True)
class MethodScores:
    """What a method contributes to an evaluation.

    ``decision``: score of the deployed threshold rule (answer iff >= tau);
    ``final``: the final sequence score used for AUROC; ``lifts`` and
    ``policy``: set for streaming lift methods, so tokens read can be replayed;
    ``paths``: the replayed scores of a fitted statistic (with ``policy``).
    """

    name: str
    decision: FloatArray
    final: FloatArray
    lifts: list[FloatArray] | None = None
    policy: StreamPolicy | None = None
    paths: list[FittedPath] | None = None

    def shown(self, idx: npt.NDArray[np.int64], tau: float) -> npt.NDArray[np.bool_]:
        """Whether answers ``idx`` are shown at ``tau``: the deployed policy
        (:func:`guardrail.shown_at`) for a lift method, ``decision >= tau`` otherwise
        (for a fitted statistic the decision is the replayed monitor's critical score,
        exact by construction)."""
        if self.lifts is None or self.policy is None:
            return np.asarray(self.decision[idx] >= tau, dtype=bool)
        return shown_at(self.policy, [self.lifts[i] for i in idx], [tau])[:, 0]


def lift_method(
    traces: Sequence[Trace],
    policy: StreamPolicy,
    skeleton: str,
    name: str = "lift",
    *,
    exact: bool = True,
) -> MethodScores:
    """The streaming lift certificate: critical thresholds of ``policy`` per answer.

    ``exact=False`` uses only what the traces' top-k alternatives allow
    (compensated estimates instead of the recorded full-vocabulary values)."""
    lifts = [trace_clipped_lifts(t, skeleton, policy.clip, exact=exact) for t in traces]
    crit = critical_thresholds(policy, lifts)
    final = np.array(
        [float(running_statistic(policy, x)[-1]) if x.size else -np.inf for x in lifts]
    )
    return MethodScores(name, crit, final, lifts, policy)


def fitted_method(
    traces: Sequence[Trace],
    certificate: Certificate,
    name: str = "certificate",
    *,
    progress: Progress | None = None,
) -> MethodScores:
    """A certificate's fitted statistic, held fixed: each answer replayed through the
    certificate's monitor (its policy, token limit and skeleton; the prompt-free
    skeleton reads the traces' recorded log-probabilities)."""
    stat = certificate.statistic
    if stat is None:
        raise ConfigError("the certificate has no fitted statistic")
    skeleton: Any = None
    if "skeleton" in stat.requires:
        kind = certificate.skeleton.kind
        skeleton = "prompt-free" if kind == "prompt_free" else certificate.skeleton.build()
    policy, limit = certificate.policy, certificate.context.max_tokens
    paths = []
    for i, t in enumerate(traces):
        paths.append(replay_fitted(stat, t, skeleton=skeleton, max_tokens=limit))
        if progress is not None and (i + 1) % 100 == 0:
            progress(i + 1, len(traces))
    crit = np.array([critical_score(p, policy) for p in paths])
    final = np.array([float(p.scores[-1]) if p.scores.size else -np.inf for p in paths])
    return MethodScores(name, crit, final, policy=policy, paths=paths)


def baseline_method(traces: Sequence[Trace], name: str, *, exact: bool = True) -> MethodScores:
    """A baseline score (see :data:`guardrail.BASELINES`), decided at the end."""
    if name not in BASELINES:
        raise ConfigError(f"unknown baseline {name!r}")
    scores = np.array([baseline_score(t, name, exact=exact) for t in traces])
    return MethodScores(name, scores, scores)


def _tokens_read(method: MethodScores, idx: npt.NDArray[np.int64], tau: float) -> list[float]:
    """Share of each (non-empty) answer's tokens read before its verdict at ``tau``."""
    if method.paths is not None and method.policy is not None:
        pol, paths = method.policy, method.paths
        return [stop_at(paths[i], pol, tau) / paths[i].scores.size for i in idx
                if paths[i].scores.size]  # fmt: skip
    if method.lifts is None or method.policy is None:
        return [1.0] * len(idx)
    shares = []
    for i in idx:
        x = method.lifts[i]
        if x.size == 0:
            continue
        if 0.0 < tau < method.policy.clip:
            shares.append(int(replay(method.policy, x, [tau]).stop[0]) / x.size)
        else:
            shares.append(1.0)
    return shares


def evaluate_methods(
    methods: Sequence[MethodScores],
    correct: npt.ArrayLike,
    *,
    risk: float,
    delta: float,
    splits: int,
    seed: int = 0,
    cal_fraction: float = 0.5,
    progress: Progress | None = None,
) -> dict[str, dict[str, Any]]:
    """Calibrate each method on the calibration half of each split, test on the rest.

    Returns, per method: ``coverage_mean``, ``risk_mean`` (test selective risk,
    averaged over the splits that show something; NaN if none does),
    ``risk_violation_rate`` (share of splits whose test risk's 95%
    Clopper-Pearson lower bound exceeds ``risk``), ``auroc``
    (of the final sequence score on all answers), ``tokens_read_fraction``
    (mean share of tokens read before the verdict, over test answers of
    splits that calibrated), ``tokens_read_median`` (the median of those
    shares, pooled over the splits), and ``refused`` (splits where calibration had too
    little data; they count as showing nothing). ``progress(done, total)`` is called
    after each method.
    """
    ok = np.asarray(correct, dtype=bool)
    n = ok.size
    if splits < 1:
        raise ConfigError("splits must be >= 1")
    rng = np.random.default_rng(seed)
    perms = [rng.permutation(n) for _ in range(splits)]
    n_cal = round(n * cal_fraction)
    out: dict[str, dict[str, Any]] = {}
    for m in methods:
        cov, rsk, viol = [], [], 0
        read: list[float] = []
        refused = 0
        for perm in perms:
            cal, test = perm[:n_cal], perm[n_cal:]
            try:
                tau = ltt_threshold(m.decision[cal], ~ok[cal], risk, delta).tau
            except InsufficientDataError:
                refused += 1
                cov.append(0.0)
                rsk.append(0.0)
                continue
            shown = m.shown(test, tau)
            k = int((shown & ~ok[test]).sum())
            s = int(shown.sum())
            cov.append(s / test.size)
            rsk.append(k / s if s else 0.0)
            if s and clopper_pearson_interval(k, s, 0.05)[0] > risk:
                viol += 1
            read.extend(_tokens_read(m, test, tau))
        shown_risks = [r for r, c in zip(rsk, cov, strict=True) if c > 0]
        out[m.name] = {
            "coverage_mean": float(np.mean(cov)),
            "risk_mean": float(np.mean(shown_risks)) if shown_risks else float("nan"),
            "risk_violation_rate": viol / splits,
            "auroc": auroc(m.final, ok),
            "tokens_read_fraction": float(np.mean(read)) if read else 1.0,
            "tokens_read_median": float(np.median(read)) if read else 1.0,
            "refused": refused,
        }
        if progress is not None:
            progress(len(out), len(methods))
    return out
