"""The guarantee of a fitted certificate as deployed, by seeded simulation: fit on one
i.i.d. draw from a population of real answers, set early-block margins from it, calibrate
tau on another draw by replaying the rule, and count how often the population's
selective risk at that tau exceeds the target (a binomial test against ``delta``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from guardrail import InsufficientDataError, StreamPolicy
from guardrail._fit._replay import MarginAnswers
from guardrail.evaluate import ltt_threshold
from guardrail.fitting import (
    answer_features,
    block_margins,
    critical_score,
    fit_statistic,
    preset_features,
    replay_fitted,
)
from guardrail.traces import read_traces

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.mark.parametrize("answers", ["correct", "all"])
def test_a_fitted_rule_with_early_block_margins_keeps_its_risk_guarantee(
    answers: MarginAnswers,
) -> None:
    """``answers="correct"``: margins from the fitting draw's correct answers, as ``liftguard
    fit`` sets them; ``"all"``: from every answer of a third, unlabelled draw (the traffic
    ``liftguard calibrate --margins-from`` reads), none of them a calibration answer."""
    # the population: the committed Gemma 3 samples (80 real answers, 35% correct); draws
    # with replacement from it are i.i.d. from a known distribution, so the population
    # risk at any tau is exact
    pop = [*read_traces(FIXTURES / "traces_gemma3_sample.jsonl"),
           *read_traces(FIXTURES / "traces_gemma3_nq_sample.jsonl")]  # fmt: skip
    correct = np.array([bool(t.correct) for t in pop])
    feats = preset_features("api")
    x = answer_features(pop, feats)
    limit = max(t.n_tokens for t in pop)
    policy = StreamPolicy()
    rng = np.random.default_rng(31)
    reps, n_fit, n_cal, risk, delta = 300, 150, 200, 0.5, 0.1
    violations = naive = answered = blocked_early = 0
    for _ in range(reps):
        fit, cal = rng.integers(0, len(pop), n_fit), rng.integers(0, len(pop), n_cal)
        stat = fit_statistic(x[fit], correct[fit], feats, vocab_size=pop[0].vocab_size, l2=10.0)
        source = fit if answers == "correct" else rng.integers(0, len(pop), n_fit)
        margins = block_margins(stat, [pop[i] for i in source], 0.9, max_tokens=limit,
                                answers=answers)  # fmt: skip
        stat = replace(stat, block_margins=margins)
        paths = [replay_fitted(stat, t, max_tokens=limit) for t in pop]
        crit = np.array([critical_score(p, policy) for p in paths])
        blocked_early += int(sum(c < p.scores[-1] for c, p in zip(crit, paths, strict=True)))
        # a threshold read off the calibration draw with no confidence margin: the control
        order = np.argsort(-crit[cal], kind="stable")
        running = np.cumsum(~correct[cal][order]) / np.arange(1, n_cal + 1)
        fine = np.flatnonzero(running <= risk)
        if fine.size:
            shown = crit >= crit[cal][order][fine[-1]]
            naive += (~correct[shown]).mean() > risk
        try:
            tau = ltt_threshold(crit[cal], ~correct[cal], risk, delta).tau
        except InsufficientDataError:
            continue
        answered += 1
        shown = crit >= tau
        violations += bool(shown.any()) and (~correct[shown]).mean() > risk
    assert blocked_early > 0  # the margins blocked answers whose final score would pass
    assert answered > reps // 2  # and the rule certifies something most of the time
    assert stats.binom.sf(violations - 1, reps, delta) > 1e-3, violations
    # the same draws fail the test without the calibration's confidence: it can fail
    assert stats.binom.sf(naive - 1, reps, delta) < 1e-3, naive
