"""The text shown is the text read, in the one stream step every front end drives.

``adapters/_guard/_shown.py``: a chunk's ``delta.content`` must be the text of its tokens
(compared as UTF-8 bytes: a character split over tokens is shown with the token that
completes it), every token read must be shown by the end, and nothing of an answer may
follow its finish. The step is driven with decoded chunks (what the proxy feeds it); the
conformance suite runs the same cases through every front end. A batch reference checks
:class:`ShownText` on random splits of one text into tokens and shown pieces.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from sse_server import chat_chunk

from adapters import guard_chat_stream_sync
from adapters._guard._shown import ShownText
from guardrail import (
    Cause,
    GuardrailBlocked,
    Monitor,
    State,
    StreamPolicy,
    TokenEvent,
    UniformSkeleton,
)

GOOD = -0.05  # lift 10.77 against UniformSkeleton(50_000): certified after 7 tokens
WORDS = [" w0", " w1", " w2", " w3", " w4", " w5", " w6", " w7"]
HAND = "\N{OK HAND SIGN}"


def _entry(token: str, raw: bytes | None = None) -> dict[str, Any]:
    data = token.encode() if raw is None else raw
    return {"token": token, "logprob": GOOD, "bytes": list(data), "top_logprobs": []}


def _said(content: str | None, *entries: dict[str, Any]) -> dict[str, Any]:
    return chat_chunk({} if content is None else {"content": content}, {"content": list(entries)})


STOP = chat_chunk({}, None, "stop")
USAGE = {"id": "x", "object": "chat.completion.chunk", "choices": [], "usage": {"total_tokens": 9}}


def _run(chunks: list[dict[str, Any]], mode: str = "passthrough") -> tuple[str, Monitor]:
    monitor = Monitor.lift(StreamPolicy(), 4.0, skeleton=UniformSkeleton(50_000))
    out = guard_chat_stream_sync(iter(chunks), monitor, mode=mode, on_block="stop")  # type: ignore[arg-type]
    return "".join(out), monitor


ANSWER = [_said(w, _entry(w)) for w in WORDS]


def test_a_character_split_over_tokens_is_shown_with_the_token_that_completes_it() -> None:
    raw = HAND.encode()
    split = [
        _said("", _entry("bytes:\\xf0\\x9f", raw[:2])),
        _said(HAND, _entry("\\x91\\x8c", raw[2:])),
    ]
    text, monitor = _run([*ANSWER, *split, STOP])
    assert monitor.verdict.state is State.CERTIFIED and text == "".join(WORDS) + HAND


@pytest.mark.parametrize("mode", ["passthrough", "buffered"])
def test_text_that_is_not_its_tokens_is_never_shown(mode: str) -> None:
    text, monitor = _run([*ANSWER, _said(" EVIL", _entry(" w8")), STOP], mode)
    assert monitor.verdict.cause is Cause.CONTENT_MISMATCH and " EVIL" not in text


def test_a_token_never_shown_blocks_the_answer_at_its_end() -> None:
    text, monitor = _run([*ANSWER, _said("", _entry(" w8")), STOP], "buffered")
    assert monitor.verdict.cause is Cause.CONTENT_MISMATCH and text == "".join(WORDS)


def test_a_whole_answer_whose_content_runs_past_its_tokens_is_blocked() -> None:
    whole = _said("".join(WORDS) + " TAIL", *(_entry(w) for w in WORDS))
    text, monitor = _run([whole, STOP], "buffered")
    assert monitor.verdict.cause is Cause.CONTENT_MISMATCH and text == ""


@pytest.mark.parametrize(
    "after",
    [[_said(" EVIL", _entry(" EVIL"))], [chat_chunk({}, None, "stop")], [_said("", _entry(""))]],
    ids=["text", "second-finish", "empty-token"],
)
def test_nothing_of_an_answer_may_follow_its_finish(after: list[dict[str, Any]]) -> None:
    text, monitor = _run([*ANSWER, chat_chunk({}, None, "length"), *after])
    assert monitor.verdict.cause is Cause.AFTER_FINISH and "EVIL" not in text


def test_a_usage_chunk_may_follow_the_finish() -> None:
    text, monitor = _run([*ANSWER, STOP, USAGE], "buffered")
    assert monitor.verdict.state is State.CERTIFIED and text == "".join(WORDS)


def test_shown_text_agrees_with_a_batch_reference() -> None:
    """Random splits of one text into tokens (bytes) and shown pieces: each piece agrees
    exactly when the text shown so far is a start of the bytes read so far."""
    rng = random.Random(7)
    text = "caf\N{LATIN SMALL LETTER E WITH ACUTE} " + HAND * 3 + " \N{CJK UNIFIED IDEOGRAPH-4E2D}"
    raw = text.encode()
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(raw)), 6))
        tokens = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
        shown_check, read, shown = ShownText(), b"", b""
        for token in tokens:
            read += token
            piece = read[len(shown) : len(shown) + rng.randrange(0, len(read) - len(shown) + 1)]
            try:
                as_text = piece.decode()
            except UnicodeDecodeError:
                as_text = ""  # a partial character is not shown yet
            wrong = rng.random() < 0.1 and as_text
            shown_text = as_text[:-1] + "#" if wrong else as_text
            event = TokenEvent(text="?", logprob=GOOD, bytes=token)
            agrees = shown_check.agrees([event], shown_text)
            expected = read.startswith(shown + shown_text.encode())
            assert agrees == expected, (tokens, token, shown_text)
            if not agrees:
                break
            shown += shown_text.encode()
        else:
            assert shown_check.complete == (shown == raw)


def test_a_blocked_answer_raises_with_its_cause() -> None:
    monitor = Monitor.lift(StreamPolicy(), 4.0, skeleton=UniformSkeleton(50_000))
    chunks = [*ANSWER, _said(" EVIL", _entry(" w8")), STOP]
    with pytest.raises(GuardrailBlocked) as blocked:
        list(guard_chat_stream_sync(iter(chunks), monitor))
    assert blocked.value.verdict.cause is Cause.CONTENT_MISMATCH
