"""``liftguard calibrate --certificate``: a fitted statistic held fixed, its threshold
calibrated on other answers (the committed fixture samples: fitted on Gemma 3's NQ-Open
sample, calibrated on its TriviaQA sample)."""

from __future__ import annotations

import json
import lzma
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from adapters.cli import main
from adapters.cli._fit_args import TRAFFIC_EARLY_BLOCK
from adapters.cli._recalibrate import _blocked_read_line
from guardrail import Certificate
from guardrail._fit._replay import calibrate_fitted, margin_cost
from guardrail.fitting import block_margins, critical_score, replay_fitted, stop_at
from guardrail.traces import read_traces
from guardrail.traces._read import file_sha256

ROOT = Path(__file__).parents[2]
FIXTURES = Path(__file__).parents[1] / "fixtures"
NQ = str(FIXTURES / "traces_gemma3_nq_sample.jsonl")
TQ = str(FIXTURES / "traces_gemma3_sample.jsonl")


def _mbpp_halves(tmp_path: Path) -> tuple[Path, Path]:
    """The first 60 of the committed MBPP answers to fit on and the next 60, as files."""
    committed = ROOT / "benchmarks" / "traces" / "mbpp_qwen25coder.jsonl.xz"
    with lzma.open(committed, "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(120)]
    fit_on, other = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    fit_on.write_text("".join(lines[:60]), encoding="utf-8")
    other.write_text("".join(lines[60:]), encoding="utf-8")
    return fit_on, other


@pytest.fixture
def fitted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path / "fitted.json"
    args = ["fit", "--traces", NQ, "--out", str(out), "--group", "api", "--risk", "0.99"]
    assert main([*args, "--delta", "0.3"]) == 0
    capsys.readouterr()
    return out


def test_the_threshold_is_calibrated_on_the_other_answers_and_the_rest_is_kept(
    fitted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "recalibrated.json"
    args = ["calibrate", "--traces", TQ, "--certificate", str(fitted), "--risk", "0.7"]
    assert main([*args, "--delta", "0.3", "--out", str(out)]) == 0
    assert f"wrote the certificate {out}" in capsys.readouterr().out
    before, after = Certificate.load(fitted), Certificate.load(out)
    # the same rule, model and context; a new tau from exactly the library's procedure
    assert after.statistic == before.statistic and after.policy == before.policy
    assert (after.model, after.context, after.skeleton) == (
        before.model, before.context, before.skeleton,
    )  # fmt: skip
    assert before.statistic is not None
    cal, _ = calibrate_fitted(
        before.statistic, read_traces(TQ), policy=before.policy, risk=0.7, delta=0.3,
        max_tokens=before.context.max_tokens,
    )  # fmt: skip
    assert after.calibration is not None
    assert after.tau == cal.tau != before.tau
    assert replace(after.calibration, extra={}) == replace(cal, extra={})
    assert after.calibration.extra["split"]["fitted_on"] == Path(NQ).name
    assert after.provenance["traces"] == Path(TQ).name
    assert after.provenance["fitted_on_sha256"] == before.provenance["traces_sha256"]
    assert after.provenance["fit"] == before.provenance["fit"]
    assert after.calibration.extra["margins_blocked"] is None  # no margins: nothing to count


def test_the_summary_says_what_the_margins_cost_on_these_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fitted, out = tmp_path / "all.json", tmp_path / "calibrated.json"
    fit = ["fit", "--traces", NQ, "--group", "api", "--fit-fraction", "1", "--early-block", "0.2"]
    assert main([*fit, "--out", str(fitted)]) == 0
    capsys.readouterr()
    stat = Certificate.load(fitted).statistic
    assert stat is not None and stat.block_margins
    args = ["calibrate", "--traces", TQ, "--certificate", str(fitted), "--risk", "0.8",
            "--delta", "0.3", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    after = Certificate.load(out)
    assert after.calibration is not None
    got = after.calibration.extra["margins_blocked"]
    # counted as margin_cost counts it, on replays without the margins
    traces = read_traces(TQ)
    limit = after.context.max_tokens
    plain = [replay_fitted(replace(stat, block_margins=()), t, max_tokens=limit) for t in traces]
    want = margin_cost(plain, stat.block_margins, [bool(t.correct) for t in traces],
                       after.policy, after.tau)  # fmt: skip
    assert (got["blocked"], got["shown_without_margins"]) == want and want[0] > 0
    assert f"margins blocked  {want[0]} of the {want[1]} correct calibration answers" in printed


def test_json_prints_the_summary_of_what_it_wrote(
    fitted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "recalibrated.json"
    args = ["calibrate", "--traces", TQ, "--certificate", str(fitted), "--risk", "0.7",
            "--delta", "0.3", "--out", str(out), "--json"]  # fmt: skip
    assert main(args) == 0
    got = json.loads(capsys.readouterr().out)
    after = Certificate.load(out)
    assert after.calibration is not None
    assert got["out"] == str(out) and got["tau"] == after.tau
    assert got["coverage"] == after.calibration.coverage
    assert got["margins_blocked"] == after.calibration.extra["margins_blocked"]
    assert got["n_calibration"] == len(read_traces(TQ))


def test_refusals_are_one_line(
    fitted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "x.json")
    base = ["calibrate", "--certificate", str(fitted), "--risk", "0.9", "--out", out]
    # the answers the statistic was fitted on cannot calibrate it
    assert main([*base, "--traces", NQ]) == 1
    err = capsys.readouterr().err
    assert "these are the traces the certificate's statistic was fitted on" in err
    assert len(err.strip().splitlines()) == 1
    # the rule comes from the certificate
    assert main([*base, "--traces", TQ, "--skeleton", "temperature"]) == 2
    assert "drop --skeleton" in capsys.readouterr().err
    assert main(["calibrate", "--certificate", str(fitted), "--risk", "0.9", "--traces", TQ]) == 2
    assert "needs --out" in capsys.readouterr().err
    # a single-score certificate has no statistic to hold fixed
    single = tmp_path / "single.json"
    replace(Certificate.load(fitted), statistic=None, tau=5.0, calibration=None).save(single)
    base[2] = str(single)
    assert main([*base, "--traces", TQ]) == 1
    assert "has no fitted statistic" in capsys.readouterr().err
    assert not Path(out).exists()


def test_fit_on_all_answers_then_calibrate_on_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``fit --fit-fraction 1`` fits on every answer, certifies nothing until ``calibrate
    --certificate`` sets tau on other answers, and says so."""
    fitted, half = tmp_path / "all.json", tmp_path / "half.json"
    base = ["fit", "--traces", NQ, "--group", "api", "--risk", "0.99", "--delta", "0.3"]
    assert main([*base, "--out", str(fitted), "--fit-fraction", "1", "--json"]) == 0
    captured = capsys.readouterr()
    note = captured.err.strip().splitlines()
    assert len(note) == 1 and note[0].startswith("liftguard fit: note: the statistic is fitted")
    assert f"liftguard calibrate --certificate {fitted}" in note[0]
    summary = json.loads(captured.out)
    n = len(read_traces(NQ))
    assert summary["n_fit"] == n and summary["n_calibration"] == 0
    assert summary["certifies_nothing"] is True and summary["calibration_auroc"] is None
    cert = Certificate.load(fitted)
    assert cert.calibration is not None and cert.calibration.n == 0
    assert "not calibrated" in cert.calibration.guarantee
    assert cert.statistic is not None
    assert cert.tau > cert.statistic.score_bounds(cert.context.max_tokens or 1)[1]
    # the statistic differs from a half fit: it saw every answer
    assert main([*base, "--out", str(half)]) == 0
    capsys.readouterr()
    assert Certificate.load(half).statistic != cert.statistic
    # calibrated elsewhere, it certifies
    out = tmp_path / "calibrated.json"
    args = ["calibrate", "--traces", TQ, "--certificate", str(fitted), "--risk", "0.7"]
    assert main([*args, "--delta", "0.3", "--out", str(out)]) == 0
    capsys.readouterr()
    after = Certificate.load(out)
    assert after.statistic == cert.statistic and after.calibration is not None
    assert after.tau < cert.tau and after.calibration.n_answered > 0
    # the file it was fitted on is refused, as for any fitted certificate
    args = ["calibrate", "--traces", NQ, "--certificate", str(fitted), "--risk", "0.99"]
    assert main([*args, "--delta", "0.3", "--out", str(tmp_path / "x.json")]) == 1
    assert "fitted on" in capsys.readouterr().err


def test_fit_fraction_edges_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small = tmp_path / "small.jsonl"
    small.write_text("".join(Path(NQ).read_text().splitlines(keepends=True)[:19]))
    out = str(tmp_path / "c.json")
    assert main(["fit", "--traces", str(small), "--out", out, "--fit-fraction", "1"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "liftguard fit: error: 19 traces: the fit needs >= 20"
    assert main(["fit", "--traces", NQ, "--out", out, "--fit-fraction", "0.99"]) == 1
    err = capsys.readouterr().err.strip()
    assert "both parts need >= 20 (or --fit-fraction 1" in err and "\n" not in err


def _unlabelled(src: str, dst: Path, edit: Any = None) -> Path:
    """``src``'s traces with their labels dropped (recorded traffic), ``edit`` applied to
    each record."""
    rows = [json.loads(line) for line in Path(src).read_text(encoding="utf-8").splitlines()]
    for row in rows:
        row.pop("correct", None)
        if edit:
            edit(row)
    dst.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return dst


def test_margins_from_traffic_are_every_answers_rises_and_calibration_replays_them(
    fitted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traffic = _unlabelled(NQ, tmp_path / "traffic.jsonl")
    out = tmp_path / "out.json"
    args = ["calibrate", "--traces", TQ, "--certificate", str(fitted), "--risk", "0.7",
            "--delta", "0.3", "--out", str(out), "--margins-from", str(traffic),
            "--early-block", "0.5"]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    before, after = Certificate.load(fitted), Certificate.load(out)
    assert before.statistic is not None and after.statistic is not None
    limit = before.context.max_tokens
    want = block_margins(before.statistic, read_traces(NQ), 0.5, max_tokens=limit,
                         answers="all")  # fmt: skip
    assert want and after.statistic.block_margins == want
    assert replace(after.statistic, block_margins=(), info={}) == replace(
        before.statistic, block_margins=(), info={}
    )  # only the margins (and their record) changed
    record = after.statistic.info["early_block"]
    assert record["traces"] == "traffic.jsonl" and record["answers"] == "all"
    assert record["quantile"] == 0.5 and record["positions"] == len(want)
    # tau is the one calibration gives the rule with these margins
    cal, _ = calibrate_fitted(after.statistic, read_traces(TQ), policy=after.policy, risk=0.7,
                              delta=0.3, max_tokens=limit)  # fmt: skip
    assert after.tau == cal.tau
    assert f"margins          from 40 answers of traffic.jsonl (labels not read): the first " \
        f"{len(want)} tokens, quantile 0.5" in printed  # fmt: skip
    # the default quantile, and the JSON summary's record of it
    assert main([*args[:-2], "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["margins_from"]
    assert got["quantile"] == TRAFFIC_EARLY_BLOCK and got["traces_sha256"] == file_sha256(traffic)


def test_margins_from_traffic_carry_on_to_the_token_limit_with_a_tail(
    fitted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traffic = _unlabelled(NQ, tmp_path / "traffic.jsonl")
    out = tmp_path / "out.json"
    base = ["calibrate", "--traces", TQ, "--certificate", str(fitted), "--risk", "0.7",
            "--delta", "0.3", "--margins-from", str(traffic), "--early-block", "0.5"]  # fmt: skip
    before = Certificate.load(fitted)
    assert before.statistic is not None
    limit = before.context.max_tokens
    assert limit is not None
    for tail in ("flat", "sqrt"):
        assert main([*base, "--early-block-tail", tail, "--out", str(out)]) == 0
        capsys.readouterr()
        after = Certificate.load(out)
        assert after.statistic is not None
        want = block_margins(before.statistic, read_traces(NQ), 0.5, max_tokens=limit,
                             answers="all", positions=limit, tail=tail)  # fmt: skip
        assert after.statistic.block_margins == want and len(want) == limit
        assert after.statistic.info["early_block"]["tail"] == tail
    # a tail without --margins-from is a usage error
    assert main(["calibrate", "--traces", TQ, "--certificate", str(fitted), "--risk", "0.7",
                 "--early-block-tail", "sqrt", "--out", str(out)]) == 2  # fmt: skip
    assert "--early-block-tail" in capsys.readouterr().err


def test_margins_from_calibration_answers_are_refused(
    fitted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.json"
    base = ["calibrate", "--traces", TQ, "--certificate", str(fitted), "--risk", "0.7",
            "--out", str(out), "--margins-from"]  # fmt: skip
    assert main([*base, TQ]) == 1
    err = capsys.readouterr().err
    assert "these are the calibration traces" in err and len(err.strip().splitlines()) == 1
    # another file holding calibration answers (the same ids, labels dropped)
    copy = _unlabelled(TQ, tmp_path / "copy.jsonl")
    assert main([*base, str(copy)]) == 1
    assert "40 of its answers have the id of a calibration answer" in capsys.readouterr().err
    # usage: --margins-from needs --certificate, --early-block needs --margins-from
    assert main(["calibrate", "--traces", TQ, "--risk", "0.7", "--margins-from", NQ]) == 2
    assert "give --certificate" in capsys.readouterr().err
    assert main([*base[:-1], "--early-block", "0.9"]) == 2
    assert "--early-block sets the quantile" in capsys.readouterr().err
    # too few answers to set a margin: refused, not the certificate's margins dropped
    few = tmp_path / "few.jsonl"
    few.write_text("".join(Path(NQ).read_text(encoding="utf-8").splitlines(True)[:5]))
    assert main([*base, str(few)]) == 1
    err = capsys.readouterr().err
    assert "its 5 answers are too few to set a margin" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_calibrate_and_eval_report_one_auroc_for_one_statistic_on_one_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both rank answers by the statistic's final score (not calibration's critical score,
    which early verdicts also move: on these long answers the two rank differently), so
    they print the same AUROC. Fitted on 60 of the committed MBPP answers, calibrated and
    evaluated on the next 60."""
    fit_on, other = _mbpp_halves(tmp_path)
    cert = tmp_path / "fitted.json"
    args = ["--risk", "0.9", "--delta", "0.3"]
    fit = ["fit", "--traces", str(fit_on), "--group", "api", "--fit-fraction", "1"]
    assert main([*fit, "--out", str(cert), *args]) == 0
    capsys.readouterr()
    args += ["--traces", str(other), "--certificate", str(cert)]
    assert main(["calibrate", *args, "--out", str(tmp_path / "c.json"), "--json"]) == 0
    calibrated = json.loads(capsys.readouterr().out)["calibration_auroc"]
    assert main(["eval", *args, "--splits", "2", "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out)["methods"]["certificate"]["auroc"]
    assert calibrated == evaluated


def test_calibrating_on_answers_far_longer_than_the_fitting_ones_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fitted on the shortest half of the committed MBPP answers (about 23 tokens), the
    statistic reads GSM8K's (about 285) far outside its fitting range: ``calibrate`` and
    ``eval`` say so (that it extrapolates, for a statistic fitted without clamps), and stay
    quiet on the other short MBPP answers."""
    traces = ROOT / "benchmarks" / "traces"
    mbpp = lzma.decompress((traces / "mbpp_qwen25coder.jsonl.xz").read_bytes()).decode()
    lines = mbpp.splitlines()
    order = sorted(range(len(lines)), key=lambda i: (len(json.loads(lines[i])["tokens"]), i))
    short = [lines[i] for i in order[: len(lines) // 2]]
    gsm8k = lzma.decompress(sorted(traces.glob("gsm8k_qwen25coder/*.xz"))[0].read_bytes())
    files = {"fit": short[0::2], "short": short[1::2],
             "long": gsm8k.decode().splitlines()[:120]}  # fmt: skip
    for name, part in files.items():
        (tmp_path / f"{name}.jsonl").write_text("\n".join(part) + "\n", encoding="utf-8")
    fitted = tmp_path / "fitted.json"
    args = ["fit", "--traces", str(tmp_path / "fit.jsonl"), "--group", "api", "--fit-fraction",
            "1", "--early-block", "None", "--out", str(fitted)]  # fmt: skip
    assert main(args) == 0
    capsys.readouterr()
    calibrate = ["calibrate", "--certificate", str(fitted), "--risk", "0.9"]
    short = tmp_path / "short_cal.json"
    assert main([*calibrate, "--traces", str(tmp_path / "short.jsonl"), "--json",
                 "--out", str(short)]) == 0  # fmt: skip
    got = capsys.readouterr()
    assert not json.loads(got.out)["extrapolation"]["far"] and "extrapolates" not in got.err
    # the long answers run past the fitting answers' token limit as well: nothing is shown
    # and the calibration refuses, after the warning that says why the ranking is suspect
    main([*calibrate, "--traces", str(tmp_path / "long.jsonl"), "--out", str(short)])
    err = capsys.readouterr().err
    assert "liftguard calibrate: warning: these answers lie outside what the statistic was " \
           "fitted on: their length.count lies a median of" in err  # fmt: skip
    assert "holds it at its fitting range's edge" in err and "Traceback" not in err
    eval_args = ["eval", "--certificate", str(fitted), "--risk", "0.9", "--splits", "2"]
    main([*eval_args, "--traces", str(tmp_path / "long.jsonl")])
    assert "liftguard eval: warning: these answers lie outside" in capsys.readouterr().err
    assert main([*args, "--feature-clamps", "none"]) == 0  # as fitted before clamps
    capsys.readouterr()
    main([*calibrate, "--traces", str(tmp_path / "long.jsonl"), "--out", str(short)])
    assert "liftguard calibrate: warning: the statistic extrapolates on these answers: " \
           "their length.count lies a median of" in capsys.readouterr().err  # fmt: skip
    assert main([*calibrate, "--traces", str(tmp_path / "short.jsonl"), "--json",
                 "--out", str(short)]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["extrapolation"]["clamped"] is False


def test_calibrate_says_when_a_single_score_ranks_these_answers_better(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The statistic's AUROC on the calibration labels beside the best single score's; a
    warning (and what to do) where the single score ranks better. Fitted on 60 of the
    committed MBPP answers, calibrated on the next 60, then the same certificate with its
    weights turned round (a statistic that ranks the answers backwards)."""
    from guardrail.evaluate import ranking_check
    from guardrail.fitting import replay_fitted

    fit_on, other = _mbpp_halves(tmp_path)
    cert = tmp_path / "fitted.json"
    fit = ["fit", "--traces", str(fit_on), "--group", "api", "--fit-fraction", "1",
           "--early-block", "None", "--risk", "0.9", "--delta", "0.3"]  # fmt: skip
    assert main([*fit, "--out", str(cert)]) == 0
    capsys.readouterr()
    fitted = Certificate.load(cert)
    assert fitted.statistic is not None
    backwards = replace(fitted.statistic, weights=tuple(-w for w in fitted.statistic.weights))
    turned = tmp_path / "backwards.json"
    replace(fitted, statistic=backwards).save(turned)
    traces = read_traces(str(other))
    calibrate = ["calibrate", "--traces", str(other), "--risk", "0.9", "--delta", "0.3",
                 "--out", str(tmp_path / "c.json")]  # fmt: skip
    for path, stat in ((cert, fitted.statistic), (turned, backwards)):
        final = [replay_fitted(stat, t, max_tokens=fitted.context.max_tokens).final
                 for t in traces]  # fmt: skip
        expected = ranking_check(final, traces)
        assert expected is not None
        assert main([*calibrate, "--certificate", str(path), "--json"]) == 0
        got = capsys.readouterr()
        assert json.loads(got.out)["ranking"] == json.loads(json.dumps(expected.to_dict()))
        assert ("ranks these answers worse than a single score" in got.err) is expected.weaker
        assert main([*calibrate, "--certificate", str(path)]) == 0
        assert f"  ranking          {expected.line()}\n" in capsys.readouterr().out
    assert expected.weaker and expected.statistic_auroc < 0.5  # the backwards one
    assert f"calibrate --score {expected.best_single}" in expected.warning()


def test_the_summary_says_how_much_of_a_blocked_answer_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The share of a blocked calibration answer's tokens the monitor reads before it stops
    it, as ``eval`` counts it (its critical score below tau; the tokens to its stop), and
    the hint to set margins from traffic where that is over half."""
    fit_on, other = _mbpp_halves(tmp_path)
    cert, out = tmp_path / "fitted.json", tmp_path / "c.json"
    fit = ["fit", "--traces", str(fit_on), "--group", "api", "--fit-fraction", "1"]
    assert main([*fit, "--out", str(cert), "--risk", "0.9", "--delta", "0.3"]) == 0
    capsys.readouterr()
    args = ["calibrate", "--traces", str(other), "--certificate", str(cert), "--risk", "0.5",
            "--delta", "0.3", "--out", str(out)]  # fmt: skip
    assert main([*args, "--json"]) == 0
    got_all = json.loads(capsys.readouterr().out)
    got = got_all["blocked_read"]
    after = Certificate.load(out)
    assert after.statistic is not None and after.statistic.block_margins
    paths = [replay_fitted(after.statistic, t, max_tokens=after.context.max_tokens)
             for t in read_traces(str(other))]  # fmt: skip
    shares = [stop_at(p, after.policy, after.tau) / p.scores.size for p in paths
              if critical_score(p, after.policy) < after.tau]  # fmt: skip
    assert 0 < got["blocked"] == len(shares) < got["of"] == 60
    assert got["mean"] == pytest.approx(sum(shares) / len(shares)) and got["mean"] < 1.0
    assert main(args) == 0
    printed = capsys.readouterr().out
    line = (f"blocked answers  read for {got['mean']:.0%} of their tokens before they are "
            f"stopped (median {got['median']:.0%}; {got['blocked']} of 60 blocked)")  # fmt: skip
    assert line in printed
    assert main([*args, "--procedure", "conformal", "--json"]) == 0
    cheap = json.loads(capsys.readouterr().out)  # the other promise's own calibration
    assert cheap["in_expectation_coverage"] is None
    assert got_all["in_expectation_coverage"] == pytest.approx(cheap["coverage"])
    assert f"  in expectation   {cheap['coverage']:.1%} shown with --procedure conformal" in printed
    late = {"blocked": 3, "of": 10, "mean": 0.7, "median": 0.8}
    assert "--margins-from TRAFFIC" in _blocked_read_line(late, hint=True)
    assert "--margins-from" not in _blocked_read_line(late, hint=False)  # already given
    assert "--margins-from" not in _blocked_read_line({**late, "mean": 0.5}, hint=True)
    assert _blocked_read_line(None, hint=True) == ""
