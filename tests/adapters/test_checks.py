"""The checks behind ``liftguard traces label --check``: which code an answer holds, which
number it ends on, and the labels (or reasons for none) they give."""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

import adapters._labels._checks
import adapters._labels._sandbox
from adapters import CheckSkipped, check_code, check_number, extract_python_code, final_number


@pytest.mark.parametrize("module", [adapters._labels._checks, adapters._labels._sandbox])
def test_docstring_examples_run(module: ModuleType) -> None:
    failures, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert tried > 0 and failures == 0


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        ("def f():\n    return 1\n", "def f():\n    return 1\n"),  # no fence: all of it
        ("Sure!\n```python\nx = 1\n```\nand\n```python\ny = 2\n```", "x = 1\n"),  # the first
        ("```py\nx = 1\n```", "x = 1\n"),
        ("```Python3\nx = 1\n```", "x = 1\n"),
        ("```\nout\n```\n```python\nx = 1\n```", "x = 1\n"),  # tagged beats untagged
        ("Text\n```\nx = 1\n```", "x = 1\n"),  # else the first untagged block
        ("```python\nx = 1\n", "x = 1\n"),  # unclosed: to the end
        ("  ```python\n  x = 1\n  ```", "  x = 1\n"),
        ("```bash\nls\n```", None),  # blocks, none of them Python
        ("```json\n{}\n```\nnothing else", None),
    ],
)  # fmt: skip
def test_the_code_of_an_answer(answer: str, code: str | None) -> None:
    assert extract_python_code(answer) == code


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("Answer: 1,234", 1234.0),
        ("so she earns $5.00.", 5.0),
        ("**Answer:** $18", 18.0),
        ("The answer is 42.", 42.0),
        ("Answer: 7 apples, because 3 + 4 = 7 and 10 - 3 = 7", 7.0),  # "Answer:" wins
        ("Answer: 3\nWait, recount.\nAnswer: 4", 4.0),  # the last "Answer:"
        ("3 boxes of 12 eggs make 36 eggs", 36.0),  # else the last number
        ("It drops to -5 degrees", -5.0),
        ("half is 0.5", 0.5),
        ("1,000,000 people", 1_000_000.0),
        ("no number at all", None),
        ("", None),
    ],
)  # fmt: skip
def test_the_final_number(text: str, number: float | None) -> None:
    assert final_number(text) == number


@pytest.mark.parametrize(
    ("answer", "reference", "correct"),
    [
        ("Answer: 1,234", "1234", True),
        ("$5.00", "5", True),
        ("Step 1: 2 + 2 = 4. Step 2: 4 * 3 = 12.", "12", True),  # last-number fallback
        ("Step 1: 2 + 2 = 4. So 4 * 3 = 12.", "13", False),
        ("Answer: 70000", "70,000", True),
        ("Answer: 0.30000000000000004", "0.3", True),  # within the 1e-6 tolerance
        ("Answer: 0.3001", "0.3", False),
    ],
)  # fmt: skip
def test_check_number(answer: str, reference: str, correct: bool) -> None:
    assert check_number(answer, {"answer": reference}) is correct


@pytest.mark.parametrize(
    ("answer", "task", "reason"),
    [
        ("I cannot say.", {"answer": "5"}, "no_number"),
        ("Answer: 5", {"question": "q"}, "no_reference_number"),
        ("Answer: 5", {"answer": "many"}, "no_reference_number"),
    ],
)  # fmt: skip
def test_check_number_leaves_unlabelled(answer: str, task: dict[str, str], reason: str) -> None:
    with pytest.raises(CheckSkipped) as info:
        check_number(answer, task)
    assert info.value.reason == reason


@pytest.mark.parametrize(
    ("answer", "task", "reason"),
    [
        ("```bash\nls\n```", {"test_list": ["assert True"]}, "no_code_block"),
        ("```python\n\n```", {"test_list": ["assert True"]}, "no_code_block"),
        ("x = 1", {"text": "no tests"}, "no_tests"),
        ("x = 1", {"test_list": []}, "no_tests"),
        ("x = 1", {"test_list": ["assert True"], "test_setup_code": 3}, "no_tests"),
    ],
)  # fmt: skip
def test_check_code_leaves_unlabelled(answer: str, task: dict[str, object], reason: str) -> None:
    with pytest.raises(CheckSkipped) as info:
        check_code(answer, task)
    assert info.value.reason == reason
