"""The final number's tokens of a worked answer, and the baselines that read them."""

from __future__ import annotations

import json
import math

import pytest

from adapters import final_number
from guardrail._answer_span import _number_chars, final_number_span
from guardrail.traces import Trace, baseline_score, parse_trace


def _number(text: str) -> str | None:
    chars = _number_chars(text)
    return None if chars is None else text[chars[0] : chars[1]]


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("3 + 4 = 7 apples, so... Answer: 1,234.", "1,234"),
        ("**Answer:** $56", "56"),
        ("The answer is 7 and not 8", "7"),
        ("Answer: 3\nAnswer: 4", "4"),  # the last marker
        ("She pays $5.00 in total.", "5.00"),  # no marker: the last number
        ("So x = -3", "-3"),
        ("It is 2 km.\n\n\\boxed{18}", "18"),
        ("\\boxed{18} is what she makes, about 20 a week", "18"),  # boxed before the last
        ("\\boxed{x = 12}", "12"),
        ("Answer: 9. Check: \\boxed{10}", "9"),  # a marker wins over a box
        ("no digits here", None),
        ("\\boxed{none}", None),
    ],
)
def test_the_final_number(text: str, number: str | None) -> None:
    assert _number(text) == number


@pytest.mark.parametrize(
    "text",
    [
        "3 + 4 = 7 apples, so... Answer: 1,234.",
        "**Answer:** $56",
        "The answer is 7 and not 8",
        "She pays $5.00 in total.",
        "Step 1: 12 * 3 = 36\nStep 2: 36 - 4 = 32\nAnswer: 32",
        "x = -3",
        "Answer: -$5",
        "It is 2 km.\n\n\\boxed{18}",
    ],
)
def test_the_number_is_the_one_the_label_check_reads(text: str) -> None:
    """Without a boxed number followed by another, the span's number is the one
    :func:`adapters.check_number` compares (the same number regex, kept in step)."""
    got = _number(text)
    assert got is not None
    assert float(got.replace(",", "").replace("$", "").replace(" ", "")) == final_number(text)


def test_tokens_that_overlap_the_number() -> None:
    tokens = ["Total", ":", " $", "1", ",", "2", "3", "4", ".\n", "Answer", ": ", "$1", ",234", "."]
    assert final_number_span(tokens) == range(11, 13)  # "$1" overlaps the number
    assert final_number_span(["Answer", ":", " ", "4", "2"]) == range(3, 5)
    assert final_number_span(["Answer:", " 42"]) == range(1, 2)  # the space token with it
    assert final_number_span(["", "7", ""]) == range(1, 2)  # empty pieces (partial UTF-8)
    assert final_number_span([]) is None
    assert final_number_span(["no", " number"]) is None


def _trace(texts: list[str], logprobs: list[float]) -> Trace:
    tokens = [
        {"id": i, "text": t, "logprob": lp, "top": [[i, lp]], "entropy": 0.1,
         "logz": {"1.5": 0.0, "2.0": 0.0}, "prompt_free_logprob": -1.0}
        for i, (t, lp) in enumerate(zip(texts, logprobs, strict=True))
    ]  # fmt: skip
    obj = {"id": "g-1", "dataset": "gsm8k", "model": "m", "question": "q", "references": ["18"],
           "prompt": "p", "answer": "".join(texts), "correct": True, "vocab_size": 100,
           "top_k": 1, "tokens": tokens}  # fmt: skip
    return parse_trace(json.loads(json.dumps(obj)))


def test_final_number_baselines() -> None:
    t = _trace(["So", " 1", "8", ".\n", "Answer", ":", " ", "1", "8"],
               [-0.1, -2.0, -3.0, -0.2, -0.1, -0.1, -0.1, -0.5, -1.5])  # fmt: skip
    assert baseline_score(t, "final_mean") == pytest.approx(-1.0)
    assert baseline_score(t, "final_min") == pytest.approx(-1.5)
    none = _trace(["no", " number"], [-0.1, -0.2])
    assert baseline_score(none, "final_mean") == -math.inf
    assert baseline_score(none, "final_min") == -math.inf
