from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from scipy import stats
from scipy.special import digamma

from guardrail._errors import ConfigError
from guardrail._subgamma import (
    GammaFit,
    SubGammaParams,
    _solve_shape,
    _solve_shape_scalar,
    bernstein_params,
    fit_gamma,
    inflate,
    inflation_factor,
    model_check,
    subgamma_from_gamma,
    subgamma_moments,
)


def _binom_upper(n: int, p: float, tail: float = 1e-3) -> int:
    """Largest count that a Binomial(n, p) exceeds with probability <= tail."""
    return int(stats.binom.ppf(1 - tail, n, p))


# --- SubGammaParams ------------------------------------------------------------------


def test_params_roundtrip_json() -> None:
    p = SubGammaParams(v=2.5, c=0.75, method="moments")
    d = json.loads(json.dumps(p.to_dict()))
    assert d == {"v": 2.5, "c": 0.75, "method": "moments"}
    assert SubGammaParams.from_dict(d) == p


@pytest.mark.parametrize(
    "v, c, method",
    [(0.0, 1.0, "moments"), (1.0, -1.0, "moments"), (math.inf, 1.0, "moments"),
     (1.0, math.nan, "bernstein"), (1.0, 1.0, "mle"), ("1", 1.0, "moments")],
)  # fmt: skip
def test_params_invalid(v: object, c: object, method: str) -> None:
    with pytest.raises(ConfigError):
        SubGammaParams(v=v, c=c, method=method)  # type: ignore[arg-type]


def test_params_from_dict_rejects_bad_keys() -> None:
    with pytest.raises(ConfigError):
        SubGammaParams.from_dict({"v": 1.0, "c": 1.0})
    with pytest.raises(ConfigError):
        SubGammaParams.from_dict({"v": 1.0, "c": 1.0, "method": "moments", "x": 1})
    assert issubclass(ConfigError, ValueError)


# --- Gamma MLE -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "seed, k, theta, n",
    [(0, 0.5, 3.0, 300), (1, 1.0, 1.0, 50), (2, 2.5, 0.4, 1000), (3, 30.0, 2.0, 200),
     (4, 0.15, 5.0, 500), (5, 500.0, 0.01, 100)],
)  # fmt: skip
def test_fit_gamma_matches_scipy(seed: int, k: float, theta: float, n: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.gamma(k, theta, size=n)
    fit = fit_gamma(x)
    xf = np.maximum(x, 1e-6)  # scipy sees the same floored data
    a, loc, scale = stats.gamma.fit(xf, floc=0)
    assert loc == 0
    assert fit.shape == pytest.approx(a, rel=1e-6)
    assert fit.scale == pytest.approx(scale, rel=1e-6)
    assert fit.n == n
    assert fit.n_zero == int(np.sum(x < 1e-6))

    # the MLE maximises the likelihood: nudging the shape (profile scale) lowers it
    def loglik(kk: float) -> float:
        return float(stats.gamma.logpdf(xf, kk, scale=xf.mean() / kk).sum())

    assert loglik(fit.shape) >= max(loglik(fit.shape * 1.01), loglik(fit.shape * 0.99))


def test_fit_gamma_floor_and_zeros() -> None:
    rng = np.random.default_rng(7)
    x = np.concatenate([np.zeros(40), rng.gamma(2.0, 1.5, size=160)])
    fit = fit_gamma(x, floor=1e-3)
    assert fit.n_zero == 40 and fit.floor == 1e-3
    a, _, scale = stats.gamma.fit(np.maximum(x, 1e-3), floc=0)
    assert fit.shape == pytest.approx(a, rel=1e-6)
    assert fit.scale == pytest.approx(scale, rel=1e-6)
    assert fit.mean == pytest.approx(np.maximum(x, 1e-3).mean(), rel=1e-12)


@pytest.mark.parametrize(
    "x, kw",
    [([1.0], {}), ([], {}), ([1.0, -0.5, 2.0], {}), ([1.0, math.nan], {}),
     ([1.0, math.inf], {}), ([2.0, 2.0, 2.0], {}), ([0.0, 0.0], {}),
     ([0.0, 1e-9], {}), ([1.0, 2.0], {"floor": 0.0}), ([1.0, 2.0], {"floor": -1.0})],
)  # fmt: skip
def test_fit_gamma_errors(x: list[float], kw: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        fit_gamma(x, **kw)


def test_vectorised_shape_solver_agrees_with_brent() -> None:
    s = np.logspace(-9, 3, 60)
    vec = _solve_shape(s)
    ref = np.array([_solve_shape_scalar(float(v)) for v in s])
    np.testing.assert_allclose(vec, ref, rtol=1e-10)
    # and both solve the equation (checked with scipy's digamma directly, moderate k)
    mid = (ref > 1e-2) & (ref < 1e3)
    np.testing.assert_allclose(np.log(ref[mid]) - digamma(ref[mid]), s[mid], rtol=1e-9)


# --- sub-gamma pairs -----------------------------------------------------------------


def _centred_gamma_logmgf(lam: np.ndarray, k: float, theta: float) -> np.ndarray:
    return -k * lam * theta - k * np.log1p(-lam * theta)


def _subgamma_rhs(lam: np.ndarray, v: float, c: float) -> np.ndarray:
    return np.asarray(lam**2 * v / (2 * (1 - c * np.abs(lam))))


def test_fitted_pair_satisfies_subgamma_inequality_for_exact_gamma() -> None:
    rng = np.random.default_rng(11)
    fit = fit_gamma(rng.gamma(0.7, 2.0, size=400))
    p = subgamma_from_gamma(fit)
    assert p.method == "gamma-mle"
    assert p.v == pytest.approx(fit.shape * fit.scale**2)
    assert p.c == pytest.approx(fit.scale)
    lam = np.linspace(-0.999 / p.c, 0.999 / p.c, 2001)
    lhs = _centred_gamma_logmgf(lam, fit.shape, fit.scale)
    assert np.all(lhs <= _subgamma_rhs(lam, p.v, p.c) + 1e-12)
    # the check has teeth: a smaller v or c breaks it for the same Gamma
    assert np.any(lhs > _subgamma_rhs(lam, 0.9 * p.v, p.c))
    assert np.any(lhs > _subgamma_rhs(lam, p.v, 0.8 * p.c))


def test_logmgf_formula_against_monte_carlo() -> None:
    rng = np.random.default_rng(12)
    k, theta = 1.7, 0.8
    x = rng.gamma(k, theta, size=400_000)
    for lam in (-1.0, 0.3, 0.5):
        mc = math.log(np.mean(np.exp(lam * (x - k * theta))))
        assert mc == pytest.approx(_centred_gamma_logmgf(np.array(lam), k, theta), abs=5e-3)


def test_moments_pair() -> None:
    rng = np.random.default_rng(3)
    x = rng.gamma(2.0, 1.5, size=20_000)
    p = subgamma_moments(x)
    assert p.method == "moments"
    assert p.v == pytest.approx(np.var(x, ddof=1), rel=1e-12)
    assert p.c == pytest.approx(np.var(x, ddof=1) / np.mean(x), rel=1e-12)
    assert p.v == pytest.approx(2.0 * 1.5**2, rel=0.05)  # k theta^2
    assert p.c == pytest.approx(1.5, rel=0.05)  # theta
    assert subgamma_moments([1.0, 3.0]).v == pytest.approx(2.0)
    with pytest.raises(ConfigError):
        subgamma_moments([1.0, 1.0, 1.0])


def test_bernstein_pair_and_validity_for_bounded_variables() -> None:
    B = 12.0
    p = bernstein_params(B)
    assert (p.v, p.c, p.method) == (36.0, 4.0, "bernstein")
    assert bernstein_params(B, variance=5.0).v == 5.0
    lam = np.linspace(-0.999 / p.c, 0.999 / p.c, 801)
    for q in (0.01, 0.2, 0.5, 0.9):  # X = B * Bernoulli(q), the extreme bounded case
        m = B * q
        lhs = np.log((1 - q) * np.exp(-lam * m) + q * np.exp(lam * (B - m)))
        v_true = B * B * q * (1 - q)
        assert np.all(lhs <= _subgamma_rhs(lam, v_true, B / 3) + 1e-12)
        assert np.all(lhs <= _subgamma_rhs(lam, p.v, p.c) + 1e-12)
    # teeth: c = B/6 is not enough for the skewed case
    q, m = 0.01, B * 0.01
    lhs = np.log((1 - q) * np.exp(-lam * m) + q * np.exp(lam * (B - m)))
    assert np.any(lhs > _subgamma_rhs(lam, B * B * q * (1 - q), B / 6))
    for bad in ((0.0, None), (-1.0, None), (12.0, 0.0), (12.0, 36.5)):
        with pytest.raises(ConfigError):
            bernstein_params(*bad)


# --- inflation -------------------------------------------------------------------------


def test_inflation_factor() -> None:
    assert inflation_factor(0.5) == 1.0
    assert inflation_factor(0.05) == 1.0
    assert inflation_factor(0.0) == 2.0
    assert inflation_factor(0.025) == pytest.approx(1.5)
    assert inflation_factor(0.01, level=0.1) == pytest.approx(1.9)
    for bad in ((-0.1, 0.05), (1.1, 0.05), (0.1, 0.0), (0.1, 1.0), (math.nan, 0.05)):
        with pytest.raises(ConfigError):
            inflation_factor(*bad)


def test_inflate() -> None:
    p = inflate(SubGammaParams(2.0, 0.5, "gamma-mle"), 1.5)
    assert (p.v, p.c, p.method) == (3.0, 0.75, "gamma-mle")
    with pytest.raises(ConfigError):
        inflate(SubGammaParams(2.0, 0.5, "gamma-mle"), 0.9)


# --- model check -------------------------------------------------------------------------


def test_model_check_statistics_match_scipy() -> None:
    rng = np.random.default_rng(21)
    x = rng.gamma(1.3, 2.0, size=300)
    fit = fit_gamma(x)
    mc = model_check(x, fit, n_boot=50, seed=1)
    ks = stats.kstest(x, "gamma", args=(fit.shape, 0.0, fit.scale)).statistic
    assert mc.ks_stat == pytest.approx(ks, rel=1e-9)
    # Anderson-Darling by its textbook formula, written independently
    u = np.sort(stats.gamma.cdf(x, fit.shape, scale=fit.scale))
    n = x.size
    i = np.arange(1, n + 1)
    ad = -n - np.sum((2 * i - 1) * (np.log(u) + np.log(1 - u[::-1]))) / n
    assert mc.ad_stat == pytest.approx(ad, rel=1e-9)
    res = stats.goodness_of_fit(
        stats.gamma, x, known_params={"loc": 0.0}, statistic="ad", n_mc_samples=9
    )
    assert mc.ad_stat == pytest.approx(res.statistic, rel=1e-4)
    assert mc.n_boot == 50 and mc.pvalue == min(mc.ks_pvalue, mc.ad_pvalue)
    assert mc.inflation == inflation_factor(mc.pvalue)
    assert mc.passed == (mc.pvalue >= 0.05)


def test_model_check_seeded_and_pvalue_grid() -> None:
    x = np.random.default_rng(5).gamma(0.9, 1.0, size=200)
    a, b = model_check(x, n_boot=99, seed=3), model_check(x, n_boot=99, seed=3)
    assert a == b
    for p in (a.ks_pvalue, a.ad_pvalue):
        assert (p * 100) == pytest.approx(round(p * 100)) and 0.01 <= p <= 1.0


def test_model_check_null_pvalues_roughly_uniform() -> None:
    n_sets = 40
    ks_p, ad_p, mins = [], [], []
    for seed in range(n_sets):
        rng = np.random.default_rng(1000 + seed)
        x = rng.gamma(0.8, 2.0, size=150)
        mc = model_check(x, n_boot=200, seed=seed)
        ks_p.append(mc.ks_pvalue)
        ad_p.append(mc.ad_pvalue)
        mins.append(mc.pvalue)
    for ps in (ks_p, ad_p):
        assert sum(p < 0.05 for p in ps) <= _binom_upper(n_sets, 0.05)
        assert sum(p < 0.5 for p in ps) <= _binom_upper(n_sets, 0.5)
        assert sum(p >= 0.5 for p in ps) <= _binom_upper(n_sets, 0.5)
        assert stats.kstest(ps, "uniform").pvalue > 1e-3
    # the min of two tests rejects at most at 2 * level (Bonferroni)
    assert sum(p < 0.05 for p in mins) <= _binom_upper(n_sets, 0.10)


@pytest.mark.parametrize("kind", ["two-point", "uniform", "zero-inflated"])
def test_model_check_rejects_non_gamma(kind: str) -> None:
    rng = np.random.default_rng(9)
    n = 1000
    if kind == "two-point":
        x = np.where(rng.random(n) < 0.5, 1.0, 5.0)
    elif kind == "uniform":
        x = rng.uniform(5.0, 6.0, size=n)
    else:
        x = np.where(rng.random(n) < 0.6, 0.0, rng.gamma(1.0, 2.0, size=n))
    mc = model_check(x, n_boot=200, seed=0)
    assert mc.pvalue < 0.01 and not mc.passed
    assert mc.inflation > 1.8


def test_model_check_speed_and_errors() -> None:
    x = np.random.default_rng(0).gamma(0.8, 2.0, size=1000)
    model_check(x, n_boot=5)  # warm up
    t0 = time.perf_counter()
    model_check(x, n_boot=200, seed=0)
    assert time.perf_counter() - t0 < 1.0
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ConfigError):
            model_check(x, n_boot=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        model_check(x, fit=(1.0, 2.0))  # type: ignore[arg-type]
    assert isinstance(fit_gamma(x), GammaFit)
