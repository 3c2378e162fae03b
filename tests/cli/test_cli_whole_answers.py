"""``calibrate``, ``fit``, ``eval`` and ``monitor`` read whole answers only: a recorded
line with ``complete: false`` (a prefix of an answer the proxy blocked mid-stream) is
left out with one note, a file of prefixes only is refused in one line, and the whole
answers of a buffered recording (mostly the ones its certificate showed) draw a warning.

The recordings are built from the committed Gemma 3 NQ sample (40 real traces, 20
correct) the way ``liftguard serve --mode buffered --record`` and ``traces label
--include-incomplete`` write them: every other wrong answer blocked after two tokens,
its line a prefix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapters.cli import main
from guardrail import Certificate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SAMPLE = FIXTURES / "traces_gemma3_nq_sample.jsonl"
OTHER = FIXTURES / "traces_gemma3_sample.jsonl"
CERT = "chat@production=v1"
DATA = FIXTURES.parent.parent / "guardrail" / "data"


def _rows(path: Path = SAMPLE) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _recorded(rows: list[dict[str, Any]], mode: str | None = "buffered") -> list[dict[str, Any]]:
    """``rows`` as a labelled recording: every other wrong answer a two-token prefix
    (``complete: false``, blocked); the others whole (certified). ``mode=None``: no
    verdict, only ``complete``."""
    out = []
    for i, row in enumerate(rows):
        prefix = not row["correct"] and i % 2 == 0
        row = {**row, "created": f"2025-01-01T00:00:{i:02d}Z", "complete": not prefix}
        if prefix:
            row["tokens"] = row["tokens"][:2]
            row["answer"] = "".join(t["text"] for t in row["tokens"]).strip()
        if mode is not None:
            state = "blocked" if prefix else "certified"
            row["verdict"] = {"state": state, "mode": mode, "certificate": CERT}
        out.append(row)
    return out


def _write(tmp_path: Path, name: str, rows: list[dict[str, Any]]) -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, list[str]]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err.splitlines()


def _one(lines: list[str], text: str) -> str:
    """The one line of ``lines`` that holds ``text``."""
    hits = [line for line in lines if text in line]
    assert len(hits) == 1, (text, lines)
    return hits[0]


N_PREFIXES = 10  # every other of the 20 wrong answers
N_WHOLE = 30


def _left_out(command: str, path: str, lines: list[str]) -> None:
    note = _one(lines, f"left out {N_PREFIXES} of 40 ")
    assert note.startswith(f"liftguard {command}: note: {path}: left out {N_PREFIXES} of 40 ")
    assert "(complete: false: 10)" in note and "whole answers only" in note


def _shown_only(command: str, lines: list[str], use: str) -> None:
    warning = _one(lines, "warning:")
    assert warning.startswith(f"liftguard {command}: warning: ")
    assert f"{N_WHOLE} of these answers were recorded in buffered mode" in warning
    assert f"certificate {CERT}" in warning and f"the ones it showed ({N_WHOLE} of" in warning
    assert f"{use} over-states coverage" in warning
    assert "guarantee does not hold for the traffic" in warning
    assert warning.endswith("record in --mode observe")


def test_calibrate_certifies_nothing_from_prefixes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "rec.jsonl", _recorded(_rows()))
    out = str(tmp_path / "cert.json")
    code, _, err = _run(
        capsys, "calibrate", "--traces", path, "--risk", "0.6", "--cal-fraction", "1",
        "--out", out,
    )  # fmt: skip
    assert code == 0
    _left_out("calibrate", path, err)
    _shown_only("calibrate", err, "calibrating on them")
    assert len(err) == 2
    calibration = Certificate.load(out).calibration
    assert calibration is not None and calibration.n == N_WHOLE  # whole answers only


def test_without_a_verdict_prefixes_are_left_out_with_no_bias_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "rec.jsonl", _recorded(_rows(), mode=None))
    code, out, err = _run(
        capsys, "calibrate", "--traces", path, "--risk", "0.6", "--cal-fraction", "1",
        "--score", "nll", "--json",
    )  # fmt: skip
    assert code == 0 and json.loads(out)["n"] == N_WHOLE
    _left_out("calibrate", path, err)
    assert len(err) == 1


def test_an_observe_recording_is_not_a_biased_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [{**r, "complete": True} for r in _recorded(_rows(), mode="observe")]
    path = _write(tmp_path, "rec.jsonl", rows)
    code, out, err = _run(
        capsys, "calibrate", "--traces", path, "--risk", "0.8", "--cal-fraction", "1",
        "--score", "nll", "--json",
    )  # fmt: skip
    assert code == 0 and err == [] and json.loads(out)["n"] == 40


@pytest.mark.parametrize(
    "argv",
    [
        ["calibrate", "--risk", "0.6", "--cal-fraction", "1"],
        ["calibrate", "--risk", "0.6", "--repeats", "3"],
        ["calibrate", "--certificate", str(DATA / "smollm2_fitted_certificate.json"),
         "--risk", "0.6", "--out", "{tmp}/cal.json"],
        ["fit", "--fit-fraction", "1", "--out", "{tmp}/fit.json"],
        ["eval", "--risk", "0.5", "--splits", "2"],
        ["monitor", "--certificate", str(DATA / "smollm2_certificate.json")],
    ],
    ids=["calibrate", "calibrate-repeats", "calibrate-certificate", "fit", "eval", "monitor"],
)  # fmt: skip
def test_a_file_of_prefixes_only_is_refused_in_one_line(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [r for r in _recorded(_rows()) if not r["complete"]]
    path = _write(tmp_path, "prefixes.jsonl", rows)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code, _, err = _run(capsys, *argv, "--traces", path)
    assert code == 2
    assert len(err) == 1 and err[0].startswith(f"liftguard {argv[0]}: error: {path}: ")
    assert f"all {N_PREFIXES} answers are prefixes" in err[0] and "whole answers only" in err[0]


def test_fit_fits_and_eval_evaluates_whole_answers_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "rec.jsonl", _recorded(_rows()))
    out = str(tmp_path / "fit.json")
    argv = ["fit", "--traces", path, "--fit-fraction", "1", "--out", out, "--json"]
    code, summary, err = _run(capsys, *argv)
    assert code == 0 and json.loads(summary)["n_fit"] == N_WHOLE
    _left_out("fit", path, err)
    _shown_only("fit", err, "fitting and calibrating on them")

    code, report, err = _run(
        capsys, "eval", "--traces", path, "--risk", "0.5", "--splits", "2", "--json"
    )
    assert code == 0 and json.loads(report)["n"] == N_WHOLE
    _left_out("eval", path, err)
    _shown_only("eval", err, "evaluating on them")


def test_calibrate_certificate_and_margins_from_read_whole_answers_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fitted = str(tmp_path / "fit.json")
    fit_on = _write(tmp_path, "fit_on.jsonl", _rows())
    assert main(["fit", "--traces", fit_on, "--fit-fraction", "1", "--out", fitted]) == 0
    capsys.readouterr()
    rows = _rows(OTHER)
    for i, row in enumerate(rows):  # 4 more right answers: calibration at 0.9 passes
        row["correct"] = row["correct"] or i < 4
    path = _write(tmp_path, "rec.jsonl", _recorded(rows, mode=None))
    n_whole = sum(r["complete"] for r in _recorded(rows, mode=None))
    out = str(tmp_path / "cal.json")
    argv = ["calibrate", "--certificate", fitted, "--traces", path, "--risk", "0.9",
            "--delta", "0.2", "--out", out, "--json"]  # fmt: skip
    code, report, err = _run(capsys, *argv)
    assert code == 0, err
    assert json.loads(report)["n_calibration"] == n_whole < len(rows)
    assert _one(err, f"left out {len(rows) - n_whole} of {len(rows)} answers")
    calibration = Certificate.load(out).calibration
    assert calibration is not None and calibration.n == n_whole

    traffic = [{**r, "id": f"traffic-{r['id']}"} for r in _recorded(_rows())]
    margins = _write(tmp_path, "traffic.jsonl", traffic)
    code, report, err = _run(capsys, *argv, "--margins-from", margins)
    assert code == 0, err
    assert json.loads(report)["margins_from"]["n_answers"] == N_WHOLE
    assert _one(err, f"{margins}: left out {N_PREFIXES} of 40")
    _shown_only("calibrate", err, "setting margins from them")


def _monitor(capsys: pytest.CaptureFixture[str], path: str, cert: str) -> tuple[
    dict[str, Any], list[str]
]:  # fmt: skip
    code, out, err = _run(capsys, "monitor", "--traces", path, "--certificate", cert, "--json")
    assert code == 0, err
    report: dict[str, Any] = json.loads(out)
    return report, err


def test_monitor_counts_prefixes_as_the_recording_showed_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The certificate calibrated on the whole answers shows every one of them; the true
    coverage counts the blocked prefixes too: 30 of 40, not 30 of 30."""
    rows = _recorded(_rows())
    whole = _write(tmp_path, "whole.jsonl", [r for r in rows if r["complete"]])
    path = _write(tmp_path, "rec.jsonl", rows)
    cert = str(tmp_path / "cert.json")
    argv = ["calibrate", "--traces", whole, "--risk", "0.6", "--cal-fraction", "1", "--out", cert]
    assert main(argv) == 0
    capsys.readouterr()

    report, err = _monitor(capsys, path, cert)
    assert report["answers"] == 40 and report["prefixes"] == N_PREFIXES
    assert report["prefixes_shown"] == 0 and report["shown"] <= N_WHOLE
    assert report["coverage"] == report["shown"] / 40 and report["coverage_seen"] == "all"
    assert report["bounds"]["labelled"] == report["shown"]  # prefixes' labels unread
    note = _one(err, "note:")
    assert f"{N_PREFIXES} of 40 answers are prefixes" in note and "not replayed" in note
    assert len(err) == 1

    # the same recording labelled without --include-incomplete: the coverage is blind
    report, err = _monitor(capsys, whole, cert)
    assert report["answers"] == N_WHOLE and report["coverage_seen"] == "partial"
    warning = _one(err, "warning:")
    assert "cannot see the true coverage" in warning and "--include-incomplete" in warning
    code, text, _ = _run(capsys, "monitor", "--traces", whole, "--certificate", cert)
    assert code == 0 and "over-states the traffic's" in text


def test_the_issue_label_include_incomplete_then_calibrate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reported path: a buffered recording labelled with ``--include-incomplete`` and
    calibrated with ``--cal-fraction 1`` gave "coverage (cal) 100.0%" and a guarantee
    over prefixes; now the certificate counts the whole answers only, and says why."""
    rows = _recorded(_rows())
    unlabelled = [{k: v for k, v in r.items() if k != "correct"} for r in rows]
    recording = _write(tmp_path, "rec.jsonl", unlabelled)
    refs = _write(tmp_path, "refs.jsonl", [{"id": r["id"], "references": r["references"]}
                                           for r in rows])  # fmt: skip
    labelled = str(tmp_path / "labelled.jsonl")
    argv = ["traces", "label", "--traces", recording, "--references", refs, "--out", labelled,
            "--include-incomplete"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    cert = str(tmp_path / "cert.json")
    code, out, err = _run(
        capsys, "calibrate", "--traces", labelled, "--risk", "0.6", "--cal-fraction", "1",
        "--out", cert,
    )  # fmt: skip
    assert code == 0 and f"n={N_WHOLE} " in out
    _left_out("calibrate", labelled, err)
    _shown_only("calibrate", err, "calibrating on them")
    calibration = Certificate.load(cert).calibration
    assert calibration is not None and calibration.n == N_WHOLE


PROSE = ("question", "references", "prompt", "answer")


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_the_reader_yields_each_whole_answer_compact_as_the_full_parse_reads_it(
    tmp_path: Path, suffix: str
) -> None:
    """The streaming reader (a compact trace per whole answer, as the file is read) against
    its batch twin: every line decoded at once and parsed in full."""
    from adapters._tracefiles._digest import TraceDigest
    from adapters.cli._recorded import WholeAnswers, whole_traces
    from adapters.tracefiles import convert_traces, trace_digest
    from guardrail.traces import parse_trace
    from guardrail.traces._write import trace_to_dict

    rows = _recorded(_rows())
    path = _write(tmp_path, "rec.jsonl", rows)
    if suffix == ".parquet":
        convert_traces(path, str(tmp_path / "rec.parquet"))
        path = str(tmp_path / "rec.parquet")
    sort, digest = WholeAnswers("fit"), TraceDigest()
    read = list(whole_traces(path, sort, digest=digest))
    full = [parse_trace(r) for r in rows if r["complete"]]
    assert len(read) == len(full) == sort.n_whole == N_WHOLE and sort.read == 40
    for small, trace in zip(read, full, strict=True):
        kept, whole = trace_to_dict(small), trace_to_dict(trace)
        assert [kept.pop(k) for k in PROSE] == ["", [], "", ""]
        assert kept == {k: v for k, v in whole.items() if k not in PROSE}
    assert digest.count == 40 and digest.hexdigest() == trace_digest(path)
