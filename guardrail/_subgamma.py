"""Sub-gamma concentration parameters for clipped lifts (paper Alg. 1, Sec. 2.3).

A centred variable ``Y`` is *sub-gamma with variance factor v and scale c* when
``log E exp(l Y) <= l^2 v / (2 (1 - c |l|))`` for all ``|l| < 1/c`` (both tails).
This module fits ``(v, c)`` to calibration lifts (Gamma MLE or moments), offers
the distribution-free Bernstein pair for variables bounded in ``[0, B]``, and
checks the Gamma model by KS / Anderson-Darling tests whose p-values come from a
parametric bootstrap (the parameters are estimated from the same data).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ._errors import ConfigError

__all__ = [
    "METHODS",
    "GammaFit",
    "ModelCheck",
    "SubGammaParams",
    "bernstein_params",
    "checked_subgamma",
    "fit_gamma",
    "inflate",
    "inflation_factor",
    "model_check",
    "subgamma_from_gamma",
    "subgamma_moments",
]

FloatArray = npt.NDArray[np.float64]

METHODS: tuple[str, ...] = ("gamma-mle", "moments", "bernstein")
_SERIES_K = 100.0  # above this shape, use asymptotic series (avoids cancellation)
_F_CLIP = 1e-12


def _positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    out = float(value)
    if not (math.isfinite(out) and out > 0):
        raise ConfigError(f"{name} must be finite and > 0, got {value!r}")
    return out


def _lifts(x: npt.ArrayLike) -> FloatArray:
    """Validate non-negative finite data (any shape, flattened), at least 2 points."""
    try:
        arr = np.asarray(x, dtype=np.float64).ravel()
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"data must be numeric: {exc}") from None
    if arr.size < 2:
        raise ConfigError(f"need at least 2 data points, got {arr.size}")
    if not np.all(np.isfinite(arr)):
        raise ConfigError("data contain non-finite values (NaN or inf)")
    if np.any(arr < 0):
        raise ConfigError(f"data must be non-negative, min is {arr.min()!r}")
    if np.all(arr == arr[0]):
        raise ConfigError(f"all {arr.size} values are identical ({arr[0]!r}); cannot fit a Gamma")
    return arr


@dataclass(frozen=True)
class SubGammaParams:
    """Sub-gamma pair ``(v, c)`` and how it was obtained (one of :data:`METHODS`).

    Examples
    --------
        >>> params = bernstein_params(12.0)
        >>> params.v, params.c, params.method
        (36.0, 4.0, 'bernstein')
    """

    v: float
    c: float
    method: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "v", _positive("v", self.v))
        object.__setattr__(self, "c", _positive("c", self.c))
        if not isinstance(self.method, str) or self.method not in METHODS:
            raise ConfigError(f"method must be one of {METHODS}, got {self.method!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict ``{"v": float, "c": float, "method": str}``."""
        return {"v": self.v, "c": self.c, "method": self.method}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SubGammaParams:
        """Inverse of :meth:`to_dict`; exactly the keys ``v``, ``c``, ``method``."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"expected a mapping, got {type(data).__name__}")
        keys = set(data)
        if keys != {"v", "c", "method"}:
            raise ConfigError(f"expected keys {{'v', 'c', 'method'}}, got {sorted(keys)}")
        return cls(v=data["v"], c=data["c"], method=data["method"])


@dataclass(frozen=True)
class GammaFit:
    """Gamma(shape, scale) MLE with location 0 of ``n`` points, ``n_zero`` of which
    (exact zeros included) were below ``floor`` and replaced by it before fitting.

    Examples
    --------
        >>> fit = fit_gamma([0.5, 1.0, 1.5, 2.0, 3.0])
        >>> fit.n, round(fit.shape, 3), round(fit.mean, 3)
        (5, 3.112, 1.6)
    """

    shape: float
    scale: float
    n: int
    n_zero: int
    floor: float

    @property
    def mean(self) -> float:
        return self.shape * self.scale


@dataclass(frozen=True)
class ModelCheck:
    """Goodness of fit of a :class:`GammaFit`. ``n_boot``: bootstrap replicates
    used; ``pvalue = min(ks_pvalue, ad_pvalue)``; ``inflation =
    inflation_factor(pvalue)``; ``passed = pvalue >= 0.05``.

    Examples
    --------
        >>> import numpy as np
        >>> x = np.random.default_rng(0).gamma(2.0, 1.5, size=100)
        >>> check = model_check(x, n_boot=50, seed=0)
        >>> check.n_boot, check.passed
        (50, True)
    """

    ks_stat: float
    ks_pvalue: float
    ad_stat: float
    ad_pvalue: float
    n_boot: int
    pvalue: float
    inflation: float
    passed: bool


def _log_minus_digamma(k: FloatArray) -> FloatArray:
    """``log k - digamma(k)`` (decreasing from +inf to 0, convex); asymptotic
    series for large k, where the direct difference cancels."""
    kb, ks = np.maximum(k, _SERIES_K), np.minimum(k, _SERIES_K)
    series = 1 / (2 * kb) + 1 / (12 * kb**2) - 1 / (120 * kb**4) + 1 / (252 * kb**6)
    from scipy import special

    direct = np.log(ks) - special.digamma(ks)
    return np.asarray(np.where(k >= _SERIES_K, series, direct), dtype=np.float64)


def _d_log_minus_digamma(k: FloatArray) -> FloatArray:
    kb, ks = np.maximum(k, _SERIES_K), np.minimum(k, _SERIES_K)
    series = -1 / (2 * kb**2) - 1 / (6 * kb**3) + 1 / (30 * kb**5) - 1 / (42 * kb**7)
    from scipy import special

    direct = 1 / ks - special.polygamma(1, ks)
    return np.asarray(np.where(k >= _SERIES_K, series, direct), dtype=np.float64)


def _shape_statistic(xf: FloatArray) -> FloatArray:
    """``log(mean) - mean(log x)`` along the last axis, computed as ``mean(u - log1p(u))``
    with ``u = x/mean - 1`` (non-negative, and insensitive to rounding of the mean)."""
    m = xf.mean(axis=-1, keepdims=True)
    u = (xf - m) / m
    return np.asarray(np.mean(u - np.log1p(u), axis=-1), dtype=np.float64)


def _solve_shape_scalar(s: float) -> float:
    """Root of ``log k - digamma(k) = s`` by Brent's method on the bracket
    ``[1/(2s), 1/s]`` (from ``1/(2k) < log k - digamma(k) < 1/k``), widened if
    rounding ever breaks the sign change."""
    lo, hi = 0.5 / s, 1.0 / s

    def g(k: float) -> float:
        return float(_log_minus_digamma(np.array([k]))[0]) - s

    while g(lo) <= 0:
        lo *= 0.5
    while g(hi) >= 0:
        hi *= 2.0
    from scipy import optimize

    return float(optimize.brentq(g, lo, hi, xtol=1e-15 * lo, rtol=4 * np.finfo(float).eps))


def _solve_shape(s: FloatArray) -> FloatArray:
    """Vectorised root of ``log k - digamma(k) = s`` (Newton from the left end of
    the bracket; the function is convex and decreasing, so iterates increase
    monotonically to the root)."""
    lo, hi = 0.5 / s, 1.0 / s
    k: FloatArray = np.array(lo, dtype=np.float64)
    for _ in range(100):
        step = (_log_minus_digamma(k) - s) / _d_log_minus_digamma(k)
        k = np.asarray(np.clip(k - step, lo, hi), dtype=np.float64)
        if np.all(np.abs(step) <= 1e-14 * k):
            break
    return k


def fit_gamma(x: npt.ArrayLike, *, floor: float = 1e-6) -> GammaFit:
    """Maximum-likelihood Gamma(shape k, scale theta) fit with location 0.

    The likelihood needs ``log x`` but clipped lifts are zero-inflated, so values
    below ``floor`` are replaced by ``floor`` (``n_zero`` counts them) and the
    floored data are fitted. A large point mass at the floor is *not* Gamma:
    :func:`model_check` then usually rejects, and inflation (or the
    distribution-free :func:`bernstein_params`) applies. Profile likelihood:
    ``log k - digamma(k) = log(mean) - mean(log x)`` by Brent's method, then
    ``theta = mean / k``. ConfigError for < 2 points, negative or non-finite
    values, or identical values (before or after flooring).
    """
    floor = _positive("floor", floor)
    arr = _lifts(x)
    n_zero = int(np.count_nonzero(arr < floor))
    xf = np.maximum(arr, floor)
    s = float(_shape_statistic(xf))
    if not s > 0:
        raise ConfigError(f"all values are (numerically) identical after flooring at {floor}")
    k = _solve_shape_scalar(s)
    return GammaFit(shape=k, scale=float(xf.mean()) / k, n=arr.size, n_zero=n_zero, floor=floor)


def subgamma_from_gamma(fit: GammaFit) -> SubGammaParams:
    """``v = k theta^2``, ``c = theta`` for a fitted Gamma(k, theta).

    Why: for ``X ~ Gamma(k, theta)`` and ``l < 1/theta``,
    ``log E exp(l (X - EX)) = -k l theta - k log(1 - l theta)``. With
    ``u = l theta``, ``-u - log(1 - u) = sum_{j>=2} u^j / j``, which for
    ``0 <= u < 1`` is ``<= (u^2/2) sum_{j>=0} u^j = u^2 / (2 (1 - u))``, so the
    right tail satisfies ``<= l^2 k theta^2 / (2 (1 - theta l))``; for ``u < 0``
    it is ``<= u^2/2``, so the left tail is sub-Gaussian with ``v`` (hence also
    sub-gamma with ``(v, c)``).
    """
    if not isinstance(fit, GammaFit):
        raise ConfigError(f"expected a GammaFit, got {type(fit).__name__}")
    return SubGammaParams(v=fit.shape * fit.scale**2, c=fit.scale, method="gamma-mle")


def subgamma_moments(x: npt.ArrayLike) -> SubGammaParams:
    """Method of moments, no flooring: ``v`` = sample variance (ddof=1),
    ``c = v / mean`` (for a Gamma, variance / mean = theta)."""
    arr = _lifts(x)
    var = float(arr.var(ddof=1))
    return SubGammaParams(v=var, c=var / float(arr.mean()), method="moments")


def bernstein_params(B: float, variance: float | None = None) -> SubGammaParams:
    """Bernstein pair for variables in ``[0, B]``: ``v`` = variance bound, ``c = B/3``.

    Valid with no distributional assumption (Bernstein's inequality: a centred
    variable bounded above by ``B`` with variance ``<= v`` is sub-gamma on the
    right tail with ``(v, B/3)``; the same holds for ``-X``). ``variance``
    defaults to ``B^2/4``, the largest variance of any ``[0, B]`` variable;
    a value above ``B^2/4`` is rejected.
    """
    B = _positive("B", B)
    if variance is None:
        var = B * B / 4
    else:
        var = _positive("variance", variance)
        if var > B * B / 4 * (1 + 1e-12):
            raise ConfigError(f"variance {var} exceeds B^2/4 = {B * B / 4}; pass None")
    return SubGammaParams(v=var, c=B / 3, method="bernstein")


def _gof_stats(xs: FloatArray, k: FloatArray, theta: FloatArray) -> tuple[FloatArray, FloatArray]:
    """KS and Anderson-Darling statistics of each sorted row of ``xs`` against
    Gamma(k[r], theta[r])."""
    n = xs.shape[1]
    z = xs / theta[:, None]
    from scipy import special

    cdf = special.gammainc(k[:, None], z)
    i = np.arange(1, n + 1, dtype=np.float64)
    ks = np.maximum((i / n - cdf).max(axis=1), (cdf - (i - 1) / n).max(axis=1))
    clipped = np.clip(cdf, _F_CLIP, 1 - _F_CLIP)
    terms = np.log(clipped) + np.log1p(-clipped[:, ::-1])
    ad = -n - np.mean((2 * i - 1) * terms, axis=1)
    return np.asarray(ks, dtype=np.float64), np.asarray(ad, dtype=np.float64)


def model_check(
    x: npt.ArrayLike, fit: GammaFit | None = None, *, n_boot: int = 200, seed: int = 0
) -> ModelCheck:
    """KS and Anderson-Darling goodness of fit of the Gamma model for ``x``
    (floored at ``fit.floor`` as in :func:`fit_gamma`; ``fit`` defaults to it).

    Parametric bootstrap: ``n_boot`` samples of size n from the fitted Gamma
    (``numpy.random.default_rng(seed)``), floored, refit by MLE;
    ``p = (1 + #{boot >= observed}) / (n_boot + 1)``. Replicates that cannot be
    fit (all at the floor) are dropped: the bootstrap is conditioned on the fit
    existing, as it exists for ``x``. ``pvalue = min(ks_pvalue, ad_pvalue)``
    rejects more often than either test alone, erring towards inflation.
    """
    arr = _lifts(x)
    if fit is None:
        fit = fit_gamma(arr)
    elif not isinstance(fit, GammaFit):
        raise ConfigError(f"fit must be a GammaFit, got {type(fit).__name__}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ConfigError(f"n_boot must be an integer >= 1, got {n_boot!r}")
    n = arr.size
    obs = np.sort(np.maximum(arr, fit.floor))[None, :]
    ks_obs, ad_obs = _gof_stats(obs, np.array([fit.shape]), np.array([fit.scale]))
    rng = np.random.default_rng(seed)
    sims = np.sort(np.maximum(rng.gamma(fit.shape, fit.scale, size=(int(n_boot), n)), fit.floor))
    s = _shape_statistic(sims)
    ok = np.isfinite(s) & (s > 0)
    sims, s = sims[ok], s[ok]
    if sims.shape[0] == 0:
        raise ConfigError("parametric bootstrap degenerate: every replicate fell at the floor")
    k = _solve_shape(s)
    ks_b, ad_b = _gof_stats(sims, k, sims.mean(axis=1) / k)
    m = sims.shape[0]
    ks, ad = float(ks_obs[0]), float(ad_obs[0])
    # ">= observed" with a 1e-12 relative slack, so rounding never breaks a tie
    ks_p = (1 + int(np.count_nonzero(ks_b >= ks - 1e-12 * abs(ks)))) / (m + 1)
    ad_p = (1 + int(np.count_nonzero(ad_b >= ad - 1e-12 * abs(ad)))) / (m + 1)
    p = min(ks_p, ad_p)
    return ModelCheck(ks, ks_p, ad, ad_p, m, p, inflation_factor(p), p >= 0.05)


def inflation_factor(p: float, level: float = 0.05) -> float:
    """``1 + (level - p)/level`` if ``p < level`` else 1 (linear from 2 at p=0 to 1)."""
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise ConfigError(f"p must be a number, got {p!r}")
    if not 0.0 <= float(p) <= 1.0:
        raise ConfigError(f"p must be in [0, 1], got {p!r}")
    level = _positive("level", level)
    if level >= 1:
        raise ConfigError(f"level must be in (0, 1), got {level!r}")
    return 1.0 + (level - float(p)) / level if p < level else 1.0


def inflate(params: SubGammaParams, factor: float) -> SubGammaParams:
    """Multiply ``v`` and ``c`` by ``factor`` (>= 1; deflating would not be valid)."""
    if not isinstance(params, SubGammaParams):
        raise ConfigError(f"expected SubGammaParams, got {type(params).__name__}")
    factor = _positive("factor", factor)
    if factor < 1:
        raise ConfigError(f"inflation factor must be >= 1, got {factor}")
    return SubGammaParams(v=params.v * factor, c=params.c * factor, method=params.method)


def checked_subgamma(
    x: npt.ArrayLike, *, n_boot: int = 200, seed: int = 0
) -> tuple[SubGammaParams, ModelCheck]:
    """The paper's Algorithm 1 steps 1-3 in one call: Gamma fit to ``x``, the model
    check, and ``(v, c)`` inflated by the check's factor when the fit is rejected."""
    fit = fit_gamma(x)
    check = model_check(x, fit, n_boot=n_boot, seed=seed)
    return inflate(subgamma_from_gamma(fit), check.inflation), check
