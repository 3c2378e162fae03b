"""What ``liftguard demo`` prints, without the local model: a scripted model streams fixed
tokens through the shipped single-score certificate (the weakest token's lift against a
uniform skeleton, tau 9.43: a token of logprob -0.1 passes, one of -3 blocks at once), and
the summary is printed from made-up results. The real demo runs in
tests/adapters/test_local_model.py and tests/docs/test_docs_local.py."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from adapters.cli._demo import (
    DemoResult,
    _Screen,
    _summary,
    load_demo_calibration,
    load_demo_certificate,
    run_question,
)
from guardrail import State, TokenEvent

ROOT = Path(__file__).resolve().parents[2]
SURE, UNSURE = -0.1, -3.0


@dataclass(frozen=True)
class _Token:
    text: str
    logprob: float

    def event(self, index: int) -> TokenEvent:
        return TokenEvent(self.text, logprob=self.logprob, index=index)


class _Scripted:
    """A model that answers every prompt with the same tokens (greedy, like the demo's)."""

    def __init__(self, *tokens: tuple[str, float]) -> None:
        self.tokens = [_Token(text, lp) for text, lp in tokens]

    def generate(self, prompt: str, max_tokens: int = 24, **_: Any) -> Iterator[_Token]:
        yield from self.tokens[:max_tokens]


WRONG = _Scripted(("The", SURE), (" element", SURE), (" is", SURE), (" iron", UNSURE), (".", SURE))
RIGHT = _Scripted(("Au", SURE), (".", SURE))


def _ask(model: _Scripted, mode: str, max_tokens: int = 24) -> tuple[DemoResult, str]:
    out = io.StringIO()
    certificate = load_demo_certificate("smollm2_certificate.json")
    result = run_question(model, certificate, "Which element has the atomic number 8?",
                          ["Oxygen"], mode=mode, screen=_Screen(out, live=False),
                          max_tokens=max_tokens)  # fmt: skip
    return result, out.getvalue()


def test_passthrough_calls_withheld_only_what_was_not_shown() -> None:
    result, out = _ask(WRONG, "passthrough")
    assert result.verdict.state is State.BLOCKED and result.n_tokens == 4
    assert result.shown == "The element is" and result.withheld == "iron."
    assert "A: The element is\n" in out
    assert "   the rest, never shown: 'iron.'; reference check: wrong\n" in out
    assert "withheld" not in out  # the text before the block was shown


def test_buffered_withholds_the_whole_answer() -> None:
    result, out = _ask(WRONG, "buffered")
    assert result.shown == "" and result.withheld == result.answer == "The element is iron."
    assert "A: (nothing shown)\n" in out
    assert "   withheld (never shown): 'The element is iron.'; reference check: wrong\n" in out


@pytest.mark.parametrize("model", [WRONG, RIGHT], ids=["blocked", "certified"])
def test_the_verdict_line_names_its_state_once(model: _Scripted) -> None:
    result, out = _ask(model, "buffered")
    word = result.verdict.state.value
    line = next(x for x in out.splitlines() if x.startswith(f"   {word.upper()}: "))
    assert not line.startswith(f"   {word.upper()}: {word}:"), line
    assert line.removeprefix(f"   {word.upper()}: ") in result.verdict.reason


def test_an_answer_at_the_token_limit_is_judged_as_the_certificate_says() -> None:
    """The shipped certificates count an answer cut at the token limit as an answer
    (``on_length="answer"``: their calibration answers were cut at 24 tokens too); the demo
    says so where it happens, and the README says the same."""
    result, out = _ask(RIGHT, "buffered", max_tokens=2)
    assert result.verdict.state is State.CERTIFIED and result.n_tokens == 2
    assert "(it ended at the 2-token limit: this certificate judges such an answer" in out
    assert "on_length='answer'" in out
    _, out = _ask(_Scripted(("Au", SURE), (".", SURE), ("\n", SURE)), "buffered")
    assert "token limit" not in out  # ended by the model: nothing to say
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "on_length" in readme and "token limit" in readme


def _results() -> list[DemoResult]:
    right, _ = _ask(RIGHT, "buffered")
    wrong, _ = _ask(WRONG, "passthrough")
    slow = replace(right, seconds=20.0)  # a busy machine: well under one token a second
    return [slow, replace(slow, correct=False), replace(wrong, seconds=10.0)]


def test_the_summary_rate_of_a_slow_run_is_not_zero() -> None:
    out = io.StringIO()
    _summary(_results(), load_demo_calibration(), out)
    match = re.search(r"(\d+) tokens read in (\S+) s \((\S+) tok/s\)", out.getvalue())
    assert match is not None and match[1] == "8" and match[2] == "50.0"
    assert match[3] == "0.16"


def test_the_summary_reconciles_the_guarantee_with_what_the_demo_let_through() -> None:
    calibration = load_demo_calibration()
    out = io.StringIO()
    _summary(_results(), calibration, out)
    text = out.getvalue()
    assert f"at most {calibration.risk:.0%} of the answers this certificate lets through" in text
    assert (
        "How many it certifies is not part of the guarantee: it certified "
        f"{calibration.coverage:.0%} of its calibration answers and 67% of these 3" in text
    )
    assert "withheld 0 of 1 would have been correct" in text


def test_the_summary_states_the_promise_the_certificate_keeps() -> None:
    strict = load_demo_calibration()
    cheap = replace(strict, extra={**strict.extra, "promise": "in expectation"})
    for calibration, said, unsaid in ((strict, "with probability 0.95", "on average"),
                                      (cheap, "on average over draws", "with probability")):
        out = io.StringIO()
        _summary(_results(), calibration, out)
        line = next(x for x in out.getvalue().splitlines() if "guarantee in plain words" in x)
        assert said in line and unsaid not in line, line


def test_the_passthrough_summary_says_blocked_not_withheld() -> None:
    out = io.StringIO()
    _summary(_results(), load_demo_calibration(), out, mode="passthrough")
    text = out.getvalue()
    assert "withheld" not in text and "blocked 0 of 1 would have been correct" in text
