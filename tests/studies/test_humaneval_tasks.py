"""HumanEval's tasks as MBPP rows (``studies/humaneval_tasks.py``): the rows a user feeds
``traces generate --task code`` label HumanEval's own tests as HumanEval does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapters import check_code
from adapters.cli._tasks import get_task
from studies import humaneval_tasks as he

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "humaneval_sample.jsonl"


def _rows() -> dict[str, dict[str, Any]]:
    return {r["task_id"]: r for r in he.read_humaneval(SAMPLE)}


def _answer(code: str) -> str:
    return f"Here it is:\n```python\n{code}\n```\n"


@pytest.mark.parametrize("task_id", ["HumanEval/0", "HumanEval/10", "HumanEval/32", "HumanEval/38"])
def test_the_canonical_solution_passes_and_a_wrong_one_fails(task_id: str) -> None:
    row = _rows()[task_id]
    task = he.convert(row)
    assert check_code(_answer(row["prompt"] + row["canonical_solution"]), task)
    signature = row["prompt"].split(f"def {row['entry_point']}", 1)[1].split(":\n", 1)[0]
    wrong = f"def {row['entry_point']}{signature}:\n    return None\n"
    assert not check_code(_answer(wrong), task)


def test_an_answer_may_leave_the_prompts_helpers_out() -> None:
    row = _rows()["HumanEval/10"]  # make_palindrome calls the prompt's is_palindrome
    body = row["canonical_solution"]
    assert "is_palindrome" in body
    only = f"def make_palindrome(string: str) -> str:\n{body}"
    assert check_code(_answer(only), he.convert(row))


def test_the_row_the_model_sees() -> None:
    task = he.convert(_rows()["HumanEval/0"])
    assert task["id"] == "humaneval-0"
    assert task["test_list"][0] == (
        "assert has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True"
    )
    assert task["test_list"][1].endswith("check(has_close_elements)")
    item = get_task("code").item(task)
    assert item is not None and item.references == tuple(task["test_list"])
    assert item.message.startswith(he.PREFIX + "\n```python\nfrom typing import List")
    assert item.message.endswith("Your code should pass this test:\n" + task["test_list"][0])


def test_a_task_without_a_plain_assert_runs_only_its_check() -> None:
    task = he.convert(_rows()["HumanEval/38"])
    assert he.first_assert(_rows()["HumanEval/38"]["test"], "decode_cyclic") is None
    assert len(task["test_list"]) == 1 and task["test_list"][0].endswith("check(decode_cyclic)")
    assert "def encode_cyclic" in task["test_setup_code"]


def test_the_command_writes_one_row_a_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tasks.jsonl"
    assert he.main([str(SAMPLE), "--out", str(out), "--check-canonical"]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == [
        "humaneval-0",
        "humaneval-10",
        "humaneval-32",
        "humaneval-38",
    ]
    assert "4 of 4 pass" in capsys.readouterr().out
