"""``liftguard traces label --rule {contains,f1}`` end to end on the committed Gemma 3
sample (40 real traces), with two references replaced so that the rules disagree both ways:
``triviaqa-0`` answers "The Phantom of the Opera" (against "Opera": contained, F1 2/4) and
``triviaqa-150`` answers "Montreal" (against "Montreal Canadiens": not contained, F1 2/3)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapters.cli import main
from guardrail.traces import is_correct_f1

SAMPLE = Path(__file__).resolve().parent / "fixtures" / "traces_gemma3_sample.jsonl"
OVERRIDES = {"triviaqa-0": ["Opera"], "triviaqa-150": ["Montreal Canadiens"]}


def _lines() -> list[str]:
    return SAMPLE.read_text(encoding="utf-8").splitlines()


@pytest.fixture
def refs(tmp_path: Path) -> dict[str, list[str]]:
    """Each sample trace's own references, two replaced (module docstring); written to
    ``tmp_path / refs.jsonl``."""
    by_id = {}
    for line in _lines():
        row = json.loads(line)
        by_id[row["id"]] = OVERRIDES.get(row["id"], row["references"])
    text = "".join(json.dumps({"id": k, "references": v}) + "\n" for k, v in by_id.items())
    (tmp_path / "refs.jsonl").write_text(text, encoding="utf-8")
    return by_id


def _label(tmp_path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[
    list[dict[str, Any]], list[str], str
]:  # fmt: skip
    out = tmp_path / "labelled.jsonl"
    argv = ["traces", "label", "--traces", str(SAMPLE), "--references",
            str(tmp_path / "refs.jsonl"), "--out", str(out), *flags]  # fmt: skip
    assert main(argv) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines], lines, capsys.readouterr().err


def test_the_default_rule_is_contains_and_names_itself(
    refs: dict[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows, lines, err = _label(tmp_path, capsys)
    originals = {json.loads(line)["id"]: json.loads(line)["correct"] for line in _lines()}
    expected = {**originals, "triviaqa-0": True}  # "Opera" is named in the answer
    assert {r["id"]: r["correct"] for r in rows} == expected
    assert {r["label_rule"] for r in rows} == {"contains"}
    assert err.startswith(f"labelled 40 of 40 traces into {tmp_path / 'labelled.jsonl'} "
                          f"by contains ({sum(expected.values())} correct)")  # fmt: skip
    # the rule goes after the documented keys; the rest of the line is as read
    for line, original, row in zip(lines, _lines(), rows, strict=True):
        assert line.endswith(', "label_rule": "contains"}')
        if row["id"] not in OVERRIDES:
            assert line.removesuffix(', "label_rule": "contains"}') + "}" == original


@pytest.mark.parametrize(("threshold", "flags"), [(0.6, []), (0.5, ["--f1-threshold", "0.5"])])
def test_rule_f1_labels_by_token_f1_at_the_threshold(
    refs: dict[str, list[str]], threshold: float, flags: list[str], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    rows, _, err = _label(tmp_path, capsys, "--rule", "f1", *flags)
    labels = {r["id"]: r["correct"] for r in rows}
    assert labels["triviaqa-150"] is True  # "Montreal" against "Montreal Canadiens": 2/3
    assert labels["triviaqa-0"] is (threshold <= 0.5)  # 3 answer tokens, 1 shared: 2/4
    for row in rows:
        assert row["references"] == refs[row["id"]]
        assert row["correct"] == is_correct_f1(
            row["answer"], refs[row["id"]], row["question"], threshold=threshold
        )
    rule = f"f1>={threshold:g}"
    assert {r["label_rule"] for r in rows} == {rule}
    assert f"traces into {tmp_path / 'labelled.jsonl'} by {rule} ({sum(labels.values())} " in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--rule", "f1", "--f1-threshold", "0"], "argument --f1-threshold: expected a number "
         "in (0, 1], got '0'"),
        (["--rule", "f1", "--f1-threshold", "1.5"], "expected a number in (0, 1], got '1.5'"),
        (["--rule", "f1", "--f1-threshold", "nan"], "--f1-threshold"),
        (["--rule", "exact"], "argument --rule: invalid choice: 'exact'"),
        (["--f1-threshold", "0.5"], "--f1-threshold goes with --rule f1"),
        (["--rule", "contains", "--f1-threshold", "0.5"], "--f1-threshold goes with --rule f1"),
    ],
)  # fmt: skip
def test_bad_rule_arguments_are_one_line(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.jsonl"
    argv = ["traces", "label", "--traces", str(SAMPLE), "--references", str(SAMPLE),
            "--out", str(out), *flags]  # fmt: skip
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's own checks
        status = exc.code if isinstance(exc.code, int) else 1
    err = capsys.readouterr().err
    assert status == 2
    assert err.splitlines() == [err.strip()] and "Traceback" not in err, err
    assert err.startswith("liftguard traces label: error: ") and message in err, err
    assert not out.exists()


def test_a_judge_takes_no_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["traces", "label", "--traces", str(SAMPLE), "--judge", "http://127.0.0.1:9/v1",
            "--judge-model", "j", "--rule", "f1", "--out", str(tmp_path / "out.jsonl")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        "liftguard traces label: error: --rule labels by --references; a --judge labels on "
        "its own\n"
    )


SMOLLM2 = SAMPLE.parent / "traces_smollm2_sample.jsonl"


@pytest.mark.parametrize(("rule", "other"), [("f1", "--rule contains"), ("contains", "--rule f1")])
def test_a_rule_that_labels_almost_nothing_correct_is_named_with_another_to_try(
    rule: str, other: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SmolLM2 answers in sentences: token F1 against the short references calls them all
    wrong; references that no answer names do the same to contains."""
    rows = [json.loads(line) for line in SMOLLM2.read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if not is_correct_f1(r["answer"], r["references"], r["question"])]
    refs = tmp_path / "refs.jsonl"
    wrong = ["no answer names this reference"]
    refs.write_text("".join(json.dumps({"id": r["id"], "references": r["references"]
                                        if rule == "f1" else wrong}) + "\n" for r in rows),
                    encoding="utf-8")  # fmt: skip
    out = tmp_path / "labelled.jsonl"
    argv = ["traces", "label", "--traces", str(SMOLLM2), "--references", str(refs),
            "--rule", rule, "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and f"labelled {len(rows)} of 40 traces" in err[0]
    name = "f1>=0.6" if rule == "f1" else "contains"
    assert err[1].startswith(
        f"liftguard traces label: warning: the rule {name} labelled 0 of {len(rows)} answers "
        "correct (almost none)"
    )
    assert f"try {other}" in err[1] and "--judge" in err[1]


def test_labels_that_vary_draw_no_warning(
    refs: dict[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, err = _label(tmp_path, capsys, "--rule", "f1")
    assert len(err.splitlines()) == 1  # the summary only: 9 of 40 correct
