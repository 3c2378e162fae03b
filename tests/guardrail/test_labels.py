from __future__ import annotations

from pathlib import Path

import pytest

from guardrail._labels import is_correct, normalize_answer
from guardrail.traces import read_traces

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Phantom of the Opera!", "phantom of opera"),
        ("  Sunset   Blvd. ", "sunset blvd"),
        ("An apple, a day", "apple day"),
        ("Théâtre — “quoted”", "théâtre — “quoted”"),  # non-ASCII punctuation is kept
    ],
)
def test_normalize(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_is_correct_rules() -> None:
    assert is_correct("Sunset Boulevard", ["Sunset Blvd", "Sunset Boulevard"])
    assert is_correct("It is Paris, of course.", ["Paris"])
    assert not is_correct("Parisian", ["Paris"])  # whole words only
    assert not is_correct("", ["Paris"])
    # a reference already in the question does not count
    assert not is_correct("The capital of France", ["France"], "What is the capital of France?")


@pytest.mark.parametrize("model", ["gemma3", "smollm2"])
def test_labels_reproduce_the_fixture_traces(model: str) -> None:
    for t in read_traces(FIXTURES / f"traces_{model}_sample.jsonl"):
        assert is_correct(t.answer, t.references, t.question) == t.correct, t.id
