"""A risk monitor whose evidence is lost and restarted: its state written and read back
exactly, the restarted tests' batch twin against the streaming monitors, and false alarms
at the boundary within alpha over 0, 2, 5 and 20 restarts (seeded simulation, counted
against a binomial interval)."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from guardrail import ConfigError, RiskMonitor
from guardrail.stats import clopper_pearson_interval

TARGET, ALPHA = 0.2, 0.05


def _state(m: RiskMonitor) -> tuple[object, ...]:
    return (m.n, m.errors, m.log_e_value, m.alarm_at, m.lower_bound, m.bounds, m.bounds_since,
            m.answers, m.shown, m.coverage_warning_at, m.alpha)  # fmt: skip


@pytest.mark.parametrize("coverage", [None, 0.6])
def test_a_state_read_back_is_the_monitor_exactly_from_then_on(coverage: float | None) -> None:
    rng = random.Random(3)
    monitor = RiskMonitor(0.1, 0.03, coverage=coverage)
    size = len(monitor.to_bytes())
    for i in range(1500):
        monitor.update_shown(rng.random() < 0.5)
        monitor.update(correct=rng.random() >= (0.05 if i < 700 else 0.3))
    data = monitor.to_bytes()
    assert abs(len(data) - size) < 200  # the same size after 0 labels or 1500
    copy = RiskMonitor.from_bytes(data)
    assert _state(copy) == _state(monitor) and copy.alarm
    for _ in range(700):
        shown, correct = rng.random() < 0.5, rng.random() >= 0.1
        for m in (monitor, copy):
            m.update_shown(shown)
            m.update(correct=correct)
    assert _state(copy) == _state(monitor)
    assert copy.to_bytes() == monitor.to_bytes()


@pytest.mark.parametrize("junk", [b"", b"{}\n", b"not a state", b'{"format": 2}\n'])
def test_bytes_it_did_not_write_are_refused(junk: bytes) -> None:
    with pytest.raises(ValueError, match="not a risk monitor's state"):
        RiskMonitor.from_bytes(junk)
    data = RiskMonitor(0.1).to_bytes()
    with pytest.raises(ValueError, match="bytes of state"):
        RiskMonitor.from_bytes(data[:-8])


def test_the_levels_of_the_restarted_tests_sum_to_alpha() -> None:
    levels = [RiskMonitor.restart_level(ALPHA, k) for k in range(100_000)]
    assert levels[0] == pytest.approx(ALPHA * 6 / math.pi**2)
    assert all(a > b for a, b in itertools.pairwise(levels))
    assert sum(levels) < ALPHA and sum(levels) == pytest.approx(ALPHA, rel=1e-4)
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="restarts"):
            RiskMonitor.restart_level(ALPHA, bad)  # type: ignore[arg-type]


def test_the_batch_twin_of_restarted_monitors() -> None:
    rng = np.random.default_rng(5)
    rates = np.r_[np.full(150, 0.1), np.full(250, 0.45)]
    wrong = rng.random((12, rates.size)) < rates
    restarts = [120, 200, 330]
    batch = RiskMonitor.alarms_with_restarts(wrong, TARGET, ALPHA, restarts)
    for stream, at in zip(wrong, batch, strict=True):
        first, k = 0, 0
        monitor = RiskMonitor(TARGET, RiskMonitor.restart_level(ALPHA, 0))
        for i, x in enumerate(stream):
            if k < len(restarts) and i == restarts[k]:
                k += 1
                monitor = RiskMonitor(TARGET, RiskMonitor.restart_level(ALPHA, k))
            if monitor.update(correct=not x) and first == 0:
                first = i + 1
        assert at == first
    assert (batch > 0).any() and (batch > restarts[0]).any()
    with pytest.raises(ConfigError, match="restarts_at"):
        RiskMonitor.alarms_with_restarts(wrong, TARGET, ALPHA, [200, 100])


@pytest.mark.parametrize("restarts", [0, 2, 5, 20])
def test_false_alarms_at_the_boundary_stay_within_alpha_over_restarts(restarts: int) -> None:
    runs, labels = 1500, 3000
    wrong = np.random.default_rng(49 + restarts).random((runs, labels)) < TARGET
    at = [round(labels * (k + 1) / (restarts + 1)) for k in range(restarts)]
    alarms = int((RiskMonitor.alarms_with_restarts(wrong, TARGET, ALPHA, at) > 0).sum())
    low, high = clopper_pearson_interval(alarms, runs, 0.01)  # a 99% interval
    assert high <= ALPHA, (restarts, alarms / runs, (low, high))
