"""LangChain integration: the real ``langchain_openai.ChatOpenAI`` against the loopback SSE server.

Numbers: ``UniformSkeleton(50_000)`` gives lift ``logprob + log(50000) = logprob +
10.82`` clipped to ``[0, 12]``. With ``tau = 4`` and the default betting policy,
tokens at logprob -0.05 (lift 10.77) certify after 7 tokens and tokens at logprob
-12 (lift 0) block after 17. ``StreamPolicy(aggregate="min")`` blocks at the first
token whose lift is below ``tau`` (a BAD token at index ``k`` blocks with ``t = k + 1``)
and certifies only at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import ToolException, tool
from langchain_openai import ChatOpenAI
from sse_server import Reply, SSEServer, running_server
from sse_server import chat_chunk as _chunk
from sse_server import token_entry as _tok

from adapters import (
    Abstention,
    LiftGuardCallbackHandler,
    ProviderFormatError,
    guard_runnable,
    guard_tool,
)
from adapters._providers._langchain import token_events
from guardrail import (
    ConfigError,
    GuardrailBlocked,
    MissingLogprobsError,
    Monitor,
    State,
    StreamPolicy,
    TokenEvent,
    UniformSkeleton,
    Verdict,
)

VOCAB = 50_000
TAU = 4.0
SKELETON = UniformSkeleton(VOCAB)
GOOD, BAD = -0.05, -12.0  # lifts 10.77 and 0 (clipped)
CERTIFY_AT, BLOCK_AT = 7, 17
HOLD = BLOCK_AT + 2  # the server holds the stream here until the client closes
DEFAULT, MIN = StreamPolicy(), StreamPolicy(aggregate="min")
WORDS = ["The", " capital", " of", " France", " is", " Paris", ".", " It", " lies", " on"]


# --- wire data and fixtures ----------------------------------------------------------------------


def texts_of(n: int) -> list[str]:
    return [WORDS[i % len(WORDS)] for i in range(n)]


def answer(logprobs: list[float], per_chunk: int = 1, *, with_logprobs: bool = True) -> list[Any]:
    """SSE events of a streamed answer whose tokens have these logprobs."""
    texts = texts_of(len(logprobs))
    events: list[Any] = [_chunk({"role": "assistant", "content": ""}, {"content": []})]
    for start in range(0, len(texts), per_chunk):
        idx = range(start, min(start + per_chunk, len(texts)))
        toks = [_tok(texts[i], logprobs[i]) for i in idx] if with_logprobs else None
        content = "".join(texts[i] for i in idx)
        events.append(_chunk({"content": content}, {"content": toks} if toks else None))
    events.append(_chunk({}, None, "stop"))
    return events


def completion(message: dict[str, Any], logprobs: list[float] | None = None) -> dict[str, Any]:
    """A non-streamed Chat Completions body."""
    lp = None
    if logprobs is not None:
        texts = texts_of(len(logprobs))
        lp = {"content": [_tok(t, v) for t, v in zip(texts, logprobs, strict=True)]}
        message = {**message, "content": "".join(texts)}
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    choice = {"index": 0, "message": message, "logprobs": lp, "finish_reason": finish}
    usage = {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
    return {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [choice], "usage": usage}  # fmt: skip


def expected(logprobs: list[float], policy: StreamPolicy) -> tuple[State, int]:
    """Reference: the verdict a fresh monitor gives these tokens (early or at the end)."""
    mon = Monitor.lift(policy, TAU, skeleton=SKELETON)
    for lp in logprobs:
        if mon.update(TokenEvent("x", lp)).final:
            break
    v = mon.verdict if mon.verdict.final else mon.finish()
    return v.state, v.t


@pytest.fixture
def server() -> Iterator[SSEServer]:
    with running_server() as srv:
        yield srv


def chat(server: SSEServer, **kw: Any) -> ChatOpenAI:
    args: dict[str, Any] = {"logprobs": True, "top_logprobs": 5, "streaming": True}
    return ChatOpenAI(
        base_url=server.base_url, api_key="test", model="m", max_retries=0, **{**args, **kw}
    )


@pytest.fixture
def llm(server: SSEServer) -> ChatOpenAI:
    return chat(server)


def handler(policy: StreamPolicy = DEFAULT, **kw: Any) -> LiftGuardCallbackHandler:
    return LiftGuardCallbackHandler(policy, TAU, **{"skeleton": SKELETON, **kw})


async def astream_text(llm: Any, out: list[str], config: dict[str, Any], q: str = "Hi") -> None:
    async for chunk in llm.astream(q, config=config):
        if chunk.content:
            out.append(chunk.content)


async def stopped_early(server: SSEServer) -> bool:
    rec = await server.records[-1].finished()
    return rec.client_closed and rec.sent < rec.total


def test_lifts_used_by_these_tests() -> None:
    assert expected([GOOD] * 30, DEFAULT) == (State.CERTIFIED, CERTIFY_AT)
    assert expected([BAD] * 300, DEFAULT) == (State.BLOCKED, BLOCK_AT)
    assert expected([GOOD] * 5 + [BAD] * 5, MIN) == (State.BLOCKED, 6)


# --- the callback handler, async path ------------------------------------------------------------


async def test_handler_lets_a_certified_answer_through(server: SSEServer, llm: ChatOpenAI) -> None:
    server.replies.put(Reply(answer([GOOD] * 30, per_chunk=3)))
    h, out = handler(), []
    await astream_text(llm, out, {"callbacks": [h]})
    assert "".join(out) == "".join(texts_of(30))
    ((_, verdict),) = h.verdicts
    assert verdict.state is State.CERTIFIED and verdict.t == CERTIFY_AT and h.active_runs == 0
    rec = await server.records[-1].finished()
    assert rec.body["logprobs"] is True and rec.body["top_logprobs"] == 5
    assert rec.sent == rec.total and not rec.client_closed


@pytest.mark.parametrize(("policy", "lps", "at"), [
    (DEFAULT, [BAD] * 400, BLOCK_AT),
    (MIN, [GOOD] * 5 + [BAD] + [GOOD] * 400, 6),
])  # fmt: skip
async def test_handler_blocks_mid_stream_before_the_blocking_chunk(
    server: SSEServer, llm: ChatOpenAI, policy: StreamPolicy, lps: list[float], at: int
) -> None:
    server.replies.put(Reply(answer(lps), hold_after=HOLD))
    h, out = handler(policy), []
    with pytest.raises(GuardrailBlocked) as info:
        await astream_text(llm, out, {"callbacks": [h]})
    verdict = info.value.verdict
    assert verdict.state is State.BLOCKED and verdict.final and verdict.t == at
    assert out == texts_of(at - 1)  # every token before the blocking one, not that one
    assert verdict.reason in str(info.value)
    assert h.verdicts[-1][1] is verdict and h.active_runs == 0
    assert await stopped_early(server)  # the HTTP response was closed: no more tokens paid


async def test_a_chunk_of_several_tokens_is_withheld_whole(
    server: SSEServer, llm: ChatOpenAI
) -> None:
    server.replies.put(Reply(answer([GOOD] * 4 + [BAD] + [GOOD] * 100, per_chunk=3)))
    out: list[str] = []
    with pytest.raises(GuardrailBlocked) as info:
        await astream_text(llm, out, {"callbacks": [handler(MIN)]})
    assert info.value.verdict.t == 5 and out == ["".join(texts_of(3))]


async def test_ainvoke_of_a_blocked_answer_raises_with_the_verdict(
    server: SSEServer, llm: ChatOpenAI
) -> None:
    server.replies.put(Reply(answer([BAD] * 400), hold_after=HOLD))
    h = handler()
    with pytest.raises(GuardrailBlocked) as info:
        await llm.ainvoke("Hi", config={"callbacks": [h]})
    assert info.value.verdict.state is State.BLOCKED and info.value.verdict.t == BLOCK_AT
    assert h.active_runs == 0 and await stopped_early(server)
    server.replies.put(Reply(answer([GOOD] * 20)))
    msg = await llm.ainvoke("Hi", config={"callbacks": [h]})
    assert msg.content == "".join(texts_of(20)) and h.verdicts[-1][1].state is State.CERTIFIED


@pytest.mark.parametrize(("lp", "state"), [(GOOD, State.CERTIFIED), (BAD, State.BLOCKED)])
async def test_a_non_streamed_answer_is_judged_at_the_end(
    server: SSEServer, lp: float, state: State
) -> None:
    server.replies.put(Reply(body=completion({"role": "assistant"}, [lp] * 30)))
    h = handler()
    llm = chat(server, streaming=False)
    if state is State.CERTIFIED:
        assert (await llm.ainvoke("Hi", config={"callbacks": [h]})).content
    else:
        with pytest.raises(GuardrailBlocked):
            await llm.ainvoke("Hi", config={"callbacks": [h]})
    assert h.verdicts[-1][1].state is state and h.active_runs == 0
    assert server.last().body["stream"] is False


async def test_final_mode_decides_at_the_end(server: SSEServer, llm: ChatOpenAI) -> None:
    server.replies.put(Reply(answer([BAD] * 20)))
    h, out = handler(StreamPolicy(early=False), mode="final"), []
    with pytest.raises(GuardrailBlocked, match="final mean lift"):
        await astream_text(llm, out, {"callbacks": [h]})
    assert out == texts_of(20) and h.verdicts[-1][1].t == 20  # passthrough, verdict at end


async def test_missing_logprobs_block_with_a_hint(server: SSEServer) -> None:
    server.replies.put(Reply(answer([GOOD] * 30, with_logprobs=False)))
    out: list[str] = []
    with pytest.raises(GuardrailBlocked, match=r"missing logprob at token 0.*logprobs=True"):
        model = chat(server, logprobs=None, top_logprobs=None)  # (top_logprobs alone: refused)
        await astream_text(model, out, {"callbacks": [handler()]})
    assert out == []
    server.replies.put(Reply(answer([GOOD] * 30, with_logprobs=False)))
    with pytest.raises(MissingLogprobsError):
        await astream_text(chat(server), out, {"callbacks": [handler(on_missing_logprobs="error")]})


# --- the sync path -------------------------------------------------------------------------------


def test_sync_stream_and_invoke_are_blocked_too(server: SSEServer, llm: ChatOpenAI) -> None:
    server.replies.put(Reply(answer([BAD] * 400), hold_after=HOLD))
    h, out = handler(), []
    with pytest.raises(GuardrailBlocked) as info:
        out.extend(c.content for c in llm.stream("Hi", config={"callbacks": [h]}))
    assert info.value.verdict.t == BLOCK_AT and out == ["", *texts_of(BLOCK_AT - 1)]
    rec = server.last()
    assert rec.client_closed and rec.sent < rec.total
    server.replies.put(Reply(answer([BAD] * 400), hold_after=HOLD))
    with pytest.raises(GuardrailBlocked):
        llm.invoke("Hi", config={"callbacks": [h]})
    server.replies.put(Reply(answer([GOOD] * 20)))
    assert llm.invoke("Hi", config={"callbacks": [h]}).content == "".join(texts_of(20))
    assert [v.state for _, v in h.verdicts] == [State.BLOCKED, State.BLOCKED, State.CERTIFIED]
    assert h.active_runs == 0


class _CoroutineHooks(AsyncCallbackHandler):
    raise_error = True
    run_inline = True

    async def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
        if token:
            raise RuntimeError("stop")


def test_why_the_hooks_are_plain_functions(server: SSEServer, llm: ChatOpenAI) -> None:
    # langchain_core.callbacks.manager._run_coros logs and swallows errors of coroutine hooks
    # on the sync path, whatever raise_error says; the async path re-raises them
    server.replies.put(Reply(answer([GOOD] * 5)))
    chunks = list(llm.stream("Hi", config={"callbacks": [_CoroutineHooks()]}))
    assert "".join(str(c.content) for c in chunks) == "".join(texts_of(5))
    server.replies.put(Reply(answer([GOOD] * 5)))
    with pytest.raises(RuntimeError, match="stop"):
        asyncio.run(llm.ainvoke("Hi", config={"callbacks": [_CoroutineHooks()]}))


# --- no leaks, no cross-talk ---------------------------------------------------------------------


async def test_no_monitor_is_left_behind(server: SSEServer, llm: ChatOpenAI) -> None:
    h = handler(keep=5)
    error = {"error": {"message": "boom", "type": "server_error"}}
    for i in range(6):
        server.replies.put(Reply(answer([GOOD] * 10)))
        server.replies.put(Reply(answer([BAD] * 300)))
        server.replies.put(Reply([*answer([GOOD] * 10)[:4], error]))  # error event mid-stream
        server.replies.put(Reply(answer([GOOD] * 50), abort_after=3))  # dropped connection
        server.replies.put(Reply(status=500, body=error))
        server.replies.put(Reply(answer([GOOD] * 300)))  # the consumer stops early
        await llm.ainvoke(f"q{i}", config={"callbacks": [h]})
        for _ in range(4):
            with pytest.raises((GuardrailBlocked, openai.APIError)):
                await llm.ainvoke(f"q{i}", config={"callbacks": [h]})
        stream = llm.astream(f"q{i}", config={"callbacks": [h]})
        async with contextlib.aclosing(stream):
            async for chunk in stream:
                if chunk.content:
                    break
        assert h.active_runs == 0
    assert len(h.verdicts) == 5  # bounded


async def test_fifty_concurrent_streams_do_not_mix(server: SSEServer, llm: ChatOpenAI) -> None:
    scripts = [
        [GOOD] * 30 if i % 3 == 0 else [BAD] * 300 if i % 3 == 1 else [GOOD] * (i % 7) + [BAD] * 300
        for i in range(50)
    ]  # fmt: skip
    server.responder = lambda body: Reply(answer(scripts[int(body["messages"][0]["content"][1:])]))
    h = handler(keep=None)
    run_ids = [uuid.uuid4() for _ in scripts]

    async def one(i: int) -> tuple[State, int, list[str]]:
        out: list[str] = []
        try:
            await astream_text(llm, out, {"callbacks": [h], "run_id": run_ids[i]}, f"q{i}")
        except GuardrailBlocked as exc:
            return exc.verdict.state, exc.verdict.t, out
        return State.CERTIFIED, dict(h.verdicts)[run_ids[i]].t, out

    results = await asyncio.gather(*(one(i) for i in range(50)))
    verdicts = dict(h.verdicts)
    for i, (state, t, out) in enumerate(results):
        assert (state, t) == expected(scripts[i], DEFAULT), i
        assert (verdicts[run_ids[i]].state, verdicts[run_ids[i]].t) == (state, t)
        n = len(scripts[i]) if state is State.CERTIFIED else t - 1
        assert out == texts_of(n), i
    assert {s for s, _, _ in results} == {State.CERTIFIED, State.BLOCKED}
    assert h.active_runs == 0 and len(verdicts) == 50


class _PerAnswerSkeleton:
    """A stateful skeleton: uniform, but each stream remembers the tokens it has seen."""

    def __init__(self) -> None:
        self.streams: list[_PerAnswerSkeleton] = []
        self.seen: list[str] = []

    def for_stream(self) -> _PerAnswerSkeleton:
        stream = _PerAnswerSkeleton()
        self.streams.append(stream)
        return stream

    def log_prob(self, event: TokenEvent) -> float:
        self.seen.append(event.text)
        return SKELETON.log_prob(event)


async def test_each_run_gets_its_own_stream_of_a_stateful_skeleton(
    server: SSEServer, llm: ChatOpenAI
) -> None:
    skel = _PerAnswerSkeleton()
    h = LiftGuardCallbackHandler(MIN, TAU, skeleton=skel)
    for n in (3, 5):
        server.replies.put(Reply(answer([GOOD] * n)))
        await astream_text(llm, [], {"callbacks": [h]})
    assert not skel.seen  # the shared object itself never scores a token
    runs = [s for s in skel.streams if s.seen]
    assert [s.seen for s in runs] == [texts_of(3), texts_of(5)]
    assert [v.state for _, v in h.verdicts] == [State.CERTIFIED, State.CERTIFIED]


# --- guard_runnable ------------------------------------------------------------------------------

PROMPT = ChatPromptTemplate.from_messages([("human", "{question}")])


def guarded(llm: ChatOpenAI, policy: StreamPolicy = DEFAULT, **kw: Any) -> Any:
    return guard_runnable(PROMPT | llm | StrOutputParser(), policy, TAU, skeleton=SKELETON, **kw)


async def collect(runnable: Any, out: list[Any]) -> None:
    async for item in runnable.astream({"question": "Capital of France?"}):
        out.append(item)


async def test_buffered_chain_releases_at_certification(server: SSEServer, llm: ChatOpenAI) -> None:
    server.replies.put(Reply(answer([GOOD] * 20)))
    out: list[Any] = []
    await collect(guarded(llm), out)
    texts = texts_of(20)
    assert out == ["".join(texts[:CERTIFY_AT]), *texts[CERTIFY_AT:]]


@pytest.mark.parametrize("mode", ["buffered", "passthrough"])
@pytest.mark.parametrize("on_block", ["raise", "replace", "abstain"])
async def test_blocked_chain_in_each_mode(
    server: SSEServer, llm: ChatOpenAI, mode: str, on_block: str
) -> None:
    server.replies.put(Reply(answer([BAD] * 400), hold_after=HOLD))
    out: list[Any] = []
    runnable = guarded(llm, on_block=on_block, mode=mode, refusal="No.")
    shown = [] if mode == "buffered" else texts_of(BLOCK_AT - 1)
    if on_block == "raise":
        with pytest.raises(GuardrailBlocked) as info:
            await collect(runnable, out)
        assert out == shown and info.value.verdict.t == BLOCK_AT
    elif on_block == "replace":
        await collect(runnable, out)
        assert out == [*shown, "No."]
    else:
        await collect(runnable, out)
        assert out[:-1] == shown and isinstance(out[-1], Abstention)
        assert out[-1].verdict.t == BLOCK_AT and out[-1].reason.startswith("blocked")
    assert await stopped_early(server)


@pytest.mark.parametrize("on_block", ["raise", "replace", "abstain"])
async def test_ainvoke_returns_text_refusal_or_abstention(
    server: SSEServer, llm: ChatOpenAI, on_block: str
) -> None:
    runnable = guarded(llm, on_block=on_block, mode="passthrough")
    server.replies.put(Reply(answer([GOOD] * 12)))
    assert await runnable.ainvoke({"question": "q"}) == "".join(texts_of(12))
    server.replies.put(Reply(answer([BAD] * 400), hold_after=HOLD))
    if on_block == "raise":
        with pytest.raises(GuardrailBlocked):
            await runnable.ainvoke({"question": "q"})
    elif on_block == "replace":  # never the partial text, even in passthrough mode
        assert await runnable.ainvoke({"question": "q"}) == "I can't answer that reliably."
    else:
        result = await runnable.ainvoke({"question": "q"})
        assert isinstance(result, Abstention) and result.verdict.state is State.BLOCKED


async def test_the_final_rule_blocks_at_the_end_with_nothing_shown(
    server: SSEServer, llm: ChatOpenAI
) -> None:
    server.replies.put(Reply(answer([BAD] * 20)))
    out: list[Any] = []
    with pytest.raises(GuardrailBlocked, match="final mean lift"):
        await collect(guarded(llm, StreamPolicy(early=False)), out)
    assert out == []


async def test_guarding_the_model_inside_a_chain(server: SSEServer, llm: ChatOpenAI) -> None:
    chain = PROMPT | guard_runnable(llm, MIN, TAU, skeleton=SKELETON, on_block="replace")
    server.replies.put(Reply(answer([GOOD] * 9)))
    assert await chain.ainvoke({"question": "q"}) == "".join(texts_of(9))
    server.replies.put(Reply(answer([GOOD] * 3 + [BAD] * 9)))
    assert [c async for c in chain.astream({"question": "q"})] == ["I can't answer that reliably."]


async def test_a_step_that_catches_the_block_does_not_unblock(
    server: SSEServer, llm: ChatOpenAI
) -> None:
    fallback = RunnableLambda(lambda _: AIMessage("made up"))
    risky = llm.with_fallbacks([fallback], exceptions_to_handle=(GuardrailBlocked,))
    server.replies.put(Reply(answer([BAD] * 400), hold_after=HOLD))
    with pytest.raises(GuardrailBlocked):
        await guard_runnable(risky, DEFAULT, TAU, skeleton=SKELETON).ainvoke("q")


async def test_output_without_a_model_run_is_blocked() -> None:
    runnable = guard_runnable(RunnableLambda(lambda _: "text"), DEFAULT, TAU, skeleton=SKELETON)
    with pytest.raises(GuardrailBlocked, match="no language-model run"):
        await runnable.ainvoke("q")
    dicts = guard_runnable(RunnableLambda(lambda _: {"a": 1}), DEFAULT, TAU, skeleton=SKELETON)
    with pytest.raises(ConfigError, match="streams text or messages"):
        await dicts.ainvoke("q")


def test_sync_invoke_and_stream_of_the_guarded_runnable(server: SSEServer, llm: ChatOpenAI) -> None:
    runnable = guarded(llm, on_block="replace")
    for _ in range(2):  # repeated calls: no event loop is created, none is reused
        server.replies.put(Reply(answer([GOOD] * 10)))
        assert runnable.invoke({"question": "q"}) == "".join(texts_of(10))
        server.replies.put(Reply(answer([BAD] * 400), hold_after=HOLD))
        assert list(runnable.stream({"question": "q"})) == ["I can't answer that reliably."]
        rec = server.last()
        assert rec.client_closed and rec.sent < rec.total
    strict = guarded(llm, mode="passthrough")
    server.replies.put(Reply(answer([BAD] * 400), hold_after=HOLD))
    out: list[Any] = []
    with pytest.raises(GuardrailBlocked):
        out.extend(strict.stream({"question": "q"}))
    assert out == texts_of(BLOCK_AT - 1)


@pytest.mark.parametrize(("kw", "match"), [
    ({"on_block": "ignore"}, "on_block must be"),
    ({"mode": "final"}, "mode must be"),
    ({"refusal": None}, "refusal must be"),
    ({"on_missing_logprobs": "guess"}, "on_missing_logprobs"),
])  # fmt: skip
def test_guard_runnable_checks_its_arguments(
    llm: ChatOpenAI, kw: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        guard_runnable(llm, DEFAULT, TAU, skeleton=SKELETON, **kw)
    with pytest.raises(ConfigError, match="Runnable"):
        guard_runnable(lambda x: x, DEFAULT, TAU, skeleton=SKELETON)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="tau"):
        guard_runnable(llm, DEFAULT, 99.0, skeleton=SKELETON)


def test_handler_checks_its_arguments() -> None:
    with pytest.raises(ConfigError, match="guard_runnable"):
        handler(mode="buffered")
    with pytest.raises(ConfigError, match="early=False"):
        handler(mode="final")
    with pytest.raises(ConfigError, match="keep"):
        handler(keep=0)
    with pytest.raises(ConfigError, match="skeleton"):
        handler(skeleton=None)  # type: ignore[arg-type]


# --- guard_tool ----------------------------------------------------------------------------------


def make_tools(llm: ChatOpenAI) -> tuple[Any, Any]:
    @tool
    async def ask_expert(question: str) -> str:
        """Ask the expert model a factual question."""
        return str((await llm.ainvoke(question)).content)

    @tool
    async def forgiving_expert(question: str) -> str:
        """Ask the expert model, hiding its failures."""
        try:
            return str((await llm.ainvoke(question)).content)
        except Exception:
            return "Paris, surely."

    return ask_expert, forgiving_expert


async def test_an_agent_sees_a_blocked_tool_answer_as_an_error_message(server: SSEServer) -> None:
    ask_expert, _ = make_tools(chat(server))
    expert = guard_tool(ask_expert, DEFAULT, TAU, skeleton=SKELETON, handle_tool_error=True)
    assert expert.name == "ask_expert" and expert.args == ask_expert.args
    agent = chat(server, streaming=False, logprobs=None, top_logprobs=None).bind_tools([expert])
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "ask_expert", "arguments": json.dumps({"question": "Capital?"})},
    }
    server.replies.put(Reply(body=completion({"role": "assistant", "tool_calls": [call]})))
    server.replies.put(Reply(answer([BAD] * 400), hold_after=HOLD))  # the expert's answer: blocked
    server.replies.put(Reply(body=completion({"role": "assistant", "content": "I don't know."})))
    messages: list[Any] = [HumanMessage("What is the capital of France?")]
    while True:  # a minimal agent loop
        reply = await agent.ainvoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            break
        for tool_call in reply.tool_calls:
            messages.append(await expert.ainvoke(tool_call))
    tool_message = messages[2]
    assert isinstance(tool_message, ToolMessage) and tool_message.status == "error"
    assert tool_message.content.startswith("the tool's answer was blocked by liftguard: blocked")
    assert messages[-1].content == "I don't know."
    sent = server.records[-1].body["messages"]
    assert sent[-1]["role"] == "tool" and sent[-1]["content"] == tool_message.content
    assert (await server.records[1].finished()).client_closed  # the expert's stream stopped


async def test_guarded_tool_raises_tool_exception_with_the_verdict(
    server: SSEServer, llm: ChatOpenAI
) -> None:
    ask_expert, forgiving = make_tools(llm)
    for inner in (ask_expert, forgiving):  # catching the error inside does not help
        expert = guard_tool(inner, DEFAULT, TAU, skeleton=SKELETON)
        server.replies.put(Reply(answer([BAD] * 400), hold_after=HOLD))
        with pytest.raises(ToolException, match="blocked by liftguard") as info:
            await expert.ainvoke({"question": "Capital?"})
        cause = info.value.__cause__
        assert isinstance(cause, GuardrailBlocked) and isinstance(cause.verdict, Verdict)
        assert cause.verdict.t == BLOCK_AT
        server.replies.put(Reply(answer([GOOD] * 10)))
        assert await expert.ainvoke({"question": "Capital?"}) == "".join(texts_of(10))


async def test_a_tool_without_a_model_run_is_not_certified() -> None:
    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return "cached"

    with pytest.raises(ToolException, match="no language-model run"):
        await guard_tool(lookup, DEFAULT, TAU, skeleton=SKELETON).ainvoke({"key": "k"})


def test_sync_tool(server: SSEServer, llm: ChatOpenAI) -> None:
    @tool
    def ask(question: str) -> str:
        """Ask the model."""
        return str(llm.invoke(question).content)

    expert = guard_tool(ask, DEFAULT, TAU, skeleton=SKELETON, handle_tool_error="unreliable")
    server.replies.put(Reply(answer([BAD] * 400), hold_after=HOLD))
    assert expert.invoke({"question": "q"}) == "unreliable"
    server.replies.put(Reply(answer([GOOD] * 10)))
    assert expert.invoke({"question": "q"}) == "".join(texts_of(10))
    with pytest.raises(ConfigError, match="BaseTool"):
        guard_tool(ask.func, DEFAULT, TAU, skeleton=SKELETON)  # type: ignore[arg-type]


# --- parsing and packaging -----------------------------------------------------------------------


def test_token_events_from_langchain_logprobs() -> None:
    content = [_tok("a", -0.5), _tok("b", -1.0)]
    assert [(e.text, e.logprob) for e in token_events("ab", {"content": content})] == [
        ("a", -0.5),
        ("b", -1.0),
    ]
    assert token_events("ab", content)[1].bytes == b"b"
    refusal = token_events("", {"content": None, "refusal": [_tok("no", -0.1)]})
    assert [e.text for e in refusal] == ["no"]
    assert token_events("x", None) == [TokenEvent("x", None)]
    assert token_events("x", {"content": []}) == [TokenEvent("x", None)]
    assert token_events("", {"content": []}) == []
    with pytest.raises(ProviderFormatError, match=r"logprobs\.content\[0\]\.logprob"):
        token_events("a", {"content": [{"token": "a", "logprob": "high"}]})
    with pytest.raises(ProviderFormatError, match="logprobs"):
        token_events("a", 3.0)


async def test_chunk_logprobs_from_message_metadata() -> None:
    from langchain_core.outputs import ChatGenerationChunk

    h = handler(MIN)
    msg = AIMessageChunk(content="x", response_metadata={"logprobs": {"content": [_tok("x", BAD)]}})
    with pytest.raises(GuardrailBlocked):
        h.on_llm_new_token("x", chunk=ChatGenerationChunk(message=msg), run_id=uuid.uuid4())
    h.on_llm_new_token("y", run_id=(run := uuid.uuid4()), logprobs={"content": [_tok("y", GOOD)]})
    assert h.active_runs == 2
    h.on_llm_error(RuntimeError(), run_id=run)
    assert h.active_runs == 1


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_import_adapters_does_not_import_langchain() -> None:
    code = (
        "import sys, adapters\n"
        "print([m for m in sys.modules if m.startswith('langchain')])\n"
        "print(adapters.LiftGuardCallbackHandler.__name__, 'langchain_core' in sys.modules)\n"
    )
    assert _run(code).splitlines() == ["[]", "LiftGuardCallbackHandler True"]


def test_missing_extra_gives_an_install_hint() -> None:
    code = (
        "import sys\n"
        "sys.modules['langchain_core'] = None\n"
        "import adapters\n"
        "try:\n"
        "    adapters.guard_runnable\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    assert 'pip install "liftguard[langchain]"' in _run(code)
