"""Calibration: the fixed-sequence test by hand, and risk control by seeded simulation."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from scipy import stats

from guardrail import (
    Calibration,
    ConfigError,
    InsufficientDataError,
    StreamPolicy,
    calibrate,
    calibrate_policy,
)
from guardrail._calibration import PROCEDURES, first_test_level
from guardrail._policy import shown_at
from guardrail.evaluate import critical_thresholds, ltt_threshold


def test_fixed_sequence_by_hand() -> None:
    scores = [5.0, 4.0, 3.0, 2.0, 1.0]
    errors = [False, False, False, True, True]
    # start at 3 answered: p(0; 3, .5) = 0.125 <= 0.2 passes; p(1; 4, .5) = 5/16 fails
    out = ltt_threshold(scores, errors, risk=0.5, delta=0.2, start=3)
    assert out.tau == 3.0 and out.n_answered == 3 and out.n_errors == 0
    assert out.pvalue == pytest.approx(0.125) and out.n_tested == 2
    # starting at the top cannot pass: one example gives p = 0.5 > 0.2
    with pytest.raises(InsufficientDataError) as info:
        ltt_threshold(scores, errors, risk=0.5, delta=0.2, start=1)
    assert info.value.needed == 3  # 0.5^3 = 0.125 <= 0.2 < 0.25
    assert "needs at least 3 answered" in str(info.value)


def test_ties_are_tested_as_groups_and_fixed_grid() -> None:
    scores = np.array([2.0, 2.0, 2.0, 1.0, 1.0, 0.0])
    errors = np.array([False, False, False, False, True, True])
    out = ltt_threshold(scores, errors, risk=0.5, delta=0.2, start=2)
    assert out.tau == 1.0 and out.n_answered == 5 and out.n_errors == 1
    grid_out = ltt_threshold(scores, errors, risk=0.5, delta=0.2, grid=[2.0, 1.0, 0.0])
    assert grid_out.tau == 1.0 and grid_out.n_tested == 3
    # a fixed grid that starts where nothing is answered has p = 1 and stops at once
    with pytest.raises(InsufficientDataError):
        ltt_threshold(scores, errors, risk=0.5, delta=0.2, grid=[2.5, 2.0, 1.0, 0.0])
    with pytest.raises(ConfigError, match="decreasing"):
        ltt_threshold(scores, errors, risk=0.5, delta=0.2, grid=[1.0, 2.0])


def test_too_little_data_says_how_much_is_needed() -> None:
    with pytest.raises(InsufficientDataError) as info:
        ltt_threshold([1.0] * 10, [False] * 10, risk=0.1, delta=0.05)
    assert info.value.needed == 29
    with pytest.raises(InsufficientDataError):
        ltt_threshold([], [], risk=0.1, delta=0.05)
    with pytest.raises(ConfigError):
        ltt_threshold([1.0], [False], risk=1.5, delta=0.05)


@pytest.mark.parametrize(
    ("risk", "delta", "start"), [(0.3, 0.05, None), (0.3, 0.05, 9), (0.1, 0.05, None)]
)
def test_refusal_minimum_is_at_the_level_tested(
    risk: float, delta: float, start: int | None
) -> None:
    import re

    scores = np.arange(200.0, 0.0, -1.0)
    errors = np.ones(200, dtype=bool)  # every answer wrong: no candidate can pass
    with pytest.raises(InsufficientDataError) as info:
        ltt_threshold(scores, errors, risk=risk, delta=delta, start=start)
    text = str(info.value)
    level = float(re.search(r"its level ([0-9.e-]+)", text).group(1))  # type: ignore[union-attr]
    n_min = int(re.search(r"needs at least (\d+) answered", text).group(1))  # type: ignore[union-attr]
    assert level == pytest.approx(delta if start else delta / 2, rel=1e-3)
    assert info.value.needed == n_min
    assert stats.binom.cdf(0, n_min, risk) <= level < stats.binom.cdf(0, n_min - 1, risk)
    if start is None:  # the default start can pass at its own level
        assert first_test_level(200, risk, delta) == pytest.approx(level, rel=1e-3)
        assert int(re.search(r"candidate (\d+) examples", text).group(1)) >= n_min  # type: ignore[union-attr]


def _population_risk(tau: float) -> float:
    # s ~ U(0, 1), P(error | s) = 0.9 - 0.8 s  =>  R(tau) = 0.5 - 0.4 tau
    return 0.5 - 0.4 * tau


@pytest.mark.parametrize("discrete", [False, True], ids=["continuous", "tied-scores"])
def test_ltt_controls_selective_risk(discrete: bool) -> None:
    rng = np.random.default_rng(99)
    reps, n, risk, delta = 400, 400, 0.3, 0.1
    violations = 0
    coverages = []
    for _ in range(reps):
        s = rng.random(n)
        if discrete:
            s = np.floor(s * 25) / 25
        err = rng.random(n) < 0.9 - 0.8 * s
        try:
            tau = ltt_threshold(s, err, risk, delta).tau
        except InsufficientDataError:
            coverages.append(0.0)
            continue
        violations += _population_risk(tau) > risk
        coverages.append(1 - tau)
    assert stats.binom.sf(violations - 1, reps, delta) > 1e-3, violations
    # and it has power (the oracle answers half of the questions: R(0.5) = 0.3)
    assert np.mean(coverages) > 0.1


def _check_population_risk(
    policy: StreamPolicy,
    lifts: list[np.ndarray],
    correct: np.ndarray,
    rng: np.random.Generator,
    *,
    risk: float,
    reps: int = 300,
    n: int = 300,
    delta: float = 0.1,
) -> None:
    """Calibrate on ``reps`` draws of ``n`` answers; the population risk of the answers
    shown exceeds ``risk`` in at most a ``delta`` share of draws (binomial test)."""
    crit = critical_thresholds(policy, lifts)
    violations = answered = 0
    for _ in range(reps):
        idx = rng.integers(0, correct.size, n)
        try:
            tau = ltt_threshold(crit[idx], ~correct[idx], risk, delta).tau
        except InsufficientDataError:
            continue
        shown = crit >= tau
        answered += 1
        violations += (~correct[shown]).mean() > risk
    assert answered > reps // 2
    assert stats.binom.sf(violations - 1, reps, delta) > 1e-3, violations


def test_calibrated_streaming_policy_controls_risk() -> None:
    """End to end: replay the betting policy, calibrate, check the population risk."""
    rng = np.random.default_rng(2025)
    pop = 3000
    correct = rng.random(pop) < 0.4
    lengths = rng.integers(1, 16, pop)
    lifts = [
        np.clip(rng.gamma(0.8, (2.2 if ok else 1.0) / 0.8, k), 0, 12)
        for ok, k in zip(correct, lengths, strict=True)
    ]
    _check_population_risk(StreamPolicy(delta=0.2), lifts, correct, rng, risk=0.35)


def test_calibrated_lowest_aggregate_controls_risk() -> None:
    """End to end for the order-based default: wrong answers tend to hold weak tokens."""
    rng = np.random.default_rng(77)
    pop = 3000
    correct = rng.random(pop) < 0.4
    lifts = []
    for ok in correct:
        x = rng.uniform(6.0, 12.0, int(rng.integers(1, 16)))
        n_weak = rng.binomial(2, 0.25 if ok else 0.7)
        x[rng.choice(x.size, min(n_weak, x.size), replace=False)] = rng.uniform(0, 6, n_weak)[
            : x.size
        ]
        lifts.append(x)
    _check_population_risk(StreamPolicy(aggregate="lowest"), lifts, correct, rng, risk=0.45)


def test_paper_algorithm_1_does_not_control_risk() -> None:
    """The documented failure: Algorithm 1 uses no labels, so when the lift carries
    no information about correctness it answers most questions at the base error
    rate, far above the target, in essentially every calibration draw. The
    label-based default refuses instead (or stays within the target)."""
    rng = np.random.default_rng(3)
    reps, n, risk, delta = 60, 400, 0.2, 0.05
    paper_violations = ltt_violations = 0
    for _ in range(reps):
        budgets = rng.gamma(2.0, 0.5, n)
        correct = rng.random(n) < 0.5  # independent of the budget
        cal = calibrate(
            budgets, correct, risk=risk, delta=delta, budgets=budgets, method="paper", n_boot=20
        )
        # any rule that ignores the labels has population selective risk 0.5 > 0.2 here,
        # so answering anything at all is a violation of the target
        paper_violations += cal.n_answered > 0
        try:
            tau = ltt_threshold(budgets, ~correct, risk, delta).tau
            ltt_violations += bool((budgets >= tau).any())
        except InsufficientDataError:
            pass
    assert paper_violations / reps > 0.9
    assert stats.binom.sf(ltt_violations - 1, reps, delta) > 1e-3


def test_calibration_record_round_trips_and_reports() -> None:
    rng = np.random.default_rng(4)
    n = 300
    correct = rng.random(n) < 0.5
    lifts = [np.clip(rng.gamma(1.0, 2.0 if ok else 0.7, 6), 0, 12) for ok in correct]
    cal = calibrate_policy(StreamPolicy(delta=0.2), lifts, correct, risk=0.4, delta=0.1, n_boot=50)
    assert cal.method == "ltt" and cal.score == "lift" and cal.n == n
    assert 0 < cal.coverage <= 1 and cal.empirical_risk <= cal.risk_upper
    assert cal.v is not None and cal.c is not None and cal.model_check is not None
    assert cal.pac_bayes_bound is not None and cal.mean_budget is not None
    assert cal.pac_bayes_bound > cal.mean_budget
    assert cal.kappa is not None and cal.kappa > 0
    assert cal.policy == StreamPolicy(delta=0.2).to_dict()
    again = Calibration.from_json(cal.to_json())
    assert again == cal
    with pytest.raises(ConfigError):
        Calibration.from_dict({"tau": 1.0})
    paper = calibrate_policy(
        StreamPolicy(delta=0.2), lifts, correct, risk=0.4, delta=0.1, method="paper", n_boot=50
    )
    assert paper.method == "paper" and "no guarantee" in paper.guarantee
    # the paper threshold is judged by the deployed rule itself: shown_at, as everywhere
    shown = shown_at(StreamPolicy(delta=0.2), lifts, [paper.tau])[:, 0]
    assert paper.n_answered == int(shown.sum())
    assert paper.n_errors == int((shown & ~correct).sum())
    assert paper.policy is not None and paper.policy["on_missing_logprobs"] == "block"


@pytest.mark.parametrize("risk", [0.3, 0.7])
def test_the_fallback_start_keeps_the_guarantee_near_the_boundary(risk: float) -> None:
    """Seeded simulation in a least favourable monotone case: the top 10% of scores are
    never wrong and the rest wrong with one probability ``c``, so ``R(t)`` rises slowly
    past ``risk`` at ``t*`` and stays just above it: every run of the sequence meets
    many barely-bad candidates. ``tau < t*`` is a violation; their count stays within
    the binomial interval for delta (shares summing to 2 instead of 1 give 87 and 113
    violations of 600 here, which this test rejects)."""
    rng = np.random.default_rng(4242)
    reps, n, delta = 600, 600, 0.1
    c = (risk + 0.05) / 0.9
    t_star = (0.9 * c - risk) / (c - risk)  # R(t) = c (0.9 - t) / (1 - t) = risk
    violations = 0
    for _ in range(reps):
        s = rng.random(n)
        err = rng.random(n) < np.where(s > 0.9, 0.0, c)
        violations += ltt_threshold(s, err, risk, delta).tau < t_star
    assert stats.binom.sf(violations - 1, reps, delta) > 1e-3, violations
    assert violations > reps * delta / 3  # the case is tight: the test can fail


def test_a_cluster_of_errors_at_the_top_does_not_refuse_the_whole_ranking() -> None:
    """The top 40 answers hold 12 errors, the next 960 are right 97 times in 100: plain
    fixed-sequence testing from the default start fails at once and refuses; the second
    start (four times the count) certifies most of the ranking, at risk 0.2."""
    rng = np.random.default_rng(7)
    n = 1000
    scores = np.arange(n, 0, -1, dtype=np.float64)
    errors = np.r_[np.isin(np.arange(40) % 10, (0, 3, 6)), rng.random(n - 40) < 0.03]
    start = 32  # the default start for n = 1000: ceil(sqrt(1000))
    with pytest.raises(InsufficientDataError):
        ltt_threshold(scores, errors, 0.2, 0.05, start=start)
    out = ltt_threshold(scores, errors, 0.2, 0.05)
    assert out.start == start and out.n_answered > 800
    assert out.n_errors / out.n_answered <= 0.2


def test_a_clean_ranking_is_tested_at_the_full_level_past_the_second_start() -> None:
    """With no error in the first run, the fallback returns what plain fixed-sequence
    testing returns once the boundary lies past the second start."""
    rng = np.random.default_rng(11)
    s = rng.random(2000)
    err = rng.random(2000) < 0.9 - 0.8 * s
    plain = ltt_threshold(s, err, 0.3, 0.05, start=45)
    fallback = ltt_threshold(s, err, 0.3, 0.05)
    assert plain.n_answered > 4 * 45
    assert fallback.tau == plain.tau


@pytest.mark.parametrize("risk", [0.3, 0.7])
def test_the_simultaneous_procedure_keeps_the_guarantee_near_the_boundary(risk: float) -> None:
    """The least favourable case of the fallback's test above, for the simultaneous
    procedure: its violations (``tau < t*``) stay within the binomial interval for
    delta. Every candidate is tested, so every barely-bad one is a chance to pass."""
    rng = np.random.default_rng(4243)
    reps, n, delta = 600, 600, 0.1
    c = (risk + 0.05) / 0.9
    t_star = (0.9 * c - risk) / (c - risk)
    violations = 0
    for _ in range(reps):
        s = rng.random(n)
        err = rng.random(n) < np.where(s > 0.9, 0.0, c)
        out = ltt_threshold(s, err, risk, delta, procedure="simultaneous")
        violations += out.tau < t_star
    assert stats.binom.sf(violations - 1, reps, delta) > 1e-3, violations
    assert violations > 0  # barely-bad candidates do pass at times: the test can fail


def test_the_boundary_crossing_probability_matches_simulated_walks() -> None:
    """The exact recursion against 20,000 simulated Bernoulli walks: the share that
    crosses the boundary lies in the binomial interval of the computed probability,
    which is within delta."""
    from guardrail._simultaneous import crossing_probability, simultaneous_boundary

    n, risk, delta = 200, 0.3, 0.1
    _level, bound = simultaneous_boundary(n, risk, delta)
    p = crossing_probability(bound, risk)
    assert 0.5 * delta < p <= delta
    rng = np.random.default_rng(5)
    walks = np.cumsum(rng.random((20_000, n)) < risk, axis=1)
    crossed = int((walks <= bound[None, :]).any(axis=1).sum())
    lo, hi = stats.binom.interval(0.999, 20_000, p)
    assert lo <= crossed <= hi, (crossed, p)


def test_the_simultaneous_procedure_does_not_stop_at_a_failed_candidate() -> None:
    """The cluster of errors at the top of the fallback's test: the simultaneous
    procedure has no start to fail at and certifies most of the ranking."""
    rng = np.random.default_rng(7)
    n = 1000
    scores = np.arange(n, 0, -1, dtype=np.float64)
    errors = np.r_[np.isin(np.arange(40) % 10, (0, 3, 6)), rng.random(n - 40) < 0.03]
    out = ltt_threshold(scores, errors, 0.2, 0.05, procedure="simultaneous")
    assert out.n_answered > 800 and out.n_errors / out.n_answered <= 0.2
    with pytest.raises(ConfigError, match="neither start nor grid"):
        ltt_threshold(scores, errors, 0.2, 0.05, procedure="simultaneous", start=10)
    with pytest.raises(ConfigError, match="procedure must be one of"):
        ltt_threshold(scores, errors, 0.2, 0.05, procedure="bonferroni")  # type: ignore[arg-type]


def test_coverage_grows_with_the_labels() -> None:
    """Seeded simulation: a ranking whose error rate rises from 5% to 60% down the scores;
    the mean coverage certified at risk 0.2 over 40 draws grows with the calibration size
    for both procedures."""
    rng = np.random.default_rng(9)
    for procedure in PROCEDURES[:2]:  # the label tests; conformal is calibrate()'s
        means = []
        for n in (100, 200, 400, 800):
            cov = []
            for _ in range(40):
                s = rng.random(n)
                err = rng.random(n) < 0.05 + 0.55 * (1 - s)
                try:
                    cov.append(
                        float(
                            (s >= ltt_threshold(s, err, 0.2, 0.05, procedure=procedure).tau).mean()
                        )
                    )
                except InsufficientDataError:
                    cov.append(0.0)
            means.append(float(np.mean(cov)))
        assert all(b > a for a, b in itertools.pairwise(means)), (procedure, means)


def test_a_refusal_names_the_labels_that_would_pass() -> None:
    """``calibrate`` refusing at 80 labels states about how many would pass, and most
    calibrations of that size drawn from the same ranking do pass."""
    rng = np.random.default_rng(12)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        s = rng.random(n)
        return s, rng.random(n) >= 0.02 + 0.5 * (1 - s)

    s, ok = draw(80)
    with pytest.raises(InsufficientDataError, match=r"about (\d+) calibration labels") as info:
        calibrate(s, ok, risk=0.15, delta=0.05)
    found = re.search(r"about (\d+) calibration labels", str(info.value))
    assert found is not None
    more = int(found.group(1))
    assert more > 80
    passed = 0
    for _ in range(10):
        s, ok = draw(more)
        try:
            cal = calibrate(s, ok, risk=0.15, delta=0.05, procedure="simultaneous")
            passed += cal.n_answered > 0
        except InsufficientDataError:
            pass
    assert passed >= 5
