from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from guardrail._bounds import (
    binomial_pvalue,
    clopper_pearson_interval,
    clopper_pearson_upper,
    eta_budget_shift_bound,
    kappa_answer_rate_bound,
    mean_lift_lower_bound,
    min_answered_for_risk,
    mutual_information,
    pac_bayes_bound,
    tv_distance,
)
from guardrail._errors import ConfigError

# --- PAC-Bayes / paper threshold ----------------------------------------------------------


def test_pac_bayes_hand_computed() -> None:
    # n=100, v=2, c=0.5, delta=e^-3 (log(1/delta)=3), kl=1 -> L=4
    # sqrt(2*2*4/100) = 0.4 ; 0.5*4/100 = 0.02
    val = pac_bayes_bound(1.0, 100, 2.0, 0.5, math.exp(-3.0), kl=1.0)
    assert val == pytest.approx(1.42, abs=1e-12)
    # kl = 0: L = 3 -> sqrt(0.12) + 0.015
    assert pac_bayes_bound(1.0, 100, 2.0, 0.5, math.exp(-3.0)) == pytest.approx(
        1.0 + math.sqrt(0.12) + 0.015, abs=1e-12
    )
    # delta = 0.05, n = 50, v = 1, c = 1: log 20 = 2.995732273553991
    L = 2.995732273553991
    expected = 0.3 + math.sqrt(2 * L / 50) + L / 50
    assert pac_bayes_bound(0.3, 50, 1.0, 1.0, 0.05) == pytest.approx(expected, rel=1e-12)


def test_paper_threshold_is_mirror_of_kl0_bound() -> None:
    th = mean_lift_lower_bound(2.0, 100, 2.0, 0.5, math.exp(-3.0))
    assert th == pytest.approx(2.0 - math.sqrt(0.12) - 0.015, abs=1e-12)
    up = pac_bayes_bound(2.0, 100, 2.0, 0.5, math.exp(-3.0))
    assert th + up == pytest.approx(4.0, abs=1e-12)


def test_pac_bayes_lower_bound_coverage_exact_gamma() -> None:
    # Sub-gamma with the exact Gamma pair: the lower bound covers the mean w.p. >= 1-delta.
    rng = np.random.default_rng(0)
    k, theta, n, delta, reps = 0.6, 2.0, 40, 0.1, 4000
    means = rng.gamma(k, theta, size=(reps, n)).mean(axis=1)
    lows = np.array([mean_lift_lower_bound(m, n, k * theta**2, theta, delta) for m in means])
    miss = int(np.sum(lows > k * theta))
    assert miss <= stats.binom.ppf(0.999, reps, delta)


@pytest.mark.parametrize(
    "args",
    [(0.0, 0, 1.0, 1.0, 0.05), (0.0, 10, 1.0, 1.0, 0.0), (0.0, 10, 1.0, 1.0, 1.0),
     (0.0, 10, -1.0, 1.0, 0.05), (0.0, 10, 1.0, -1.0, 0.05), (math.nan, 10, 1.0, 1.0, 0.05),
     (0.0, 10.0, 1.0, 1.0, 0.05), (0.0, True, 1.0, 1.0, 0.05)],
)  # fmt: skip
def test_pac_bayes_invalid(args: tuple[float, int, float, float, float]) -> None:
    with pytest.raises(ConfigError):
        pac_bayes_bound(*args)
    with pytest.raises(ConfigError):
        mean_lift_lower_bound(*args)


def test_pac_bayes_negative_kl() -> None:
    with pytest.raises(ConfigError):
        pac_bayes_bound(0.0, 10, 1.0, 1.0, 0.05, kl=-0.1)


# --- kappa / eta -------------------------------------------------------------------------------


def test_kappa_bound() -> None:
    # paper example: kappa = 0.1, h* = 0.02 -> sqrt(0.1)/0.96
    assert kappa_answer_rate_bound(0.1, 0.02) == pytest.approx(0.329404, abs=1e-6)
    assert kappa_answer_rate_bound(0.0, 0.1) == 0.0
    assert kappa_answer_rate_bound(2.0, 0.1) == 1.0
    assert kappa_answer_rate_bound(0.01, 0.5) == 1.0
    assert kappa_answer_rate_bound(0.01, 0.7) == 1.0
    for bad in ((-0.1, 0.1), (0.1, -0.1), (0.1, 1.5), (math.inf, 0.1)):
        with pytest.raises(ConfigError):
            kappa_answer_rate_bound(*bad)


def test_tv_and_eta() -> None:
    p, q = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]
    assert tv_distance(p, q) == pytest.approx(0.3)
    assert tv_distance(p, p) == 0.0
    assert tv_distance([1.0, 0.0], [0.0, 1.0]) == 1.0
    # TV = sup_A |P(A) - Q(A)|, checked by enumerating all events
    rng = np.random.default_rng(1)
    a, b = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    sup = max(abs(sum(a[i] - b[i] for i in range(6) if mask >> i & 1)) for mask in range(64))
    assert tv_distance(a, b) == pytest.approx(sup, rel=1e-12)
    for bad in (([0.5, 0.5], [1.0]), ([0.6, 0.6], [0.5, 0.5]), ([1.2, -0.2], [0.5, 0.5]),
                ([math.nan, 1.0], [0.5, 0.5]), ([], [])):  # fmt: skip
        with pytest.raises(ConfigError):
            tv_distance(*bad)
    assert eta_budget_shift_bound(0.1, 0.5, 12.0) == pytest.approx(0.4)
    assert eta_budget_shift_bound(0.9, 0.1, 12.0) == 12.0
    for bad_eta in ((-0.1, 0.5, 12.0), (0.1, 0.0, 12.0), (0.1, 0.5, 0.0), (1.5, 0.5, 12.0)):
        with pytest.raises(ConfigError):
            eta_budget_shift_bound(*bad_eta)


# --- mutual information -------------------------------------------------------------------------


def test_mi_hand_computed() -> None:
    # bins {1,2} -> labels (0,0), {3,4} -> labels (0,1): I = 0.75 log(4/3)
    mi = mutual_information([0, 0, 0, 1], [1.0, 2.0, 3.0, 4.0], bins=2)
    assert mi == pytest.approx(0.75 * math.log(4 / 3), rel=1e-12)
    # perfect separation: I = H(Y) = log 2
    assert mutual_information([0, 0, 1, 1], [1.0, 2.0, 3.0, 4.0], bins=2) == pytest.approx(
        math.log(2)
    )
    assert mutual_information([True, False, True, False], [1.0, 2.0, 3.0, 4.0], bins=2) == 0.0


def test_mi_binary_symmetric_closed_form() -> None:
    # score = label flipped w.p. 0.2 (exact counts): I = log 2 - h(0.2)
    y = np.array([1] * 500 + [0] * 500)
    s = np.array([1.0] * 400 + [0.0] * 100 + [1.0] * 100 + [0.0] * 400)
    h = -(0.2 * math.log(0.2) + 0.8 * math.log(0.8))
    assert mutual_information(y, s) == pytest.approx(math.log(2) - h, rel=1e-12)


def test_mi_against_entropy_identity_and_ties() -> None:
    rng = np.random.default_rng(2)
    n = 3000
    y = rng.random(n) < 0.3
    s = np.where(rng.random(n) < 0.4, 0.0, rng.gamma(1.0, 1.0 + 2.0 * y, size=n))  # zero mass
    mi = mutual_information(y, s, bins=10)
    # independent reference: I = H(Y) + H(B) - H(Y, B) on a table built by explicit loops
    edges = np.unique(np.quantile(s, np.arange(1, 10) / 10))
    b = np.array([np.sum(v >= edges) for v in s])
    table = np.zeros((2, edges.size + 1))
    for yi, bi in zip(y.astype(int), b, strict=True):
        table[yi, bi] += 1
    hy = stats.entropy(table.sum(axis=1))
    hb = stats.entropy(table.sum(axis=0))
    hyb = stats.entropy(table.ravel())
    assert mi == pytest.approx(hy + hb - hyb, rel=1e-10)
    assert 0.01 < mi < hy
    # the ties at 0 collapse several quantile bins into one
    assert edges.size < 9


def test_mi_degenerate_and_independent() -> None:
    rng = np.random.default_rng(3)
    assert mutual_information([0, 1, 0, 1], [5.0, 5.0, 5.0, 5.0]) == 0.0
    assert mutual_information([1, 1, 1], [1.0, 2.0, 3.0]) == 0.0
    assert mutual_information([0, 1, 1], [1.0, 2.0, 3.0], bins=1) == 0.0
    n = 20_000
    y = rng.random(n) < 0.5
    s = rng.normal(size=n)
    mi = mutual_information(y, s, bins=10)
    assert mi < 5 * 9 / (2 * n)  # plug-in bias is about (bins-1)/(2n)
    s2 = s + 1.5 * y
    assert mutual_information(y, s2) > 0.15
    for bad in (([0, 2], [1.0, 2.0]), ([0, 1], [1.0]), ([0, 1], [1.0, math.nan]), ([], [])):
        with pytest.raises(ConfigError):
            mutual_information(*bad)
    with pytest.raises(ConfigError):
        mutual_information([0, 1], [1.0, 2.0], bins=0)


# --- binomial tools -------------------------------------------------------------------------


def test_clopper_pearson_upper_closed_forms() -> None:
    for n in (1, 7, 50):
        assert clopper_pearson_upper(0, n, 0.05) == pytest.approx(1 - 0.05 ** (1 / n))
        # duality with the binomial tail: P(Bin(n, u) <= k) = delta at the upper bound u
        for k in range(n):
            u = clopper_pearson_upper(k, n, 0.05)
            assert stats.binom.cdf(k, n, u) == pytest.approx(0.05, abs=1e-9)
    assert clopper_pearson_upper(5, 5, 0.05) == 1.0
    assert clopper_pearson_upper(0, 0, 0.05) == 1.0


def test_clopper_pearson_interval_vs_scipy_binomtest() -> None:
    for k, n in ((0, 10), (3, 10), (10, 10), (17, 200)):
        lo, hi = clopper_pearson_interval(k, n, 0.1)
        ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.9, method="exact")
        assert lo == pytest.approx(ci.low, abs=1e-12)
        assert hi == pytest.approx(ci.high, abs=1e-12)
    assert clopper_pearson_interval(0, 0, 0.1) == (0.0, 1.0)
    for bad in ((3, 2, 0.1), (-1, 2, 0.1), (1, 2, 0.0), (1, 2, 1.0), (1.0, 2, 0.1)):
        with pytest.raises(ConfigError):
            clopper_pearson_interval(*bad)
        with pytest.raises(ConfigError):
            clopper_pearson_upper(*bad)


@pytest.mark.parametrize("n, p", [(20, 0.05), (60, 0.3), (150, 0.02)])
def test_clopper_pearson_upper_coverage(n: int, p: float) -> None:
    delta, reps = 0.1, 4000
    table = np.array([clopper_pearson_upper(k, n, delta) for k in range(n + 1)])
    # exact coverage over the binomial law
    exact = float(np.sum(stats.binom.pmf(np.arange(n + 1), n, p) * (table >= p)))
    assert exact >= 1 - delta - 1e-12
    # seeded simulation, counted against a binomial interval
    ks = np.random.default_rng(n).binomial(n, p, size=reps)
    covered = int(np.sum(table[ks] >= p))
    assert covered >= stats.binom.ppf(0.001, reps, 1 - delta)


def test_binomial_pvalue() -> None:
    for k, n, h in ((0, 10, 0.1), (3, 50, 0.05), (7, 200, 0.02), (10, 10, 0.3), (0, 29, 0.1)):
        assert binomial_pvalue(k, n, h) == pytest.approx(stats.binom.cdf(k, n, h), rel=1e-12)
    assert binomial_pvalue(0, 10, 0.1) == pytest.approx(0.9**10, rel=1e-12)
    assert binomial_pvalue(0, 0, 0.1) == 1.0
    assert binomial_pvalue(3, 10, 0.0) == 1.0
    assert binomial_pvalue(3, 10, 1.0) == 0.0
    for bad in ((11, 10, 0.1), (1, 10, 1.1), (1, 10, -0.1), (-1, 10, 0.1)):
        with pytest.raises(ConfigError):
            binomial_pvalue(*bad)


def test_min_answered_for_risk() -> None:
    assert min_answered_for_risk(0.7, 0.05) == 3
    assert min_answered_for_risk(0.1, 0.05) == 29
    for risk, delta in ((0.7, 0.05), (0.1, 0.05), (0.02, 0.1), (0.5, 0.25), (0.5, 0.5), (0.9, 0.5)):
        n = min_answered_for_risk(risk, delta)
        assert n == max(1, math.ceil(math.log(delta) / math.log(1 - risk) - 1e-12))
        assert (1 - risk) ** n <= delta * (1 + 1e-12)
        assert n == 1 or (1 - risk) ** (n - 1) > delta
        # zero errors in n answered passes the binomial test at level delta, n - 1 does not
        assert binomial_pvalue(0, n, risk) <= delta * (1 + 1e-12)
        assert n == 1 or binomial_pvalue(0, n - 1, risk) > delta
    assert min_answered_for_risk(0.5, 0.25) == 2  # exact power: no rounding up to 3
    for bad in ((0.0, 0.05), (1.0, 0.05), (0.1, 0.0), (0.1, 1.0)):
        with pytest.raises(ConfigError):
            min_answered_for_risk(*bad)
