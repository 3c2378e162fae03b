"""A fitted monitor's early verdicts bound the score over the continuations the answer's
token limit allows, so every adapter gives it the limit the request really has: the
request's ``max_tokens`` (the certificate's, where the adapter fills it in), and none at
all where it cannot know (a LangChain run without ``max_tokens``). An answer that runs
past the limit its monitor assumed is blocked at its first token past it, cause
``over_token_limit``, even after an early certification.

The real ``openai`` and ``langchain_openai`` clients run against the loopback SSE
server, which sends six confident tokens whatever ``max_tokens`` the request asked for
(as an upstream that ignores it would); the certificate's context says 4.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import openai
import pytest
from fitted_certs import certificate as fitted_certificate
from langchain_openai import ChatOpenAI
from sse_server import Reply, SSEServer, clean_answer, running_server

from adapters import LiftGuardCallbackHandler, guarded_chat_completion
from guardrail import (
    Cause,
    Certificate,
    ContextMismatchWarning,
    GenerationContext,
    GuardrailBlocked,
    State,
)

WORDS = ["Paris", " is", " the", " capital", " of", " France"]
MESSAGES = [{"role": "user", "content": "Capital of France?"}]
LIMIT = 4


def _certificate() -> Certificate:
    cert = fitted_certificate("api", api_model="gpt-test")  # tau -50: every answer clears it
    return replace(cert, context=GenerationContext(max_tokens=LIMIT))


def _answer() -> Reply:
    return clean_answer(WORDS)


@pytest.fixture
def server() -> Iterator[SSEServer]:
    with running_server() as srv:
        yield srv


async def _completion(server: SSEServer, shown: list[str], **kw: Any) -> None:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="t", max_retries=0)
    try:
        gen = guarded_chat_completion(client, certificate=_certificate(), messages=MESSAGES, **kw)
        async for text in gen:
            shown.append(text)
    finally:
        await client.close()


def test_the_certificate_certifies_these_tokens_early_within_its_limit() -> None:
    from guardrail import TokenEvent

    mon = _certificate().monitor()
    states = []
    for i, w in enumerate(WORDS[:LIMIT]):
        alts = tuple((f"{w}{j}" if j else w, -0.05 - 3 * j) for j in range(5))
        states.append(mon.update(TokenEvent(w, -0.05, top_logprobs=alts, index=i)).state)
    assert State.CERTIFIED in states  # so the tests below exercise an early certification


async def test_a_request_held_to_the_context_blocks_an_answer_past_it(
    server: SSEServer,
) -> None:
    server.replies.put(_answer())
    shown: list[str] = []
    with pytest.raises(GuardrailBlocked) as exc:
        await _completion(server, shown)
    assert server.last().body["max_tokens"] == LIMIT  # filled in from the context
    verdict = exc.value.verdict
    assert verdict.cause is Cause.OVER_TOKEN_LIMIT and f"token {LIMIT + 1} is past" in (
        verdict.reason
    )
    assert "".join(shown) == "".join(WORDS[:LIMIT])  # released at certification; no more


async def test_a_request_with_a_larger_limit_gets_a_monitor_with_that_limit(
    server: SSEServer,
) -> None:
    server.replies.put(_answer())
    shown: list[str] = []
    with pytest.warns(ContextMismatchWarning, match="max_tokens=10") as warned:
        await _completion(server, shown, max_tokens=10)
    assert [w.filename for w in warned] == [__file__]  # the caller's line
    assert server.last().body["max_tokens"] == 10
    assert "".join(shown) == "".join(WORDS)


@pytest.mark.parametrize(("max_tokens", "blocked"), [(None, False), (LIMIT, True), (10, False)])
def test_a_langchain_run_gives_its_monitor_the_runs_own_limit(
    server: SSEServer, max_tokens: int | None, blocked: bool
) -> None:
    """The handler does not make the request: a run without max_tokens has no limit
    it knows of, so none is assumed and the whole answer is judged at its end."""
    server.replies.put(_answer())
    handler = LiftGuardCallbackHandler(certificate=_certificate())
    llm = ChatOpenAI(
        model="gpt-test", base_url=server.base_url, api_key="t", max_retries=0,  # type: ignore[arg-type]
        logprobs=True, top_logprobs=5, callbacks=[handler], max_tokens=max_tokens,  # type: ignore[call-arg]
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ContextMismatchWarning)
        if blocked:
            with pytest.raises(GuardrailBlocked) as exc:
                "".join(str(c.content) for c in llm.stream(MESSAGES))
            assert exc.value.verdict.cause is Cause.OVER_TOKEN_LIMIT
        else:
            text = "".join(str(c.content) for c in llm.stream(MESSAGES))
            assert text == "".join(WORDS)
    assert handler.active_runs == 0 and not handler._limits
    _, verdict = handler.verdicts[-1]
    assert verdict.state is (State.BLOCKED if blocked else State.CERTIFIED)
