"""The LiteLLM guardrail in a real LiteLLM proxy process, in front of the scripted upstream.

One ``litellm --config`` process serves the whole module (``litellm_harness.py``); each test
scripts the upstream's answer to its own question and asks it through the openai client
(sync and async) or langchain-openai.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

if find_spec("litellm") is None or find_spec("fastapi") is None:
    pytest.skip(
        'litellm is not installed (pip install "liftguard[litellm]")', allow_module_level=True
    )

import openai
from litellm_harness import (
    OFFLINE_ENV,
    LiteLLM,
    ScriptedUpstream,
    blocked_verdict,
    running_litellm,
)
from proxy_harness import BAD, GOOD, ROLE, STOP, WORDS, tokens
from sse_server import Reply, serving

from guardrail import ConfigError

CLEAN = [ROLE, *tokens([GOOD] * len(WORDS)), STOP]
TEXT = "".join(WORDS)
BLOCKS_AT_4 = [ROLE, *tokens([GOOD, GOOD, GOOD, BAD, GOOD, GOOD, GOOD]), STOP]


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with serving(ScriptedUpstream()) as srv:
        yield srv


@pytest.fixture(scope="module")
def litellm(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiteLLM]:
    with running_litellm(tmp_path_factory.mktemp("litellm"), upstream.base_url) as proc:
        yield proc


def script(upstream: ScriptedUpstream, question: str, events: list[Any], **reply: Any) -> str:
    upstream.script[question] = Reply(list(events), delay=reply.pop("delay", 0.0), **reply)
    return question


def ask(question: str, **kwargs: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": question}], **kwargs}


def sync_client(proc: LiteLLM) -> openai.OpenAI:
    return openai.OpenAI(base_url=proc.base_url, api_key=proc.key, max_retries=0, timeout=30)


def async_client(proc: LiteLLM) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=proc.base_url, api_key=proc.key, max_retries=0, timeout=30)


# --- certified answers ---------------------------------------------------------------------------


def test_a_certified_stream_passes_sync(litellm: LiteLLM, upstream: ScriptedUpstream) -> None:
    question = script(upstream, "certified sync", CLEAN)
    with sync_client(litellm) as client:
        chunks = list(client.chat.completions.create(model="guarded", stream=True, **ask(question)))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == TEXT
    verdicts = [c.model_extra["liftguard"] for c in chunks if "liftguard" in (c.model_extra or {})]
    assert [v["state"] for v in verdicts] == ["certified"]
    assert verdicts[0]["certificate"].startswith("cert.json#")
    assert verdicts[0]["context_mismatches"] == []
    assert chunks[-1].choices[0].finish_reason == "stop" or any(
        c.choices and c.choices[0].finish_reason == "stop" for c in chunks
    )
    # the client did not ask for logprobs: none reach it, though the upstream was asked
    assert all(c.choices[0].logprobs is None for c in chunks if c.choices)
    sent = upstream.request(question).body
    assert sent["logprobs"] is True and sent["top_logprobs"] >= 1
    assert sent["temperature"] == 0.0  # the certificate's context, filled in


@pytest.mark.parametrize("model", ["passthrough", "guarded"])
async def test_a_certified_stream_passes_async_with_the_logprobs_asked(
    litellm: LiteLLM, upstream: ScriptedUpstream, model: str
) -> None:
    question = script(upstream, f"certified async {model}", CLEAN)
    async with async_client(litellm) as client:
        stream = await client.chat.completions.create(
            model=model, stream=True, logprobs=True, top_logprobs=2, **ask(question)
        )
        chunks = [chunk async for chunk in stream]
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    # passthrough: token by token; buffered ("guarded"): held whole, then released at once
    # with the text chunks joined (LiteLLM relays and the client parses one chunk)
    assert texts == (WORDS if model == "passthrough" else [TEXT])
    entries = [e for c in chunks if c.choices and c.choices[0].logprobs
               for e in c.choices[0].logprobs.content or ()]  # fmt: skip
    assert [e.token for e in entries] == WORDS  # every entry kept, in order
    assert all(len(e.top_logprobs) == 2 for e in entries)  # trimmed to what it asked
    assert upstream.request(question).body["top_logprobs"] >= 2
    verdicts = [c.model_extra["liftguard"] for c in chunks if "liftguard" in (c.model_extra or {})]
    assert [v["state"] for v in verdicts] == ["certified"]


def test_a_whole_answer_carries_its_verdict(litellm: LiteLLM, upstream: ScriptedUpstream) -> None:
    question = "whole certified"
    upstream.script[question] = Reply(body=_completion(GOOD))
    with sync_client(litellm) as client:
        completion = client.chat.completions.create(model="guarded", **ask(question))
    assert completion.choices[0].message.content == "Paris"
    assert completion.choices[0].logprobs is None
    assert (completion.model_extra or {})["liftguard"]["state"] == "certified"
    sent = upstream.request(question).body
    assert sent["logprobs"] is True and not sent.get("stream")


def test_a_changed_setting_is_reported(litellm: LiteLLM, upstream: ScriptedUpstream) -> None:
    question = script(upstream, "hot", CLEAN)
    with sync_client(litellm) as client:
        chunks = list(
            client.chat.completions.create(
                model="guarded", stream=True, temperature=1.0, **ask(question)
            )
        )
    verdict = next(c.model_extra["liftguard"] for c in chunks if "liftguard" in c.model_extra)
    assert verdict["state"] == "certified"
    assert verdict["context_mismatches"] == ["temperature"] and verdict["covered"] is False
    assert upstream.request(question).body["temperature"] == 1.0


# --- blocked answers ---------------------------------------------------------------------------


def test_a_buffered_block_shows_nothing_and_closes_the_upstream(
    litellm: LiteLLM, upstream: ScriptedUpstream
) -> None:
    question = script(upstream, "buffered block", BLOCKS_AT_4, hold_after=5)
    shown: list[str] = []
    with sync_client(litellm) as client, pytest.raises(openai.APIError) as caught:
        for chunk in client.chat.completions.create(model="guarded", stream=True, **ask(question)):
            shown += [chunk.choices[0].delta.content or ""] if chunk.choices else []
    assert "".join(shown) == ""
    verdict = blocked_verdict(caught.value)
    assert verdict["state"] == "blocked" and verdict["cause"] == "below_threshold"
    assert verdict["tokens"] == 4
    record = upstream.request(question)
    assert record.client_closed and record.sent < record.total


async def test_a_passthrough_block_is_an_in_stream_error(
    litellm: LiteLLM, upstream: ScriptedUpstream
) -> None:
    question = script(upstream, "passthrough block", BLOCKS_AT_4, hold_after=5)
    shown: list[str] = []
    async with async_client(litellm) as client:
        stream = await client.chat.completions.create(
            model="passthrough", stream=True, **ask(question)
        )
        with pytest.raises(openai.APIError) as caught:
            async for chunk in stream:
                shown += [chunk.choices[0].delta.content or ""] if chunk.choices else []
    assert "".join(shown) == "".join(WORDS[:3])  # the blocking token is not sent
    assert not isinstance(caught.value, openai.APIStatusError)  # an error event, status 200
    assert blocked_verdict(caught.value)["tokens"] == 4
    record = upstream.request(question)
    assert record.client_closed and record.sent < record.total


def test_a_refusal_ends_the_stream_with_content_filter(
    litellm: LiteLLM, upstream: ScriptedUpstream
) -> None:
    question = script(upstream, "refused", BLOCKS_AT_4, hold_after=5)
    with sync_client(litellm) as client:
        chunks = list(client.chat.completions.create(model="refusal", stream=True, **ask(question)))
    choices = [c.choices[0] for c in chunks if c.choices]
    assert [c.finish_reason for c in choices][-1] == "content_filter"
    assert "not certified" in "".join(c.delta.content or "" for c in choices)
    verdict = next(c.model_extra["liftguard"] for c in chunks if "liftguard" in c.model_extra)
    assert verdict["state"] == "blocked" and verdict["cause"] == "below_threshold"
    record = upstream.request(question)
    assert record.client_closed and record.sent < record.total


def test_a_blocked_whole_answer_is_http_422(litellm: LiteLLM, upstream: ScriptedUpstream) -> None:
    question = "whole blocked"
    upstream.script[question] = Reply(body=_completion(BAD))
    with sync_client(litellm) as client, pytest.raises(openai.UnprocessableEntityError) as caught:
        client.chat.completions.create(model="guarded", **ask(question))
    assert blocked_verdict(caught.value)["cause"] == "below_threshold"


def test_langchain_through_litellm(litellm: LiteLLM, upstream: ScriptedUpstream) -> None:
    from langchain_openai import ChatOpenAI

    good = script(upstream, "langchain good", CLEAN)
    bad = script(upstream, "langchain bad", BLOCKS_AT_4)
    llm = ChatOpenAI(
        base_url=litellm.base_url, api_key=litellm.key, model="guarded", max_retries=0,
        streaming=True,
    )  # fmt: skip
    assert llm.invoke(good).content == TEXT
    with pytest.raises(openai.APIError) as caught:
        llm.invoke(bad)
    assert blocked_verdict(caught.value)["cause"] == "below_threshold"


# --- upstreams that fail: never certified ------------------------------------------------------


@pytest.mark.parametrize("model", ["guarded", "passthrough"])
def test_a_cut_off_stream_is_never_certified(
    litellm: LiteLLM, upstream: ScriptedUpstream, model: str
) -> None:
    # the upstream ends cleanly but without a finish reason (and without [DONE])
    question = script(upstream, f"cut off {model}", CLEAN[:-1], done=False)
    chunks: list[Any] = []
    with sync_client(litellm) as client, pytest.raises(openai.APIError):
        for chunk in client.chat.completions.create(model=model, stream=True, **ask(question)):
            chunks.append(chunk)
    assert not any("liftguard" in (c.model_extra or {}) for c in chunks)
    if model == "guarded":
        assert chunks == []


@pytest.mark.parametrize(
    "events",
    [
        [ROLE, *tokens([GOOD, GOOD]), {"error": {"message": "boom", "type": "server_error"}}],
        [ROLE, *tokens([GOOD, GOOD]), "{not json"],
    ],
    ids=["error_event", "malformed"],
)
def test_a_failing_upstream_is_an_error(
    litellm: LiteLLM, upstream: ScriptedUpstream, events: list[Any]
) -> None:
    question = script(upstream, f"fails {events[-1]!s:.12}", events)
    with sync_client(litellm) as client, pytest.raises(openai.APIError):
        list(client.chat.completions.create(model="guarded", stream=True, **ask(question)))


def test_a_stalled_upstream_times_out(litellm: LiteLLM, upstream: ScriptedUpstream) -> None:
    question = script(upstream, "stalled", CLEAN, hold_after=3, stall=True, hold_timeout=20)
    with sync_client(litellm) as client, pytest.raises(openai.APIError):
        list(client.chat.completions.create(model="guarded", stream=True, **ask(question)))
    assert upstream.request(question, timeout=20).client_closed


def test_several_answers_are_refused(litellm: LiteLLM) -> None:
    with sync_client(litellm) as client, pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="guarded", n=2, **ask("two answers"))
    assert "n must be 1" in str(caught.value)


# --- configuration -----------------------------------------------------------------------------


def test_a_bad_configuration_is_refused_at_start(tmp_path: Path) -> None:
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    from proxy_harness import make_certificate

    from adapters.litellm import GuardrailStartupError, LiftGuardGuardrail

    make_certificate().save(tmp_path / "cert.json")
    cert = str(tmp_path / "cert.json")
    with pytest.raises(GuardrailStartupError, match="pre_call, post_call") as caught:
        LiftGuardGuardrail(certificate=cert, event_hook="post_call")
    assert isinstance(caught.value.__cause__, ConfigError)
    with pytest.raises(GuardrailStartupError, match="guard_mode"):
        LiftGuardGuardrail(certificate=cert, guard_mode="observe")
    with pytest.raises(GuardrailStartupError, match="certificate"):
        LiftGuardGuardrail(event_hook=["pre_call", "post_call"])
    guard = LiftGuardGuardrail(certificate=cert, event_hook=["pre_call", "post_call"])
    assert guard.source.current()[1].startswith("cert.json#")


def _completion(logprob: float) -> dict[str, Any]:
    """A whole ``chat.completion`` answering ``Paris`` with one token at ``logprob``."""
    entry = {"token": "Paris", "logprob": logprob, "bytes": list(b"Paris"), "top_logprobs": []}
    return {
        "id": "chatcmpl-whole",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Paris"},
                "logprobs": {"content": [entry]},
                "finish_reason": "stop",
            }
        ],
    }
