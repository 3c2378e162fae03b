"""``liftguard traces label --check``: label answers by checking them against their task.

``--check code`` runs the answer's Python with the task's tests (:func:`adapters.check_code`,
in the sandbox), ``--check number`` compares final numbers (:func:`adapters.check_number`),
``--check MODULE:FUNCTION`` calls a user's own check with the same contract
(``(answer: str, task: dict) -> bool | None``, :mod:`adapters` "Labelling by checking"),
imported by name with the current directory first on the import path. The task is the
row of ``--references`` the trace matches (by ``id``, then by question; a row's question
is its ``"question"`` or ``"text"``). ``label_rule`` is ``check:code``, ``check:number``
or ``check:MODULE:FUNCTION``.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from ._common import CommandError
from ._label_refs import Labeller, match, read_tasks

__all__ = ["by_check"]

Check = Callable[[str, dict[str, Any]], object]


def _user_check(spec: str) -> Check:
    """The function ``MODULE:FUNCTION`` names; a one-line error if it does not import."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise CommandError(
            f"--check: expected code, number or MODULE:FUNCTION, got {spec!r}", status=2
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module: whatever its import raises
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise CommandError(
            f"--check {spec}: cannot import {module_name!r}: {type(exc).__name__}: {first}",
            status=2,
        ) from exc
    check = getattr(module, name, None)
    if not callable(check):
        raise CommandError(f"--check {spec}: {module_name!r} has no function {name!r}", status=2)
    return check  # type: ignore[no-any-return]


def _check(spec: str) -> Check:
    from adapters import check_code, check_number

    builtin: dict[str, Check] = {"code": check_code, "number": check_number}
    return builtin.get(spec) or _user_check(spec)


def by_check(
    spec: str, references: str, command: str = "liftguard traces label"
) -> tuple[Labeller, str]:
    """The labeller of ``--check spec`` against the tasks in ``references``, and its rule
    name (``check:spec``); ``command`` names the command in its warnings."""
    from adapters import CheckSkipped

    check, rule = _check(spec), f"check:{spec}"
    by_id, by_question = read_tasks(references)
    warned: set[str] = set()

    def label(obj: dict[str, Any]) -> tuple[bool | None, str]:
        task = match(obj, by_id, by_question)
        if task is None:
            return None, "no_task"
        try:
            verdict = check(obj["answer"], task)
        except CheckSkipped as exc:
            return None, exc.reason
        except Exception as exc:  # a user's own check failed on this answer: count it
            why = f"check_raised_{type(exc).__name__}"
            if why not in warned:
                warned.add(why)
                print(f"{command}: warning: {rule} raised {type(exc).__name__}: "
                      f"{exc} (such answers are left unlabelled)", file=sys.stderr)  # fmt: skip
            return None, why
        if verdict is None:
            return None, "check_returned_none"
        if not isinstance(verdict, bool):
            raise CommandError(
                f"{rule} returned {type(verdict).__name__}, expected True, False or None"
            )
        return verdict, ""

    return label, rule
