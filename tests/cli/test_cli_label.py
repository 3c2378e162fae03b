"""``liftguard traces label --rule {contains,f1}`` end to end on the committed Gemma 3
sample (40 real traces), with two references replaced so that the rules disagree both ways:
``triviaqa-0`` answers "The Phantom of the Opera" (against "Opera": contained, F1 2/4) and
``triviaqa-150`` answers "Montreal" (against "Montreal Canadiens": not contained, F1 2/3)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from adapters.cli import main
from guardrail.traces import is_correct_f1

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "traces_gemma3_sample.jsonl"
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


# --------------------------------------------------------------------------- #
# --check: labels by checking answers against their task rows
# --------------------------------------------------------------------------- #
FIXTURES = SAMPLE.parent
TEMPLATE = json.loads((FIXTURES / "traces_qwen_sample.jsonl").read_text().splitlines()[0])


def _trace(trace_id: str, question: str, answer: str) -> str:
    """A trace line with the Qwen sample's tokens (the label reads only the answer)."""
    obj = {k: v for k, v in TEMPLATE.items() if k != "correct"}
    obj.update(id=trace_id, question=question, answer=answer, references=[])
    return json.dumps(obj) + "\n"


def _check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: list[str], references: Path,
    *flags: str,
) -> tuple[dict[str, bool], str]:  # fmt: skip
    traces, out = tmp_path / "traces.jsonl", tmp_path / "labelled.jsonl"
    traces.write_text("".join(lines), encoding="utf-8")
    argv = ["traces", "label", "--traces", str(traces), "--references", str(references),
            "--out", str(out), *flags]  # fmt: skip
    assert main(argv) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert {r["label_rule"] for r in rows} == {f"check:{flags[-1]}"}
    return {r["id"]: r["correct"] for r in rows}, capsys.readouterr().err


def test_check_code_runs_each_answer_with_its_tasks_tests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = {t["id"]: t for t in map(json.loads, (FIXTURES / "mbpp_sample.jsonl").open())}
    ok, balanced = tasks["mbpp-17"], tasks["mbpp-367"]
    fence = "Here is the function:\n```python\n{}\n```\nIt multiplies by four."
    lines = [
        _trace("mbpp-17", ok["text"], fence.format(ok["reference_code"])),
        _trace("renamed", ok["text"], "def square_perimeter(a):\n    return 4 * a"),  # by text
        _trace("mbpp-12", "q", "def sort_matrix(m):\n    return m"),  # wrong
        _trace("mbpp-367", "q", balanced["reference_code"]),  # needs test_setup_code
        _trace("mbpp-11", "q", "import os\nos.kill(os.getppid(), 9)\nos._exit(0)"),
        _trace("mbpp-999", "no such task", "def f(): pass"),
        _trace("mbpp-11", "q", "```bash\necho hi\n```"),
    ]
    labels, err = _check(tmp_path, capsys, lines, FIXTURES / "mbpp_sample.jsonl", "--check",
                         "code")  # fmt: skip
    assert labels == {"mbpp-17": True, "renamed": True, "mbpp-12": False, "mbpp-367": True,
                      "mbpp-11": False}  # fmt: skip
    assert err.startswith(f"labelled 5 of 7 traces into {tmp_path / 'labelled.jsonl'} by "
                          "check:code (3 correct); unlabelled: no_code_block 1; unlabelled: "
                          "no_task 1")  # fmt: skip


def test_a_sandbox_that_cannot_start_leaves_answers_unlabelled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import adapters._labels._sandbox

    monkeypatch.setattr(adapters._labels._sandbox, "default_python", lambda: str(tmp_path / "none"))
    task = json.loads((FIXTURES / "mbpp_sample.jsonl").read_text().splitlines()[0])
    traces, out = tmp_path / "traces.jsonl", tmp_path / "labelled.jsonl"
    traces.write_text(_trace(task["id"], "q", task["reference_code"]), encoding="utf-8")
    argv = ["traces", "label", "--traces", str(traces), "--references",
            str(FIXTURES / "mbpp_sample.jsonl"), "--out", str(out), "--check", "code"]  # fmt: skip
    assert main(argv) == 1  # nothing labelled
    assert out.read_text(encoding="utf-8") == ""
    err = capsys.readouterr().err
    assert "labelled 0 of 1 traces" in err and "unlabelled: sandbox_failed_to_start 1" in err


def test_check_number_compares_final_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [
        _trace("gsm8k-0", "q", "16 - 3 - 4 = 9 eggs, 9 * $2 = $18.\nAnswer: $18"),
        _trace("gsm8k-1", "q", "2 + 2 = 4\nAnswer: 4"),
        _trace("gsm8k-2", "q", "The profit is 70,000 dollars."),
        _trace("gsm8k-3", "q", "I do not know."),
    ]
    labels, err = _check(tmp_path, capsys, lines, FIXTURES / "gsm8k_sample.jsonl", "--check",
                         "number")  # fmt: skip
    assert labels == {"gsm8k-0": True, "gsm8k-1": False, "gsm8k-2": True}
    assert "by check:number (2 correct); unlabelled: no_number 1" in err


def test_check_by_a_users_own_function(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_label_check.py").write_text(
        "from adapters import CheckSkipped\n\n"
        "def grade(answer, task):\n"
        "    if answer == 'skip':\n        raise CheckSkipped('asked_to_skip')\n"
        "    if answer == 'none':\n        return None\n"
        "    if answer == 'boom':\n        raise KeyError('boom')\n"
        "    return answer == task['answer']\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "my_label_check", raising=False)
    lines = [_trace("gsm8k-0", "q", "18"), _trace("gsm8k-1", "q", "2"),
             *(_trace("gsm8k-2", "q", a) for a in ("skip", "none", "boom"))]  # fmt: skip
    labels, err = _check(tmp_path, capsys, lines, FIXTURES / "gsm8k_sample.jsonl", "--check",
                         "my_label_check:grade")  # fmt: skip
    assert labels == {"gsm8k-0": True, "gsm8k-1": False}
    assert "warning: check:my_label_check:grade raised KeyError: 'boom'" in err
    assert err.splitlines()[-1].endswith(
        "by check:my_label_check:grade (1 correct); unlabelled: asked_to_skip 1; unlabelled: "
        "check_raised_KeyError 1; unlabelled: check_returned_none 1"
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--check", "bogus"], "--check: expected code, number or MODULE:FUNCTION, got 'bogus'"),
        (["--check", ":f"], "--check: expected code, number or MODULE:FUNCTION, got ':f'"),
        (["--check", "no_such_module_xyz:f"], "--check no_such_module_xyz:f: cannot import "
         "'no_such_module_xyz': ModuleNotFoundError: No module named 'no_such_module_xyz'"),
        (["--check", "json:no_such_function"], "'json' has no function 'no_such_function'"),
        (["--check", "code", "--rule", "f1"], "--rule labels by reference answers; --check "
         "labels by checking"),
        (["--check", "number", "--f1-threshold", "0.5"], "--check labels by checking"),
    ],
)  # fmt: skip
def test_bad_check_arguments_are_one_line(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.jsonl"
    argv = ["traces", "label", "--traces", str(SAMPLE), "--references",
            str(FIXTURES / "gsm8k_sample.jsonl"), "--out", str(out), *flags]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [err.strip()] and "Traceback" not in err, err
    assert err.startswith("liftguard traces label: error: ") and message in err, err
    assert not out.exists()


@pytest.mark.parametrize("other", [[], ["--judge", "http://127.0.0.1:9/v1", "--judge-model", "j"]])
def test_check_needs_references(
    other: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["traces", "label", "--traces", str(SAMPLE), "--check", "code", *other,
            "--out", str(tmp_path / "out.jsonl")]  # fmt: skip
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "liftguard traces label: error: --check needs --references FILE (the tasks to check "
        "against)\n"
    )
