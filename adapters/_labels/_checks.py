"""Labels by checking: run an answer's code against its task's tests, or compare its final
number with the task's.

One contract for every check, the built-in ones and a user's own
(``liftguard traces label --check MODULE:FUNCTION``)::

    check(answer: str, task: dict[str, Any]) -> bool | None

``answer`` is the model's whole answer, ``task`` the row of the references file it
matched (by ``id``, then by question). ``True``/``False`` label the answer correct or
wrong; an answer that cannot be checked is left unlabelled: the check raises
:class:`CheckSkipped` with a short reason (counted by reason in the summary), or returns
None (counted as ``check_returned_none``).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from typing import Any

from ._sandbox import SandboxLimits, run_sandboxed

__all__ = ["CheckSkipped", "check_code", "check_number", "extract_python_code", "final_number"]

logger = logging.getLogger(__name__)


class CheckSkipped(Exception):
    """An answer a check cannot label: ``reason`` (a short snake_case phrase, e.g.
    ``"no_code_block"``) says why; the answer stays unlabelled."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)", re.M | re.S)
_PYTHON_TAGS = {"python", "py", "python3"}


def extract_python_code(answer: str) -> str | None:
    """The Python program in ``answer``.

    The rule: an answer without a fence line (one that starts with three backticks) is
    code as a whole. Otherwise the code is the first fenced block tagged ``python``,
    ``py`` or ``python3`` (any case), else the first untagged block; an unclosed block
    runs to the end of the answer. An answer whose fenced blocks are all in other
    languages has no code: None.

    Examples
    --------
    >>> extract_python_code("Here:\\n```python\\ndef f():\\n    return 1\\n```\\nDone.")
    'def f():\\n    return 1\\n'
    >>> extract_python_code("def f():\\n    return 1")
    'def f():\\n    return 1'
    >>> extract_python_code("```bash\\nls\\n```") is None
    True
    """
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(answer)]
    if not blocks:
        return None if re.search(r"^[ \t]*```", answer, re.M) else answer
    for wanted in (_PYTHON_TAGS, {""}):
        for tag, body in blocks:
            if tag in wanted:
                return body
    return None


_NUMBER = r"-?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\$?\.\d+"
_ANSWER = re.compile(r"\banswer\W{0,4}\s*(?:is\s*)?\W{0,3}(" + _NUMBER + ")", re.I)


def _to_float(text: str) -> float:
    return float(re.sub(r"[\s,$]", "", text).rstrip("."))


def final_number(text: str) -> float | None:
    """The final number of a worked answer: the one after the last ``Answer:`` if there
    is one (``**Answer:** $1,234``, ``The answer is 7``), else the last number in the
    text; commas, ``$`` and a trailing period dropped. None if there is no number.

    Examples
    --------
    >>> final_number("3 + 4 = 7 apples, so... Answer: 1,234.")
    1234.0
    >>> final_number("She pays $5.00 in total.")
    5.0
    >>> final_number("no digits here") is None
    True
    """
    found = _ANSWER.findall(text) or re.findall(_NUMBER, text)
    return _to_float(found[-1]) if found else None


def check_number(answer: str, task: Mapping[str, Any]) -> bool:
    """Whether :func:`final_number` of ``answer`` equals the number in ``task["answer"]``
    (GSM8K), within a relative tolerance of 1e-6 (absolute 1e-9 near zero).

    Raises :class:`CheckSkipped` (``no_reference_number``, ``no_number``) when either
    side has no number.

    Examples
    --------
    >>> check_number("Answer: 1,234", {"answer": "1234"})
    True
    >>> check_number("It costs $5.00.", {"answer": "5"})
    True
    """
    ref = task.get("answer")
    expected = final_number(str(ref)) if isinstance(ref, str | int | float) else None
    if expected is None:
        raise CheckSkipped("no_reference_number")
    got = final_number(answer)
    if got is None:
        raise CheckSkipped("no_number")
    return math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-9)


def check_code(
    answer: str, task: Mapping[str, Any], *, limits: SandboxLimits | None = None
) -> bool:
    """Whether the answer's code (:func:`extract_python_code`), then ``task``'s
    ``test_setup_code``, then every assert of its ``test_list`` (MBPP) run to the end in
    the sandbox (:func:`run_sandboxed`).

    Raises :class:`CheckSkipped`: ``no_tests`` (the task has no ``test_list`` of
    strings), ``no_code_block``, or ``sandbox_failed_to_start`` (nothing of the answer
    ran; the reason is logged).

    Examples
    --------
    >>> task = {"test_list": ["assert double(2) == 4"], "test_setup_code": ""}
    >>> check_code("```python\\ndef double(x):\\n    return 2 * x\\n```", task)
    True
    >>> check_code("def double(x):\\n    return x + 1", task)
    False
    """
    tests = task.get("test_list")
    if not (isinstance(tests, list) and tests and all(isinstance(t, str) for t in tests)):
        raise CheckSkipped("no_tests")
    setup = task.get("test_setup_code") or ""
    if not isinstance(setup, str):
        raise CheckSkipped("no_tests")
    code = extract_python_code(answer)
    if code is None or not code.strip():
        raise CheckSkipped("no_code_block")
    result = run_sandboxed(code, tests, setup=setup, limits=limits)
    if result.outcome == "start_failed":
        logger.warning("the sandbox did not start: %s", result.detail)
        raise CheckSkipped("sandbox_failed_to_start")
    return result.passed
