"""``liftguard fit`` and ``liftguard eval --certificate``: the interface the acceptance
check uses, on the committed fixture samples."""

from __future__ import annotations

import argparse
import io
import json
import math
import shlex
from pathlib import Path
from typing import Any

import pytest

from adapters._tracefiles._digest import trace_identity
from adapters.cli import main
from adapters.cli._progress import Progress
from guardrail import Certificate, ConfigError, FittedRule, State, TokenEvent
from guardrail._fit._state import RecordedSkeleton
from guardrail.fitting import FitOptions, fit_certificate
from guardrail.traces import BASELINES, read_traces

FIXTURES = Path(__file__).parents[1] / "fixtures"
GEMMA = str(FIXTURES / "traces_gemma3_sample.jsonl")
SMOLLM2 = str(FIXTURES / "traces_smollm2_sample.jsonl")
KEYS = {"auroc", "coverage_mean", "risk_violation_rate", "refused", "tokens_read_fraction",
        "tokens_read_median"}  # fmt: skip


def _fit(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> Path:
    out = tmp_path / "cert.json"
    args = ["fit", "--traces", GEMMA, "--out", str(out), "--risk", "0.95", "--delta", "0.2"]
    assert main([*args, *extra]) == 0
    capsys.readouterr()
    return out


def test_fit_writes_a_certificate_with_a_disjoint_split(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cert.json"
    code = main(["fit", "--traces", GEMMA, "--out", str(out), "--risk", "0.95", "--delta",
                 "0.2", "--max-tokens", "24"])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "wrote the certificate" in printed and "log-odds" in printed
    cert = Certificate.load(out)
    assert cert.statistic is not None and cert.statistic.group == "lift"
    assert cert.calibrated and cert.calibration is not None
    assert cert.calibration.score == "fitted[lift, answer]"
    assert cert.context.max_tokens == 24 and cert.skeleton.kind == "prompt_free"
    fit = cert.provenance["fit"]
    assert fit["n_fit"] == 20 and fit["n_calibration"] == 20 and fit["seed"] == 0
    assert fit["fit_ids_sha256"] != fit["calibration_ids_sha256"]
    assert cert.calibration.extra["split"] == fit
    assert "liftguard fit" in cert.provenance["command"]
    assert cert.provenance["traces_sha256"]
    mon = cert.monitor(skeleton=RecordedSkeleton([-1.0] * 30))
    assert isinstance(mon.rule, FittedRule)


def test_fit_calibrates_by_the_procedure_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cert.json"
    args = ["fit", "--traces", GEMMA, "--out", str(out), "--risk", "0.95", "--delta", "0.2",
            "--max-tokens", "24"]  # fmt: skip
    assert main([*args, "--procedure", "conformal", "--json"]) == 0
    cheap = json.loads(capsys.readouterr().out)
    cal = Certificate.load(out).calibration
    assert cal is not None and cal.extra["promise"] == "in expectation"
    assert cheap["in_expectation_coverage"] is None  # not said of itself
    # the default promise reports what this one showed, on the same calibration answers
    assert main([*args, "--json"]) == 0
    high = json.loads(capsys.readouterr().out)
    assert high["in_expectation_coverage"] == pytest.approx(cal.coverage) and cal.coverage > 0
    assert main(args) == 0
    line = f"  in expectation   {cal.coverage:.1%} shown with --procedure conformal ("
    assert line in capsys.readouterr().out
    assert cal.extra["split"]["n_calibration"] == 20
    assert cal.guarantee.startswith("In expectation over the calibration draw")
    with pytest.raises(ConfigError, match="procedure must be one of"):
        FitOptions(procedure="bonferroni")  # type: ignore[arg-type]


def test_fit_json_summary_and_the_token_limit_from_the_traces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "c.json"
    args = ["fit", "--traces", SMOLLM2, "--out", str(out), "--risk", "0.95", "--delta", "0.2"]
    assert main([*args, "--group", "api", "--form", "monotone", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["group"] == "api" and summary["form"] == "monotone"
    assert summary["max_tokens"] == 24 and summary["n_fit"] == 20
    cert = Certificate.load(out)
    assert "longest answer" in cert.provenance["note"]


def test_fit_writes_a_certificate_that_certifies_nothing_when_no_threshold_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A target the calibration half cannot meet still yields the fitted statistic (eval
    and calibrate recalibrate it), with a tau above every reachable score and a warning."""
    out = tmp_path / "c.json"
    code = main(["fit", "--traces", GEMMA, "--out", str(out), "--risk", "0.05", "--json"])
    captured = capsys.readouterr()
    assert code == 0
    warning = captured.err.strip().splitlines()
    assert len(warning) == 1 and warning[0].startswith("liftguard fit: warning: calibration at")
    assert "certifies nothing" in warning[0] and "liftguard calibrate --certificate" in warning[0]
    summary = json.loads(captured.out)
    assert summary["certifies_nothing"] is True and summary["coverage"] == 0.0
    cert = Certificate.load(out)
    stat = cert.statistic
    assert stat is not None and cert.calibration is not None
    assert cert.calibration.n_answered == 0 and "Certifies nothing" in cert.calibration.guarantee
    lo, hi = stat.score_bounds(cert.context.max_tokens or 1)
    assert lo < hi < cert.tau
    # the deployed monitor blocks every answer: a confident one included
    for value in (-0.01, -5.0):
        mon = cert.monitor(skeleton=RecordedSkeleton([-1.0] * 30))
        alts = (("a", value), *((f"b{j}", -9.0 - j) for j in range(5)))
        verdict = mon.update(TokenEvent("a", value, top_logprobs=alts, index=0))
        assert verdict.state is State.BLOCKED and verdict.t == 1  # at once
    # a reachable target keeps the ordinary record
    ok = _fit(tmp_path, capsys)
    assert Certificate.load(ok).calibration.n_answered > 0  # type: ignore[union-attr]


def test_fit_early_block_sets_margins_from_the_correct_fitting_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "c.json"
    nq = str(FIXTURES / "traces_gemma3_nq_sample.jsonl")  # 20 correct answers of 40
    # the flat tail: every margin one factor of the per-position one (the sqrt tail's are
    # at most that: the next test)
    args = ["fit", "--traces", nq, "--out", str(out), "--fit-fraction", "1",
            "--early-block-tail", "flat"]  # fmt: skip
    assert main([*args, "--early-block", "0.95"]) == 0
    printed = capsys.readouterr().out
    stat = Certificate.load(out).statistic
    assert stat is not None and stat.block_margins and min(stat.block_margins) >= 0.0
    assert f"margins for the first {len(stat.block_margins)} tokens" in printed
    early = stat.info["early_block"]
    assert early["quantile"] == 0.95 and early["positions"] == len(stat.block_margins)
    assert main([*args, "--early-block", "0.95", "--early-block-share", "none"]) == 0
    assert "widened" not in capsys.readouterr().out
    pointwise = Certificate.load(out).statistic
    assert pointwise is not None and "share" not in pointwise.info["early_block"]
    factors = {round(b / a, 9)
               for a, b in zip(pointwise.block_margins, stat.block_margins, strict=True) if a}
    assert len(factors) == 1  # one common factor, recorded where it widened the margins
    assert factors == {round(early.get("scale", 1.0), 9)}
    share = FitOptions().early_block_share
    assert early.get("share", share) == share and ("scale" in early) == (factors != {1.0})
    assert (f"widened until {share:g}" in printed) == ("scale" in early)
    assert main([*args, "--json"]) == 0  # by default, the 0.99 quantile: larger margins
    assert json.loads(capsys.readouterr().out)["early_block"]["quantile"] == 0.99
    default = Certificate.load(out).statistic
    assert default is not None and len(default.block_margins) == len(stat.block_margins)
    assert all(a >= b for a, b in zip(default.block_margins, stat.block_margins, strict=True))
    assert main([*args, "--json", "--early-block", "None"]) == 0  # only the exact blocks
    summary = json.loads(capsys.readouterr().out)
    assert summary["early_block"] is None and summary["margins_blocked"] is None
    assert Certificate.load(out).statistic.block_margins == ()  # type: ignore[union-attr]
    # too few correct answers reach the first token (the other sample: 4 of 20 fit here)
    assert main(["fit", "--traces", GEMMA, "--out", str(out)]) == 0
    assert "early block      none: too few correct fitting answers" in capsys.readouterr().out
    for bad in ("0", "1.5", "x"):
        with pytest.raises(SystemExit) as exc:
            main([*args, "--early-block", bad])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "--early-block" in err and "Traceback" not in err


def test_fit_early_block_tail_sqrt_lowers_the_margins_past_the_fitted_positions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, flat_out = tmp_path / "sqrt.json", tmp_path / "flat.json"
    nq = str(FIXTURES / "traces_gemma3_nq_sample.jsonl")  # 20 correct answers of 40
    args = ["fit", "--traces", nq, "--fit-fraction", "1", "--max-tokens", "256"]
    assert main([*args, "--out", str(flat_out), "--early-block-tail", "flat"]) == 0
    assert "c/sqrt(t)" not in capsys.readouterr().out
    assert main([*args, "--out", str(out)]) == 0  # the default
    assert "falling as c/sqrt(t) past the fitted positions" in capsys.readouterr().out
    flat, sqrt = Certificate.load(flat_out).statistic, Certificate.load(out).statistic
    assert flat is not None and sqrt is not None
    assert sqrt.info["early_block"]["tail"] == "sqrt" and "tail" not in flat.info["early_block"]
    assert len(sqrt.block_margins) == len(flat.block_margins) == 256
    assert all(s <= f for s, f in zip(sqrt.block_margins, flat.block_margins, strict=True))
    assert sqrt.block_margins[-1] < flat.block_margins[-1]
    with pytest.raises(SystemExit) as exc:
        main([*args, "--out", str(out), "--early-block-tail", "linear"])
    assert exc.value.code == 2 and "--early-block-tail" in capsys.readouterr().err


def test_fit_takes_an_explicit_feature_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = "logprob.min, lift.sum,length.count,entropy.count_below@1.5"
    out = _fit(tmp_path, capsys, "--features", names)
    stat = Certificate.load(out).statistic
    assert stat is not None
    assert [f.name for f in stat.features] == [
        "logprob.min", "lift.sum", "length.count", "entropy.count_below@1.5",
    ]  # fmt: skip
    assert stat.group == "lift"
    api = _fit(tmp_path, capsys, "--features", "logprob.lowest2,margin.first")
    assert Certificate.load(api).statistic.group == "api"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("features", "extra", "message"),
    [
        ("logprob.bogus", (), "--features: feature 'logprob.bogus': unknown aggregate"),
        ("logprob.min,logprob.min", (), "--features: a feature is named twice"),
        (" , ", (), "--features: expected comma-separated feature names"),
        ("logprob.mean", ("--form", "monotone"), "logprob.mean can move either way"),
    ],
)
def test_fit_refuses_a_bad_feature_list_in_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    features: str,
    extra: tuple[str, ...],
    message: str,
) -> None:
    out = tmp_path / "c.json"
    code = main(["fit", "--traces", GEMMA, "--out", str(out), "--features", features, *extra])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.startswith("liftguard fit: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_fit_refuses_features_the_traces_cannot_feed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded = tmp_path / "recorded.jsonl"
    lines = []
    for line in Path(GEMMA).read_text().splitlines():
        row = json.loads(line)
        for tok in row["tokens"]:
            tok["entropy"] = None
        lines.append(json.dumps(row))
    recorded.write_text("\n".join(lines) + "\n")
    code = main(["fit", "--traces", str(recorded), "--out", str(tmp_path / "c.json"),
                 "--features", "logprob.min,exact_entropy.max"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and "--features (its exact-entropy features)" in err


def _top3(tmp_path: Path) -> Path:
    out = tmp_path / "top3.jsonl"
    rows = []
    for line in Path(GEMMA).read_text().splitlines():
        row = json.loads(line)
        row["top_k"] = 3
        for tok in row["tokens"]:
            tok["top"] = tok["top"][:3]
        rows.append(json.dumps(row))
    out.write_text("\n".join(rows) + "\n")
    return out


def test_fit_reads_no_more_alternatives_than_the_traces_carry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    top3 = str(_top3(tmp_path))
    out = tmp_path / "c.json"
    base = ["fit", "--traces", top3, "--out", str(out), "--risk", "0.95", "--delta", "0.2"]
    assert main(base) == 0
    printed = capsys.readouterr().out
    assert "note: the traces carry 3 alternatives per token: the statistic reads 3" in printed
    cert = Certificate.load(out)
    assert cert.statistic is not None and cert.statistic.alternatives == 3
    assert "3 alternatives" in cert.provenance["note"]
    assert main([*base, "--alternatives", "5"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "liftguard fit: error: --alternatives 5: the traces carry 3 per token"
    # features that read no alternatives need none
    assert main([*base, "--features", "logprob.min,lift.sum,length.count", "--json"]) == 0
    assert Certificate.load(out).statistic.alternatives == 5  # type: ignore[union-attr]


def test_eval_refuses_a_certificate_that_reads_more_alternatives_than_it_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert = _fit(tmp_path, capsys)  # reads 5
    args = ["eval", "--traces", GEMMA, "--certificate", str(cert), "--risk", "0.95",
            "--delta", "0.2", "--splits", "3", "--json"]  # fmt: skip
    for extra, source in ((["--top-k", "3"], "--top-k 3 keeps 3"),
                          ([], "the traces carry 3")):  # fmt: skip
        traces = args if extra else [*args[:2], str(_top3(tmp_path)), *args[3:]]
        assert main([*traces, *extra]) == 0
        captured = capsys.readouterr()
        got = json.loads(captured.out)["methods"]["certificate"]
        assert got["all_refused"] and got["refusal_reason"] == (
            f"the certificate's statistic reads 5 alternatives per token; {source}"
        )
        assert "Not evaluated" in captured.err and "certificate (the certificate" in captured.err


def test_eval_with_a_certificate_reports_every_baseline_and_the_certificate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert = _fit(tmp_path, capsys)
    args = ["eval", "--traces", GEMMA, "--certificate", str(cert), "--risk", "0.95",
            "--delta", "0.2", "--splits", "5", "--seed", "7", "--json"]  # fmt: skip
    assert main(args) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert set(report["methods"]) == {"lift", "lift_paper", *BASELINES, "certificate"}
    for r in report["methods"].values():
        assert r.keys() >= KEYS
    assert report["certificate"]["group"] == "lift"
    assert "not held out" in captured.err  # the traces the certificate was made on
    n = len(Path(GEMMA).read_text(encoding="utf-8").splitlines())
    assert f"fitted on {round(n * 0.5)} of its {n} traces" in captured.err  # default: half
    assert "--fit-fraction 1" in captured.err
    assert "liftguard eval: replaying" not in captured.err  # no progress off a terminal
    # --top-k 5: the certificate reads 5 alternatives, so it scores the same
    assert main([*args, "--top-k", "5"]) == 0
    top5 = json.loads(capsys.readouterr().out)
    assert top5["top_k"] == 5
    assert top5["methods"]["certificate"] == report["methods"]["certificate"]


def test_eval_certificate_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lift = tmp_path / "lift.json"
    args = ["calibrate", "--traces", GEMMA, "--risk", "0.95", "--delta", "0.2", "--out",
            str(lift)]  # fmt: skip
    assert main(args) == 0
    capsys.readouterr()
    code = main(["eval", "--traces", GEMMA, "--certificate", str(lift), "--risk", "0.9"])
    assert code == 1 and "has no fitted statistic" in capsys.readouterr().err
    cert = _fit(tmp_path, capsys, "--model-id", "my-gemma")
    code = main(["eval", "--traces", SMOLLM2, "--certificate", str(cert), "--risk", "0.95",
                 "--delta", "0.2", "--splits", "2"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and "certificates are per model" in err and len(err.splitlines()) == 1
    code = main(["eval", "--traces", GEMMA, "--certificate", str(cert), "--risk", "0.95",
                 "--delta", "0.2", "--splits", "2"])  # fmt: skip
    assert code == 0
    assert "the certificate is for model 'my-gemma'" in capsys.readouterr().err


def test_progress_draws_only_on_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    quiet = io.StringIO()
    p = Progress("work", quiet)
    p(1, 2)
    p.close()
    assert quiet.getvalue() == "" and not p.enabled
    tty = Tty()
    p = Progress("work", tty)
    p(2, 2)
    p.close()
    assert "work 2/2" in tty.getvalue() and tty.getvalue().endswith("\r")


def test_eval_bootstrap_gives_the_certificates_paired_differences(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert = _fit(tmp_path, capsys)
    args = ["eval", "--traces", GEMMA, "--certificate", str(cert), "--risk", "0.95",
            "--delta", "0.2", "--splits", "3", "--seed", "7"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*args, "--json", "--bootstrap", "20"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["bootstrap"]["replicates"] == 20 and report["bootstrap"]["level"] == 0.95
    assert report["bootstrap"]["reference"] == "certificate"
    for name, r in report["methods"].items():
        boot = r.pop("bootstrap")
        assert r == plain["methods"][name]  # the point estimates are unchanged
        lo, hi = boot["coverage_mean"]
        assert 0.0 <= lo <= hi <= 1.0
        if name == "certificate":
            assert "certificate_minus" not in boot
        else:
            d_lo, d_hi = boot["certificate_minus"]["coverage_mean"]
            assert -1.0 <= d_lo <= d_hi <= 1.0
    assert main([*args, "--bootstrap", "20"]) == 0
    captured = capsys.readouterr()
    text = captured.out
    assert "certificate minus each method, 95% intervals over 20 resamples" in text
    # where a baseline certifies more, the note names a best one and the interval
    cov = {n: r["coverage_mean"] for n, r in plain["methods"].items()}
    top = max(c for n, c in cov.items() if n != "certificate")
    notes = [line for line in captured.err.splitlines()
             if "certifies more than the certificate here" in line]  # fmt: skip
    assert len(notes) == (top > cov["certificate"])
    for line in notes:
        named = line.split("note: ", 1)[1].split(" ", 1)[0]
        assert cov[named] == top and f"(certificate minus {named}: [" in line
    assert sum(line.lstrip().startswith(tuple(BASELINES)) and "coverage [" in line
               for line in text.splitlines()) == len(BASELINES)  # fmt: skip


def test_eval_bootstrap_needs_enough_resamples(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["eval", "--traces", GEMMA, "--risk", "0.95", "--bootstrap", "5"])
    err = capsys.readouterr().err
    assert code == 2 and "at least 20 resamples" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--traces", GEMMA, "--risk", "0.95", "--bootstrap", "-1"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--bootstrap: expected an integer >= 0" in err


def test_eval_replays_answers_longer_than_the_certificates_limit_with_their_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A certificate whose context holds answers to 3 tokens, evaluated on answers of up
    to 6 (generated with a larger limit): replayed with the context's limit, every longer
    answer would be blocked as past it; eval replays them as deployed with their own limit
    and says so."""
    from guardrail.evaluate import fitted_method
    from guardrail.traces import read_traces

    cert_path = _fit(tmp_path, capsys, "--max-tokens", "3")
    cert = Certificate.load(cert_path)
    traces = read_traces(GEMMA)
    longest = max(t.n_tokens for t in traces)
    assert cert.context.max_tokens == 3 < longest
    args = ["eval", "--traces", GEMMA, "--certificate", str(cert_path), "--risk", "0.95",
            "--delta", "0.2", "--splits", "3", "--json"]  # fmt: skip
    assert main(args) == 0
    captured = capsys.readouterr()
    over = sum(t.n_tokens > 3 for t in traces)
    assert f"{over} of {len(traces)} answers are longer than the certificate's token limit 3" in (
        captured.err
    )
    assert f"replayed as deployed with max_tokens={longest}" in captured.err
    as_context = fitted_method(traces, cert)
    as_deployed = fitted_method(traces, cert, max_tokens=longest)
    longer = [i for i, t in enumerate(traces) if t.n_tokens > 3]
    assert all(as_context.decision[i] == float("-inf") for i in longer)
    assert any(as_deployed.decision[i] > float("-inf") for i in longer)
    report = json.loads(captured.out)
    assert report["methods"]["certificate"]["auroc"] > 0.5


def test_fit_selects_the_statistic_by_cross_validated_coverage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cert.json"
    args = ["fit", "--traces", GEMMA, "--out", str(out), "--group", "api", "--skeleton",
            "uniform", "--risk", "0.8", "--delta", "0.3", "--fit-fraction", "1"]  # fmt: skip
    assert main([*args, "--select", "coverage", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    table = summary["selection"]
    names = [row["candidate"] for row in table]
    statistics = ["group api, l2 1", "group api, l2 10", "group api, l2 100", "logprob.sum",
                  "logprob.min", "logprob.mean"]  # fmt: skip
    blocks = ["exact early blocks", "early block 0.99", "early block 0.95", "early block 0.9"]
    assert names == [f"{s}; {b}" for s in statistics for b in blocks]
    (chosen,) = [row for row in table if row["chosen"]]
    assert chosen["cv_coverage"] == max(row["cv_coverage"] for row in table)
    stat = Certificate.load(out).statistic
    assert stat is not None and stat.info["selection"] == table
    label, block = chosen["candidate"].split("; ")
    if not label.startswith("group"):  # a single score: the statistic reads it
        assert [f.name for f in stat.features] == [label]
    quantile = None if block == blocks[0] else float(block.rsplit(" ", 1)[1])
    assert (summary["early_block"] or {}).get("quantile") == quantile
    # the summary names the next best candidate and how far behind it is
    from adapters.cli._fit import selection_line

    line = selection_line(table, 0.8)
    behind = [r for r in table if r["cv_coverage"] < chosen["cv_coverage"]]
    second = max(behind, key=lambda r: r["cv_coverage"])
    gap = 100 * (chosen["cv_coverage"] - second["cv_coverage"])
    assert f"next best {second['candidate']}: " in line and f"{gap:.2f} points behind" in line
    level = [r for r in table if r["cv_coverage"] == chosen["cv_coverage"]]
    assert (f"{len(level)} candidates tie on coverage" in line) == (len(level) > 1)
    # the monotone form offers only the single scores that move one way
    assert main([*args, "--select", "coverage", "--form", "monotone", "--json"]) == 0
    names = [row["candidate"] for row in json.loads(capsys.readouterr().out)["selection"]]
    assert not any(n.startswith("logprob.mean") for n in names)
    assert any(n.startswith("logprob.min") for n in names)
    # an --early-block given is kept: only the statistics are chosen
    assert main([*args, "--select", "coverage", "--early-block", "0.95", "--json"]) == 0
    given = json.loads(capsys.readouterr().out)
    assert [row["candidate"] for row in given["selection"]] == [
        f"{s}; early block 0.95" for s in statistics
    ]
    assert given["early_block"]["quantile"] == 0.95
    # a risk no candidate meets on the fitting answers: the summary says how it chose
    strict = [a if a != "0.8" else "0.01" for a in args]
    assert main([*strict, "--select", "coverage", "--early-block", "none"]) == 0
    text = capsys.readouterr().out
    assert "no candidate certifies anything at this risk: the choice fell to" in text
    # without --select nothing is chosen and nothing is recorded
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["selection"] is None


def test_eval_says_when_a_method_certifies_more_than_the_certificate() -> None:
    from adapters.cli._eval_report import trailing_note

    args = argparse.Namespace(risk=0.7)

    def result(coverage: float) -> dict[str, Any]:
        return {"coverage_mean": coverage, "all_refused": coverage == 0.0}

    ahead = {"certificate": result(0.60), "lift": result(0.62), "nll": result(0.61),
             "pmi": result(math.nan)}  # fmt: skip
    scores = ("lift", "nll")
    note = trailing_note(args, ahead, {}, scores)
    assert note.startswith("lift certifies more than the certificate here: 62.0% of the "
                           "answers against 60.0% at risk 0.7")  # fmt: skip
    assert "--bootstrap 200" in note and "liftguard calibrate --score lift" in note
    tie = {"lift": {"certificate_minus": {"coverage_mean": [-0.03, 0.01]}}}
    assert "[-3.0, +1.0] pts, a tie within the noise" in trailing_note(args, ahead, tie, scores)
    real = {"lift": {"certificate_minus": {"coverage_mean": [-0.05, -0.01]}}}
    assert "a real difference" in trailing_note(args, ahead, real, scores)
    # a method no single-score certificate can be made of: no command to suggest
    assert "liftguard calibrate" not in trailing_note(args, ahead, {}, ("nll",))
    # the certificate at least as good as every method, or no certificate: nothing to say
    level = {"certificate": result(0.62), "lift": result(0.62)}
    assert trailing_note(args, level, {}, scores) == ""
    assert trailing_note(args, {"lift": result(0.62)}, {}, scores) == ""


def test_long_answers_add_length_robust_and_scoped_candidates() -> None:
    """Selection's extra candidates for long answers: length-robust aggregates where the
    median answer is long, and a scope's features where the answers use it (real code
    answers: the code block and its numbers; short factoid answers: neither)."""
    from guardrail._fit._choice import long_answer_sets
    from guardrail._fit._statistic import moves_one_way
    from guardrail.fitting import preset_features
    from guardrail.traces import read_traces

    feats = preset_features("lift")
    code = list(read_traces(FIXTURES / "traces_qwen_mbpp_sample.jsonl"))
    sets = dict(long_answer_sets(feats, code, "answer"))
    assert list(sets) == ["+ means and shares below", "+ code scope", "+ number scope"]
    for extra in sets.values():
        assert extra[: len(feats)] == feats and len(set(extra)) == len(extra)
    assert {f.name for f in sets["+ code scope"]} >= {"code:logprob.min", "code:lift.mean"}
    monotone = dict(long_answer_sets(preset_features("lift", "monotone"), code, "monotone"))
    assert all(moves_one_way(f) for fs in monotone.values() for f in fs)
    assert long_answer_sets(feats, list(read_traces(GEMMA)), "answer") == []


def test_the_command_writes_what_the_function_returns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cert.json"
    args = ["fit", "--traces", GEMMA, "--out", str(out), "--risk", "0.95", "--delta", "0.2"]
    assert main(args) == 0
    capsys.readouterr()
    provenance = {**trace_identity(GEMMA), "command": shlex.join(["liftguard", *args])}
    options = FitOptions(risk=0.95, delta=0.2)
    cert, _ = fit_certificate(read_traces(GEMMA), options, source=GEMMA, provenance=provenance)
    assert cert.to_json() == out.read_text(encoding="utf-8")
