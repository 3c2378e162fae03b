"""What ``liftguard traces label`` reads besides the traces' labels: the trace lines it
labels, and the reference or task files it matches them with (by ``id``, then by question:
a row's ``question``, or MBPP's ``text``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ._common import CommandError, json_lines
from ._recorded import recorded_lines

__all__ = ["Labeller", "lines", "match", "read_references", "read_tasks", "usable"]

Labeller = Callable[[dict[str, Any]], tuple[bool | None, str]]


def lines(path: str, torn: Callable[[int], None]) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, obj in recorded_lines(path, torn):
        if not isinstance(obj, dict):
            raise CommandError(f"{path}:{lineno}: expected a JSON object")
        for key, kind in (("question", str), ("answer", str), ("tokens", list)):
            if not isinstance(obj.get(key), kind):
                raise CommandError(
                    f"{path}:{lineno}: expected {key!r} ({kind.__name__}) in a trace line"
                )
        yield lineno, obj


def _question(row: dict[str, Any]) -> str | None:
    """A references row's question: ``"question"``, else ``"text"`` (MBPP's task text)."""
    for key in ("question", "text"):
        if isinstance(row.get(key), str):
            return str(row[key])
    return None


def _keyed_rows(path: str) -> Iterator[tuple[int, dict[str, Any], str | None, str | None]]:
    """``(line, row, id, question)`` of each row of a references file (see the module
    docstring); a row with neither an id nor a question is a one-line error."""
    for lineno, value in json_lines(path):
        row: dict[str, Any] = value if isinstance(value, dict) else {}
        key_id, question = row.get("id"), _question(row)
        if not isinstance(key_id, str) and question is None:
            raise CommandError(f'{path}:{lineno}: expected a "question" (or "text") or an "id"')
        yield lineno, row, key_id if isinstance(key_id, str) else None, question


def read_references(path: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """``(by id, by question)`` from a references JSONL file (see the module docstring)."""
    by_id: dict[str, list[str]] = {}
    by_question: dict[str, list[str]] = {}
    for lineno, row, key_id, question in _keyed_rows(path):
        refs = row.get("references", row.get("answer"))
        if isinstance(refs, str):
            refs = [refs]
        if not (isinstance(refs, list) and refs and all(isinstance(r, str) for r in refs)):
            raise CommandError(
                f'{path}:{lineno}: expected "answer" or "references" (a string or a '
                "non-empty list of strings)"
            )
        if key_id is not None:
            by_id.setdefault(key_id, []).extend(refs)
        if question is not None:
            by_question.setdefault(question.strip(), []).extend(refs)
    return by_id, by_question


def read_tasks(path: str) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """``(by id, by question)`` of the whole rows of a references file, for ``--check``
    (the first row of an id or a question wins)."""
    by_id: dict[str, dict[str, Any]] = {}
    by_question: dict[str, dict[str, Any]] = {}
    for _, row, key_id, question in _keyed_rows(path):
        if key_id is not None:
            by_id.setdefault(key_id, row)
        if question is not None:
            by_question.setdefault(question.strip(), row)
    return by_id, by_question


_T = TypeVar("_T")


def match(obj: dict[str, Any], by_id: dict[str, _T], by_question: dict[str, _T]) -> _T | None:
    """What a trace matches: by its ``id`` first, then by its question text."""
    return by_id.get(str(obj.get("id"))) or by_question.get(obj["question"].strip())


def usable(obj: dict[str, Any]) -> bool:
    """Every token has a finite logprob <= 0 (not OpenAI's -9999)."""
    for token in obj["tokens"]:
        lp = token.get("logprob") if isinstance(token, dict) else None
        if isinstance(lp, bool) or not isinstance(lp, int | float):
            return False
        if not math.isfinite(lp) or lp > 1e-6 or lp <= -9999.0:
            return False
    return True


