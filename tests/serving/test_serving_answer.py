"""The serving core's answer (``adapters._serving._answer.ServedAnswer``): its
docstring example runs, both server front ends use it, and observe mode ends an answer
at its token limit."""

from __future__ import annotations

import doctest
from typing import Any

import adapters._serving._answer as answer_module
from adapters._litellm._answer import Answer
from adapters._proxy._answer import ProxyAnswer
from adapters._serving._answer import ServedAnswer
from adapters._serving._prepare import GuardedRequest
from guardrail import Certificate, ModelIdentity, SkeletonSpec, StreamPolicy


def _cert() -> Certificate:
    return Certificate(
        StreamPolicy(aggregate="min"), 2.5, SkeletonSpec("uniform", {"vocab_size": 1000}),
        ModelIdentity("m"),
    )  # fmt: skip


def _chunk(text: str, finish: str | None = None) -> dict[str, Any]:
    entry = {"token": text, "logprob": -0.1, "bytes": None, "top_logprobs": []}
    return {"choices": [{"index": 0, "delta": {"content": text},
                         "logprobs": {"content": [entry] if text else None},
                         "finish_reason": finish}]}  # fmt: skip


def test_the_docstring_example_runs() -> None:
    result = doctest.testmod(answer_module)
    assert result.attempted > 0 and result.failed == 0


def test_both_server_front_ends_guard_with_the_one_class() -> None:
    assert issubclass(ProxyAnswer, ServedAnswer) and issubclass(Answer, ServedAnswer)


def test_observe_mode_shows_everything_but_ends_at_the_token_limit() -> None:
    answer: ServedAnswer[dict[str, Any]] = ServedAnswer(
        GuardedRequest("r", _cert(), "v1", "observe", max_tokens=3)
    )
    shown = [c for t in ("a", "b", "c") for c in answer.feed(_chunk(t))]
    assert len(shown) == 3 and not answer.blocked  # observe: nothing held, nothing blocked
    assert answer.feed(_chunk("d")) == [] and answer.blocked  # the 4th token: past the limit
    assert answer.error == "over_token_limit" and not answer.certified
    assert answer.end() == []


def test_a_dict_chunk_gets_the_verdict_on_a_copy() -> None:
    """The proxy keeps the upstream's chunk dicts (the recorder reads them): the verdict goes
    on a copy, in every mode that releases the finish chunk at the end."""
    for mode in ("buffered", "passthrough"):
        answer: ServedAnswer[dict[str, Any]] = ServedAnswer(
            GuardedRequest("r", _cert(), "v1", mode, max_tokens=8)
        )
        answer.feed(_chunk("Paris"))
        finish = _chunk("", "stop")
        answer.feed(finish)
        out = answer.end()
        assert out[-1]["liftguard"]["state"] == "certified"
        assert "liftguard" not in finish
