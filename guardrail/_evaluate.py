"""Evaluation of certification rules on labelled traces over repeated splits.

Every method is calibrated by the same risk-control procedure
(:func:`guardrail.evaluate.ltt_threshold`) on the same random calibration/test splits,
then measured on the test half: coverage, selective risk, whether the risk is
above the target beyond sampling noise, AUROC of the method's final sequence
score, and the share of each answer's tokens read before the verdict.

Methods: the streaming lift certificate (:func:`lift_method`), the single-pass
baselines of :data:`guardrail.traces.BASELINES` (:func:`baseline_method`), and a
certificate's fitted statistic held fixed (:func:`fitted_method`: only ``tau`` is
recalibrated on each split, like every other method).

:func:`bootstrap_intervals` says how much of a difference between methods is
the particular answers drawn: it resamples the answers with replacement and
reruns the whole evaluation on each resample, paired across methods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from scipy import stats

from ._bounds import clopper_pearson_interval
from ._calibration import Procedure, procedure_threshold
from ._errors import ConfigError, InsufficientDataError
from ._fit._replay import FittedPath, critical_score, read_share, replay_fitted
from ._policy import StreamPolicy, critical_thresholds, replay, running_statistic, shown_at
from ._scores import BASELINES, baseline_score, trace_clipped_lifts
from ._trace_format import Trace

if TYPE_CHECKING:
    from ._certificate import Certificate

__all__ = [
    "MethodScores",
    "auroc",
    "baseline_method",
    "bootstrap_intervals",
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

    Examples
    --------
        >>> import numpy as np
        >>> score = np.array([0.2, 0.8, 0.5])
        >>> scores = MethodScores("mean", decision=score, final=score)
        >>> scores.shown(np.array([0, 1, 2]), tau=0.5).tolist()
        [False, True, True]
    """

    name: str
    decision: FloatArray
    final: FloatArray
    lifts: list[FloatArray] | None = None
    policy: StreamPolicy | None = None
    paths: list[FittedPath] | None = None

    def shown(self, idx: npt.NDArray[np.int64], tau: float) -> npt.NDArray[np.bool_]:
        """Whether answers ``idx`` are shown at ``tau``: the deployed policy
        (:func:`guardrail._policy.shown_at`) for a lift method, ``decision >= tau`` otherwise
        (for a fitted statistic the decision is the replayed monitor's critical score,
        exact by construction)."""
        if self.lifts is None or self.policy is None:
            return np.asarray(self.decision[idx] >= tau, dtype=bool)
        return shown_at(self.policy, [self.lifts[i] for i in idx], [tau])[:, 0]

    def take(self, idx: npt.NDArray[np.int64]) -> MethodScores:
        """The same method on answers ``idx`` (repeats allowed: a bootstrap resample)."""
        lifts = None if self.lifts is None else [self.lifts[i] for i in idx]
        paths = None if self.paths is None else [self.paths[i] for i in idx]
        return MethodScores(
            self.name, self.decision[idx], self.final[idx], lifts, self.policy, paths
        )


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
    max_tokens: int | None = None,
) -> MethodScores:
    """A certificate's fitted statistic, held fixed: each answer replayed through the
    certificate's monitor (its policy, token limit and skeleton; the prompt-free
    skeleton reads the traces' recorded log-probabilities). ``max_tokens``: replay as
    deployed with that token limit instead of the context's (answers generated with a
    larger limit than the certificate's; see :meth:`Certificate.monitor`)."""
    stat = certificate.statistic
    if stat is None:
        raise ConfigError("the certificate has no fitted statistic")
    skeleton = certificate.replay_skeleton()
    policy = certificate.policy
    limit = certificate.context.max_tokens if max_tokens is None else max_tokens
    paths = []
    for i, t in enumerate(traces):
        paths.append(replay_fitted(stat, t, skeleton=skeleton, max_tokens=limit))
        if progress is not None and (i + 1) % 100 == 0:
            progress(i + 1, len(traces))
    crit = np.array([critical_score(p, policy) for p in paths])
    final = np.array([p.final for p in paths])
    return MethodScores(name, crit, final, policy=policy, paths=paths)


def baseline_method(traces: Sequence[Trace], name: str, *, exact: bool = True) -> MethodScores:
    """A baseline score (see :data:`guardrail.traces.BASELINES`), decided at the end."""
    if name not in BASELINES:
        raise ConfigError(f"unknown baseline {name!r}")
    scores = np.array([baseline_score(t, name, exact=exact) for t in traces])
    return MethodScores(name, scores, scores)


def _tokens_read(method: MethodScores, idx: npt.NDArray[np.int64], tau: float) -> FloatArray:
    """Share of each answer's tokens read before its verdict at ``tau``, aligned with
    ``idx``; NaN for an empty answer of a streaming method (it has no share)."""
    if method.paths is not None and method.policy is not None:
        pol, paths = method.policy, method.paths
        return np.array([read_share(paths[i], pol, tau) for i in idx])
    if method.lifts is None or method.policy is None:
        return np.ones(len(idx))
    shares = np.full(len(idx), np.nan)
    for j, i in enumerate(idx):
        x = method.lifts[i]
        if x.size == 0:
            continue
        if 0.0 < tau < method.policy.clip:
            shares[j] = int(replay(method.policy, x, [tau]).stop[0]) / x.size
        else:
            shares[j] = 1.0
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
    procedure: Procedure = "fixed-sequence",
) -> dict[str, dict[str, Any]]:
    """Calibrate each method on the calibration half of each split, test on the rest,
    every method by the same ``procedure`` (:data:`guardrail._calibration.PROCEDURES`).

    Returns, per method: ``coverage_mean``, ``risk_mean`` (test selective risk,
    averaged over the splits that show something; NaN if none does), ``wrong_share_mean``
    (the same averaged over every split, 0 where a split shows nothing or refuses: the
    expected share of wrong answers among those shown that the in-expectation promise of
    ``procedure="conformal"`` bounds),
    ``risk_violation_rate`` (share of splits whose test risk's 95%
    Clopper-Pearson lower bound exceeds ``risk``), ``auroc``
    (of the final sequence score on all answers), ``tokens_read_fraction``
    (mean share of tokens read before the verdict, over test answers of
    splits that calibrated), ``tokens_read_median`` (the median of those
    shares, pooled over the splits), ``blocked_read_mean`` / ``blocked_read_median``
    (the same shares over the test answers that were not shown only: how much of a
    wrong or unproven answer a passthrough user sees before it is stopped; NaN where
    nothing was blocked), and ``refused`` (splits where calibration had too
    little data; they count as showing nothing). ``progress(done, total)`` is called
    after each method.
    """
    ok = np.asarray(correct, dtype=bool)
    perms = _permutations(ok.size, splits, seed)
    out: dict[str, dict[str, Any]] = {}
    for m in methods:
        cov, rsk, viol = [], [], 0
        read: list[float] = []
        blocked: list[float] = []
        refused = 0
        for test, tau, shown in _per_split(m, ok, perms, cal_fraction, risk, delta,
                                           procedure=procedure):  # fmt: skip
            if tau is None:
                refused += 1
                cov.append(0.0)
                rsk.append(0.0)
                continue
            k = int((shown & ~ok[test]).sum())
            s = int(shown.sum())
            cov.append(s / test.size)
            rsk.append(k / s if s else 0.0)
            if s and clopper_pearson_interval(k, s, 0.05)[0] > risk:
                viol += 1
            shares = _tokens_read(m, test, tau)  # replayed once: all answers, then the blocked
            has = ~np.isnan(shares)
            read.extend(shares[has].tolist())
            blocked.extend(shares[has & ~shown].tolist())
        shown_risks = [r for r, c in zip(rsk, cov, strict=True) if c > 0]
        out[m.name] = {
            "coverage_mean": float(np.mean(cov)),
            "risk_mean": float(np.mean(shown_risks)) if shown_risks else float("nan"),
            "wrong_share_mean": float(np.mean(rsk)),
            "risk_violation_rate": viol / splits,
            "auroc": auroc(m.final, ok),
            "tokens_read_fraction": float(np.mean(read)) if read else 1.0,
            "tokens_read_median": float(np.median(read)) if read else 1.0,
            "blocked_read_mean": float(np.mean(blocked)) if blocked else float("nan"),
            "blocked_read_median": float(np.median(blocked)) if blocked else float("nan"),
            "refused": refused,
        }
        if progress is not None:
            progress(len(out), len(methods))
    return out


def _permutations(
    n: int, splits: int, seed: int | np.random.Generator
) -> list[npt.NDArray[np.int64]]:
    """``splits`` random orders of ``n`` answers (the first part of each calibrates)."""
    if splits < 1:
        raise ConfigError("splits must be >= 1")
    rng = np.random.default_rng(seed)
    return [rng.permutation(n) for _ in range(splits)]


def _threshold(
    scores: FloatArray,
    errors: npt.NDArray[np.bool_],
    risk: float,
    delta: float,
    procedure: Procedure,
) -> float | None:
    """The procedure's ``tau`` on one calibration half
    (:func:`guardrail._calibration.procedure_threshold`), ``None`` where it refuses."""
    try:
        return procedure_threshold(scores, errors, risk, delta, procedure)[0]
    except InsufficientDataError:
        return None


def _per_split(
    m: MethodScores,
    ok: npt.NDArray[np.bool_],
    perms: Sequence[npt.NDArray[np.int64]],
    cal_fraction: float,
    risk: float,
    delta: float,
    *,
    replay_policy: bool = True,
    procedure: Procedure = "fixed-sequence",
) -> Iterator[tuple[npt.NDArray[np.int64], float | None, npt.NDArray[np.bool_]]]:
    """Per split: the test answers, the calibrated ``tau`` (``None`` where calibration
    refused) and which test answers are shown (none where refused).

    ``replay_policy=False`` reads "shown" as ``decision >= tau`` for every method. The
    calibrated ``tau`` is always one of the decision scores, and a lift method's
    decision is its critical threshold on the policy's grid, at which the policy's
    monotone answer set makes that exact (:func:`guardrail.evaluate.critical_thresholds`);
    replaying the policy, the default, checks it again at a cost."""
    n_cal = round(ok.size * cal_fraction)
    for perm in perms:
        cal, test = perm[:n_cal], perm[n_cal:]
        tau = _threshold(m.decision[cal], ~ok[cal], risk, delta, procedure)
        if tau is None:
            yield test, None, np.zeros(test.size, dtype=bool)
            continue
        shown = m.shown(test, tau) if replay_policy else m.decision[test] >= tau
        yield test, tau, np.asarray(shown, dtype=bool)


def bootstrap_intervals(
    methods: Sequence[MethodScores],
    correct: npt.ArrayLike,
    *,
    risk: float,
    delta: float,
    splits: int,
    replicates: int = 200,
    seed: int = 0,
    level: float = 0.95,
    reference: str | None = None,
    cal_fraction: float = 0.5,
    progress: Progress | None = None,
    procedure: Procedure = "fixed-sequence",
) -> dict[str, dict[str, Any]]:
    """Percentile bootstrap intervals of each method's AUROC and mean test coverage.

    Each replicate draws ``n`` answers with replacement (the same draw for every
    method: the comparison is paired) and reruns :func:`evaluate_methods`'
    protocol on it: ``splits`` random calibration/test splits, ``tau`` calibrated
    by :func:`guardrail.evaluate.ltt_threshold` on each calibration half (a refusal counts
    as coverage 0). Returns, per method, ``{"auroc": [lo, hi], "coverage_mean":
    [lo, hi]}`` at ``level``, and with ``reference`` (a method's name) also
    ``"<reference>_minus": {"auroc": [lo, hi], "coverage_mean": [lo, hi]}`` for
    every other method: an interval that excludes 0 is a difference the draw
    of answers does not explain. The intervals describe the uncertainty due to
    the finite set of answers (their population: questions like these); a
    resample repeats answers, which may then fall in both halves of a split,
    alike for every method. Deterministic given ``seed``; ``progress(done,
    total)`` is called after each replicate.
    """
    ok = np.asarray(correct, dtype=bool)
    n = ok.size
    names = [m.name for m in methods]
    if len(set(names)) != len(names):
        raise ConfigError("methods must have distinct names")
    if reference is not None and reference not in names:
        raise ConfigError(f"reference {reference!r} is not one of the methods")
    if isinstance(replicates, bool) or not isinstance(replicates, int) or replicates < 2:
        raise ConfigError(f"replicates must be an integer >= 2, got {replicates!r}")
    if not 0.0 < level < 1.0:
        raise ConfigError(f"level must lie in (0, 1), got {level!r}")
    if n < 2:
        raise ConfigError("the bootstrap needs at least 2 answers")
    rng = np.random.default_rng(seed)
    auc = np.empty((len(methods), replicates))
    cov = np.empty((len(methods), replicates))
    for b in range(replicates):
        idx = rng.integers(0, n, size=n)
        ok_b = ok[idx]
        perms = _permutations(n, splits, rng)
        for j, m in enumerate(methods):
            mb = m.take(idx)
            auc[j, b] = auroc(mb.final, ok_b)
            per_split = _per_split(mb, ok_b, perms, cal_fraction, risk, delta,
                                   replay_policy=False, procedure=procedure)  # fmt: skip
            cov[j, b] = np.mean([shown.sum() / test.size for test, _, shown in per_split])
        if progress is not None:
            progress(b + 1, replicates)
    q = [(1.0 - level) / 2.0, (1.0 + level) / 2.0]

    def interval(values: FloatArray) -> list[float]:
        finite = values[np.isfinite(values)]  # AUROC is NaN on a one-class resample
        if finite.size == 0:
            return [float("nan"), float("nan")]
        return [float(v) for v in np.quantile(finite, q)]

    out: dict[str, dict[str, Any]] = {}
    ref = names.index(reference) if reference is not None else None
    for j, name in enumerate(names):
        entry: dict[str, Any] = {"auroc": interval(auc[j]), "coverage_mean": interval(cov[j])}
        if ref is not None and j != ref:
            entry[f"{reference}_minus"] = {
                "auroc": interval(auc[ref] - auc[j]),
                "coverage_mean": interval(cov[ref] - cov[j]),
            }
        out[name] = entry
    return out
