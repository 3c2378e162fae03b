"""Every command-line failure is one line, ``liftguard <cmd>: error: <message>``.

Exit status 2 for a bad argument value, 1 for bad data, 130 for an interrupt;
``-v`` adds the traceback. Trace files are built tiny, in ``tmp_path``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapters.cli import main
from guardrail.traces import BASELINES

VOCAB = 50


def _trace(i: int, correct: Any = True, logprobs: tuple[float, ...] = (-0.1, -0.6)) -> str:
    """One valid trace line (vocabulary of 50, two alternatives per token)."""
    tokens = [
        {
            "id": j + 1,
            "text": f"t{j}",
            "logprob": lp,
            "top": [[j + 1, lp], [0, lp - 1.0]],
            "entropy": 0.5,
            "logz": {"1.5": 0.1, "2.0": 0.2},
            "prompt_free_logprob": -3.0,
        }
        for j, lp in enumerate(logprobs)
    ]
    obj = {
        "id": f"q-{i}",
        "dataset": "tiny",
        "model": "m",
        "question": f"question {i}?",
        "references": ["a"],
        "prompt": "p",
        "answer": "a",
        "correct": correct,
        "vocab_size": VOCAB,
        "top_k": 2,
        "tokens": tokens,
    }
    return json.dumps(obj)


def _lines(n: int = 8) -> list[str]:
    return [_trace(i, correct=i % 4 != 3, logprobs=(-0.1 * (i + 1), -0.5)) for i in range(n)]


def _write(tmp_path: Path, lines: list[str], name: str = "traces.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``main(argv)``'s exit status (argparse's too), stdout and stderr."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code if isinstance(exc.code, int) else 1
    except KeyboardInterrupt:  # would stop the test session
        pytest.fail("KeyboardInterrupt escaped main()")
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _assert_one_error_line(err: str, command: str, *details: str) -> None:
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"liftguard {command}: error: "), lines[0]
    for detail in details:
        assert detail in lines[0], (detail, lines[0])


COMMANDS = {
    "calibrate": ["calibrate", "--risk", "0.5", "--score", "nll", "--traces"],
    "eval": ["eval", "--risk", "0.5", "--splits", "2", "--traces"],
    "stress": ["stress", "--risk", "0.5", "--traces"],
}


# --------------------------------------------------------------------------- #
# Bad trace files: exit 1, one line naming file:line
# --------------------------------------------------------------------------- #


def _truncated_last_line(lines: list[str]) -> tuple[list[str], int, str]:
    return [*lines[:-1], lines[-1][:-25]], len(lines), "invalid JSON"


def _nan_logprob(lines: list[str]) -> tuple[list[str], int, str]:
    return [lines[0], _trace(1, logprobs=(-0.2, float("nan"))), *lines[2:]], 2, "got NaN"


def _positive_logprob(lines: list[str]) -> tuple[list[str], int, str]:
    return [*lines[:3], _trace(3, logprobs=(0.5,)), *lines[4:]], 4, "tokens[0].logprob"


def _missing_correct(lines: list[str]) -> tuple[list[str], int, str]:
    obj = json.loads(lines[4])
    del obj["correct"]
    return [*lines[:4], json.dumps(obj), *lines[5:]], 5, "missing required key 'correct'"


def _non_boolean_correct(lines: list[str]) -> tuple[list[str], int, str]:
    return [*lines[:5], _trace(5, correct="yes"), *lines[6:]], 6, "correct: expected a boolean"


DEFECTS = {
    "truncated last line": _truncated_last_line,
    "NaN logprob": _nan_logprob,
    "positive logprob": _positive_logprob,
    "missing correct": _missing_correct,
    "non-boolean correct": _non_boolean_correct,
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_bad_trace_line_is_one_error_line_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, defect: str
) -> None:
    lines, lineno, detail = DEFECTS[defect](_lines())
    path = _write(tmp_path, lines)
    code, _, err = _run([*COMMANDS[command], path], capsys)
    assert code == 1
    _assert_one_error_line(err, command, f"{path}:{lineno}: ", detail)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_missing_trace_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    path = str(tmp_path / "nope.jsonl")
    code, _, err = _run([*COMMANDS[command], path], capsys)
    assert code == 1
    _assert_one_error_line(err, command, path, "No such file or directory")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_trace_path_that_is_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    code, _, err = _run([*COMMANDS[command], str(tmp_path)], capsys)
    assert code == 1
    _assert_one_error_line(err, command, str(tmp_path), "directory")


def test_empty_trace_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, ["", "  "])
    code, _, err = _run([*COMMANDS["stress"], path], capsys)  # was an IndexError
    assert code == 1
    _assert_one_error_line(err, "stress", path, "holds no traces")


def test_utf8_bom_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = _write(tmp_path, _lines(), "plain.jsonl")
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + Path(plain).read_bytes())
    args = ["calibrate", "--risk", "0.9", "--delta", "0.5", "--score", "nll"]
    assert _run([*args, "--traces", plain], capsys)[0] == 0
    code, out, err = _run([*args, "--traces", str(bom)], capsys)
    assert code == 0 and err == ""
    assert "calibration      n=4" in out


# --------------------------------------------------------------------------- #
# Bad argument values: exit 2, one line naming the flag
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("command", "flag", "value"),
    [
        ("eval", "--risk", "1.5"),
        ("eval", "--delta", "0"),
        ("eval", "--splits", "0"),
        ("eval", "--lowest-k", "0"),
        ("eval", "--clip", "-1"),
        ("eval", "--min-tokens", "0"),
        ("eval", "--stream-delta", "0"),
        ("calibrate", "--lowest-k", "0"),
        ("calibrate", "--clip", "-1"),
        ("calibrate", "--min-tokens", "0"),
        ("calibrate", "--stream-delta", "0"),
        ("calibrate", "--repeats", "0"),
        ("calibrate", "--n-cal", "-5"),
    ],
)
def test_bad_argument_value_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, flag: str, value: str
) -> None:
    path = _write(tmp_path, _lines())
    base = {"calibrate": ["calibrate", "--risk", "0.5"], "eval": ["eval", "--risk", "0.5"]}
    code, out, err = _run([*base[command], "--traces", path, flag, value], capsys)
    assert code == 2
    _assert_one_error_line(err, command, f"argument {flag}: ", repr(value))
    assert out == ""


@pytest.mark.parametrize("where", ["missing/dir/cal.json", "."])
def test_calibrate_out_is_checked_before_the_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    path = _write(tmp_path, _lines())
    out_path = str(tmp_path / where)
    args = ["calibrate", "--traces", path, "--risk", "0.9", "--delta", "0.5", "--score", "nll"]
    code, out, err = _run([*args, "--out", out_path], capsys)
    assert code == 2
    _assert_one_error_line(err, "calibrate", "argument --out: ")
    assert out == ""  # nothing computed, nothing printed
    assert ("does not exist" in err) if where != "." else ("names a directory" in err)


# --------------------------------------------------------------------------- #
# eval where every split is refused
# --------------------------------------------------------------------------- #


def test_eval_says_why_every_split_was_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, _lines())
    args = ["eval", "--traces", path, "--risk", "0.05", "--splits", "3"]
    code, out, err = _run(args, capsys)
    assert code == 0 and "Traceback" not in err
    (note,) = err.splitlines()
    assert note.startswith("liftguard eval: note: calibration refused on all 3 splits")
    assert "every method" in note and "needs at least 59 answered" in note
    assert "only 4 of the 8 traces" in note
    rows = {line.split()[0]: line for line in out.splitlines()[2:-2]}  # (then 2 lines of notes)
    assert set(rows) == {"lift", "lift_paper", *BASELINES}
    for row in rows.values():
        assert "refused" in row and "0.0%" not in row and "nan" not in row

    code, out, err = _run([*args, "--json"], capsys)
    assert code == 0 and "every method" in err
    report = json.loads(out)  # strict JSON: no NaN
    for r in report["methods"].values():
        assert r["all_refused"] is True and r["refused"] == 3
        assert r["needed_answered"] == 59 and "59 answered" in r["refusal_reason"]
        assert r["risk_mean"] is None


# --------------------------------------------------------------------------- #
# The central handler in main()
# --------------------------------------------------------------------------- #


def test_library_error_of_a_command_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, _lines())
    args = ["calibrate", "--traces", path, "--risk", "0.05", "--score", "nll"]
    code, _, err = _run(args, capsys)
    assert code == 1
    _assert_one_error_line(err, "calibrate", "needs at least 59 answered")


@pytest.mark.parametrize(
    ("exc", "status", "detail"),
    [
        (KeyboardInterrupt(), 130, "interrupted"),
        (PermissionError(13, "Permission denied", "/x/y.json"), 1, "/x/y.json: Permission denied"),
        (ValueError("bad value\nsecond line"), 1, "bad value second line"),
    ],
)
def test_central_handler(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    exc: BaseException,
    status: int,
    detail: str,
) -> None:
    import adapters.cli._eval

    def boom(args: Any) -> int:
        raise exc

    monkeypatch.setattr(adapters.cli._eval, "cmd_eval", boom)
    code, _, err = _run(["eval", "--traces", "t.jsonl", "--risk", "0.5"], capsys)
    assert code == status
    _assert_one_error_line(err, "eval", detail)


def test_error_line_names_the_subcommand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines, lineno, detail = _truncated_last_line(_lines())
    path = _write(tmp_path, lines)
    args = ["skeleton", "--store", str(tmp_path / "store"), "build", "--name", "s"]
    code, _, err = _run([*args, "--traces", path, "--kind", "uniform"], capsys)
    assert code == 1
    _assert_one_error_line(err, "skeleton build", f"{path}:{lineno}: {detail}")


def test_questions_file_errors_name_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    questions = tmp_path / "q.jsonl"
    questions.write_text('{"question": "a?", "answer": "b"}\n{"question": \n', encoding="utf-8")
    args = ["traces", "generate", "--questions", str(questions)]
    code, _, err = _run([*args, "--out", str(tmp_path / "out.jsonl")], capsys)
    assert code == 1
    _assert_one_error_line(err, "traces generate", f"{questions}:2: invalid JSON")
    code, _, err = _run([*args, "--out", str(tmp_path / "missing" / "out.jsonl")], capsys)
    assert code == 2
    _assert_one_error_line(err, "traces generate", "argument --out: ", "does not exist")


@pytest.mark.parametrize("command", ["calibrate", "traces generate"])
def test_verbose_keeps_the_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    missing = str(tmp_path / "nope.jsonl")
    if command == "calibrate":
        argv = ["-v", "calibrate", "--risk", "0.5", "--traces", missing]
    else:  # the subcommand's own --verbose must not reset the top-level flag
        argv = ["--verbose", "traces", "generate", "--questions", missing]
        argv += ["--out", str(tmp_path / "out.jsonl")]
    code, _, err = _run(argv, capsys)
    assert code == 1
    assert "Traceback (most recent call last)" in err and "FileNotFoundError" in err
    last = err.splitlines()[-1]
    assert last == f"liftguard {command}: error: {missing}: No such file or directory"
