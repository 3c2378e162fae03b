"""The questions of ``liftguard traces generate``: short factoid questions, or the rows of a
long-answer task (``--task code|math``), each made into an :class:`Item`.

Two tasks (``data/longform/README.md``), each a system line and a user message put
through the model's chat template; the question itself is all the user message holds,
so the prompt-free pass (the same template, the same system line, an empty user
message) keeps the instruction and drops only the question:

- ``code``: MBPP rows (``id``, ``text``, ``test_list``). System line
  :data:`CODE_SYSTEM`; user message: the task, then its first assert as the expected
  signature (:func:`code_message`, the usual MBPP prompt). Dataset ``mbpp``; the
  trace's question is the task's ``text`` and its references the ``test_list``.
- ``math``: GSM8K rows (``id``, ``question``, ``answer``). System line
  :data:`MATH_SYSTEM`; user message: the question. Dataset ``gsm8k``; the references
  are the final number.

A row that lacks a field of its task is a one-line error with exit status 2 (the file
does not fit ``--task``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ._common import CommandError, json_lines

__all__ = ["CODE_SYSTEM", "MATH_SYSTEM", "TASKS", "Item", "Task", "code_message", "get_task",
           "read_items"]  # fmt: skip

CODE_SYSTEM = (
    "You are an expert Python programmer. Answer with one Python code block that solves "
    "the task, with no explanation."
)
"""The system line of ``--task code``."""

MATH_SYSTEM = (
    "Solve the math problem. Reason step by step, then end with a last line of the form "
    '"Answer: <number>".'
)
"""The system line of ``--task math``."""


@dataclass(frozen=True)
class Item:
    """One question to answer: the trace's ``id``, ``dataset``, ``question`` and
    ``references``, and ``message``, the text the prompt template renders as the
    question (the user message of a chat template)."""

    id: str
    dataset: str
    question: str
    references: tuple[str, ...]
    message: str


@dataclass(frozen=True)
class Task:
    """A long-answer task: its dataset name, system line, the fields a row must have
    (as the error names them) and how a row becomes an :class:`Item`."""

    name: str
    dataset: str
    system: str
    fields: str
    item: Callable[[dict[str, Any]], Item | None]


def code_message(text: str, first_test: str) -> str:
    """The user message of an MBPP task: the task, then the first assert of its tests.

    >>> print(code_message("Write a function to double x.", "assert double(2) == 4"))
    Write a function to double x.
    Your code should pass this test:
    assert double(2) == 4
    """
    return f"{text}\nYour code should pass this test:\n{first_test}"


def _strings(value: object) -> tuple[str, ...]:
    """``value`` as a tuple if it is a list of strings, else ``()``."""
    if not isinstance(value, list):
        return ()
    strings = tuple(v for v in value if isinstance(v, str))
    return strings if len(strings) == len(value) else ()


def _code_item(row: dict[str, Any]) -> Item | None:
    key, text, tests = row.get("id"), row.get("text"), _strings(row.get("test_list"))
    if not (isinstance(key, str) and isinstance(text, str) and tests):
        return None
    return Item(key, "mbpp", text, tests, code_message(text, tests[0]))


def _math_item(row: dict[str, Any]) -> Item | None:
    key, question, answer = row.get("id"), row.get("question"), row.get("answer")
    if isinstance(answer, bool) or not isinstance(answer, str | int | float):
        return None
    if not (isinstance(key, str) and isinstance(question, str)):
        return None
    return Item(key, "gsm8k", question, (str(answer),), question)


_CODE_FIELDS = '"id" (string), "text" (string) and "test_list" (a non-empty list of strings)'
_MATH_FIELDS = '"id" (string), "question" (string) and "answer" (a string or a number)'
_TASKS = {
    "code": Task("code", "mbpp", CODE_SYSTEM, _CODE_FIELDS, _code_item),
    "math": Task("math", "gsm8k", MATH_SYSTEM, _MATH_FIELDS, _math_item),
}
TASKS = tuple(_TASKS)
"""Names accepted by ``--task``."""


def get_task(name: str) -> Task:
    """The task called ``name`` (one of :data:`TASKS`)."""
    try:
        return _TASKS[name]
    except KeyError:
        raise CommandError(
            f"--task: unknown task {name!r} (expected one of: {', '.join(TASKS)})", status=2
        ) from None


def _task_items(path: str, task: Task, dataset: str | None) -> list[Item]:
    items = []
    for lineno, row in json_lines(path):
        item = _task_item(row, task)
        if item is None:
            raise CommandError(
                f"{path}:{lineno}: --task {task.name} expects rows with {task.fields}", status=2
            )
        items.append(item if dataset is None else replace(item, dataset=dataset))
    return items


def _task_item(row: object, task: Task) -> Item | None:
    return task.item(row) if isinstance(row, dict) else None


def _question_items(path: str, dataset: str) -> list[Item]:
    """The items of a questions JSONL file: each non-blank line an object with a string
    ``"question"`` and the references as ``"answer"`` or ``"references"`` (a string or a
    list of strings); ids ``<dataset>-<line index>``. Errors name ``path:line``."""
    items: list[Item] = []
    for lineno, row in json_lines(path):
        if not (isinstance(row, dict) and isinstance(row.get("question"), str)):
            raise CommandError(f'{path}:{lineno}: expected an object with a string "question"')
        refs = row.get("answer") or row.get("references") or []
        if isinstance(refs, str):
            refs = [refs]
        if not (isinstance(refs, list) and all(isinstance(r, str) for r in refs)):
            raise CommandError(
                f'{path}:{lineno}: "answer" / "references" must be a string or a list of strings'
            )
        question = row["question"]
        items.append(Item(f"{dataset}-{len(items)}", dataset, question, tuple(refs), question))
    return items


def read_items(path: str, task: str | None, dataset: str | None) -> list[Item]:
    """The items of the questions file ``path``: factoid questions (``task=None``; dataset
    ``dataset`` or ``questions``) or the rows of a :data:`TASKS` task (the task's dataset
    unless ``dataset`` is given)."""
    if task is None:
        return _question_items(path, dataset or "questions")
    return _task_items(path, get_task(task), dataset)
