"""``escalated_chat_completion``: the real ``openai.AsyncOpenAI`` client against the loopback
server (``tests/sse_server.py``), which streams the single pass and answers each sample
request (not streamed) with a JSON completion chosen by its ``seed``.

The certificate is the ``api`` group's fitted statistic on the committed sample
(``tests/fitted_certs.py``), its context holding answers to ``len(WORDS)`` tokens. The
answer's final score, :data:`SCORE`, is computed as :meth:`Escalation.band
<guardrail.evaluate.Escalation.band>` reads scores: ``fitted_method(traces,
certificate).final`` on the same answer recorded as a trace. Each test places a hand-made
:class:`~guardrail.evaluate.Escalation`'s band around it: above, in or below. Its ``tau``
of 1.5 shows an answer in the band iff at least half of its samples agree with it.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from typing import Any

import openai
import pytest
from fitted_certs import certificate as fitted_certificate
from markdown_blocks import block
from sse_server import Reply, SSEServer, chat_chunk, clean_answer, token_entry

from adapters import EscalatedAnswer, escalated_chat_completion, final_number
from guardrail import (
    Certificate,
    ConfigError,
    ContextMismatchWarning,
    GenerationContext,
    ModelIdentity,
    SkeletonSpec,
    StreamPolicy,
    TokenEvent,
)
from guardrail.evaluate import Escalation, fitted_method
from guardrail.traces import parse_trace

WORDS = ["We", " add", " 40", " and", " 2", ".", " Answer", ":", " 42"]
TEXT = "".join(WORDS)
LP = -0.05
MESSAGES = [{"role": "user", "content": "What is 40 + 2?"}]
K = 5
RIGHT, WRONG = "Answer: 42", "Answer: 41"


def _certificate() -> Certificate:
    cert = fitted_certificate("api", api_model="gpt-test")
    return replace(cert, context=GenerationContext(max_tokens=len(WORDS)))


@cache
def _score() -> float:
    """The answer's final score as the band is read: ``fitted_method(...).final``."""
    top = [[j + 1, -5.0 - j] for j in range(4)]  # as ``token_entry`` sends them
    tokens = [
        {"id": 100 + i, "text": w, "logprob": LP, "top": [[100 + i, LP], *top]}
        for i, w in enumerate(WORDS)
    ]
    stat = _certificate().statistic
    assert stat is not None
    trace = parse_trace({
        "id": "q", "dataset": "demo", "model": "gpt-test", "question": "What is 40 + 2?",
        "references": ["42"], "prompt": "What is 40 + 2?", "answer": TEXT, "correct": True,
        "vocab_size": stat.vocab_size, "top_k": 5, "tokens": tokens,
    })  # fmt: skip
    return float(fitted_method([trace], _certificate()).final[0])


def _rule(low: float, high: float, tau: float = 1.5) -> Escalation:
    return Escalation(low=low, high=high, tau=tau, risk=0.2, delta=0.05)


def above() -> Escalation:
    return _rule(_score() - 3.0, _score() - 0.1)


def in_band() -> Escalation:
    return _rule(_score() - 1.0, _score() + 1.0)


def below() -> Escalation:
    return _rule(_score() + 0.1, _score() + 1.0)


def completion(content: str | None, tokens: int = 7) -> Reply:
    """A non-streamed ``chat.completion`` with one choice and its ``usage``."""
    message = {"role": "assistant", "content": content, "refusal": None}
    usage = {"prompt_tokens": 9, "completion_tokens": tokens, "total_tokens": 9 + tokens}
    return Reply(body={
        "id": "chatcmpl-sample", "object": "chat.completion", "created": 1700000000,
        "model": "gpt-test", "usage": usage,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
    })  # fmt: skip


def serve(server: SSEServer, samples: Callable[[int], Reply], single: Reply | None = None) -> None:
    """The single pass (streamed: ``single``, by default the clean answer) and each sample
    by its seed."""
    first = clean_answer(WORDS, LP) if single is None else single
    server.responder = lambda body: first if body.get("stream") else samples(body["seed"])


def agreeing(n: int) -> Callable[[int], Reply]:
    """Seeds below ``n`` agree with the answer (42), the others do not (41); each sample
    reports ``10 + seed`` completion tokens."""
    return lambda seed: completion(RIGHT if seed < n else WRONG, tokens=10 + seed)


def sample_records(server: SSEServer) -> list[dict[str, Any]]:
    return [r.body for r in server.records if not r.body.get("stream")]


async def escalate(
    client: openai.AsyncOpenAI, escalation: Escalation, **kw: Any
) -> EscalatedAnswer:
    kw.setdefault("final_answer", final_number)
    kw.setdefault("certificate", _certificate())
    return await escalated_chat_completion(client, escalation=escalation, messages=MESSAGES, **kw)


# --- the score ---------------------------------------------------------------------------------


def test_early_verdicts_would_decide_this_answer_before_its_end() -> None:
    """So the tests below can tell the final score from the score at an early verdict: at
    tau ``low`` of :func:`above` the certificate's own rule certifies the answer early,
    at a score still in the band."""
    monitor = replace(_certificate(), tau=above().low).monitor()
    top = tuple((f"alt{j}", -5.0 - j) for j in range(4))
    for i, w in enumerate(WORDS):
        verdict = monitor.update(TokenEvent(w, LP, top_logprobs=((w, LP), *top), index=i))
        if verdict.final:
            break
    assert verdict.final and verdict.t < len(WORDS)
    assert above().in_band(monitor.value) and not above().in_band(_score())


async def test_above_the_band_the_answer_is_shown_without_samples(
    server: SSEServer, client: openai.AsyncOpenAI
) -> None:
    serve(server, agreeing(K))
    answer = await escalate(client, above())
    assert answer == EscalatedAnswer(TEXT, True, "certified", pytest.approx(_score()), None,
                                     len(WORDS), 0)  # fmt: skip
    assert len(server.records) == 1  # no sample request
    sent = server.records[0].body
    assert (sent["stream"], sent["logprobs"], sent["top_logprobs"]) == (True, True, 20)
    assert sent["max_tokens"] == len(WORDS) and sent["model"] == "gpt-test"  # the context


# --- in the band -------------------------------------------------------------------------------


async def test_in_the_band_agreeing_samples_show_the_answer(
    server: SSEServer, client: openai.AsyncOpenAI
) -> None:
    serve(server, agreeing(3))  # 3 of 5 agree: 0.6 >= 0.5
    answer = await escalate(client, in_band())
    assert answer == EscalatedAnswer(TEXT, True, "agreed", pytest.approx(_score()), 0.6,
                                     len(WORDS), sum(10 + s for s in range(K)))  # fmt: skip
    single, samples = server.records[0].body, sample_records(server)
    assert len(server.records) == 1 + K and len(samples) == K
    assert sorted(s["seed"] for s in samples) == list(range(K))
    for s in samples:
        assert s["temperature"] == 0.7 and s["messages"] == single["messages"] == MESSAGES
        assert (s["model"], s["max_tokens"]) == ("gpt-test", len(WORDS))
        assert not {"stream", "stream_options", "logprobs", "top_logprobs", "n"} & set(s)


async def test_in_the_band_disagreeing_samples_refuse_the_answer(
    server: SSEServer, client: openai.AsyncOpenAI
) -> None:
    serve(server, agreeing(2))  # 2 of 5 agree: 0.4 < 0.5
    answer = await escalate(client, in_band(), samples=K, sample_temperature=1.0)
    assert answer == EscalatedAnswer(None, False, "disagreed", pytest.approx(_score()), 0.4,
                                     len(WORDS), sum(10 + s for s in range(K)))  # fmt: skip
    assert [s["temperature"] for s in sample_records(server)] == [1.0] * K


async def test_a_failing_sample_request_refuses_the_answer(
    server: SSEServer, client: openai.AsyncOpenAI
) -> None:
    def samples(seed: int) -> Reply:
        if seed == 3:
            return Reply(status=500, body={"error": {"message": "overloaded", "type": "server"}})
        return agreeing(K)(seed)

    serve(server, samples)
    answer = await escalate(client, in_band())
    assert (answer.text, answer.shown, answer.cause) == (None, False, "sample_failed")
    assert answer.consistency is None and answer.score == pytest.approx(_score())
    assert answer.sample_tokens == sum(10 + s for s in range(K) if s != 3)
    assert len(sample_records(server)) == K


async def test_an_answer_without_a_final_answer_agrees_with_nothing(
    server: SSEServer, client: openai.AsyncOpenAI
) -> None:
    """``final_answer`` giving ``None`` for the answer: agreement 0, even with samples
    whose text is the same."""
    serve(server, lambda seed: completion(TEXT))
    answer = await escalate(client, in_band(), final_answer=lambda text: None)
    assert (answer.shown, answer.cause, answer.consistency, answer.text) == (
        False, "disagreed", 0.0, None,
    )  # fmt: skip


async def test_samples_without_a_final_answer_count_against_it(
    server: SSEServer, client: openai.AsyncOpenAI
) -> None:
    """A sample with no number, or with no text at all, agrees with nothing: 2 of 5."""
    texts = [RIGHT, RIGHT, "I cannot tell.", None, None]
    serve(server, lambda seed: completion(texts[seed]))
    answer = await escalate(client, in_band())
    assert (answer.shown, answer.cause, answer.consistency) == (False, "disagreed", 0.4)


@pytest.mark.parametrize(
    ("tau", "rule", "shown", "cause"),
    [
        (0.5, in_band, True, "certified"),  # every answer in the band is shown
        (3.5, in_band, False, "below_threshold"),  # none is
        (3.99, above, False, "below_threshold"),  # the threshold lies above this score
    ],
)
async def test_where_samples_cannot_change_the_decision_none_are_drawn(
    server: SSEServer,
    client: openai.AsyncOpenAI,
    tau: float,
    rule: Callable[[], Escalation],
    shown: bool,
    cause: str,
) -> None:
    serve(server, agreeing(K))
    answer = await escalate(client, replace(rule(), tau=tau))
    assert (answer.shown, answer.cause, answer.text) == (shown, cause, TEXT if shown else None)
    assert len(server.records) == 1


# --- refused without samples -------------------------------------------------------------------


async def test_below_the_band_the_answer_is_refused_without_samples(
    server: SSEServer, client: openai.AsyncOpenAI
) -> None:
    serve(server, agreeing(K))
    answer = await escalate(client, below())
    assert answer == EscalatedAnswer(None, False, "below_band", pytest.approx(_score()), None,
                                     len(WORDS), 0)  # fmt: skip
    assert len(server.records) == 1


def _missing_logprob() -> Reply:
    """The answer with its third token's logprobs missing; the server then waits for the
    client to close (so a stream stopped there is seen stopped, however slow the test)."""
    reply = clean_answer(WORDS, LP)
    reply.events[3] = chat_chunk({"content": WORDS[2]}, None)
    reply.hold_after = 4
    return reply


def _cut(finish: str | None) -> Reply:
    reply = clean_answer(WORDS, LP)
    if finish is None:  # cut off: no finish, no [DONE]
        reply.events.pop()
        reply.done = False
    else:
        reply.events[-1] = chat_chunk({}, None, finish)
    return reply


@pytest.mark.parametrize(
    "single",
    [_missing_logprob, lambda: _cut("length"), lambda: _cut(None), lambda: _cut("tool_calls")],
    ids=["missing-logprob", "token-limit", "cut-off", "tool-calls"],
)
async def test_a_blocked_or_unfinished_answer_is_refused_without_samples(
    server: SSEServer, client: openai.AsyncOpenAI, single: Callable[[], Reply]
) -> None:
    serve(server, agreeing(K), single())
    answer = await escalate(client, in_band())
    assert (answer.text, answer.shown, answer.cause, answer.score) == (None, False, "blocked",
                                                                      None)  # fmt: skip
    assert len(server.records) == 1


@pytest.mark.parametrize(
    ("policy", "single", "cause"),
    [
        ({"on_length": "answer"}, lambda: _cut("length"), "blocked"),
        ({"final_rule": "block"}, lambda: clean_answer(WORDS, LP), "certified"),
    ],
    ids=["cut-answer-counted", "no-final-rule"],
)
async def test_a_finished_answer_is_judged_by_its_final_score_whatever_the_policy_says(
    server: SSEServer,
    client: openai.AsyncOpenAI,
    policy: dict[str, Any],
    single: Callable[[], Reply],
    cause: str,
) -> None:
    """The band is read on finished answers' final scores: an answer cut at its token limit
    is refused though the certificate counts it as an answer, and one that finished is
    judged by its score though the certificate decides only early (``final_rule='block'``)."""
    cert = _certificate()
    serve(server, agreeing(K), single())
    answer = await escalate(client, above(), certificate=replace(cert, policy=replace(
        cert.policy, **policy)))  # fmt: skip
    assert answer.cause == cause and len(server.records) == 1


async def test_an_answer_blocked_early_stops_the_stream(
    server: SSEServer, client: openai.AsyncOpenAI
) -> None:
    serve(server, agreeing(K), _missing_logprob())
    answer = await escalate(client, in_band())
    assert answer.cause == "blocked" and answer.answer_tokens == 2
    record = await server.records[0].finished()
    assert record.client_closed and record.sent == 4  # the rest was never sent


def test_the_streamed_tokens_carry_the_alternatives_the_statistic_reads() -> None:
    assert len(token_entry("x", LP)["top_logprobs"]) == _certificate().reads.alternatives


# --- the request -------------------------------------------------------------------------------


async def test_a_changed_setting_is_warned_about_at_the_callers_line(
    server: SSEServer, client: openai.AsyncOpenAI
) -> None:
    serve(server, agreeing(K))
    certificate = replace(_certificate(), context=GenerationContext(max_tokens=len(WORDS),
                                                                    temperature=0.0))  # fmt: skip
    with pytest.warns(ContextMismatchWarning, match="temperature=0.3") as warned:
        answer = await escalated_chat_completion(
            client, certificate=certificate, escalation=in_band(), final_answer=final_number,
            messages=MESSAGES, temperature=0.3,
        )  # fmt: skip
    assert [w.filename for w in warned] == [__file__]
    assert answer.cause == "agreed" and server.records[0].body["temperature"] == 0.3
    assert {s["temperature"] for s in sample_records(server)} == {0.7}


async def test_the_samples_keep_extra_body_but_not_what_they_replace(
    server: SSEServer, client: openai.AsyncOpenAI
) -> None:
    serve(server, agreeing(K))
    with pytest.warns(ContextMismatchWarning, match="repeat_penalty=1.1"):
        await escalate(client, in_band(), extra_body={"temperature": 0.1, "repeat_penalty": 1.1})
    assert server.records[0].body["temperature"] == 0.1  # the single pass as asked
    for s in sample_records(server):
        assert s["temperature"] == 0.7 and s["repeat_penalty"] == 1.1


def _lift_certificate() -> Certificate:
    return Certificate(StreamPolicy(), 2.0, SkeletonSpec("uniform", {"vocab_size": 1000}),
                       ModelIdentity("gpt-test"))  # fmt: skip


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"samples": 0}, "samples must be an integer >= 1"),
        ({"samples": True}, "samples must be an integer >= 1"),
        ({"samples": 2.0}, "samples must be an integer >= 1"),
        ({"sample_temperature": math.nan}, "sample_temperature must be a finite number"),
        ({"sample_temperature": math.inf}, "sample_temperature must be a finite number"),
        ({"sample_temperature": -0.1}, "sample_temperature must be a finite number"),
        ({"sample_temperature": "0.7"}, "sample_temperature must be a finite number"),
        ({"stream": True}, "takes no stream="),
        ({"stream": False}, "takes no stream="),
        ({"n": 1}, "takes no n="),
        ({"extra_body": {"n": 3}}, "takes no n="),
        ({"final_answer": "42"}, "final_answer must be a callable"),
        ({"escalation": (0.0, 1.0)}, "escalation must be a guardrail.evaluate.Escalation"),
        ({"certificate": "cert.json"}, "certificate must be a guardrail.Certificate"),
        ({"certificate": _lift_certificate()}, r"escalation.low=.* is off this lift"),
        ({"logprobs": False}, "needs logprobs=True"),
        ({"top_logprobs": 3}, "reads 5 alternatives"),
    ],
)
async def test_bad_arguments_are_refused_before_any_request(
    server: SSEServer, client: openai.AsyncOpenAI, kw: dict[str, Any], match: str
) -> None:
    args: dict[str, Any] = {"certificate": _certificate(), "escalation": in_band(),
                            "final_answer": final_number, "messages": MESSAGES, **kw}  # fmt: skip
    with pytest.raises(ConfigError, match=match):
        await escalated_chat_completion(client, **args)
    assert server.records == []


# --- the docs ----------------------------------------------------------------------------------


async def test_the_guarding_page_example(
    server: SSEServer,
    client: openai.AsyncOpenAI,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``docs/guarding-code-and-reasoning.md``'s call, run as written with its names
    defined: an answer in the band whose samples agree."""
    serve(server, agreeing(K))
    code = block("docs/guarding-code-and-reasoning.md",
                 "from adapters import escalated_chat_completion, final_number").text  # fmt: skip
    names = {"client": client, "certificate": _certificate(), "rule": in_band(),
             "question": MESSAGES[0]["content"]}  # fmt: skip
    compiled = compile(code, "<docs block>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    await eval(compiled, names)
    assert capsys.readouterr().out == (
        f"{TEXT}\n{len(WORDS)} tokens in the answer, {sum(10 + s for s in range(K))} in samples\n"
    )
    assert len(sample_records(server)) == K
