"""The conformal threshold: conformal selection's cut-off on a reference batch, carried to
a stream as a fixed ``tau`` (``calibrate(..., procedure="conformal")``).

The promise is in expectation: each run draws a calibration set, calibrates, and then
picks one answer at random from the stream's answers the threshold shows; it is wrong
with probability equal to the threshold's selective risk, so the wrong picks over many
runs are a binomial count with the mean risk as its rate, compared with the one-sided
99.9% binomial interval at the target. The stream is a large fixed pool whose labels are
drawn from the model's error probabilities.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from guardrail import InsufficientDataError, calibrate
from guardrail._conformal_selection import conformal_threshold
from guardrail.evaluate import conformal_select

POOL = 200_000


def _model(
    rng: np.random.Generator, size: int, slope: float, shift: float
) -> tuple[np.ndarray, np.ndarray]:
    """Scores N(0, 1); the probability that each answer is wrong, sigmoid(shift - slope s)."""
    s = rng.normal(size=size)
    return s, 1.0 / (1.0 + np.exp(slope * s - shift))


def _runs(
    risk: float, n: int, slope: float, shift: float, runs: int, procedure: str
) -> tuple[int, int, float]:
    """Wrong random picks among shown stream answers, runs whose threshold's risk is above
    ``risk``, and the mean share of the stream shown."""
    rng = np.random.default_rng(1)
    pool, p_wrong = _model(rng, POOL, slope, shift)
    order = np.argsort(-pool)
    ranked, risk_at = pool[order], np.cumsum(p_wrong[order]) / np.arange(1, POOL + 1)
    wrong_picks, above, shown = 0, 0, 0.0
    for _ in range(runs):
        s, p = _model(rng, n, slope, shift)
        try:
            tau = calibrate(s, rng.random(n) >= p, risk=risk, delta=0.05,
                            procedure=procedure).tau  # type: ignore[arg-type]  # fmt: skip
        except InsufficientDataError:
            continue
        m = int(np.searchsorted(-ranked, -tau, side="right"))
        if m == 0:
            continue
        shown += m / POOL
        wrong_picks += bool(rng.random() < risk_at[m - 1])
        above += bool(risk_at[m - 1] > risk)
    return wrong_picks, above, shown / runs


@pytest.mark.parametrize(
    ("risk", "n", "slope", "shift"),
    [
        (0.2, 300, 1.5, 0.0),  # an informative score, half the answers wrong
        (0.3, 100, 2.0, 0.5),  # few labels, most answers wrong
        (0.1, 1000, 3.0, -1.0),  # a strong score, few wrong
    ],
)
def test_the_mean_risk_of_the_threshold_is_at_most_the_target(
    risk: float, n: int, slope: float, shift: float
) -> None:
    runs = 1500
    wrong, _above, shown = _runs(risk, n, slope, shift, runs, "conformal")
    assert wrong <= int(stats.binom.ppf(0.999, runs, risk))
    assert shown > 0.05  # it shows something: a threshold that shows nothing is trivially safe


def test_it_is_a_promise_in_expectation_not_with_high_probability() -> None:
    # about half the draws give a threshold above the target (offset by the rest), where
    # the default calibration keeps that share under delta, and shows less for it
    runs = 600
    _w, above, shown = _runs(0.2, 300, 1.5, 0.0, runs, "conformal")
    _w, above_hp, shown_hp = _runs(0.2, 300, 1.5, 0.0, runs, "fixed-sequence")
    assert above > 0.2 * runs
    assert above_hp <= int(stats.binom.ppf(0.999, runs, 0.05))
    assert shown > 1.5 * shown_hp


def test_the_threshold_is_the_cut_off_of_conformal_selection_on_the_reference() -> None:
    rng = np.random.default_rng(3)
    s = rng.normal(size=400)
    wrong = rng.random(400) < 1.0 / (1.0 + np.exp(2.0 * s))
    extra = rng.normal(size=250)
    for reference in (s, np.r_[s, extra]):
        picked = conformal_select(s, wrong, reference, 0.2)
        tau = conformal_threshold(s, wrong, 0.2, reference)
        assert picked.n_selected > 0
        assert np.array_equal(picked.selected, reference >= tau)
    cal = calibrate(s, ~wrong, risk=0.2, delta=0.05, procedure="conformal", reference=extra)
    assert cal.tau == conformal_threshold(s, wrong, 0.2, np.r_[s, extra])
    assert cal.extra == {"procedure": "conformal", "promise": "in expectation", "reference": 650}
    assert "In expectation" in cal.guarantee and "probability 1 - delta" in cal.guarantee


def test_a_target_nothing_meets_is_refused_with_the_reason() -> None:
    s = np.linspace(0.0, 1.0, 50)
    with pytest.raises(InsufficientDataError, match="conformal threshold shows nothing"):
        calibrate(s, np.zeros(50, dtype=bool), risk=0.2, delta=0.05, procedure="conformal")


def test_reference_scores_need_the_conformal_procedure() -> None:
    from guardrail import ConfigError

    with pytest.raises(ConfigError, match="procedure='conformal' only"):
        calibrate(np.ones(10), np.ones(10, dtype=bool), risk=0.2, delta=0.05, reference=[1.0])


def test_the_fitting_page_example() -> None:
    # the block of docs/fitting.md, run as written, prints the conformal threshold
    import contextlib
    import io

    from markdown_blocks import block

    code = block("docs/fitting.md", "from guardrail import calibrate").text
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/fitting.md", "exec"), {})
    rng = np.random.default_rng(0)
    scores = rng.normal(size=300)
    correct = rng.random(300) >= 1 / (1 + np.exp(3 * scores))
    cal = calibrate(scores, correct, risk=0.2, delta=0.05, procedure="conformal")
    hp = calibrate(scores, correct, risk=0.2, delta=0.05)
    assert cal.coverage > hp.coverage
    shown = f"shows {cal.coverage:.0%} of the calibration answers"
    assert out.getvalue() == f"tau {cal.tau:.2f}, {shown}\n"


def test_a_high_probability_refusal_says_what_the_promise_in_expectation_would_show() -> None:
    """Where the labels buy nothing with probability 1 - delta, the refusal ends with the
    share of the same calibration answers the conformal threshold shows; it says nothing
    of it where that shows nothing too, or where the conformal procedure itself refused."""
    rng = np.random.default_rng(3)
    s, p_wrong = _model(rng, 60, slope=1.5, shift=1.0)
    correct = rng.random(60) >= p_wrong
    cheap = calibrate(s, correct, risk=0.3, delta=0.05, procedure="conformal")
    with pytest.raises(InsufficientDataError) as refused:
        calibrate(s, correct, risk=0.3, delta=0.05)
    said = str(refused.value)
    assert cheap.coverage > 0.2
    assert said.endswith(f"these labels would show {cheap.coverage:.1%} of the calibration "
                         "answers.")  # fmt: skip
    assert "procedure='conformal'" in said and "on average over calibration draws" in said
    hopeless = np.zeros(60, dtype=bool)  # every answer wrong: neither promise shows any
    for procedure in ("fixed-sequence", "conformal"):
        with pytest.raises(InsufficientDataError) as refused:
            calibrate(s, hopeless, risk=0.3, delta=0.05, procedure=procedure)  # type: ignore[arg-type]
        assert "In expectation instead" not in str(refused.value)
