"""The proxy guards the events of one upstream read together
(:meth:`AnswerGuard.feed_events`): its batch twin must release what feeding the same
events one by one releases, however the stream is cut into reads.

The reference is the per-chunk loop the proxy ran before: decode each event, stop at
``[DONE]``, at a failure (nothing more is fed) or at a block (the chunk that blocks
releases nothing). Streams: clean answers, a block mid-stream (passthrough and
buffered), a malformed event and an error event mid-stream, ``[DONE]`` with events after
it, a token limit, and a tool call; each cut into reads at seeded random places.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from proxy_harness import BAD, GOOD, ROLE, STOP, WORDS, make_certificate, tokens
from sse_server import chat_chunk

from adapters._proxy._guarded import AnswerGuard, RequestInfo
from adapters._proxy._upstream import Event, decode_chunk
from adapters._serving._wire import merge_released, sse

Outcome = tuple[list[dict[str, Any]], bool, str | None, dict[str, Any]]


def _guard(mode: str, max_tokens: int) -> AnswerGuard:
    cert = make_certificate()
    info = RequestInfo("req-1", cert, "v1", mode, want_logprobs=True, top_k=2,
                       upstream_top=5, max_tokens=max_tokens)  # fmt: skip
    return AnswerGuard(info, cert.monitor(), max_token_chars=1000)


def _one_by_one(guard: AnswerGuard, events: list[Event]) -> Outcome:
    out: list[dict[str, Any]] = []
    done, failure = False, None
    try:
        for event, data in events:
            chunk = decode_chunk(event, data)
            if chunk is None:
                done = True
                break
            released = guard.feed(chunk)
            if guard.blocked:
                break
            out += released
    except Exception as exc:
        failure = type(exc).__name__
    return out, done, failure, guard.verdict_field()


def _in_reads(guard: AnswerGuard, events: list[Event], rng: random.Random) -> Outcome:
    cuts = sorted(rng.sample(range(1, len(events)), rng.randint(0, len(events) - 1)))
    reads = [events[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True)]
    out: list[dict[str, Any]] = []
    for batch in reads:
        releases, done, failure = guard.feed_events(batch)
        for released in releases:
            assert released  # (only what a chunk released)
            out += released
        if failure is not None:
            return out, False, type(failure).__name__, guard.verdict_field()
        if done or guard.blocked:
            return out, done, None, guard.verdict_field()
    return out, False, None, guard.verdict_field()


def _events(chunks: list[Any]) -> list[Event]:
    return [
        (None, c) if isinstance(c, bytes) else (c[0], json.dumps(c[1]).encode())
        if isinstance(c, tuple) else (None, json.dumps(c).encode())
        for c in chunks
    ]  # fmt: skip


TOOL = chat_chunk({"tool_calls": [{"index": 0, "id": "t", "type": "function",
                   "function": {"name": "pay", "arguments": "{}"}}]}, None)  # fmt: skip
STREAMS: dict[str, list[Any]] = {
    "clean": [ROLE, *tokens([GOOD] * len(WORDS)), STOP, b"[DONE]"],
    "block": [ROLE, *tokens([GOOD, GOOD, BAD, GOOD, GOOD]), STOP, b"[DONE]"],
    "malformed": [ROLE, *tokens([GOOD, GOOD]), b"{not json", *tokens([GOOD]), STOP],
    "error_event": [ROLE, *tokens([GOOD]), ("error", {"error": {"message": "x"}}), STOP],
    "after_done": [ROLE, *tokens([GOOD] * 3), STOP, b"[DONE]", *tokens([GOOD])],
    "over_limit": [ROLE, *tokens([GOOD] * len(WORDS)), STOP, b"[DONE]"],
    "tool_call": [ROLE, *tokens([GOOD]), TOOL, STOP, b"[DONE]"],
}


@pytest.mark.parametrize("mode", ["passthrough", "buffered", "observe"])
@pytest.mark.parametrize("name", sorted(STREAMS))
def test_a_read_of_events_releases_what_the_events_one_by_one_release(
    name: str, mode: str
) -> None:
    events = _events(STREAMS[name])
    limit = 4 if name == "over_limit" else 64
    expected = _one_by_one(_guard(mode, limit), events)
    rng = random.Random(f"{name}-{mode}")
    for _ in range(30):
        got = _in_reads(_guard(mode, limit), events, rng)
        assert got[1:] == expected[1:]  # [DONE], the failure and the verdict
        assert got[0] == expected[0]  # the chunks, in order
        # the client's bytes, with each release joined as the proxy writes it
        assert b"".join(map(sse, merge_released(got[0]))) == b"".join(
            map(sse, merge_released(expected[0]))
        )


def test_the_streams_reach_each_ending() -> None:
    """The cases above are the ones they say they are (the test could not pass blind)."""
    ends = {name: _one_by_one(_guard("passthrough", 4 if name == "over_limit" else 64),
                              _events(chunks)) for name, chunks in STREAMS.items()}  # fmt: skip
    assert ends["clean"][1] and ends["clean"][3]["state"] == "continue"  # (end() not run)
    assert ends["block"][3]["state"] == "blocked" and not ends["block"][1]
    assert ends["malformed"][2] == "UpstreamFailure"
    assert ends["error_event"][2] == "UpstreamFailure"
    assert ends["after_done"][1]
    assert ends["over_limit"][3]["cause"] == "over_token_limit"
    assert ends["tool_call"][3]["state"] == "blocked"
