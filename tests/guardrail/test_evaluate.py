from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from guardrail import BASELINES, StreamPolicy, read_traces
from guardrail._evaluate import auroc, baseline_method, evaluate_methods, lift_method
from guardrail._policy import shown_at
from guardrail.cli import main

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_auroc_matches_mann_whitney() -> None:
    rng = np.random.default_rng(0)
    s = rng.normal(size=300)
    y = rng.random(300) < 1 / (1 + np.exp(-2 * s))
    u = stats.mannwhitneyu(s[y], s[~y]).statistic
    assert auroc(s, y) == pytest.approx(u / (y.sum() * (~y).sum()))
    assert auroc([1.0, 2.0, 3.0], [False, False, True]) == 1.0
    assert auroc([1.0, 1.0], [False, True]) == 0.5
    assert auroc([-np.inf, 0.0], [False, True]) == 1.0
    assert np.isnan(auroc([1.0, 2.0], [True, True]))


def test_evaluate_methods_on_fixture() -> None:
    traces = read_traces(FIXTURES / "traces_gemma3_sample.jsonl")
    correct = np.array([bool(t.correct) for t in traces])
    methods = [
        lift_method(traces, StreamPolicy(delta=0.3), "uniform"),
        baseline_method(traces, "nll"),
    ]
    res = evaluate_methods(methods, correct, risk=0.95, delta=0.2, splits=5, seed=1)
    assert set(res) == {"lift", "nll"}
    for r in res.values():
        assert 0.0 <= r["coverage_mean"] <= 1.0
        assert 0.0 < r["tokens_read_fraction"] <= 1.0
        assert 0.0 <= r["risk_violation_rate"] <= 1.0
    assert res["nll"]["tokens_read_fraction"] == 1.0
    assert res["nll"]["tokens_read_median"] == 1.0
    # shares are k/n for the fixture's answer lengths: the median is one of them or a midpoint
    assert 0.0 < res["lift"]["tokens_read_median"] <= 1.0
    # nll ranks the fixture's answers better than chance
    assert res["nll"]["auroc"] > 0.6


def test_a_lift_method_shows_what_its_policy_shows() -> None:
    """The test split is judged by the deployed policy (shown_at); at grid thresholds that is
    the critical-threshold rule calibration tests, since the answer set is monotone."""
    traces = read_traces(FIXTURES / "traces_gemma3_sample.jsonl")
    lift = lift_method(traces, StreamPolicy(delta=0.3, aggregate="lowest"), "uniform")
    nll = baseline_method(traces, "nll")
    idx = np.arange(len(traces), dtype=np.int64)[::2]
    for tau in (0.01, 0.5, 2.0, 7.5, 11.0):
        assert lift.lifts is not None and lift.policy is not None
        want = shown_at(lift.policy, [lift.lifts[i] for i in idx], [tau])[:, 0]
        np.testing.assert_array_equal(lift.shown(idx, tau), want)
        np.testing.assert_array_equal(want, lift.decision[idx] >= tau)
        np.testing.assert_array_equal(nll.shown(idx, -tau), nll.decision[idx] >= -tau)


def test_eval_cli_prints_the_documented_json(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(FIXTURES / "traces_gemma3_sample.jsonl")
    args = ["eval", "--traces", path, "--risk", "0.95", "--delta", "0.2", "--splits", "3"]
    code = main([*args, "--seed", "2", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"n", "risk", "delta", "splits", "top_k", "methods"}
    assert report["n"] == 40 and report["splits"] == 3 and report["top_k"] == 20
    assert set(report["methods"]) == {"lift", "lift_paper", *BASELINES}
    for r in report["methods"].values():
        assert {
            "coverage_mean",
            "risk_mean",
            "risk_violation_rate",
            "auroc",
            "tokens_read_fraction",
            "tokens_read_median",
        } <= set(r)


def test_eval_default_clip_is_the_support_clip_for_the_uniform_skeleton(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Leaving --clip out equals passing log(0.8 |V|); another clip changes the result."""
    from guardrail import support_clip

    path = str(FIXTURES / "traces_gemma3_sample.jsonl")
    args = ["eval", "--traces", path, "--risk", "0.95", "--delta", "0.2", "--splits", "3", "--json"]
    reports = []
    for extra in ([], ["--clip", repr(support_clip(262144))], ["--clip", "12"]):
        assert main([*args, *extra]) == 0
        reports.append(json.loads(capsys.readouterr().out)["methods"]["lift"])
    assert reports[0] == reports[1]
    assert reports[0]["auroc"] != reports[2]["auroc"]


SHARED_GEMMA = (
    Path(__file__).resolve().parents[3] / "shared" / "data" / "traces" / "triviaqa_gemma3.jsonl"
)


@pytest.mark.skipif(not SHARED_GEMMA.exists(), reason="shared trace data not available")
def test_default_certificate_beats_the_best_baseline_on_gemma(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The README's claim: on the Gemma traces at risk 0.7 the default certificate answers
    more than the sequence log-likelihood and ranks at least as well."""
    args = ["eval", "--traces", str(SHARED_GEMMA), "--risk", "0.7", "--splits", "20", "--json"]
    assert main(args) == 0
    res = json.loads(capsys.readouterr().out)["methods"]
    assert res["lift"]["coverage_mean"] > res["nll"]["coverage_mean"] > 0.3
    assert res["lift"]["auroc"] >= res["nll"]["auroc"]
    assert res["lift"]["risk_violation_rate"] <= 0.1


def test_eval_plot_writes_figures_and_report(tmp_path: Path) -> None:
    path = str(FIXTURES / "traces_gemma3_sample.jsonl")
    out = tmp_path / "report"
    args = ["eval", "--traces", path, "--risk", "0.95", "--delta", "0.2", "--splits", "2"]
    assert main([*args, "--plot", str(out)]) == 0
    report = (out / "report.md").read_text()
    for name in ("risk_coverage.png", "score_distribution.png", "tokens_read.png"):
        png = (out / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
        assert f"]({name})" in report
    assert "| lift |" in report
