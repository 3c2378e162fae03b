"""The two reference rules of :mod:`guardrail._labels` on hand-checked cases: ``contains``
(:func:`is_correct`) and token F1 (:func:`token_f1`, :func:`is_correct_f1`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from guardrail import ConfigError
from guardrail._labels import normalize_answer
from guardrail.traces import DEFAULT_F1_THRESHOLD, is_correct, is_correct_f1, token_f1

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize(
    ("answer", "references", "f1"),
    [
        # the short answers: one of a two-word reference's words, 2 * 1 / (1 + 2)
        ("fusion", ["nuclear fusion"], 2 / 3),
        ("pressure", ["air pressure"], 2 / 3),
        ("Paris", ["Paris"], 1.0),
        # punctuation deleted, articles dropped, case folded
        ("The Beatles!", ["beatles"], 1.0),
        ("U.S.A.", ["USA"], 1.0),
        ("an apple, a pear", ["Apple pear"], 1.0),
        # the best reference counts
        ("fusion", ["nuclear fusion", "cold fusion reactor", "Fusion"], 1.0),
        # a sentence that names the answer: one token of five, 2 * 1 / (5 + 1)
        ("The capital of France is Paris.", ["Paris"], 1 / 3),
        # one shared word of two against two: the band the default threshold leaves out
        ("George III", ["George V"], 0.5),
        # tokens count with multiplicity: 2 * 1 / (2 + 1)
        ("paris paris", ["Paris"], 2 / 3),
        ("red and white", ["white and red"], 1.0),
        ("London", ["Paris", "Rome"], 0.0),
    ],
)
def test_token_f1_on_hand_checked_cases(answer: str, references: list[str], f1: float) -> None:
    assert token_f1(answer, references) == pytest.approx(f1, abs=1e-12)


@pytest.mark.parametrize("answer", ["", "   ", "The", "a an the", "...", "?!"])
def test_an_answer_that_normalises_to_nothing_scores_zero(answer: str) -> None:
    assert normalize_answer(answer) == ""
    assert token_f1(answer, ["the", "x"]) == 0.0
    assert not is_correct_f1(answer, ["x"], threshold=1e-9) and not is_correct(answer, ["x"])


def test_no_usable_reference_scores_zero() -> None:
    assert token_f1("Paris", []) == 0.0
    assert token_f1("Paris", ["", "The", "!"]) == 0.0
    # a reference the question already holds is skipped, as the contains rule skips it
    question = "Is the capital of France Paris or Lyon?"
    assert token_f1("Paris", ["Paris"], question) == 0.0
    assert not is_correct("Paris", ["Paris"], question)
    assert token_f1("Paris", ["Paris", "Paris, France"], question) == pytest.approx(2 / 3)


def test_the_rules_disagree_both_ways() -> None:
    assert not is_correct("fusion", ["nuclear fusion"])
    assert is_correct_f1("fusion", ["nuclear fusion"])
    assert not is_correct("pressure", ["air pressure"])
    assert is_correct_f1("pressure", ["air pressure"])
    sentence = "The capital of France is Paris."
    assert is_correct(sentence, ["Paris"]) and not is_correct_f1(sentence, ["Paris"])


def test_the_threshold() -> None:
    assert DEFAULT_F1_THRESHOLD == 0.6
    # inclusive: exactly the threshold is correct
    assert is_correct_f1("George III", ["George V"], threshold=0.5)
    assert not is_correct_f1("George III", ["George V"])
    assert is_correct_f1("Paris", ["paris"], threshold=1.0)
    assert not is_correct_f1("Paris France", ["paris"], threshold=1.0)
    for bad in (0.0, -0.1, 1.5, math.nan, math.inf):
        with pytest.raises(ConfigError, match=r"threshold: expected a number in \(0, 1\]"):
            is_correct_f1("Paris", ["Paris"], threshold=bad)


@pytest.mark.parametrize("name", ["gemma3", "smollm2", "gemma3_nq", "smollm2_nq"])
def test_an_answer_that_equals_a_reference_is_correct_by_both_rules(name: str) -> None:
    """On the committed samples: contains still gives each file's own labels; where the
    normalised answer equals a usable reference, F1 is 1; F1 is 0 exactly when no
    reference shares a token."""
    path = FIXTURES / f"traces_{name}_sample.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        answer, refs, question = row["answer"], row["references"], row["question"]
        assert is_correct(answer, refs, question) == row["correct"]
        f1 = token_f1(answer, refs, question)
        assert 0.0 <= f1 <= 1.0
        a, q = normalize_answer(answer), normalize_answer(question)
        usable = [r for r in map(normalize_answer, refs) if r and f" {r} " not in f" {q} "]
        if a and a in usable:
            assert f1 == 1.0
        shared = any(set(a.split()) & set(r.split()) for r in usable)
        assert (f1 > 0.0) == shared


@pytest.mark.parametrize(
    ("answer", "reference", "correct"),
    [
        # numbers are compared by value: trailing zeros and thousands separators
        ("approximately 100.0 degrees Celsius", "100", True),
        ("100", "100.0", True),
        ("1,000 metres", "1000", True),
        ("1000", "1,000", True),
        ("It boils at 100 °C.", "100", True),
        ("$100", "100", True),
        ("In 1914.", "1914", True),
        ("3.50", "3.5", True),
        # ... never by digits: deleting the point no longer makes 100.0 into 1000
        ("1000 degrees", "100", False),
        ("100.0", "1000", False),
        ("3.5", "35", False),
        ("1915", "1914", False),
        # a number glued to letters stays part of its word
        ("100km", "100", False),
        ("COVID-19", "COVID-19", True),
        ("December 7, 1941", "December", True),
    ],
)
def test_contains_compares_numbers_by_value(answer: str, reference: str, correct: bool) -> None:
    assert is_correct(answer, [reference]) is correct


def test_contains_reads_words_not_meaning() -> None:
    """The contradiction case the docs warn about: the answer names the reference and then
    takes it back, and contains calls it correct."""
    answer = "Leonardo da Vinci, but on reflection Michelangelo was the actual artist"
    assert is_correct(answer, ["Leonardo da Vinci"])
