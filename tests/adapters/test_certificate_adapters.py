"""Every adapter takes ``certificate=``; the request carries its generation context.

The real ``openai`` and ``langchain_openai`` clients against the loopback SSE
server: the server records each request body, so a test sees exactly what the
certificate added (system prompt, temperature, max_tokens, llama.cpp's
repeat_penalty) and that a caller's change raises a ContextMismatchWarning.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from sse_server import Reply, SSEServer, clean_answer, running_server

from adapters import (
    LiftGuardCallbackHandler,
    guard_chat_stream_sync,
    guard_runnable,
    guard_tool,
    guarded_chat_completion,
)
from guardrail import (
    Certificate,
    ConfigError,
    ContextMismatchWarning,
    GenerationContext,
    ModelIdentity,
    SkeletonSpec,
    StreamPolicy,
    UniformSkeleton,
)

WORDS = ["Paris", " is", " the", " capital", "."]
SYSTEM = "Answer with a few words."
CERT = Certificate(
    policy=StreamPolicy(aggregate="min"),
    tau=4.0,
    skeleton=SkeletonSpec("uniform", {"vocab_size": 50_000}),
    model=ModelIdentity("test-model", api_model="gpt-test", vocab_size=50_000),
    context=GenerationContext(
        system_prompt=SYSTEM, temperature=0.0, max_tokens=24, repeat_penalty=1.0
    ),
)
QUESTION = [{"role": "user", "content": "Capital of France?"}]


def answer(lp: float = -0.05) -> Reply:
    return clean_answer(WORDS, lp)


@pytest.fixture
def server() -> Iterator[SSEServer]:
    with running_server() as srv:
        yield srv


async def run(server: SSEServer, **kw: Any) -> str:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="t", max_retries=0)
    try:
        parts = [t async for t in guarded_chat_completion(client, certificate=CERT, **kw)]
    finally:
        await client.close()
    return "".join(parts)


async def test_the_request_gets_the_certificates_context(server: SSEServer) -> None:
    server.replies.put(answer())
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextMismatchWarning)
        assert await run(server, messages=QUESTION) == "".join(WORDS)
    body = server.last().body
    assert body["model"] == "gpt-test" and body["temperature"] == 0.0
    assert body["max_tokens"] == 24 and body["repeat_penalty"] == 1.0
    assert body["messages"] == [{"role": "system", "content": SYSTEM}, *QUESTION]


@pytest.mark.parametrize(
    ("override", "setting"),
    [
        ({"temperature": 0.8}, "temperature"),
        ({"model": "other-model"}, "model"),
        ({"max_tokens": 200}, "max_tokens"),
        ({"extra_body": {"repeat_penalty": 1.1}}, "repeat_penalty"),
        ({"messages": [{"role": "system", "content": "Be chatty."}, *QUESTION]}, "system prompt"),
    ],
)
async def test_a_changed_setting_warns_and_is_sent_as_asked(
    server: SSEServer, override: dict[str, Any], setting: str
) -> None:
    server.replies.put(answer())
    kwargs = {"messages": QUESTION, **override}
    with pytest.warns(ContextMismatchWarning, match=f"sets {setting}="):
        await run(server, **kwargs)
    body = server.last().body
    key = next(iter(override))
    if key == "extra_body":
        assert body["repeat_penalty"] == 1.1
    elif key == "messages":
        assert body["messages"][0]["content"] == "Be chatty."
    else:
        assert body[key] == override[key]


async def test_without_applying_the_context_the_request_is_sent_as_given(
    server: SSEServer,
) -> None:
    server.replies.put(answer())
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="t", max_retries=0)
    gen = guarded_chat_completion(
        client, certificate=CERT, apply_certificate_context=False, model="m", messages=QUESTION
    )
    assert "".join([t async for t in gen]) == "".join(WORDS)
    await client.close()
    body = server.last().body
    assert "temperature" not in body and body["messages"] == QUESTION


def test_exactly_one_rule_is_given() -> None:
    other = Certificate(StreamPolicy(), 4.0, CERT.skeleton, CERT.model)
    with pytest.raises(ConfigError, match="does not apply"):
        guard_chat_stream_sync(iter(()), other.monitor(), certificate=CERT)
    with pytest.raises(ConfigError, match="pass certificate="):
        guard_chat_stream_sync(iter(()))
    assert list(guard_chat_stream_sync(iter(()), CERT.monitor(), certificate=CERT,
                                       on_block="stop")) == []  # fmt: skip
    with pytest.raises(ConfigError, match="not both"):
        LiftGuardCallbackHandler(StreamPolicy(), 4.0, certificate=CERT)
    with pytest.raises(ConfigError, match=r"pass certificate="):
        LiftGuardCallbackHandler()
    with pytest.raises(ConfigError, match="skeleton"):
        LiftGuardCallbackHandler(StreamPolicy(), 4.0)
    handler = LiftGuardCallbackHandler(StreamPolicy(), 4.0, skeleton=UniformSkeleton(9))
    assert handler.certificate.calibrated is False


def chat(server: SSEServer, **kw: Any) -> ChatOpenAI:
    args = {"model": "gpt-test", "temperature": 0.0, "max_tokens": 24, **kw}
    return ChatOpenAI(
        base_url=server.base_url, api_key="t", max_retries=0, logprobs=True, top_logprobs=5,
        streaming=True, **args,
    )  # fmt: skip


async def test_langchain_paths_take_the_certificate(server: SSEServer) -> None:
    llm = chat(server)
    msgs = [("system", SYSTEM), ("user", "Capital of France?")]
    server.replies.put(answer())
    handler = LiftGuardCallbackHandler(certificate=CERT)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextMismatchWarning)
        out = [c.content async for c in llm.astream(msgs, config={"callbacks": [handler]})]
    assert "".join(map(str, out)) == "".join(WORDS)
    assert handler.verdicts[-1][1].tau == CERT.tau
    server.replies.put(answer(lp=-12.0))
    guarded = guard_runnable(llm, certificate=CERT, on_block="replace", refusal="No.")
    assert await guarded.ainvoke(msgs) == "No."

    @tool
    async def ask(question: str) -> str:
        """Ask the model."""
        return str((await llm.ainvoke(msgs)).content)

    server.replies.put(answer())
    assert await guard_tool(ask, certificate=CERT).ainvoke({"question": "q"}) == "".join(WORDS)


async def test_the_handler_warns_once_per_changed_setting(server: SSEServer) -> None:
    llm = chat(server, temperature=0.7)
    handler = LiftGuardCallbackHandler(certificate=CERT)
    for call in range(2):
        server.replies.put(answer())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            await llm.ainvoke("Capital?", config={"callbacks": [handler]})
        names = sorted(str(w.message).split("=")[0] for w in caught
                       if issubclass(w.category, ContextMismatchWarning))  # fmt: skip
        if call == 0:
            assert names == [
                "the request leaves system prompt unset (the provider's default applies) but "
                "the certificate was calibrated with system prompt",
                "the request sets temperature",
            ]
        else:
            assert names == []
