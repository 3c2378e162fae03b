"""Adversarial upstream stream shapes, shared by the proxy's client tests
(``test_proxy_shapes.py``) and the conformance suite (every front end).

Each :class:`Shape` is a scripted upstream reply (``sse_server.Reply``) with what a guard
must make of it: the error ``type``/``code`` the proxy reports, the verdict's ``cause``, and
``before``, the text the upstream sent before the fault (what a passthrough guard may have
delivered: never more). Words and logprobs are the proxy harness's (a token at ``GOOD``
passes, one at ``BAD`` blocks at once).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proxy_harness import BAD, GOOD, ROLE, STOP, tokens
from sse_server import Reply, chat_chunk, token_entry

__all__ = [
    "BLOCKED", "CLEAN_TEXT", "EMPTY_TOKEN", "ERROR_EVENT", "FORBIDDEN", "FULL", "HUGE",
    "HUGE_TOKEN", "REFUSAL", "SHAPES", "TAIL", "TRUNCATED_JSON", "UPSTREAM", "Shape",
]  # fmt: skip

FULL = [GOOD, GOOD, GOOD, BAD, GOOD, GOOD, GOOD]
CLEAN_TEXT = "The capital of France is"
BLOCKED, UPSTREAM = "liftguard_blocked", "liftguard_upstream_error"

TRUNCATED_JSON = '{"id": "chatcmpl-test", "object": "chat.completion.chunk", "choi'
ERROR_EVENT = {"error": {"message": "the server is overloaded", "type": "server_error"}}
EMPTY_TOKEN = chat_chunk(
    {"content": ""},
    {"content": [{"token": "", "logprob": -0.01, "bytes": None, "top_logprobs": []}]},
)
HUGE = "x" * 1_000_000
HUGE_TOKEN = chat_chunk({"content": HUGE}, {"content": [token_entry(HUGE, GOOD, k=1)]})
REFUSAL = chat_chunk(
    {"refusal": "I can't help with that."},
    {"content": None, "refusal": [token_entry("I can't help with that.", -0.01)]},
)
TAIL = tokens([GOOD] * 6)
FORBIDDEN = {
    "error": {
        "message": "This model does not support logprobs.",
        "type": "invalid_request_error",
        "param": "logprobs",
        "code": None,
    }
}


@dataclass(frozen=True)
class Shape:
    name: str
    reply: Callable[[], Reply]
    type: str | None = None  # the error's type (None: a clean answer)
    code: str | None = None  # ... and code
    held: bool = False  # the upstream holds the stream until the proxy closes it
    status: int = 200  # the HTTP status the client gets (the answer never started)
    cause: str | None = None  # the verdict's cause (None: certified, or no answer began)
    before: str = ""  # the text sent before the fault: the most a client may be shown


def _reply(events: list[Any], **kw: Any) -> Callable[[], Reply]:
    return lambda: Reply(list(events), delay=0.0, **kw)


SHAPES = [
    Shape("clean", _reply([ROLE, *tokens([GOOD] * 5), STOP]), before=CLEAN_TEXT),
    Shape(
        "blocked_mid_answer",
        _reply([ROLE, *tokens(FULL), STOP], hold_after=5),
        BLOCKED,
        "below_threshold",
        held=True,
        cause="below_threshold",
        before="The capital of",
    ),
    Shape(
        "cut_off",
        _reply([ROLE, *tokens(FULL[:3])], done=False),
        BLOCKED,
        "truncated",
        cause="truncated",
        before="The capital of",
    ),
    Shape(
        "no_finish",
        _reply([ROLE, *tokens([GOOD] * 5)]),
        BLOCKED,
        "truncated",
        cause="truncated",
        before=CLEAN_TEXT,
    ),
    Shape(
        "truncated_json",
        _reply([ROLE, *tokens([GOOD] * 2), TRUNCATED_JSON, *TAIL], hold_after=4),
        UPSTREAM,
        "malformed_chunk",
        held=True,
        cause="truncated",
        before="The capital",
    ),
    Shape(
        "error_event",
        _reply([ROLE, *tokens([GOOD] * 2), ERROR_EVENT, *TAIL], hold_after=4),
        UPSTREAM,
        "upstream_error",
        held=True,
        cause="truncated",
        before="The capital",
    ),
    Shape(
        "stall",
        _reply([ROLE, *tokens([GOOD] * 2), *TAIL], hold_after=3, stall=True),
        UPSTREAM,
        "upstream_timeout",
        held=True,
        cause="truncated",
        before="The capital",
    ),
    Shape(
        "huge_token",
        _reply([ROLE, HUGE_TOKEN, *TAIL], hold_after=2),
        UPSTREAM,
        "upstream_too_large",  # its ~12 MB event passes max_answer_bytes before it is parsed
        held=True,
        cause="over_token_limit",
    ),
    Shape(
        "empty_text_token",
        _reply([ROLE, *tokens([GOOD] * 2), EMPTY_TOKEN, *TAIL, STOP], hold_after=4),
        BLOCKED,
        "unreadable_text",
        held=True,
        cause="unreadable_text",
        before="The capital",
    ),
    Shape("empty_stream", _reply([], done=False), BLOCKED, "empty_stream", cause="empty_stream"),
    Shape("refusal", _reply([ROLE, REFUSAL, STOP]), BLOCKED, "refusal", cause="refusal"),
    Shape(
        "length",
        _reply([ROLE, *tokens([GOOD] * 5), chat_chunk({}, None, "length")]),
        BLOCKED,
        "length",
        cause="length",
        before=CLEAN_TEXT,
    ),
    Shape(
        "content_filter",
        _reply([ROLE, *tokens([GOOD] * 2), chat_chunk({}, None, "content_filter")]),
        BLOCKED,
        "content_filter",
        cause="content_filter",
        before="The capital",
    ),
    Shape(
        "forbidden",
        lambda: Reply(status=403, body=FORBIDDEN),
        "liftguard_logprobs_refused",
        "logprobs_refused",
        status=403,
    ),
]
