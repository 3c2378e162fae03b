from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from adapters.cli import main
from guardrail import ConfigError, InsufficientDataError, StreamPolicy
from guardrail._calibration import procedure_threshold
from guardrail._evaluate import (
    MethodScores,
    auroc,
    baseline_method,
    bootstrap_intervals,
    evaluate_methods,
    lift_method,
)
from guardrail._policy import shown_at
from guardrail.traces import BASELINES, read_traces

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
    assert set(report) == {"n", "risk", "delta", "procedure", "splits", "top_k", "methods"}
    assert report["n"] == 40 and report["splits"] == 3 and report["top_k"] == 20
    assert report["procedure"] == "fixed-sequence"
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
    from guardrail.stats import support_clip

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
    """The claim of the evaluation results (docs/results/index.md): on the Gemma traces at
    risk 0.7 the default certificate answers more than the sequence log-likelihood and
    ranks at least as well."""
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


def _gaussian_method(name: str, scores: np.ndarray) -> MethodScores:
    return MethodScores(name, scores, scores)


def test_bootstrap_is_paired_deterministic_and_sees_a_real_difference() -> None:
    rng = np.random.default_rng(3)
    y = rng.random(400) < 0.4
    good = y + rng.normal(size=400)  # AUROC ~ 0.76
    noise = rng.normal(size=400)  # AUROC ~ 0.5
    methods = [_gaussian_method("good", good), _gaussian_method("twin", good.copy()),
               _gaussian_method("noise", noise)]  # fmt: skip
    kw = {"risk": 0.5, "delta": 0.1, "splits": 3, "replicates": 60, "seed": 5}
    got = bootstrap_intervals(methods, y, reference="good", **kw)
    assert got == bootstrap_intervals(methods, y, reference="good", **kw)  # seeded
    assert set(got) == {"good", "twin", "noise"} and "good_minus" not in got["good"]
    # the same scores under another name: every resample and split agrees exactly
    assert got["twin"]["good_minus"] == {"auroc": [0.0, 0.0], "coverage_mean": [0.0, 0.0]}
    assert got["twin"]["auroc"] == got["good"]["auroc"]
    # a real difference is one the resamples do not explain
    lo, hi = got["noise"]["good_minus"]["auroc"]
    assert 0.1 < lo < hi < 0.45
    assert got["noise"]["good_minus"]["coverage_mean"][0] > 0.0
    lo, hi = got["good"]["auroc"]
    assert lo < auroc(good, y) < hi and lo > 0.6
    for entry in got.values():
        c_lo, c_hi = entry["coverage_mean"]
        assert 0.0 <= c_lo <= c_hi <= 1.0
    # without a reference: each method's own intervals only
    alone = bootstrap_intervals(methods, y, **kw)
    assert all(set(e) == {"auroc", "coverage_mean"} for e in alone.values())
    assert alone["good"] == {k: got["good"][k] for k in ("auroc", "coverage_mean")}


def test_bootstrap_auroc_interval_covers_the_population_value() -> None:
    """Seeded simulation: scores N(y, 1), whose population AUROC is Phi(1/sqrt 2). The
    95% interval may miss it in about 5% of draws (a percentile bootstrap at n=300
    misses a little more): count misses against a binomial bound at 7.5%, and check
    the width against the normal approximation of AUROC's standard error."""
    truth = stats.norm.cdf(1 / np.sqrt(2))
    rng = np.random.default_rng(11)
    sims, n, misses, widths, ses = 100, 300, 0, [], []
    for i in range(sims):
        y = rng.random(n) < 0.5
        s = y + rng.normal(size=n)
        got = bootstrap_intervals([_gaussian_method("s", s)], y, risk=0.5, delta=0.2,
                                  splits=1, replicates=100, seed=i)["s"]["auroc"]  # fmt: skip
        misses += not (got[0] <= truth <= got[1])
        widths.append(got[1] - got[0])
        a, n1, n0 = truth, y.sum(), (~y).sum()  # Hanley & McNeil (1982)
        q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
        ses.append(np.sqrt((a * (1 - a) + (n1 - 1) * (q1 - a * a) + (n0 - 1) * (q2 - a * a))
                           / (n1 * n0)))  # fmt: skip
    assert misses <= stats.binom.ppf(0.999, sims, 0.075)
    ratio = np.mean(widths) / (2 * 1.96 * np.mean(ses))
    assert 0.8 < ratio < 1.2


def test_bootstrap_rejects_bad_arguments() -> None:
    m = [_gaussian_method("a", np.arange(10.0))]
    y = np.arange(10) % 2 == 0
    kw = {"risk": 0.5, "delta": 0.2, "splits": 1}
    with pytest.raises(ConfigError, match="replicates"):
        bootstrap_intervals(m, y, replicates=1, **kw)
    with pytest.raises(ConfigError, match="reference 'b'"):
        bootstrap_intervals(m, y, reference="b", **kw)
    with pytest.raises(ConfigError, match="distinct names"):
        bootstrap_intervals(m + m, y, **kw)
    with pytest.raises(ConfigError, match="level"):
        bootstrap_intervals(m, y, level=1.0, **kw)


def test_method_take_resamples_every_part() -> None:
    traces = read_traces(FIXTURES / "traces_gemma3_sample.jsonl")
    lift = lift_method(traces, StreamPolicy(delta=0.3), "uniform")
    idx = np.array([3, 3, 0, 7], dtype=np.int64)
    sub = lift.take(idx)
    assert sub.lifts is not None and lift.lifts is not None
    np.testing.assert_array_equal(sub.decision, lift.decision[idx])
    np.testing.assert_array_equal(sub.final, lift.final[idx])
    assert [x is lift.lifts[i] for x, i in zip(sub.lifts, idx, strict=True)] == [True] * 4
    assert sub.policy is lift.policy and sub.paths is None


def test_eval_cli_bootstrap_without_a_certificate_gives_each_methods_intervals(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = str(FIXTURES / "traces_gemma3_sample.jsonl")
    args = ["eval", "--traces", path, "--risk", "0.95", "--delta", "0.2", "--splits", "2",
            "--bootstrap", "20"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["bootstrap"]["reference"] is None
    for r in report["methods"].values():
        assert set(r["bootstrap"]) == {"auroc", "coverage_mean"}
        for lo, hi in r["bootstrap"].values():
            assert 0.0 <= lo <= hi <= 1.0
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "95% intervals over 20 resamples of the answers:" in text
    assert "minus each method" not in text
    assert sum(" AUROC [" in line and "coverage [" in line for line in text.splitlines()) == len(
        report["methods"]
    )


def test_every_method_is_calibrated_by_the_procedure_asked_for() -> None:
    # the conformal threshold on each calibration half: the mean test coverage is the one
    # calibrating each split directly gives, and more than the default shows
    from guardrail._conformal_selection import conformal_threshold

    rng = np.random.default_rng(4)
    n = 400
    score = rng.normal(size=n)
    correct = rng.random(n) >= 1 / (1 + np.exp(2 * score))
    m = MethodScores("s", decision=score, final=score)
    cheap = evaluate_methods([m], correct, risk=0.2, delta=0.05, splits=10, seed=3,
                             procedure="conformal")["s"]  # fmt: skip
    strict = evaluate_methods([m], correct, risk=0.2, delta=0.05, splits=10, seed=3)["s"]
    perm_rng = np.random.default_rng(3)
    direct = []
    for perm in [perm_rng.permutation(n) for _ in range(10)]:
        cal, test = perm[: n // 2], perm[n // 2 :]
        direct.append((score[test] >= conformal_threshold(score[cal], ~correct[cal], 0.2)).mean())
    assert cheap["coverage_mean"] == pytest.approx(np.mean(direct))
    assert cheap["coverage_mean"] > strict["coverage_mean"] > 0
    intervals = bootstrap_intervals([m], correct, risk=0.2, delta=0.05, splits=3,
                                    replicates=5, procedure="conformal")  # fmt: skip
    lo, hi = intervals["s"]["coverage_mean"]
    assert 0 < lo <= hi


def test_the_wrong_share_counts_every_split_and_nothing_shown_as_none_wrong() -> None:
    """``wrong_share_mean`` is the test selective risk averaged over every split, a split
    that refuses or shows nothing counting 0 (what the in-expectation promise bounds);
    ``risk_mean`` averages over the splits that show something only."""
    rng = np.random.default_rng(4)
    ok = rng.random(120) < 0.6
    score = ok + rng.normal(scale=1.0, size=ok.size)
    m = MethodScores("s", score, score)
    got = evaluate_methods([m], ok, risk=0.3, delta=0.2, splits=40, seed=3,
                           procedure="conformal")["s"]  # fmt: skip
    perm_rng, shares = np.random.default_rng(3), []
    for _ in range(40):
        perm = perm_rng.permutation(ok.size)
        cal, test = perm[:60], perm[60:]
        try:
            tau = procedure_threshold(score[cal], ~ok[cal], 0.3, 0.2, "conformal")[0]
        except InsufficientDataError:  # refused: nothing shown
            shares.append(0.0)
            continue
        shown = score[test] >= tau
        shares.append(float((shown & ~ok[test]).sum() / shown.sum()) if shown.any() else 0.0)
    assert got["wrong_share_mean"] == pytest.approx(np.mean(shares))
    assert 0 < got["wrong_share_mean"] <= got["risk_mean"]  # some splits show nothing wrong
    never = evaluate_methods([m], ok, risk=0.001, delta=0.01, splits=5, seed=3)["s"]
    assert never["refused"] == 5 and never["wrong_share_mean"] == 0.0
    assert np.isnan(never["risk_mean"])
