"""``liftguard monitor`` on the committed trace samples and the shipped certificates:
its report, the merge of several recordings by time, the alarm, and one-line errors."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from adapters.cli import main
from adapters.cli._monitor import read_merged
from guardrail import Certificate

ROOT = Path(__file__).parents[2]
SAMPLE = ROOT / "tests" / "fixtures" / "traces_smollm2_sample.jsonl"
NQ_SAMPLE = ROOT / "tests" / "fixtures" / "traces_smollm2_nq_sample.jsonl"
LIFT = ROOT / "guardrail" / "data" / "smollm2_certificate.json"
FITTED = ROOT / "guardrail" / "data" / "smollm2_fitted_certificate.json"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["monitor", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def _report(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    status, out, _ = _run(capsys, *argv, "--json")
    assert status == 0
    report: dict[str, Any] = json.loads(out)
    return report


def _recording(tmp_path: Path, name: str, lines: list[dict[str, Any]]) -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(obj) + "\n" for obj in lines), encoding="utf-8")
    return str(path)


def _sample() -> list[dict[str, Any]]:
    return [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]


def _strict_certificate(tmp_path: Path) -> str:
    """The shipped lift certificate with a low threshold (most answers shown) and a 5%
    target: on the sample (36 of 40 answers wrong) the alarm must fire."""
    cert = Certificate.load(LIFT)
    assert cert.calibration is not None
    cal = replace(cert.calibration, tau=0.5, risk=0.05)
    path = tmp_path / "strict.json"
    replace(cert, tau=0.5, calibration=cal).save(path)
    return str(path)


def test_text_report_of_the_shipped_certificate(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(capsys, "--traces", str(SAMPLE), "--certificate", str(LIFT))
    assert status == 0 and err == ""
    assert "40 answers in file order" in out and "target risk 0.8" in out
    assert "risk alarm       none" in out and "lower bound" in out and "upper bound" in out


def test_json_report_of_a_fitted_certificate(capsys: pytest.CaptureFixture[str]) -> None:
    report = _report(
        capsys, "--traces", str(SAMPLE), "--traces", str(NQ_SAMPLE),
        "--certificate", str(FITTED), "--alpha", "0.1",
    )  # fmt: skip
    assert report["answers"] == 80 and report["order"] == "file"
    assert report["alpha"] == 0.1 and report["target"] == 0.8
    assert 0 < report["shown"] < 80 and report["coverage"] == report["shown"] / 80
    assert report["bounds"]["labelled"] == report["shown"] and report["alarm"] is None
    assert 0 <= report["bounds"]["lower"] <= report["bounds"]["upper"] <= 1


def test_recordings_are_merged_by_time_and_the_alarm_is_located(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _sample()
    for i, obj in enumerate(lines):  # replica a: even seconds, replica b: odd seconds
        obj["created"] = f"2025-01-01T00:00:{i:02d}Z"
    a = _recording(tmp_path, "a.jsonl", lines[0::2])
    b = _recording(tmp_path, "b.jsonl", lines[1::2])
    traces, sources, order, _ = read_merged([b, a])
    assert order == "created"
    assert [t.id for t in traces] == [obj["id"] for obj in lines]
    assert sources[:3] == [f"{a}:1", f"{b}:1", f"{a}:2"]
    report = _report(capsys, "--traces", a, "--traces", b, "--certificate",
                     _strict_certificate(tmp_path))  # fmt: skip
    alarm = report["alarm"]
    assert report["order"] == "created" and alarm is not None
    assert 1 <= alarm["labelled"] <= alarm["answer"] <= 40
    assert alarm["id"] == lines[alarm["answer"] - 1]["id"]
    assert report["bounds"]["lower"] >= report["target"]  # the alarm's own lower bound


def test_without_a_time_on_every_line_the_files_keep_their_order(tmp_path: Path) -> None:
    lines = _sample()[:4]
    lines[0]["created"] = "2025-01-01T00:00:09Z"
    a = _recording(tmp_path, "a.jsonl", lines[:2])
    b = _recording(tmp_path, "b.jsonl", lines[2:])
    traces, _, order, _ = read_merged([b, a])
    assert order == "file" and [t.id for t in traces] == [lines[i]["id"] for i in (2, 3, 0, 1)]


@pytest.mark.parametrize(
    ("change", "status", "message"),
    [
        ("missing", 1, "No such file or directory"),
        ("uncalibrated", 1, "holds no calibration"),
        ("unlabelled", 1, "correct"),
        ("created", 1, "created: not an ISO 8601 time"),
        ("empty", 1, "holds no traces"),
    ],
)
def test_bad_data_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str, status: int, message: str
) -> None:
    lines = _sample()[:3]
    cert = str(LIFT)
    if change == "uncalibrated":
        cert = str(tmp_path / "bare.json")
        replace(Certificate.load(LIFT), calibration=None).save(cert)
    elif change == "unlabelled":
        del lines[1]["correct"]
    elif change == "created":
        lines = [{**obj, "created": "yesterday"} for obj in lines]
    elif change == "empty":
        lines = []
    traces = _recording(tmp_path, "t.jsonl", lines)
    if change == "missing":
        traces = str(tmp_path / "absent.jsonl")
    got, out, err = _run(capsys, "--traces", traces, "--certificate", cert)
    assert got == status and out == ""
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("liftguard monitor: error: ")


@pytest.mark.parametrize("alpha", ["1.5", "0", "x"])
def test_a_bad_alpha_is_a_usage_error(capsys: pytest.CaptureFixture[str], alpha: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["monitor", "--traces", str(SAMPLE), "--certificate", str(LIFT), "--alpha", alpha])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert err.startswith("liftguard monitor: error: argument --alpha: expected a number")
