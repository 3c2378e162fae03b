"""``liftguard calibrate --certificate``: a fitted statistic held fixed, its threshold
calibrated on other answers (the committed fixture samples: fitted on Gemma 3's NQ-Open
sample, calibrated on its TriviaQA sample)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from guardrail import Certificate, read_traces
from guardrail.cli import main
from guardrail.fitting import calibrate_fitted

FIXTURES = Path(__file__).parent / "fixtures"
NQ = str(FIXTURES / "traces_gemma3_nq_sample.jsonl")
TQ = str(FIXTURES / "traces_gemma3_sample.jsonl")


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
    assert main([*args, "--delta", "0.2", "--out", str(out)]) == 0
    assert f"wrote the certificate {out}" in capsys.readouterr().out
    before, after = Certificate.load(fitted), Certificate.load(out)
    # the same rule, model and context; a new tau from exactly the library's procedure
    assert after.statistic == before.statistic and after.policy == before.policy
    assert (after.model, after.context, after.skeleton) == (
        before.model, before.context, before.skeleton,
    )  # fmt: skip
    assert before.statistic is not None
    cal, _ = calibrate_fitted(
        before.statistic, read_traces(TQ), policy=before.policy, risk=0.7, delta=0.2,
        max_tokens=before.context.max_tokens,
    )  # fmt: skip
    assert after.calibration is not None
    assert after.tau == cal.tau != before.tau
    assert replace(after.calibration, extra={}) == replace(cal, extra={})
    assert after.calibration.extra["split"]["fitted_on"] == Path(NQ).name
    assert after.provenance["traces"] == Path(TQ).name
    assert after.provenance["fitted_on_sha256"] == before.provenance["traces_sha256"]
    assert after.provenance["fit"] == before.provenance["fit"]


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
