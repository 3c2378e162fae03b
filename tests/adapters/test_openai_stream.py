"""Guarded OpenAI streams against a loopback server that speaks the Chat Completions SSE format.

The server (a ``ThreadingHTTPServer`` on 127.0.0.1, free port) replays a scripted
answer as ``data: {json}\\n\\n`` events in a chunked HTTP/1.1 body, ending with
``data: [DONE]``, one event per 5 ms. Before each write it checks whether the
client has closed the connection (the socket reads EOF) and records it, so a
test can tell that a BLOCK stopped the upstream request before the answer was
finished. The real ``openai.AsyncOpenAI`` / ``openai.OpenAI`` clients drive it.

Numbers: ``UniformSkeleton(50_000)`` gives lift ``logprob + log(50000) =
logprob + 10.82`` clipped to ``[0, 12]``. With ``tau = 4`` and the default
betting policy (delta 0.05), tokens at logprob -0.05 (lift 10.77) certify after
7 tokens; tokens at logprob -12 (lift 0) block after 17.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from sse_server import Reply, SSEServer
from sse_server import chat_chunk as _chunk
from sse_server import token_entry as _tok

from adapters import guard_chat_stream, guard_chat_stream_sync, guarded_chat_completion
from guardrail import (
    ConfigError,
    GuardrailBlocked,
    MissingLogprobsError,
    Monitor,
    State,
    StreamPolicy,
    UniformSkeleton,
)

VOCAB = 50_000
TAU = 4.0
GOOD, BAD = -0.05, -12.0  # lifts 10.77 and 0 (clipped)
CERTIFY_AT, BLOCK_AT = 7, 17
HOLD = BLOCK_AT + 2  # the server holds the stream here until the client closes
WORDS = ["The", " capital", " of", " France", " is", " Paris", ".", " It", " lies", " on"]


# --- the scripted SSE server -------------------------------------------------------------------


# --- wire data -------------------------------------------------------------------------------


def answer(
    logprobs: list[float | None], per_chunk: int = 1, *, usage: bool = True
) -> tuple[list[Any], list[str]]:
    """SSE events of an answer with these token logprobs (None: chunk without logprobs).

    Returns the events and the text of each token. Token 1 has null bytes; top_logprobs
    carry 3 entries although 20 were asked.
    """
    texts = [WORDS[i % len(WORDS)] for i in range(len(logprobs))]
    events: list[Any] = [
        _chunk(
            {"role": "assistant", "content": "", "refusal": None}, {"content": [], "refusal": []}
        )
    ]
    for start in range(0, len(texts), per_chunk):
        idx = range(start, min(start + per_chunk, len(texts)))
        content = "".join(texts[i] for i in idx)
        if any(logprobs[i] is None for i in idx):
            events.append(_chunk({"content": content}, None))
            continue
        toks = [_tok(texts[i], logprobs[i], 3) for i in idx]  # type: ignore[arg-type]
        for i, t in zip(idx, toks, strict=True):
            if i == 1:
                t["bytes"] = None
        events.append(_chunk({"content": content}, {"content": toks, "refusal": None}))
    events.append(_chunk({}, None, "stop"))
    if usage:
        u = {"prompt_tokens": 5, "completion_tokens": len(texts), "total_tokens": 5 + len(texts)}
        events.append({**_chunk({}, None), "choices": [], "usage": u})
    return events, texts


def monitor(*, policy: StreamPolicy | None = None, missing: str = "block") -> Monitor:
    return Monitor.lift(
        policy or StreamPolicy(),
        TAU,
        skeleton=UniformSkeleton(VOCAB),
        on_missing_logprobs=missing,  # type: ignore[arg-type]
    )


async def _open(client: openai.AsyncOpenAI) -> Any:
    return await client.chat.completions.create(
        model="gpt-test",
        messages=[{"role": "user", "content": "Capital of France?"}],
        stream=True,
        logprobs=True,
        top_logprobs=20,
    )


async def collect(client: openai.AsyncOpenAI, mon: Monitor, out: list[str], **kw: Any) -> None:
    stream = await _open(client)
    async for text in guard_chat_stream(stream, mon, **kw):
        out.append(text)


def test_lifts_used_by_these_tests() -> None:
    assert GOOD + math.log(VOCAB) == pytest.approx(10.77, abs=0.01)
    assert BAD + math.log(VOCAB) < 0  # clipped to 0


# --- certify / block ---------------------------------------------------------------------------


async def test_certified_answer_is_released_in_buffered_mode(
    server: SSEServer, client: openai.AsyncOpenAI
) -> None:
    events, texts = answer([GOOD] * 30, per_chunk=3)
    server.replies.put(Reply(events))
    mon, out = monitor(), []
    messages = [{"role": "user", "content": "Capital of France?"}]
    async for text in guarded_chat_completion(
        client, monitor=mon, model="gpt-test", messages=messages
    ):
        out.append(text)
    assert "".join(out) == "".join(texts)
    # held until the certifying token (7th, in the 3rd chunk), then chunk by chunk
    assert out[0] == "".join(texts[:9]) and len(out) == 1 + (30 - 9) // 3
    assert mon.verdict.state is State.CERTIFIED and mon.verdict.t == CERTIFY_AT
    rec = server.last()
    assert rec.body["stream"] is True and rec.body["logprobs"] is True
    assert rec.body["top_logprobs"] == 20 and rec.path == "/v1/chat/completions"
    assert rec.sent == rec.total and not rec.client_closed


async def test_blocked_answer_yields_nothing_and_stops_upstream(
    server: SSEServer, client: openai.AsyncOpenAI
) -> None:
    events, _ = answer([BAD] * 400)
    server.replies.put(Reply(events, hold_after=HOLD))
    mon, out = monitor(), []
    with pytest.raises(GuardrailBlocked) as info:
        await collect(client, mon, out, mode="buffered")
    assert out == []
    verdict = info.value.verdict
    assert verdict is mon.verdict and verdict.state is State.BLOCKED and verdict.final
    assert verdict.t == BLOCK_AT and verdict.upper <= TAU
    assert verdict.reason in str(info.value)
    rec = server.last()
    assert rec.client_closed and rec.sent < 100 < rec.total  # the request stopped early


async def test_passthrough_yields_a_prefix_then_raises(
    server: SSEServer, client: openai.AsyncOpenAI
) -> None:
    events, texts = answer([BAD] * 400)
    server.replies.put(Reply(events, hold_after=HOLD))
    mon, out = monitor(), []
    with pytest.raises(GuardrailBlocked):
        await collect(client, mon, out, mode="passthrough")
    assert out == texts[: BLOCK_AT - 1]  # every token before the blocking one
    rec = server.last()
    assert rec.client_closed and rec.sent < rec.total


async def test_on_block_stop_ends_quietly(server: SSEServer, client: openai.AsyncOpenAI) -> None:
    events, _ = answer([BAD] * 400)
    server.replies.put(Reply(events, hold_after=HOLD))
    mon, out = monitor(), []
    await collect(client, mon, out, on_block="stop")
    assert out == [] and mon.verdict.state is State.BLOCKED
    assert server.last().client_closed


async def test_consumer_that_stops_early_closes_upstream(
    server: SSEServer, client: openai.AsyncOpenAI
) -> None:
    events, texts = answer([GOOD] * 400)
    server.replies.put(Reply(events, hold_after=CERTIFY_AT + 2))
    stream = await _open(client)
    async with contextlib.aclosing(guard_chat_stream(stream, monitor())) as texts_out:
        async for text in texts_out:
            assert text == "".join(texts[:CERTIFY_AT])
            break
    rec = server.last()
    assert rec.client_closed and rec.sent < rec.total


@pytest.mark.parametrize(("lp", "certified"), [(GOOD, True), (BAD, False)])
async def test_final_mode_decides_at_the_end(
    server: SSEServer, client: openai.AsyncOpenAI, lp: float, certified: bool
) -> None:
    events, texts = answer([lp] * 20, per_chunk=2)
    server.replies.put(Reply(events))
    mon, out = monitor(policy=StreamPolicy(early=False)), []
    if certified:
        await collect(client, mon, out, mode="final")
        assert out == ["".join(texts)]
    else:
        with pytest.raises(GuardrailBlocked, match="final mean lift"):
            await collect(client, mon, out, mode="final")
        assert out == []
    assert mon.verdict.t == 20 and mon.verdict.final
    rec = server.last()
    assert rec.sent == rec.total and not rec.client_closed


# --- missing and censored logprobs ---------------------------------------------------------------


@pytest.mark.parametrize("bad", [None, -9999.0], ids=["missing", "censored"])
@pytest.mark.parametrize("policy", ["block", "pass", "error"])
async def test_missing_or_censored_logprobs_follow_the_policy(
    server: SSEServer, client: openai.AsyncOpenAI, policy: str, bad: float | None
) -> None:
    lps: list[float | None] = [GOOD] * (30 if policy == "pass" else 200)
    lps[2] = bad
    events, texts = answer(lps)
    server.replies.put(Reply(events, hold_after=None if policy == "pass" else 5))
    mon, out = monitor(missing=policy), []
    if policy == "pass":  # skipped: certifies one token later, all text released
        await collect(client, mon, out)
        assert "".join(out) == "".join(texts)
        assert mon.verdict.state is State.CERTIFIED and mon.verdict.t == CERTIFY_AT
        assert not server.last().client_closed
        return
    exc = GuardrailBlocked if policy == "block" else MissingLogprobsError
    word = "missing" if bad is None else r"censored \(outside the top-k\)"
    with pytest.raises(exc, match=f"{word} logprob at token 2"):
        await collect(client, mon, out)
    assert out == []
    rec = server.last()
    assert rec.client_closed and rec.sent < rec.total


# --- provider errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["buffered", "passthrough"])
async def test_error_event_mid_stream_propagates_unchanged(
    server: SSEServer, client: openai.AsyncOpenAI, mode: str
) -> None:
    events, texts = answer([GOOD] * 200)
    error = {"error": {"message": "boom", "type": "server_error", "code": "internal"}}
    server.replies.put(Reply([*events[:4], error, *events[4:]], hold_after=6))  # after 3 tokens
    mon, out = monitor(), []
    with pytest.raises(openai.APIError) as info:
        await collect(client, mon, out, mode=mode)
    assert type(info.value) is openai.APIError and info.value.message == "boom"
    assert out == ([] if mode == "buffered" else texts[:3])  # nothing held back is released
    assert mon.verdict.state is State.CONTINUE
    rec = server.last()
    assert rec.client_closed and rec.sent < rec.total


async def test_abrupt_disconnect_propagates_as_connection_error(
    server: SSEServer, client: openai.AsyncOpenAI
) -> None:
    events, _ = answer([GOOD] * 50)
    server.replies.put(Reply(events, abort_after=4))
    mon, out = monitor(), []
    with pytest.raises(openai.APIConnectionError):
        await collect(client, mon, out)
    assert out == [] and mon.verdict.state is State.CONTINUE


@pytest.mark.parametrize(
    ("status", "message", "cls"),
    [
        (403, "You are not allowed to request logprobs from this model", "PermissionDeniedError"),
        (400, "logprobs is not supported with this model.", "BadRequestError"),
    ],
)
async def test_model_refusing_logprobs_is_a_config_error(
    server: SSEServer, client: openai.AsyncOpenAI, status: int, message: str, cls: str
) -> None:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None}}
    server.replies.put(Reply(status=status, body=body))
    guarded = guarded_chat_completion(client, monitor=monitor(), model="o1", messages=[])
    with pytest.raises(ConfigError, match="'o1' does not provide token logprobs") as info:
        await anext(guarded)
    assert type(info.value.__cause__) is getattr(openai, cls)


@pytest.mark.parametrize(
    ("status", "message", "cls"),
    [
        (404, "The model `nope` does not exist", "NotFoundError"),
        (400, "Invalid 'top_logprobs': integer above maximum value (20)", "BadRequestError"),
    ],
)
async def test_other_request_errors_propagate_unchanged(
    server: SSEServer, client: openai.AsyncOpenAI, status: int, message: str, cls: str
) -> None:
    body = {"error": {"message": message, "type": "invalid_request_error"}}
    server.replies.put(Reply(status=status, body=body))
    guarded = guarded_chat_completion(
        client, monitor=monitor(), model="nope", messages=[], top_logprobs=25
    )
    with pytest.raises(getattr(openai, cls)):
        await anext(guarded)
    assert server.last().body["top_logprobs"] == 25  # a given value is kept


# --- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "eager"}, "mode must be"),
        ({"on_block": "ignore"}, "on_block must be"),
        ({"stream": False}, "stream=True"),
        ({"logprobs": False}, "logprobs=True"),
        ({"n": 2}, "n must be 1"),
    ],
)
async def test_bad_configuration_fails_before_any_request(
    server: SSEServer, client: openai.AsyncOpenAI, kwargs: dict[str, Any], match: str
) -> None:
    guarded = guarded_chat_completion(client, monitor=monitor(), model="m", messages=[], **kwargs)
    with pytest.raises(ConfigError, match=match):
        await anext(guarded)
    assert server.records == []


def test_guard_chat_stream_checks_its_arguments_at_once() -> None:
    with pytest.raises(ConfigError, match="mode must be"):
        guard_chat_stream(iter_async([]), monitor(), mode="eager")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="early=False"):
        guard_chat_stream(iter_async([]), monitor(), mode="final")
    with pytest.raises(ConfigError, match="Monitor"):
        guard_chat_stream_sync([], object())  # type: ignore[arg-type]


async def iter_async(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


async def test_missing_sdk_gives_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(ImportError, match=r'pip install "liftguard\[openai\]"'):
        await anext(guarded_chat_completion(object(), monitor=monitor(), model="m", messages=[]))


# --- the sync twin -----------------------------------------------------------------------------


@pytest.mark.parametrize(("lp", "certified"), [(GOOD, True), (BAD, False)])
def test_sync_client(server: SSEServer, lp: float, certified: bool) -> None:
    events, texts = answer([lp] * (40 if certified else 300), per_chunk=2)
    server.replies.put(Reply(events, hold_after=None if certified else HOLD))
    with openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0) as sync_client:
        stream = sync_client.chat.completions.create(
            model="gpt-test", messages=[], stream=True, logprobs=True, top_logprobs=20
        )
        mon, out = monitor(), []
        if certified:
            out.extend(guard_chat_stream_sync(stream, mon))
            assert "".join(out) == "".join(texts)
        else:
            with pytest.raises(GuardrailBlocked):
                out.extend(guard_chat_stream_sync(stream, mon))
            assert out == []
            rec = server.last()
            assert rec.client_closed and rec.sent < rec.total
