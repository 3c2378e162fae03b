"""Tests for top-k compensation (guardrail._topk): closed forms, invariants, real traces."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from guardrail._errors import ConfigError
from guardrail._topk import (
    TailModel,
    TailRule,
    censored_logprob,
    censored_logprob_batch,
    estimate_entropy,
    estimate_entropy_batch,
    estimate_logz,
    estimate_logz_batch,
    fit_tail,
    topk_compensated_lift,
)
from guardrail.traces._read import read_traces

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MODELS = {"gemma3": "traces_gemma3_sample.jsonl", "smollm2": "traces_smollm2_sample.jsonl"}
TEMPS = (1.5, 2.0)
RULES: tuple[TailRule, ...] = ("paper", "anchored")
Floats = npt.NDArray[np.float64]


def _exact(p: Floats, temperature: float | None = None) -> float:
    """Entropy (``temperature=None``) or ``log Z_T`` of an explicit distribution."""
    if temperature is None:
        return float(-(p * np.log(p)).sum())
    return float(np.log((p ** (1.0 / temperature)).sum()))


def _power_law(vocab: int, slope: float) -> Floats:
    p = np.arange(1, vocab + 1, dtype=np.float64) ** slope
    return p / p.sum()


def _full(top: Floats, tail: TailModel) -> Floats:
    """The whole estimated distribution: observed top-k then the model's tail."""
    return np.concatenate([np.exp(top), tail.probabilities()])


# --------------------------------------------------------------------------- #
# Closed forms
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("k", [2, 5, 20])
@pytest.mark.parametrize("slope", [-0.7, -1.5, -3.0])
def test_exact_power_law_is_recovered(k: int, slope: float) -> None:
    vocab = 300
    p = _power_law(vocab, slope)
    top = np.log(p[:k])
    tail = fit_tail(top, vocab)
    assert tail.kind == "power"
    assert tail.r2 == pytest.approx(1.0)
    assert tail.b == pytest.approx(slope, rel=1e-9)
    assert tail.a == pytest.approx(math.log(p[0]), rel=1e-9)
    assert tail.missing_mass == pytest.approx(p[k:].sum(), rel=1e-9)
    np.testing.assert_allclose(tail.probabilities(), p[k:], rtol=1e-9)
    assert estimate_entropy(top, vocab) == pytest.approx(_exact(p), rel=1e-9)
    for t in TEMPS:
        assert estimate_logz(top, vocab, t) == pytest.approx(_exact(p, t), rel=1e-9)
    mean_log = float((p[k:] * np.log(p[k:])).sum() / p[k:].sum())
    assert censored_logprob(top, vocab) == pytest.approx(mean_log, rel=1e-9)


def test_large_vocabulary_power_law_uses_the_fast_sums() -> None:
    vocab, k = 262_144, 20
    p = _power_law(vocab, -1.2)
    top = np.log(p[:k])
    assert estimate_entropy(top, vocab) == pytest.approx(_exact(p), rel=1e-9)
    for t in TEMPS:
        assert estimate_logz(top, vocab, t) == pytest.approx(_exact(p, t), rel=1e-9)


@pytest.mark.parametrize("k", [0, 1, 5, 20])
def test_uniform_distribution(k: int) -> None:
    vocab = 1000
    top = np.full(k, -math.log(vocab))
    tail = fit_tail(top, vocab)
    assert tail.kind == "uniform" and tail.b == 0.0 and math.isnan(tail.r2)
    assert tail.a == pytest.approx(-math.log(vocab))
    assert tail.missing_mass == pytest.approx(1.0 - k / vocab)
    assert estimate_entropy(top, vocab) == pytest.approx(math.log(vocab))
    for t in TEMPS:
        assert estimate_logz(top, vocab, t) == pytest.approx((1 - 1 / t) * math.log(vocab))
    assert censored_logprob(top, vocab) == pytest.approx(-math.log(vocab))


def test_empty_top_k_puts_all_mass_uniformly() -> None:
    for rule in RULES:
        tail = fit_tail([], 50, rule=rule)
        assert (tail.kind, tail.k, tail.missing_mass) == ("uniform", 0, 1.0)
        np.testing.assert_allclose(tail.probabilities(), np.full(50, 1 / 50))
    assert estimate_entropy_batch(np.zeros((3, 0)), 50) == pytest.approx([math.log(50)] * 3)


def test_two_level_distribution_fails_r2_and_gets_the_uniform_tail() -> None:
    vocab = 1000
    p = np.concatenate([np.full(10, 0.05), np.full(10, 0.01), np.full(vocab - 20, 0.4 / 980)])
    top = np.log(p[:20])
    tail = fit_tail(top, vocab)
    assert tail.r2 < 0.8 and tail.kind == "uniform"
    assert fit_tail(top, vocab, r2_min=0.5).kind == "power"
    np.testing.assert_allclose(tail.probabilities(), p[20:], rtol=1e-12)
    assert estimate_entropy(top, vocab) == pytest.approx(_exact(p), rel=1e-12)
    for t in TEMPS:
        assert estimate_logz(top, vocab, t) == pytest.approx(_exact(p, t), rel=1e-12)


def test_law_above_p_k_falls_back_to_the_uniform_tail() -> None:
    top = np.log([0.5, 0.05, 0.005])  # steep fit, but 0.445 left for ranks 4..1000
    tail = fit_tail(top, 1000)
    assert tail.r2 > 0.8 and tail.kind == "uniform"
    assert tail.missing_mass == pytest.approx(0.445)
    np.testing.assert_allclose(tail.probabilities(), 0.445 / 997)


def test_inconsistent_inputs_cap_the_tail_at_p_k() -> None:
    for rule in RULES:  # 0.49 missing but 8 tail ranks of at most 0.01
        tail = fit_tail(np.log([0.5, 0.01]), 10, rule=rule)
        assert tail.kind == "uniform"
        np.testing.assert_allclose(tail.probabilities(), np.full(8, 0.01))
        assert tail.missing_mass == pytest.approx(0.08)


def test_rounding_that_leaves_no_mass_is_floored() -> None:
    top = [math.log(0.6000004), math.log(0.4)]  # sums to 1 + 4e-7
    tail = fit_tail(top, 100)
    assert tail.missing_mass == pytest.approx(1e-12)
    assert estimate_entropy(top, 100) == pytest.approx(_exact(np.array([0.6, 0.4])), abs=1e-6)
    assert fit_tail([0.0], 1).missing_mass == 0.0  # V == k: no tail at all
    assert estimate_entropy([0.0], 1) == 0.0


def test_anchored_rule_continues_from_p_k() -> None:
    p = _power_law(500, -1.0)
    tail = fit_tail(np.log(p[:10]), 500, rule="anchored")
    probs = tail.probabilities()
    assert tail.kind == "power" and tail.b < 0
    assert probs.sum() == pytest.approx(p[10:].sum(), rel=1e-10)
    assert probs[0] == pytest.approx(p[9] * (11 / 10) ** tail.b, rel=1e-10)


# --------------------------------------------------------------------------- #
# Invariants and the fast path on real rows
# --------------------------------------------------------------------------- #


@cache
def _rows(model: str) -> tuple[Floats, Floats, dict[float, Floats], int]:
    traces = read_traces(FIXTURES / MODELS[model])
    lp = np.concatenate([t.top_logprobs for t in traces])
    entropy = np.concatenate([t.entropy for t in traces])
    logz = {t: np.concatenate([tr.logz[t] for tr in traces]) for t in TEMPS}
    return lp, entropy, logz, traces[0].vocab_size


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("k", [20, 5, 1])
def test_tail_invariants_and_fast_sums_on_fixture_rows(model: str, rule: TailRule, k: int) -> None:
    lp, _, _, vocab = _rows(model)
    for top in lp[:: max(1, len(lp) // 8), :k]:
        tail = fit_tail(top, vocab, rule=rule)
        probs = tail.probabilities()
        mass = 1.0 - np.exp(top).sum()
        assert probs.sum() == pytest.approx(tail.missing_mass, rel=1e-9)
        assert tail.missing_mass == pytest.approx(max(mass, 1e-12), rel=1e-9, abs=1e-15)
        assert (np.diff(probs) <= 0).all() and probs[0] <= math.exp(top[-1]) * (1 + 1e-12)
        full = _full(top, tail)
        assert estimate_entropy(top, vocab, tail=tail) == pytest.approx(_exact(full), rel=1e-9)
        for t in TEMPS:
            est = estimate_logz(top, vocab, t, tail=tail)
            assert est == pytest.approx(_exact(full, t), rel=1e-9, abs=1e-12)
        mean_log = float((probs * np.log(probs)).sum() / probs.sum())
        assert censored_logprob(top, vocab, tail=tail) == pytest.approx(mean_log, rel=1e-9)
        assert censored_logprob(top, vocab, tail=tail) <= top[-1] + 1e-12


@pytest.mark.parametrize("rule", RULES)
def test_batch_matches_scalar(rule: TailRule) -> None:
    lp, _, _, vocab = _rows("smollm2")
    rows = lp[:40, :7]
    ent = estimate_entropy_batch(rows, vocab, rule=rule)
    cen = censored_logprob_batch(rows, vocab, rule=rule)
    logz = {t: estimate_logz_batch(rows, vocab, t, rule=rule) for t in TEMPS}
    for i, top in enumerate(rows):
        assert ent[i] == pytest.approx(estimate_entropy(top, vocab, rule=rule))
        assert cen[i] == pytest.approx(censored_logprob(top, vocab, rule=rule))
        for t in TEMPS:
            assert logz[t][i] == pytest.approx(estimate_logz(top, vocab, t, rule=rule))


# --------------------------------------------------------------------------- #
# Accuracy against the exact values in the fixture traces
# --------------------------------------------------------------------------- #

# Mean absolute errors measured on the fixtures (k = 20, 10, 5, 1), times ~1.2.
# Columns: entropy, log Z_1.5, log Z_2.0.
MAE_LIMITS: dict[tuple[str, str], dict[int, tuple[float, float, float]]] = {
    ("gemma3", "paper"): {
        20: (1.75, 1.2, 2.1),
        10: (2.2, 1.4, 2.3),
        5: (3.0, 1.7, 2.6),
        1: (5.7, 2.4, 3.3),
    },
    ("gemma3", "anchored"): {
        20: (0.6, 0.55, 1.1),
        10: (0.8, 0.65, 1.25),
        5: (1.05, 0.75, 1.35),
        1: (1.9, 1.0, 1.7),
    },
    ("smollm2", "paper"): {
        20: (0.42, 0.58, 1.2),
        10: (0.65, 0.73, 1.36),
        5: (1.0, 0.9, 1.57),
        1: (3.4, 1.8, 2.6),
    },
    ("smollm2", "anchored"): {
        20: (0.11, 0.18, 0.43),
        10: (0.16, 0.22, 0.5),
        5: (0.24, 0.27, 0.58),
        1: (0.78, 0.52, 1.07),
    },
}


def _naive(top: Floats) -> tuple[Floats, ...]:
    """Top-k-only estimates (the tail ignored): entropy, log Z_1.5, log Z_2.0."""
    p = np.exp(top)
    return (-(p * top).sum(axis=1), *(np.log((p ** (1 / t)).sum(axis=1)) for t in TEMPS))


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("k", [20, 10, 5, 1])
def test_accuracy_on_fixture_traces(model: str, k: int) -> None:
    lp, entropy, logz, vocab = _rows(model)
    top = lp[:, :k]
    exact = (entropy, logz[1.5], logz[2.0])
    mae: dict[str, list[float]] = {"naive": []}
    for rule in RULES:
        est = (
            estimate_entropy_batch(top, vocab, rule=rule),
            *(estimate_logz_batch(top, vocab, t, rule=rule) for t in TEMPS),
        )
        assert (est[0] >= 0).all() and (est[0] <= math.log(vocab) + 1e-12).all()
        for t, z in zip(TEMPS, est[1:], strict=True):
            assert (z >= 0).all() and (z <= (1 - 1 / t) * math.log(vocab) + 1e-12).all()
        mae[rule] = [float(np.abs(e - x).mean()) for e, x in zip(est, exact, strict=True)]
        assert mae[rule] < list(MAE_LIMITS[model, rule][k]), (rule, mae[rule])
    mae["naive"] = [float(np.abs(e - x).mean()) for e, x in zip(_naive(top), exact, strict=True)]
    for i in range(3):
        assert mae["anchored"][i] < mae["paper"][i]
        assert mae["anchored"][i] < mae["naive"][i]
        if k in (20, 5):
            assert mae["paper"][i] < mae["naive"][i]


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("k", [20, 5])
def test_censored_logprob_against_the_exact_tail_mean(model: str, k: int) -> None:
    lp, entropy, _, vocab = _rows(model)
    top = lp[:, :k]
    p = np.exp(top)
    mass = 1.0 - p.sum(axis=1)
    keep = mass > 1e-3  # the exact tail mean -(H - H_topk) / M is rounding noise below
    truth = (-(entropy + (p * top).sum(axis=1)) / np.maximum(mass, 1e-12))[keep]
    uniform = np.log(mass[keep] / (vocab - k))
    err = {
        rule: float(np.abs(censored_logprob_batch(top, vocab, rule=rule)[keep] - truth).mean())
        for rule in RULES
    }
    assert err["anchored"] < 1.8 < err["paper"] < float(np.abs(uniform - truth).mean())


# --------------------------------------------------------------------------- #
# Validation and the paper's lift correction
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("top", "vocab", "match"),
    [
        ([-0.1, float("nan")], 10, "NaN"),
        ([-0.1, float("-inf")], 10, "infinite"),
        ([-0.1, -9999.0], 10, "sentinel"),
        ([0.1, -3.0], 10, "> 0"),
        ([-2.0, -1.0], 10, "descending"),
        ([math.log(0.7), math.log(0.6)], 10, "more than 1"),
        ([-1.0, -2.0, -3.0], 2, "vocab_size"),
        ([-1.0], 0, "vocab_size"),
        ([-1.0], True, "integer"),
        ([-1.0], 10.0, "integer"),
        ([[-1.0]], 10, "1-dimensional"),
    ],
)
def test_invalid_inputs_raise_config_error(top: list[float], vocab: int, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        fit_tail(top, vocab)
    with pytest.raises(ValueError, match=match):
        estimate_entropy(top, vocab)


def test_other_invalid_arguments() -> None:
    top = [-0.5, -1.5]
    with pytest.raises(ConfigError, match="r2_min"):
        fit_tail(top, 10, r2_min=1.5)
    with pytest.raises(ConfigError, match="rule"):
        fit_tail(top, 10, rule="zipf")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="temperature"):
        estimate_logz(top, 10, 0.0)
    with pytest.raises(ConfigError, match="tail is for"):
        estimate_entropy(top, 11, tail=fit_tail(top, 10))
    with pytest.raises(ConfigError, match="outside the top k"):
        censored_logprob([-0.5, -1.0], 2)
    with pytest.raises(ConfigError, match="2-dimensional"):
        estimate_entropy_batch(top, 10)
    with pytest.raises(ConfigError, match="descending"):
        estimate_logz_batch([[-0.5, -1.5], [-1.5, -0.5]], 10, 1.5)


def test_topk_compensated_lift() -> None:
    assert topk_compensated_lift(1.0, 0.3, 0.1) == pytest.approx(1.0 + math.log(4.0))
    assert topk_compensated_lift(2.0, 0.0, 0.5) == 2.0
    vocab, k, mass = 262_144, 20, 0.3  # S_typical = M / (V - k): the constant log(1 + V - k)
    assert topk_compensated_lift(0.0, mass, mass / (vocab - k)) == pytest.approx(
        math.log(1 + vocab - k)
    )
    with pytest.raises(ConfigError, match="missing_mass"):
        topk_compensated_lift(1.0, -0.1, 0.1)
    with pytest.raises(ConfigError, match="s_typical"):
        topk_compensated_lift(1.0, 0.1, 0.0)
