"""Closed-form bounds from the paper and the binomial tools of risk control.

Natural logarithms throughout. Every function validates its arguments and
raises :class:`~guardrail._errors.ConfigError` (a ``ValueError``) on bad input.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ._errors import ConfigError

__all__ = [
    "binomial_pvalue",
    "clopper_pearson_interval",
    "clopper_pearson_upper",
    "eta_budget_shift_bound",
    "kappa_answer_rate_bound",
    "mean_lift_lower_bound",
    "min_answered_for_risk",
    "mutual_information",
    "pac_bayes_bound",
    "tv_distance",
]


def _num(name: str, value: object, lo: float = -math.inf, hi: float = math.inf) -> float:
    """A finite real in ``[lo, hi]``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    out = float(value)
    if not (math.isfinite(out) and lo <= out <= hi):
        raise ConfigError(f"{name} must be finite and in [{lo}, {hi}], got {value!r}")
    return out


def _open01(name: str, value: object) -> float:
    out = _num(name, value, 0.0, 1.0)
    if out in (0.0, 1.0):
        raise ConfigError(f"{name} must be in (0, 1), got {value!r}")
    return out


def _int(name: str, value: object, lo: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if value < lo:
        raise ConfigError(f"{name} must be >= {lo}, got {value!r}")
    return int(value)


def _kn(k: object, n: object) -> tuple[int, int]:
    ki, ni = _int("k", k), _int("n", n)
    if ki > ni:
        raise ConfigError(f"k must be <= n, got k={ki}, n={ni}")
    return ki, ni


def _penalty(n: object, v: object, c: object, delta: object, kl: object) -> tuple[float, float]:
    """``(sqrt(2 v L / n), c L / n)`` with ``L = kl + log(1/delta)``."""
    ni = _int("n", n, 1)
    vf, cf = _num("v", v, 0.0), _num("c", c, 0.0)
    load = _num("kl", kl, 0.0) + math.log(1.0 / _open01("delta", delta))
    return math.sqrt(2.0 * vf * load / ni), cf * load / ni


def pac_bayes_bound(
    mean_hat: float, n: int, v: float, c: float, delta: float, kl: float = 0.0
) -> float:
    """Upper confidence bound on the mean lift (paper Thm 2.5).

    ``mean_hat + sqrt(2 v (kl + log(1/delta)) / n) + c (kl + log(1/delta)) / n``;
    with ``kl = 0`` this is the fixed-skeleton (single hypothesis) form.
    """
    sq, lin = _penalty(n, v, c, delta, kl)
    return _num("mean_hat", mean_hat) + sq + lin


def mean_lift_lower_bound(mean_hat: float, n: int, v: float, c: float, delta: float) -> float:
    """Lower confidence bound on the mean lift,
    ``mean_hat - sqrt(2 v log(1/delta)/n) - c log(1/delta)/n``: the paper's calibration
    threshold (Algorithm 1 step 3, ``calibrate(method="paper")``).

    It uses no labels and does NOT bound the selective risk; it is kept for comparison only.
    """
    sq, lin = _penalty(n, v, c, delta, 0.0)
    return _num("mean_hat", mean_hat) - sq - lin


def kappa_answer_rate_bound(kappa: float, risk: float) -> float:
    """Upper bound on the answer rate, ``min(1, sqrt(kappa) / (1 - 2 risk))`` (Thm 2.7).

    ``kappa`` is the mutual information I(correct; evidence) in nats. For
    ``risk >= 0.5`` the bound is vacuous and 1.0 is returned.
    """
    kf = _num("kappa", kappa, 0.0)
    rf = _num("risk", risk, 0.0, 1.0)
    if rf >= 0.5:
        return 1.0
    return min(1.0, math.sqrt(kf) / (1.0 - 2.0 * rf))


def mutual_information(labels: npt.ArrayLike, scores: npt.ArrayLike, *, bins: int = 10) -> float:
    """Plug-in estimate (nats) of I(label; score) for binary labels, real scores.

    The score is discretised into ``bins`` equal-frequency bins: inner edges are
    the sample quantiles at ``j/bins`` (numpy's default interpolation), duplicate
    edges are merged (ties, constant scores give fewer bins), and a score equal
    to an edge goes to the upper bin. The plug-in estimate is biased upwards by
    about ``(bins_used - 1) / (2 n)`` nats for independent data.
    """
    y = np.asarray(labels)
    s = np.asarray(scores, dtype=np.float64)
    nb = _int("bins", bins, 1)
    if y.ndim != 1 or s.ndim != 1 or y.shape != s.shape:
        raise ConfigError(
            f"labels and scores must be 1-D of equal length, got {y.shape}, {s.shape}"
        )
    if y.size == 0:
        raise ConfigError("labels and scores are empty")
    if not np.all(np.isfinite(s)):
        raise ConfigError("scores contain non-finite values")
    try:
        yf = y.astype(np.float64)
    except (TypeError, ValueError):
        raise ConfigError("labels must be 0/1 or boolean") from None
    if not np.all((yf == 0) | (yf == 1)):
        raise ConfigError("labels must be 0/1 or boolean")
    edges = np.unique(np.quantile(s, np.arange(1, nb) / nb)) if nb > 1 else np.empty(0)
    b = np.searchsorted(edges, s, side="right")
    joint = np.zeros((2, edges.size + 1))
    np.add.at(joint, (yf.astype(np.intp), b), 1.0)
    joint /= y.size
    outer = joint.sum(axis=1, keepdims=True) * joint.sum(axis=0, keepdims=True)
    nz = joint > 0
    return max(0.0, float(np.sum(joint[nz] * np.log(joint[nz] / outer[nz]))))


def tv_distance(p: npt.ArrayLike, q: npt.ArrayLike) -> float:
    """Total variation ``0.5 * sum |p - q|`` between probability vectors.

    Both must have the same shape, be finite and non-negative and sum to 1
    within 1e-6.
    """
    pa = np.asarray(p, dtype=np.float64)
    qa = np.asarray(q, dtype=np.float64)
    if pa.shape != qa.shape:
        raise ConfigError(f"p and q must have the same shape, got {pa.shape} and {qa.shape}")
    if pa.size == 0:
        raise ConfigError("p and q are empty")
    for name, a in (("p", pa), ("q", qa)):
        if not np.all(np.isfinite(a)) or np.any(a < 0):
            raise ConfigError(f"{name} must be finite and non-negative")
        if abs(float(a.sum()) - 1.0) > 1e-6:
            raise ConfigError(f"{name} must sum to 1 (within 1e-6), sums to {float(a.sum())!r}")
    return 0.5 * float(np.abs(pa - qa).sum())


def eta_budget_shift_bound(eta: float, alpha: float, B: float) -> float:
    """Budget shift bound ``min(B, 2 eta / alpha)`` (Thm 2.6 as DESIGN.md states it).

    ``eta`` is the TV distance between two skeletons (in [0, 1]), ``alpha > 0``
    and ``B > 0`` the clipping bound.
    """
    ef = _num("eta", eta, 0.0, 1.0)
    af, bf = _num("alpha", alpha, 0.0), _num("B", B, 0.0)
    if af == 0.0 or bf == 0.0:
        raise ConfigError(f"alpha and B must be > 0, got alpha={alpha!r}, B={B!r}")
    return min(bf, 2.0 * ef / af)


def clopper_pearson_upper(k: int, n: int, delta: float) -> float:
    """One-sided ``1 - delta`` Clopper-Pearson upper bound for a binomial proportion.

    ``beta.ppf(1 - delta, k + 1, n - k)``; 1.0 when ``k == n`` or ``n == 0``.
    """
    ki, ni = _kn(k, n)
    d = _open01("delta", delta)
    if ni == 0 or ki == ni:
        return 1.0
    from scipy import special  # beta.ppf's own inverse, without scipy.stats' import

    return float(special.betaincinv(ki + 1, ni - ki, 1.0 - d))


def clopper_pearson_interval(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Two-sided ``1 - alpha`` Clopper-Pearson interval (``(0, 1)`` when ``n == 0``)."""
    ki, ni = _kn(k, n)
    a = _open01("alpha", alpha)
    from scipy import special  # beta.ppf's own inverse, without scipy.stats' import

    lo = 0.0 if ki == 0 else float(special.betaincinv(ki, ni - ki + 1, a / 2))
    hi = 1.0 if ki == ni else float(special.betaincinv(ki + 1, ni - ki, 1 - a / 2))
    return lo, hi


def binomial_pvalue(k: int, n: int, h: float) -> float:
    """``P(Binomial(n, h) <= k)``: p-value of H0 "risk >= h" after k errors in n.

    Returns 1.0 when ``n == 0``.
    """
    ki, ni = _kn(k, n)
    hf = _num("h", h, 0.0, 1.0)
    if ni == 0:
        return 1.0
    from scipy import stats

    return min(1.0, float(stats.binom.cdf(ki, ni, hf)))


def min_answered_for_risk(risk: float, delta: float) -> int:
    """Smallest n with ``(1 - risk)^n <= delta``: answered examples needed to
    certify ``risk`` at level ``delta`` even with zero errors.

    ``ceil(log(delta) / log(1 - risk))``, corrected for rounding.
    """
    r, d = _open01("risk", risk), _open01("delta", delta)
    log_q, log_d = math.log1p(-r), math.log(d)
    n = max(1, math.ceil(log_d / log_q))
    while n * log_q > log_d:
        n += 1
    while n > 1 and (n - 1) * log_q <= log_d:
        n -= 1
    return n
