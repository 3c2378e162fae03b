"""The escalation rule: one pass first, samples only in the band (guardrail._escalation)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from guardrail import ConfigError, InsufficientDataError
from guardrail.evaluate import Escalation, in_sample_ceiling, ltt_threshold

K = 5


def _population(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    """Answers with a weak single-pass score and K samples whose agreement is strong: a
    right answer's samples agree with it with probability 0.8, a wrong one's with 0.25."""
    right = rng.random(n) < 0.6
    single = rng.normal(np.where(right, 0.9, 0.0), 1.0)
    agree = rng.binomial(K, np.where(right, 0.8, 0.25)) / K
    return single, agree, right


def _rule(low: float, high: float, tau: float) -> Escalation:
    return Escalation(low=low, high=high, tau=tau, risk=0.2, delta=0.05)


def test_batch_scores_match_one_at_a_time() -> None:
    rng = np.random.default_rng(3)
    single = np.r_[rng.normal(0.0, 3.0, 300), -1.0, 1.0, 1e6, -1e6]
    agree = rng.integers(0, K + 1, single.size) / K
    rule = _rule(-1.0, 1.0, tau=1.5)
    batch = rule.scores(single, agree)
    one = [rule.score(float(s), float(c) if -1.0 <= s <= 1.0 else None)
           for s, c in zip(single, agree, strict=True)]  # fmt: skip
    assert batch.tolist() == one


def test_the_combined_scale_orders_above_band_below() -> None:
    rng = np.random.default_rng(4)
    single = rng.normal(0.0, 2.0, 2000)
    agree = rng.integers(0, K + 1, single.size) / K
    rule = _rule(-0.5, 0.5, tau=1.5)
    combined = rule.scores(single, agree)
    above, inside, below = single > 0.5, (single >= -0.5) & (single <= 0.5), single < -0.5
    assert combined[above].min() > combined[inside].max()
    assert combined[inside].min() > combined[below].max()
    for part in (above, below):  # outside the band: the single pass's order
        order = np.argsort(single[part])
        assert np.all(np.diff(combined[part][order]) > 0)
    # in the band: agreement first, the single pass breaks its ties
    key = np.lexsort((single[inside], agree[inside]))
    assert np.all(np.diff(combined[inside][key]) > 0)


def test_samples_are_needed_only_where_tau_falls_in_the_band() -> None:
    low, high = -1.0, 1.0
    in_band = _rule(low, high, tau=1.6)
    assert in_band.needs_samples(0.0) and not in_band.needs_samples(1.5)
    assert not in_band.needs_samples(-1.5)
    assert in_band.shows(2.0) and not in_band.shows(-2.0)
    assert in_band.shows(0.0, consistency=0.8) and not in_band.shows(0.0, consistency=0.4)
    with pytest.raises(ConfigError, match="sample them first"):
        in_band.shows(0.0)
    above = _rule(low, high, tau=3.5)  # tau among the answers above the band
    assert not above.needs_samples(0.0) and not above.shows(0.0)
    below = _rule(low, high, tau=0.5)  # tau among the answers below it
    assert not below.needs_samples(0.0) and below.shows(0.0)
    assert below.shows(0.0) == (below.score(0.0, consistency=0.0) >= below.tau)


def test_bad_input_is_refused_with_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="low <= high"):
        _rule(1.0, -1.0, tau=1.5)
    with pytest.raises(ConfigError, match="finite"):
        _rule(-np.inf, 1.0, tau=1.5)
    with pytest.raises(ConfigError, match="at least one sample"):
        Escalation.agreement(1.0, [])
    with pytest.raises(ConfigError, match="same shape"):
        _rule(-1.0, 1.0, 1.5).scores([0.0, 1.0], [0.5])
    with pytest.raises(ConfigError, match="NaN"):
        in_sample_ceiling([0.0, np.nan], [0, 1], risk=0.2)


def test_agreement_counts_equal_final_answers() -> None:
    assert Escalation.agreement(3, [3, 3, 4, None]) == 0.5
    assert Escalation.agreement(None, [None, None]) == 0.0


def test_the_ceiling_takes_ties_whole() -> None:
    # the top two tie: a threshold shows both or neither
    assert in_sample_ceiling([2.0, 2.0, 1.0], [0, 1, 0], risk=0.3) == 0.0
    assert in_sample_ceiling([2.0, 2.0, 1.0], [0, 1, 0], risk=0.4) == 1.0
    assert in_sample_ceiling([3.0, 2.0, 1.0], [0, 1, 0], risk=0.3) == pytest.approx(1 / 3)
    # errors may be probabilities of error (a model's, as the labels-needed study uses)
    assert in_sample_ceiling([2.0, 1.0, 1.0], [0.0, 0.0, 1.0], 0.2) == pytest.approx(1 / 3)
    assert in_sample_ceiling([2.0, 1.0], [0.1, 0.5], 0.3) == 1.0
    assert in_sample_ceiling([2.0, 1.0, 0.0], np.ones(3), 0.5) == 0.0


def test_the_band_runs_from_hindsight_to_the_certified_threshold() -> None:
    rng = np.random.default_rng(5)
    single, _, right = _population(rng, 4000)
    low, high = Escalation.band(single, right, risk=0.3)
    assert np.mean(single >= low) == in_sample_ceiling(single, ~right, 0.3)
    assert high == ltt_threshold(single, ~right, 0.3, 0.05).tau
    assert low < high
    # where the single pass certifies nothing, up to its top
    low, high = Escalation.band(single[:20], right[:20], risk=0.3)
    assert high == single[:20].max()
    with pytest.raises(ConfigError, match="non-empty"):
        Escalation.band([], [], risk=0.3)


def test_escalation_keeps_the_high_probability_promise() -> None:
    """Band from fitting answers, tau calibrated on others: the population risk of what
    the rule shows exceeds ``risk`` in at most a ``delta`` share of draws (binomial test);
    it samples only part of the answers and shows more than the single pass calibrated
    alone on the same answers."""
    rng = np.random.default_rng(2026)
    pop_single, pop_agree, pop_right = _population(rng, 200_000)
    reps, n_fit, n_cal, risk, delta = 300, 300, 300, 0.3, 0.05
    violations = refused = 0
    shown, alone, sampled = [], [], []
    for _ in range(reps):
        single, agree, right = _population(rng, n_fit + n_cal)
        try:
            tau = ltt_threshold(single[n_fit:], ~right[n_fit:], risk, delta).tau
            alone.append(float(np.mean(pop_single >= tau)))
        except InsufficientDataError:
            alone.append(0.0)
        band = Escalation.band(single[:n_fit], right[:n_fit], risk, delta)
        try:
            rule = Escalation.calibrate(single[n_fit:], agree[n_fit:], ~right[n_fit:],
                                        band=band, risk=risk, delta=delta)  # fmt: skip
        except InsufficientDataError:
            refused += 1
            shown.append(0.0)
            continue
        show = rule.scores(pop_single, pop_agree) >= rule.tau
        violations += (~pop_right[show]).mean() > risk
        shown.append(float(show.mean()))
        sampled.append(float(np.mean([rule.needs_samples(s) for s in pop_single[:2000]])))
    assert stats.binom.sf(violations - 1, reps, delta) > 1e-3, violations
    assert refused < reps // 4
    assert 0.1 < float(np.mean(sampled)) < 0.4
    assert float(np.mean(shown)) > float(np.mean(alone)) + 0.05
