"""The long-answer traces committed in ``benchmarks/traces/``: every line a whole trace of
the format, with the task's fields, in the order of the task file, and labelled as its
check labels it (MBPP by running the tests in the sandbox: a sample, since each run takes
a process; GSM8K by the final number: all of them). The label checks need the shared task
files and skip without them."""

from __future__ import annotations

import json
import lzma
from pathlib import Path
from typing import Any

import pytest

from adapters import check_code, check_number
from guardrail.traces import parse_trace

ROOT = Path(__file__).parents[2]
TRACES = ROOT / "benchmarks" / "traces"
LONGFORM = ROOT.parent / "shared" / "data" / "longform"


def _lines(*paths: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for p in paths
            for line in lzma.decompress(p.read_bytes()).decode("utf-8").splitlines()]  # fmt: skip


MBPP = _lines(TRACES / "mbpp_qwen25coder.jsonl.xz")
PARTS = sorted((TRACES / "gsm8k_qwen25coder").glob("part-*.jsonl.xz"))
GSM8K = _lines(*PARTS)
CONCISE = _lines(*sorted((TRACES / "gsm8k_qwen25coder_concise").glob("part-*.jsonl.xz")))
HUMANEVAL = _lines(*sorted((TRACES / "humaneval_qwen25coder").glob("part-*.jsonl.xz")))


def _tasks(name: str) -> dict[str, dict[str, Any]]:
    path = LONGFORM / name
    if not path.exists():
        pytest.skip(f"needs the shared task file {path}")
    return {row["id"]: row for row in map(json.loads, path.read_text("utf-8").splitlines())}


@pytest.mark.parametrize(
    ("rows", "rule"),
    [(MBPP, "check:code"), (GSM8K, "check:number"), (HUMANEVAL, "check:code"),
     (CONCISE, "check:number")],
)  # fmt: skip
def test_every_line_is_a_whole_trace_with_the_tasks_fields(
    rows: list[dict[str, Any]], rule: str
) -> None:
    assert rows
    for row in rows:
        trace = parse_trace(row)
        assert row["label_rule"] == rule and isinstance(row["correct"], bool)
        assert trace.top_k == 20 and trace.top_logprobs.shape == (trace.n_tokens, 20)
        assert trace.entropy is not None and trace.prompt_free_logprobs is not None
        assert 0 < trace.n_tokens <= 512


def test_the_gsm8k_parts_hold_100_questions_each_in_order() -> None:
    assert [p.name for p in PARTS] == [f"part-{i:03d}.jsonl.xz" for i in range(len(PARTS))]
    sizes = [len(_lines(p)) for p in PARTS]
    assert all(n == 100 for n in sizes[:-1]) and 0 < sizes[-1] <= 100
    assert [row["id"] for row in GSM8K] == [f"gsm8k-{i}" for i in range(len(GSM8K))]


def test_every_gsm8k_label_is_its_final_number_check() -> None:
    tasks = _tasks("gsm8k_first600.jsonl")
    assert [row["id"] for row in CONCISE] == [f"gsm8k-{i}" for i in range(160)]
    for row in [*GSM8K, *CONCISE]:
        assert check_number(row["answer"], tasks[row["id"]]) is row["correct"], row["id"]


def test_a_sample_of_mbpp_labels_is_what_running_the_tests_gives() -> None:
    tasks = _tasks("mbpp_test500.jsonl")
    assert [row["id"] for row in MBPP] == list(tasks)  # all 500, in the file's order
    for row in MBPP[::50]:
        assert check_code(row["answer"], tasks[row["id"]]) is row["correct"], row["id"]


def test_the_humaneval_traces_answer_every_task_in_order_labelled_by_its_check() -> None:
    """All 164 tasks, in parts of 50; the labels of the tasks in the committed HumanEval
    sample are what HumanEval's own check gives the answer, converted as the traces README
    says (``studies/humaneval_tasks.py``)."""
    from studies.humaneval_tasks import convert, read_humaneval

    assert [row["id"] for row in HUMANEVAL] == [f"humaneval-{i}" for i in range(164)]
    assert all(row["dataset"] == "humaneval" for row in HUMANEVAL)
    by_id = {row["id"]: row for row in HUMANEVAL}
    sample = ROOT / "tests" / "fixtures" / "humaneval_sample.jsonl"
    for task in map(convert, read_humaneval(sample)):
        row = by_id[task["id"]]
        assert row["references"] == task["test_list"]
        assert check_code(row["answer"], task) is row["correct"], row["id"]
