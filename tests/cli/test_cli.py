from __future__ import annotations

import json
import math
import shlex
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from adapters.cli import main
from adapters.cli._common import oracle_coverage
from guardrail import Certificate

FIXTURES = Path(__file__).parents[1] / "fixtures"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "traces"


def test_oracle_coverage_by_hand() -> None:
    scores = np.array([5.0, 4.0, 3.0, 2.0, 1.0, -np.inf])
    correct = np.array([True, False, True, False, False, True])
    # prefixes: risk 0, 1/2, 1/3, 2/4, 3/5 -> the largest prefix with risk <= 0.5 has 4
    assert oracle_coverage(scores, correct, 0.5) == (4 / 6, 2.0)
    assert oracle_coverage(scores, correct, 0.0) == (1 / 6, 5.0)
    assert oracle_coverage(np.array([1.0]), np.array([False]), 0.5) == (0.0, float("inf"))


def test_calibrate_on_fixture_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cal.json"
    code = main(
        [
            "calibrate",
            "--traces",
            str(FIXTURES / "traces_gemma3_sample.jsonl"),
            "--risk",
            "0.9",
            "--delta",
            "0.1",
            "--score",
            "min_logprob",
            "--cal-fraction",
            "0.75",
            "--out",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert code == 0
    assert "oracle coverage" in text and "tau" in text
    record = json.loads(out.read_text())
    assert record["method"] == "ltt" and record["n"] == 30 and record["risk"] == 0.9
    assert record["n_errors"] <= record["n_answered"]
    assert record["extra"]["test"]["n"] == 10


def test_calibrate_with_the_simultaneous_procedure_records_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cal.json"
    path = str(FIXTURES / "traces_gemma3_sample.jsonl")
    args = ["calibrate", "--traces", path, "--risk", "0.9", "--delta", "0.1"]
    code = main([*args, "--score", "min_logprob", "--procedure", "simultaneous", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    record = json.loads(out.read_text())
    assert record["extra"]["procedure"] == "simultaneous"
    assert 0 < record["extra"]["level"] < 0.1 and record["start"] == 0
    with pytest.raises(SystemExit):
        main([*args, "--procedure", "bonferroni"])
    assert "invalid choice: 'bonferroni'" in capsys.readouterr().err


def test_calibrate_with_the_conformal_procedure_names_its_promise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cal.json"
    path = str(FIXTURES / "traces_gemma3_sample.jsonl")
    args = ["calibrate", "--traces", path, "--risk", "0.9", "--delta", "0.1"]
    code = main([*args, "--score", "min_logprob", "--procedure", "conformal", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert "in expectation (procedure conformal; delta unused)" in capsys.readouterr().out
    record = json.loads(out.read_text())
    assert record["extra"]["procedure"] == "conformal"
    assert record["extra"]["promise"] == "in expectation"
    assert record["guarantee"].startswith("In expectation over the calibration draw")


def test_calibrate_lift_policy_and_refusal(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(FIXTURES / "traces_gemma3_sample.jsonl")
    code = main(["calibrate", "--traces", path, "--risk", "0.05", "--skeleton", "temperature"])
    err = capsys.readouterr().err
    assert code == 1
    assert "needs at least 59 answered" in err
    assert "calibration labels would pass" in err or "would not pass" in err


def test_a_high_probability_calibration_shows_what_the_promise_in_expectation_would(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Beside a high-probability calibration, the summary gives the share of the same
    calibration answers ``--procedure conformal`` shows (the other promise's own run
    gives the figure compared); a conformal run does not repeat it about itself."""
    mbpp = str(Path(__file__).parents[2] / "benchmarks" / "traces" / "mbpp_qwen25coder.jsonl.xz")
    args = ["calibrate", "--traces", mbpp, "--score", "nll", "--risk", "0.4"]
    assert main([*args, "--json"]) == 0
    high = json.loads(capsys.readouterr().out)
    assert main([*args, "--procedure", "conformal", "--json"]) == 0
    cheap = json.loads(capsys.readouterr().out)
    assert cheap["in_expectation_coverage"] is None
    assert high["in_expectation_coverage"] == pytest.approx(cheap["coverage"])
    assert cheap["coverage"] > high["coverage"] > 0
    assert main(args) == 0
    line = f"  in expectation   {cheap['coverage']:.1%} shown with --procedure conformal ("
    assert line in capsys.readouterr().out


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared traces not available")
def test_shipped_certificate_is_reproduced_by_its_documented_command(tmp_path: Path) -> None:
    """guardrail/data/README.md names the command that made the shipped certificate."""
    data = Path(__file__).parents[2] / "guardrail" / "data"
    shipped = Certificate.load(data / "smollm2_certificate.json")
    out = tmp_path / "cert.json"
    args = ["calibrate", "--traces", str(SHARED / "triviaqa_smollm2.jsonl"), "--risk", "0.8"]
    args += ["--delta", "0.05", "--cal-fraction", "1.0", "--aggregate", "min", "--clip", "12"]
    args += ["--context", str(data / "smollm2_context.json")]
    args += ["--model-id", "smollm2-135m-instruct-q4_1", "--out", str(out)]
    assert main(args) == 0
    made = Certificate.load(out)
    assert made.provenance["command"] == shlex.join(["liftguard", *args])
    assert made.provenance["traces_sha256"] == shipped.provenance["traces_sha256"]
    assert replace(made, provenance={}) == replace(shipped, provenance={})


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared traces not available")
def test_shipped_fitted_certificate_is_reproduced_by_its_documented_command(
    tmp_path: Path,
) -> None:
    """guardrail/data/README.md names the command that made the shipped fitted certificate."""
    data = Path(__file__).parents[2] / "guardrail" / "data"
    shipped = Certificate.load(data / "smollm2_fitted_certificate.json")
    out = tmp_path / "cert.json"
    args = ["fit", "--traces", str(SHARED / "triviaqa_smollm2.jsonl")]
    args += ["--context", str(data / "smollm2_context.json")]
    args += ["--model-id", "smollm2-135m-instruct-q4_1", "--early-block-share", "none"]
    args += ["--early-block-tail", "flat", "--scopes", "none", "--feature-clamps", "none"]
    assert main([*args, "--out", str(out)]) == 0
    made = Certificate.load(out)
    assert made.statistic is not None and shipped.statistic is not None
    assert made.provenance["traces_sha256"] == shipped.provenance["traces_sha256"]
    assert made.provenance["fit"] == shipped.provenance["fit"]
    # the same certificate up to floating-point rounding (it differs by CPU and BLAS build)
    _same_json(
        json.loads(replace(made, provenance={}).to_json()),
        json.loads(replace(shipped, provenance={}).to_json()),
    )


def _same_json(got: object, want: object, where: str = "certificate") -> None:
    if isinstance(got, float) or isinstance(want, float):
        assert isinstance(got, int | float) and isinstance(want, int | float), where
        assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12), (where, got, want)
    elif isinstance(got, dict) and isinstance(want, dict):
        assert got.keys() == want.keys(), where
        for key in got:
            _same_json(got[key], want[key], f"{where}.{key}")
    elif isinstance(got, list) and isinstance(want, list):
        assert len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            _same_json(a, b, f"{where}[{i}]")
    else:
        assert got == want, (where, got, want)


def test_calibrate_rejects_bad_trace_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n", encoding="utf-8")
    assert main(["calibrate", "--traces", str(bad), "--risk", "0.5"]) == 1
    assert f"{bad}:1: invalid JSON" in capsys.readouterr().err


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared traces not available")
@pytest.mark.parametrize("model", ["gemma3", "smollm2"])
def test_calibrate_on_shared_traces(model: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(SHARED / f"triviaqa_{model}.jsonl")
    code = main(["calibrate", "--traces", path, "--risk", "0.8", "--score", "min_logprob"])
    text = capsys.readouterr().out
    assert code == 0 and "test split       n=1000" in text


def test_calibrate_repeats_summary(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(FIXTURES / "traces_gemma3_sample.jsonl")
    args = ["calibrate", "--traces", path, "--risk", "0.9", "--delta", "0.2", "--score", "nll"]
    code = main([*args, "--repeats", "4", "--cal-fraction", "0.5"])
    text = capsys.readouterr().out
    assert code == 0
    assert "splits 4" in text and "share of oracle" in text and "risk violations" in text
    # a target no split can meet: every split refuses, and the summary says so
    code = main(
        ["calibrate", "--traces", path, "--risk", "0.05", "--score", "nll", "--repeats", "2"]
    )
    assert code == 0 and "refused (too little data)  2 of 2" in capsys.readouterr().out


def test_calibrate_json_is_the_record_it_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(FIXTURES / "traces_gemma3_sample.jsonl")
    out = tmp_path / "cal.json"
    args = ["calibrate", "--traces", path, "--risk", "0.9", "--delta", "0.1", "--score",
            "min_logprob", "--cal-fraction", "0.75"]  # fmt: skip
    assert main([*args, "--out", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)  # stdout is one JSON object, nothing else
    assert printed.pop("out") == str(out) and printed.pop("score_name") == "min_logprob"
    assert 0 < printed.pop("in_expectation_coverage") <= 1  # beside the record, not in it
    assert printed == json.loads(out.read_text())
    assert printed["extra"]["test"]["n"] == 10
    # the same calibration as the printed summary
    assert main(args) == 0
    assert f"tau              {printed['tau']:.4f}" in capsys.readouterr().out


def test_calibrate_repeats_json_matches_the_summary(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(FIXTURES / "traces_gemma3_sample.jsonl")
    args = ["calibrate", "--traces", path, "--risk", "0.9", "--delta", "0.2", "--score", "nll",
            "--repeats", "4"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    text = capsys.readouterr().out
    assert got["score_name"] == "nll" and got["splits"] == 4
    assert f"refused (too little data)  {got['refused']} of 4" in text
    assert f"test coverage (mean)       {got['coverage_mean']:.1%}" in text
    assert f"risk violations            {got['violations']} of 4" in text
    assert 0.0 <= got["coverage_mean"] <= got["oracle_coverage_mean"] <= 1.0


def test_calibrate_writes_a_certificate_with_context_and_provenance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = FIXTURES / "traces_gemma3_sample.jsonl"
    context = tmp_path / "ctx.json"
    context.write_text(json.dumps({"system_prompt": "Q:", "temperature": 0.0, "max_tokens": 24}))
    out = tmp_path / "cert.json"
    base = ["calibrate", "--traces", str(traces), "--risk", "0.9", "--delta", "0.2"]
    assert main([*base, "--cal-fraction", "1.0", "--context", str(context), "--out", str(out)]) == 0
    cert = Certificate.load(out)
    assert cert.context.system_prompt == "Q:" and cert.context.max_tokens == 24
    assert cert.model.model_id == "gemma3-270m-q4_k_m" and cert.skeleton.kind == "uniform"
    assert cert.calibration is not None and cert.tau == cert.calibration.tau
    assert len(cert.provenance["traces_sha256"]) == 64
    assert cert.monitor().tau == cert.tau
    # a bad context file fails before any work, naming the file and the field
    context.write_text(json.dumps({"temprature": 0.0}))
    capsys.readouterr()
    assert main([*base, "--context", str(context), "--out", str(tmp_path / "x.json")]) == 1
    err = capsys.readouterr().err
    assert "ctx.json: context: unknown field(s) 'temprature'" in err
    assert not (tmp_path / "x.json").exists()
    # a baseline score is a threshold on whole answers: its record, not a certificate
    nll = tmp_path / "nll.json"
    assert main([*base, "--cal-fraction", "1.0", "--score", "nll", "--out", str(nll)]) == 0
    assert "format" not in json.loads(nll.read_text())


SUMMARY_TERMS = (
    "score", "method", "target risk", "delta", "calibration", "answered", "errors", "tau",
    "coverage (cal)", "empirical risk", "Clopper-Pearson upper", "sub-gamma", "Gamma MLE",
    "model check", "KS p", "AD p", "inflation", "mean budget", "PAC-Bayes upper bound",
    "kappa", "I(correct; score)", "answer rate", "vacuous for risk >= 0.5", "test split",
    "oracle coverage", "of oracle", "guarantee",
)  # fmt: skip
"""Every term the calibrate summary prints, in the order it prints them."""


def test_every_term_of_the_calibrate_summary_is_explained(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = str(FIXTURES / "traces_gemma3_nq_sample.jsonl")
    args = ["calibrate", "--traces", path, "--risk", "0.9", "--delta", "0.2"]
    assert main([*args, "--skeleton", "temperature"]) == 0
    out = capsys.readouterr().out
    page, anchor = out.splitlines()[-1].split()[-1].split("#")  # the summary's pointer
    assert (page, anchor) == ("docs/fitting.md", "reading-the-calibrate-summary")
    docs = (Path(__file__).parents[2] / page).read_text(encoding="utf-8")
    start = docs.index("\n### Reading the calibrate summary\n")
    section = docs[start : docs.index("\n## ", start)]
    assert "inflation x" in out and "PAC-Bayes" in out  # the fit's lines are printed
    position = 0
    for term in SUMMARY_TERMS:
        position = out.index(term, position)  # printed, in this order
        assert term in section, term
    # the two levels of the fixed sequence, and why the first is half of delta
    assert "half of delta" in section and "Wiens" in section
