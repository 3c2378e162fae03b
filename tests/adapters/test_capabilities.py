"""What a certificate reads per token against what each adapter's stream carries.

A fitted certificate (``fitted_certs``: fitted on the committed NQ-Open sample) reads each
token's logprob, ``statistic.alternatives`` alternatives (5) and, for group
``local``, exact entropies. Every adapter states what its stream carries and a
stream that cannot carry it is a ConfigError when the guard is built (or, where
the adapter makes the request, before it is sent) naming the fix, never a block
mid-stream. The real ``openai`` and ``langchain_openai`` clients run against the
loopback SSE server; a stream that is refused at its first token is held open by
the server (``hold_after``) until the client closes it, so the close is checked
without timing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import openai
import pytest
from fitted_certs import certificate as fitted_certificate
from fitted_certs import fitted
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from sse_server import Reply, SSEServer, running_server
from sse_server import chat_chunk as _chunk
from sse_server import token_entry as _tok

from adapters import (
    LiftGuardCallbackHandler,
    guard_chat_stream,
    guard_chat_stream_sync,
    guard_runnable,
    guard_tool,
    guarded_chat_completion,
)
from adapters._guard._context import Supplies, check_supplies
from guardrail import (
    Certificate,
    ConfigError,
    ModelIdentity,
    SkeletonSpec,
    State,
    StreamPolicy,
    UniformSkeleton,
)

WORDS = ["Paris", " is", " the", " capital", "."]
MESSAGES = [{"role": "user", "content": "Capital of France?"}]
OPENAI_FIX = (
    r"create it with client\.chat\.completions\.create\(\.\.\., logprobs=True, top_logprobs=5\)"
)
CHAT_FIX = r"ChatOpenAI\(\.\.\., logprobs=True, top_logprobs=5\)"


def certificate(group: str) -> Certificate:
    return fitted_certificate(group, api_model="gpt-test")


API, LOCAL = certificate("api"), certificate("local")
LIFT_RULE = Certificate(
    StreamPolicy(aggregate="min"), 4.0, SkeletonSpec("uniform", {"vocab_size": 50_000}),
    ModelIdentity("test-model", api_model="gpt-test", vocab_size=50_000),
)  # fmt: skip


def answer(alternatives: int | None = 5, *, hold_after: int | None = None) -> Reply:
    """A clean answer whose tokens carry ``alternatives`` alternatives (None: no logprobs)."""
    events: list[Any] = [_chunk({"role": "assistant", "content": ""}, {"content": []})]
    for w in WORDS:
        lp = None if alternatives is None else {"content": [_tok(w, -0.05, alternatives)]}
        if lp is not None and alternatives == 0:
            lp["content"][0]["top_logprobs"] = []
        events.append(_chunk({"content": w}, lp))
    events.append(_chunk({}, None, "stop"))
    return Reply(events, delay=0.0, hold_after=hold_after)


@pytest.fixture
def server() -> Iterator[SSEServer]:
    with running_server() as srv:
        yield srv


def test_the_certificates_read_what_their_groups_say() -> None:
    assert API.reads == API.monitor().reads
    assert (API.reads.alternatives, API.reads.exact_entropy) == (5, False)
    assert (LOCAL.reads.group, LOCAL.reads.exact_entropy) == ("local", True)
    assert LIFT_RULE.reads.alternatives == 0  # a lift rule reads what comes
    unknown = Supplies("a stream", logprobs=None)  # nothing stated: nothing refused here
    assert check_supplies(API, unknown) == API.reads
    with pytest.raises(
        ConfigError,
        match=r"group 'local'.*which a stream never carries \(it "
        r"carries at most token logprobs and their alt",
    ):
        check_supplies(LOCAL, unknown)


# --- the adapter makes the request: guarded_chat_completion --------------------------------------


async def completion(server: SSEServer, certificate: Certificate, **kw: Any) -> str:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="t", max_retries=0)
    try:
        gen = guarded_chat_completion(client, certificate=certificate, messages=MESSAGES, **kw)
        return "".join([t async for t in gen])
    finally:
        await client.close()


async def test_the_request_asks_for_the_alternatives_the_statistic_reads(
    server: SSEServer,
) -> None:
    server.replies.put(answer())
    assert await completion(server, API) == "".join(WORDS)
    assert server.last().body["top_logprobs"] == 20
    wide = replace(API, statistic=replace(fitted("api"), alternatives=25))
    server.replies.put(answer())
    assert await completion(server, wide) == "".join(WORDS)
    assert server.last().body["top_logprobs"] == 25  # more than the default, as it reads


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"top_logprobs": 2}, r"reads 5 alternatives .*top_logprobs=2 carries at most 2: ask "
                              r"for top_logprobs=5 or more"),
        ({"logprobs": False}, "needs logprobs=True"),
    ],
)  # fmt: skip
async def test_a_request_without_them_is_refused_before_it_is_sent(
    server: SSEServer, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        await completion(server, API, **kwargs)
    assert server.records == []


async def test_an_api_stream_never_carries_exact_entropies(server: SSEServer) -> None:
    with pytest.raises(
        ConfigError,
        match=r"group 'local'.*exact entropy.*Chat Completions stream"
        r".*carries token logprobs and up to 20 alternatives",
    ):
        await completion(server, LOCAL)
    assert server.records == []


# --- the caller makes the request: guard_chat_stream ---------------------------------------------


def sync_stream(server: SSEServer, **create: Any) -> openai.Stream[Any]:
    client = openai.OpenAI(base_url=server.base_url, api_key="t", max_retries=0)
    return client.chat.completions.create(
        model="gpt-test", messages=MESSAGES, stream=True, **create
    )  # type: ignore[call-overload,no-any-return]


def test_a_declared_request_is_checked_at_construction(server: SSEServer) -> None:
    server.replies.put(answer(2, hold_after=0))
    stream = sync_stream(server, logprobs=True, top_logprobs=2)
    with pytest.raises(
        ConfigError, match=f"created with top_logprobs=2 carries at most 2: {OPENAI_FIX}"
    ):
        guard_chat_stream_sync(stream, certificate=API, top_logprobs=2)
    with pytest.raises(ConfigError, match="reads 5 alternatives"):
        guard_chat_stream_sync(stream, API.monitor(), top_logprobs=2)  # a monitor of it, too
    stream.close()
    assert server.last().client_closed and server.last().sent == 0
    server.replies.put(answer(5))
    stream = sync_stream(server, logprobs=True, top_logprobs=5)
    monitor = API.monitor()
    text = "".join(guard_chat_stream_sync(stream, monitor, certificate=API, top_logprobs=5))
    assert text == "".join(WORDS) and monitor.verdict.state is State.CERTIFIED


@pytest.mark.parametrize(
    ("alternatives", "create", "match"),
    [
        (0, {"logprobs": True}, "carries none"),
        (None, {}, "reads each token's logprob, but this stream .* carries none"),
        (2, {"logprobs": True, "top_logprobs": 2}, "carries at most 2"),
    ],
)
def test_undeclared_the_first_token_tells_before_any_text_is_shown(
    server: SSEServer, alternatives: int | None, create: dict[str, Any], match: str
) -> None:
    server.replies.put(answer(alternatives, hold_after=3))
    shown: list[str] = []
    with pytest.raises(
        ConfigError,
        match=rf"group 'api'.*{match}: {OPENAI_FIX} \(if it was, "
        r"declare it: guard_chat_stream\(\.\.\., top_logprobs",
    ):
        for text in guard_chat_stream_sync(sync_stream(server, **create), certificate=API,
                                           mode="passthrough"):  # fmt: skip
            shown.append(text)
    assert shown == []
    rec = server.last()
    assert rec.client_closed and rec.sent < rec.total  # the upstream request was stopped


async def test_undeclared_a_stream_with_the_alternatives_is_certified(server: SSEServer) -> None:
    server.replies.put(answer(5))
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="t", max_retries=0)
    stream = await client.chat.completions.create(
        model="gpt-test", messages=MESSAGES, stream=True, logprobs=True, top_logprobs=5
    )
    monitor = API.monitor()
    text = "".join([t async for t in guard_chat_stream(stream, monitor, certificate=API)])
    await client.close()
    assert text == "".join(WORDS) and monitor.verdict.state is State.CERTIFIED


def test_a_lift_rule_is_not_judged_by_the_first_token(server: SSEServer) -> None:
    server.replies.put(answer(0))  # no alternatives: a lift rule reads what comes
    text = "".join(guard_chat_stream_sync(sync_stream(server, logprobs=True),
                                          certificate=LIFT_RULE))  # fmt: skip
    assert text == "".join(WORDS)


def test_guard_chat_stream_refuses_exact_entropies_at_construction() -> None:
    with pytest.raises(ConfigError, match=r"group 'local'.*never carries"):
        guard_chat_stream(_never(), certificate=LOCAL)
    with pytest.raises(ConfigError, match=r"group 'local'.*created with top_logprobs=20"):
        guard_chat_stream_sync(iter(()), certificate=LOCAL, top_logprobs=20)
    with pytest.raises(ConfigError, match=r"group 'local'.*never carries"):  # a monitor of it
        guard_chat_stream_sync(iter(()), LOCAL.monitor(exact_entropy=True))
    with pytest.raises(ConfigError, match="top_logprobs must be an integer"):
        guard_chat_stream_sync(iter(()), certificate=API, top_logprobs=-1)


async def _never() -> Any:  # an async iterable that is never read
    raise AssertionError("read")
    yield


# --- LangChain: the model is read when the guard is built ----------------------------------------


def chat(server: SSEServer, **kw: Any) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=server.base_url, api_key="t", max_retries=0, model="gpt-test", streaming=True,
        **kw,
    )  # type: ignore[arg-type]  # fmt: skip


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({}, r"ChatOpenAI\(logprobs=None, top_logprobs=None\) carries none"),
        ({"logprobs": True}, r"ChatOpenAI\(logprobs=True, top_logprobs=None\) carries none"),
        ({"logprobs": True, "top_logprobs": 2}, "carries at most 2"),
    ],
)
def test_a_chat_model_without_the_alternatives_is_refused_everywhere(
    server: SSEServer, settings: dict[str, Any], match: str
) -> None:
    llm = chat(server, **settings)

    @tool
    def ask(question: str) -> str:
        """Ask the model."""
        return str(llm.invoke(question).content)

    pattern = rf"group 'api'.*{match}: create it with {CHAT_FIX}"
    with pytest.raises(ConfigError, match=pattern):
        guard_runnable(llm, certificate=API)
    with pytest.raises(ConfigError, match=pattern):
        guard_runnable(ChatPromptTemplate.from_messages([("user", "{q}")]) | llm, certificate=API)
    with pytest.raises(ConfigError, match=pattern):
        LiftGuardCallbackHandler(certificate=API, model=llm)
    with pytest.raises(ConfigError, match=pattern):
        guard_tool(ask, certificate=API, model=llm)
    assert server.records == []


def test_bound_settings_count_and_the_responses_api_is_refused(server: SSEServer) -> None:
    base = chat(server, logprobs=True, top_logprobs=2)
    guard_runnable(base.bind(top_logprobs=5), certificate=API)  # the bound value is sent
    with pytest.raises(ConfigError, match="carries at most 2"):
        guard_runnable(chat(server, logprobs=True, top_logprobs=5).bind(top_logprobs=2),
                       certificate=API)  # fmt: skip
    with pytest.raises(ConfigError, match=r"use_responses_api=True.*drops streamed logprobs"):
        guard_runnable(chat(server, logprobs=True, top_logprobs=5, use_responses_api=True),
                       certificate=API)  # fmt: skip
    with pytest.raises(ConfigError, match=r"this certificate reads each token's logprob"):
        guard_runnable(chat(server), certificate=LIFT_RULE)  # a lift rule needs logprobs
    guard_runnable(chat(server, logprobs=True), certificate=LIFT_RULE)


def test_a_chat_model_stream_never_carries_exact_entropies(server: SSEServer) -> None:
    llm = chat(server, logprobs=True, top_logprobs=20)

    @tool
    def ask(question: str) -> str:
        """Ask the model."""
        return str(llm.invoke(question).content)

    pattern = r"group 'local'.*exact entropy.*LangChain chat model's stream"
    with pytest.raises(ConfigError, match=pattern):
        LiftGuardCallbackHandler(certificate=LOCAL)  # without the model too
    with pytest.raises(ConfigError, match=pattern):
        guard_runnable(llm, certificate=LOCAL)
    with pytest.raises(ConfigError, match=pattern):
        guard_tool(ask, certificate=LOCAL)


async def test_configured_with_them_every_langchain_path_certifies(server: SSEServer) -> None:
    llm = chat(server, logprobs=True, top_logprobs=5)
    server.replies.put(answer())
    assert await guard_runnable(llm, certificate=API).ainvoke("Capital?") == "".join(WORDS)
    bound = chat(server, logprobs=True).bind(top_logprobs=5)  # the bound value is sent
    chain = ChatPromptTemplate.from_messages([("user", "{q}")]) | bound
    server.replies.put(answer())
    parts = [p async for p in guard_runnable(chain, certificate=API).astream({"q": "Capital?"})]
    assert "".join(map(str, parts)) == "".join(WORDS)
    assert server.last().body["top_logprobs"] == 5
    handler = LiftGuardCallbackHandler(certificate=API, model=llm)
    server.replies.put(answer())
    await llm.ainvoke("Capital?", config={"callbacks": [handler]})
    assert handler.verdicts[-1][1].state is State.CERTIFIED

    @tool
    async def ask(question: str) -> str:
        """Ask the model."""
        return str((await llm.ainvoke(question)).content)

    server.replies.put(answer())
    guarded = guard_tool(ask, certificate=API, model=llm)
    assert await guarded.ainvoke({"question": "Capital?"}) == "".join(WORDS)


def test_a_hand_made_rule_is_checked_the_same_way(server: SSEServer) -> None:
    with pytest.raises(ConfigError, match="reads each token's logprob"):
        guard_runnable(chat(server), StreamPolicy(), 4.0, skeleton=UniformSkeleton(50_000))
