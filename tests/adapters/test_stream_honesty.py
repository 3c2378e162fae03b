"""Every adversarial stream shape through every guarded path, with real SDK clients.

The loopback server (``sse_server``) speaks the Chat Completions SSE format; the
real ``openai`` clients (async and sync) and ``langchain_openai.ChatOpenAI``
drive it. The rule under test: an answer is certified only when its stream ended
the way the provider documents a finished answer (``finish_reason`` "stop");
every other shape ends in a typed error or a BLOCKED verdict with a
machine-readable cause, nothing is shown in buffered mode, and an upstream that
was still sending sees the client close (the server holds the stream at
``hold_after`` until it does, so this never depends on timing).

Numbers: ``UniformSkeleton(50_000)`` gives lift ``logprob + 10.82``; under
``StreamPolicy(aggregate="min")`` at ``tau = 4`` a token at logprob -0.05 (lift
10.77) passes and one at -12 (lift 0) blocks at once, and a clean answer is
certified only at its end. ``FULL`` is blocked at its 4th token; the stream cut
off after 3 tokens used to be certified.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from langchain_core.tools import ToolException, tool
from langchain_openai import ChatOpenAI
from sse_server import Reply, SSEServer, running_server
from sse_server import chat_chunk as _chunk
from sse_server import token_entry as _tok
from stream_shapes import (
    EMPTY_TOKEN,
    ERROR_EVENT,
    FORBIDDEN,
    HUGE_TOKEN,
    REFUSAL,
    TAIL,
    TRUNCATED_JSON,
)  # fmt: skip

from adapters import (
    Abstention,
    LiftGuardCallbackHandler,
    ProviderFormatError,
    guard_chat_stream_sync,
    guard_runnable,
    guard_tool,
    guarded_chat_completion,
)
from guardrail import (
    Cause,
    ConfigError,
    GuardrailBlocked,
    Monitor,
    State,
    StreamPolicy,
    StreamTruncated,
    UniformSkeleton,
    Verdict,
)

SKELETON = UniformSkeleton(50_000)
POLICY = StreamPolicy(aggregate="min")
TAU = 4.0
GOOD, BAD = -0.05, -12.0
WORDS = ["The", " capital", " of", " France", " is", " Paris", "."]
FULL = [GOOD, GOOD, GOOD, BAD, GOOD, GOOD, GOOD]
ROLE = _chunk({"role": "assistant", "content": ""}, {"content": []})
STOP = _chunk({}, None, "stop")
TIMEOUT = 120.0  # the client's timeout; the stalled shape sets STALL_TIMEOUT instead
STALL_TIMEOUT = 1.0  # a lower bound on the wait, so the outcome never depends on load


def tokens(logprobs: list[float]) -> list[dict[str, Any]]:
    return [
        _chunk({"content": WORDS[i]}, {"content": [_tok(WORDS[i], lp)]})
        for i, lp in enumerate(logprobs)
    ]


# --- the stream shapes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    name: str
    reply: Callable[[], Reply]
    cause: Cause | None = None  # the BLOCKED verdict's cause
    error: type[BaseException] | None = None  # or: this typed error
    held: bool = False  # the server holds the stream until the client closes


def _reply(events: list[Any], **kw: Any) -> Callable[[], Reply]:
    return lambda: Reply(list(events), delay=0.0, **kw)


_TOOL_CALL = _chunk(
    {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                     "function": {"name": "transfer_money", "arguments": "{}"}}]},
    None,
)  # fmt: skip

SHAPES = [
    Shape("clean", _reply([ROLE, *tokens([GOOD] * 5), STOP])),
    Shape("cut_off", _reply([ROLE, *tokens(FULL[:3])], done=False), cause=Cause.TRUNCATED),
    Shape("no_finish", _reply([ROLE, *tokens([GOOD] * 5)]), cause=Cause.TRUNCATED),
    Shape(
        "truncated_json",
        _reply([ROLE, *tokens([GOOD] * 2), TRUNCATED_JSON, *TAIL], hold_after=4),
        error=ProviderFormatError,
        held=True,
    ),
    Shape(
        "error_event",
        _reply([ROLE, *tokens([GOOD] * 2), ERROR_EVENT, *TAIL], hold_after=4),
        error=openai.APIError,
        held=True,
    ),
    Shape(
        "stall",
        _reply([ROLE, *tokens([GOOD] * 2), *TAIL], hold_after=3, stall=True),
        error=openai.APITimeoutError,
        held=True,
    ),
    Shape(
        "huge_token",
        _reply([ROLE, HUGE_TOKEN, *TAIL], hold_after=2),
        error=ProviderFormatError,
        held=True,
    ),
    Shape(
        "empty_text_token",
        _reply([ROLE, *tokens([GOOD] * 2), EMPTY_TOKEN, *TAIL, STOP], hold_after=4),
        cause=Cause.UNREADABLE_TEXT,
        held=True,
    ),
    Shape("empty_stream", _reply([], done=False), cause=Cause.EMPTY_STREAM),
    Shape("refusal", _reply([ROLE, REFUSAL, STOP]), cause=Cause.REFUSAL),
    Shape(
        "tool_call_then_stop",
        _reply([ROLE, *tokens([GOOD] * 5), _TOOL_CALL, STOP]),
        cause=Cause.TOOL_CALL,
    ),
    Shape(
        "length",
        _reply([ROLE, *tokens([GOOD] * 5), _chunk({}, None, "length")]),
        cause=Cause.LENGTH,
    ),
    Shape(
        "content_filter",
        _reply([ROLE, *tokens([GOOD] * 2), _chunk({}, None, "content_filter")]),
        cause=Cause.CONTENT_FILTER,
    ),
    Shape(
        "forbidden",
        lambda: Reply(status=403, body=FORBIDDEN),
        error=ConfigError,
    ),
]


# --- the guarded paths ---------------------------------------------------------------------------


@dataclass
class Outcome:
    shown: list[str] = field(default_factory=list)
    verdict: Verdict | None = None
    error: BaseException | None = None

    @property
    def text(self) -> str:
        return "".join(self.shown)


def _caught(out: Outcome, exc: BaseException) -> Outcome:
    out.error = exc
    blocked = exc if isinstance(exc, GuardrailBlocked) else exc.__cause__
    if isinstance(blocked, GuardrailBlocked):
        out.verdict = blocked.verdict
    return out


MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


async def openai_async(server: SSEServer, mode: str) -> Outcome:
    out = Outcome()
    client = openai.AsyncOpenAI(
        base_url=server.base_url, api_key="t", max_retries=0, timeout=TIMEOUT
    )
    monitor = Monitor.lift(POLICY, TAU, skeleton=SKELETON)
    try:
        async for text in guarded_chat_completion(
            client, monitor=monitor, mode=mode, model="m", messages=MESSAGES
        ):
            out.shown.append(text)
        out.verdict = monitor.verdict
    except Exception as exc:
        _caught(out, exc)
    finally:
        await client.close()
    return out


def openai_sync(server: SSEServer) -> Outcome:
    out = Outcome()
    with openai.OpenAI(
        base_url=server.base_url, api_key="t", max_retries=0, timeout=TIMEOUT
    ) as client:
        monitor = Monitor.lift(POLICY, TAU, skeleton=SKELETON)
        try:
            stream = client.chat.completions.create(
                model="m", messages=MESSAGES, stream=True, logprobs=True, top_logprobs=5
            )
            for text in guard_chat_stream_sync(stream, monitor):
                out.shown.append(text)
            out.verdict = monitor.verdict
        except Exception as exc:
            _caught(out, exc)
    return out


def chat(server: SSEServer) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=server.base_url, api_key="t", model="m", max_retries=0, timeout=TIMEOUT,
        logprobs=True, top_logprobs=5, streaming=True,
    )  # fmt: skip


def _handler() -> LiftGuardCallbackHandler:
    return LiftGuardCallbackHandler(POLICY, TAU, skeleton=SKELETON)


async def handler_astream(server: SSEServer) -> Outcome:
    out, guard = Outcome(), _handler()
    try:
        async for chunk in chat(server).astream("Q", config={"callbacks": [guard]}):
            out.shown.append(str(chunk.content))
        out.verdict = guard.verdicts[-1][1]
    except Exception as exc:
        _caught(out, exc)
    return out


def handler_stream(server: SSEServer) -> Outcome:
    out, guard = Outcome(), _handler()
    try:
        for chunk in chat(server).stream("Q", config={"callbacks": [guard]}):
            out.shown.append(str(chunk.content))
        out.verdict = guard.verdicts[-1][1]
    except Exception as exc:
        _caught(out, exc)
    return out


def _abstain(out: Outcome, result: Any) -> Outcome:
    if isinstance(result, Abstention):
        out.verdict = result.verdict
    else:
        out.shown.append(result)
        out.verdict = CERTIFIED_MARK
    return out


CERTIFIED_MARK = Verdict(State.CERTIFIED, 0, 0.0, 0.0, 0.0, TAU, "-", "returned", True,
                         Cause.CERTIFIED)  # fmt: skip
"""What the paths that only return text (runnable, tool) report for an answer let through."""


async def runnable_ainvoke(server: SSEServer) -> Outcome:
    guarded = guard_runnable(chat(server), POLICY, TAU, skeleton=SKELETON, on_block="abstain")
    out = Outcome()
    try:
        return _abstain(out, await guarded.ainvoke("Q"))
    except Exception as exc:
        return _caught(out, exc)


def runnable_invoke(server: SSEServer) -> Outcome:
    guarded = guard_runnable(chat(server), POLICY, TAU, skeleton=SKELETON, on_block="abstain")
    out = Outcome()
    try:
        return _abstain(out, guarded.invoke("Q"))
    except Exception as exc:
        return _caught(out, exc)


async def runnable_astream(server: SSEServer) -> Outcome:
    guarded = guard_runnable(chat(server), POLICY, TAU, skeleton=SKELETON)
    out = Outcome()
    try:
        async for text in guarded.astream("Q"):
            out.shown.append(str(text))
        out.verdict = CERTIFIED_MARK
    except Exception as exc:
        _caught(out, exc)
    return out


async def tool_ainvoke(server: SSEServer) -> Outcome:
    llm = chat(server)

    @tool
    async def ask_expert(question: str) -> str:
        """Ask the expert model."""
        return str((await llm.ainvoke(question)).content)

    expert = guard_tool(ask_expert, POLICY, TAU, skeleton=SKELETON)
    out = Outcome()
    try:
        out.shown.append(await expert.ainvoke({"question": "Q"}))
        out.verdict = CERTIFIED_MARK
    except ToolException as exc:
        assert str(exc).startswith("the tool's answer was blocked by liftguard")
        _caught(out, exc)
    except Exception as exc:
        _caught(out, exc)
    return out


PATHS: dict[str, tuple[Callable[[SSEServer], Any], bool]] = {
    # name: (run, buffered: nothing may be shown unless certified)
    "openai_async_buffered": (lambda s: openai_async(s, "buffered"), True),
    "openai_async_passthrough": (lambda s: openai_async(s, "passthrough"), False),
    "openai_sync": (lambda s: asyncio.to_thread(openai_sync, s), True),
    "langchain_handler_astream": (handler_astream, False),
    "langchain_handler_stream": (lambda s: asyncio.to_thread(handler_stream, s), False),
    "runnable_ainvoke": (runnable_ainvoke, True),
    "runnable_invoke": (lambda s: asyncio.to_thread(runnable_invoke, s), True),
    "runnable_astream": (runnable_astream, True),
    "tool_ainvoke": (tool_ainvoke, True),
}
USER_MADE_REQUEST = {"openai_sync"}
"""Paths where the caller sends the request: a 403 is the SDK's own error from ``create``."""


@pytest.fixture
def server() -> Iterator[SSEServer]:
    with running_server() as srv:
        yield srv


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
async def test_only_a_clean_finish_is_certified(
    server: SSEServer, shape: Shape, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shape.name == "forbidden" and path in USER_MADE_REQUEST:
        pytest.skip("the caller's own create() raises the SDK's PermissionDeniedError")
    run, buffered = PATHS[path]
    if shape.name == "stall":  # only a stalled upstream may time out
        monkeypatch.setattr(f"{__name__}.TIMEOUT", STALL_TIMEOUT)
    server.replies.put(shape.reply())
    out: Outcome = await run(server)
    if shape.name == "clean":
        assert out.error is None, out.error
        assert out.verdict is not None and out.verdict.state is State.CERTIFIED
        assert out.text == "".join(WORDS[:5])
        return
    # never certified; a typed error or a BLOCKED verdict with the shape's cause
    assert out.verdict is None or out.verdict.state is State.BLOCKED, out.verdict
    if shape.error is not None:
        assert isinstance(out.error, shape.error), repr(out.error)
    else:
        assert out.verdict is not None and out.verdict.cause is shape.cause, out.verdict
        if out.error is not None and shape.cause in (Cause.TRUNCATED, Cause.EMPTY_STREAM):
            blocked = out.error if isinstance(out.error, GuardrailBlocked) else out.error.__cause__
            assert isinstance(blocked, StreamTruncated)
    if buffered:
        assert out.text == ""
    if shape.held:  # the server held the stream open: it must have seen the client close
        rec = await server.records[-1].finished(timeout=60)
        assert rec.client_closed and rec.sent < rec.total


async def test_a_cut_off_stream_used_to_certify_its_prefix(server: SSEServer) -> None:
    # the complete answer is blocked at token 4; its 3-token prefix passes the evidence
    mon = Monitor.lift(POLICY, TAU, skeleton=SKELETON)
    verdicts = [mon.update(e) for e in _events(FULL)]
    assert verdicts[3].state is State.BLOCKED
    prefix = Monitor.lift(POLICY, TAU, skeleton=SKELETON)
    for event in _events(FULL[:3]):
        prefix.update(event)
    assert prefix.finish("stop").state is State.CERTIFIED  # had it finished there
    cut = Monitor.lift(POLICY, TAU, skeleton=SKELETON)
    for event in _events(FULL[:3]):
        cut.update(event)
    v = cut.finish(None)
    assert v.state is State.BLOCKED and v.cause is Cause.TRUNCATED and v.final


def _events(logprobs: list[float]) -> list[Any]:
    from guardrail import TokenEvent

    return [TokenEvent(WORDS[i], lp) for i, lp in enumerate(logprobs)]


@pytest.mark.parametrize("path", ["openai_async_buffered", "langchain_handler_astream"])
async def test_length_is_an_answer_only_when_the_policy_says_so(
    server: SSEServer, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(f"{__name__}.POLICY", StreamPolicy(aggregate="min", on_length="answer"))
    server.replies.put(_reply([ROLE, *tokens([GOOD] * 5), _chunk({}, None, "length")])())
    out: Outcome = await PATHS[path][0](server)
    assert out.error is None and out.verdict is not None
    assert out.verdict.state is State.CERTIFIED and out.text == "".join(WORDS[:5])
