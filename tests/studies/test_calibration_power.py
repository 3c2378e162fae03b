"""The calibration-power study: its page is what its saved run gives, and its ceiling is
the in-sample ceiling the page says."""

from __future__ import annotations

import json

import numpy as np

from studies import calibration_power as study


def test_the_page_is_the_saved_run() -> None:
    saved = json.loads(study.SAVED.read_text(encoding="utf-8"))
    assert saved["generated_by"] == study.COMMAND
    written = study.OUT.read_text(encoding="utf-8")
    assert study.COMMAND in written.splitlines()[0]
    assert written == study.render(saved), f"stale: run `{study.COMMAND} --docs-only`"
    cells = {(r["data"], r["score"], r["risk"], r["n"], r["procedure"]) for r in saved["rows"]}
    per_data = len(study.SCORES) * len(study.RISKS) * len(study.PROCEDURES)
    sizes = len(study.REAL_SIZES) + len(study.SIM_SIZES)
    assert len(cells) == len(saved["rows"]) == len(study.TRACES) * per_data * sizes
    # every high-probability procedure keeps its promise in every simulated cell (a
    # one-sided 99.9% binomial bound at delta), and the in-expectation one its mean
    from scipy import stats

    bound = int(stats.binom.ppf(0.999, study.DRAWS, study.DELTA))
    for r in saved["rows"]:
        if r["procedure"] in study.HIGH_PROBABILITY and "violations" in r:  # simulated
            assert r["violations"] <= bound, r
        if "wrong_shown_se" in r:
            assert r["wrong_shown"] - 3.1 * r["wrong_shown_se"] <= r["risk"], r


def test_the_ceiling_is_the_largest_top_share_within_the_risk() -> None:
    scores = np.array([5.0, 4.0, 3.0, 2.0, 1.0])
    errors = np.array([0.0, 1.0, 0.0, 0.0, 1.0])
    assert study.ceiling(scores, errors, 0.25) == 0.8  # top 4: one error in four
    assert study.ceiling(scores, errors, 0.2) == 0.2  # only the top answer alone
    assert study.ceiling(scores, np.ones(5), 0.5) == 0.0


def test_the_best_single_test_is_within_delta_at_the_boundary_and_full_when_errorless() -> None:
    at_risk = np.full(1000, 0.2)  # every top share is wrong at exactly the target rate
    assert 0.0 < study.best_single_test(at_risk, 300, 0.2) <= study.DELTA
    errorless = np.zeros(1000)  # with 1,000 labels, the top 99% passes with no error seen
    assert study.best_single_test(errorless, 1000, 0.2) == 0.99
    # one level-0.05 test on 14 answers can pass risk 0.2 with no error, not on 13
    assert study.best_single_test(np.zeros(100), 14, 0.2) == 0.99
    assert study.best_single_test(np.zeros(100), 13, 0.2) == 0.0
    curve = np.linspace(0.05, 0.4, 1000)  # more labels never lower the bound by much
    assert study.best_single_test(curve, 1000, 0.2) > study.best_single_test(curve, 300, 0.2)


def test_the_certificate_scores_each_answer_with_a_fit_that_never_saw_it() -> None:
    """``out_of_fold``: each fold's scores are the critical scores of the certificate
    fitted on the other folds, replayed through its monitor, as a deployed certificate
    scores new answers (40 committed MBPP answers, 2 folds)."""
    import lzma

    from guardrail.evaluate import fitted_method
    from guardrail.fitting import FitOptions, fit_certificate
    from guardrail.traces import parse_trace_lines

    with lzma.open(study.TRACES["MBPP"], "rt", encoding="utf-8") as f:
        traces = list(parse_trace_lines(next(f) for _ in range(40)))
    got = study.out_of_fold(traces, folds=2, seed=3)
    first, second = np.array_split(np.random.default_rng(3).permutation(40), 2)
    options = FitOptions(fit_fraction=1.0, max_tokens=study.MAX_TOKENS)
    cert, _ = fit_certificate([traces[i] for i in second], options)
    alone = fitted_method([traces[i] for i in first], cert, max_tokens=study.MAX_TOKENS)
    assert np.array_equal(got[first], alone.decision)
    assert np.isfinite(got).all()


def test_the_results_page_quotes_the_certificate_rows_of_the_saved_run() -> None:
    """The prose under the table reads the default certificate's cells as saved."""
    saved = json.loads(study.SAVED.read_text(encoding="utf-8"))
    page = (study.ROOT / "docs" / "results" / "index.md").read_text(encoding="utf-8")
    prose = " ".join(page.split("- The default certificate, with probability 0.95")[1]
                     .split("\n- ")[0].split())  # fmt: skip

    def row(data: str, risk: float, n: int, score: str = "certificate") -> dict[str, object]:
        return next(r for r in saved["rows"] if r["data"] == data and r["risk"] == risk
                    and r["n"] == n and r["score"] == score
                    and r["procedure"] == "fixed-sequence")  # fmt: skip

    for data, risk in (("GSM8K", 0.3), ("GSM8K", 0.2), ("MBPP", 0.3)):
        r = row(data, risk, 300)
        cov, top = float(r["coverage"]), float(r["ceiling"])  # type: ignore[arg-type]
        assert f"{cov:.1%}" in prose and f"{cov / top:.0%}" in prose, (data, risk)
    for risk in (0.3, 0.2):
        r = row("GSM8K (simulated)", risk, 1000)
        share = float(r["coverage"]) / float(r["ceiling"])  # type: ignore[arg-type]
        assert f"{share:.0%}" in prose
    assert row("GSM8K", 0.3, 300)["refused"] == 0
    for data, risk in (("GSM8K", 0.3), ("GSM8K", 0.2), ("MBPP", 0.3)):  # nll beside it
        assert f"{float(row(data, risk, 300, 'nll')['coverage']):.1%}" in prose  # type: ignore[arg-type]
