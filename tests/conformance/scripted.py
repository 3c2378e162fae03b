"""The scripted upstream of the conformance suite and what its cases share.

:class:`Upstream` answers each request by its last user message: a list of events
(``events[question]``) or an adversarial shape (``shapes[question]``, see
``tests/stream_shapes.py``), streamed, or made one ``chat.completion`` when the request
is not streamed (LiteLLM's whole answers) with the shape's fault kept (:func:`whole`).
"""

from __future__ import annotations

import json
from importlib.util import find_spec
from typing import Any

from frontends import FrontEnd, Outcome
from litellm_harness import ScriptedUpstream
from sse_server import Reply
from stream_shapes import Shape

from guardrail import GenerationContext

__all__ = [
    "CONTEXT", "FRONT_ENDS", "HAS_LITELLM", "LIMIT", "SYSTEM", "TIMEOUT_S", "WORDS",
    "Upstream", "ask", "completion", "question_for", "whole",
]  # fmt: skip

HAS_LITELLM = find_spec("litellm") is not None and find_spec("fastapi") is not None
LIMIT = 8
SYSTEM = "Answer briefly."
CONTEXT = GenerationContext(system_prompt=SYSTEM, temperature=0.0, max_tokens=LIMIT)
WORDS = [f" w{i}" for i in range(12)]
TIMEOUT_S = 3.0
"""The longest wait for the upstream in every front end (LiteLLM's ``timeout``, the proxy's
``upstream_timeout_s``, the SDK's and LangChain's client timeout): a stalled upstream meets it."""
FRONT_ENDS = [
    "sdk-buffered", "sdk-passthrough",
    "proxy-buffered-stream", "proxy-buffered-whole",
    "proxy-passthrough-stream", "proxy-passthrough-whole",
    "litellm-buffered-stream", "litellm-buffered-whole",
    "litellm-passthrough-stream", "litellm-passthrough-whole",
    "langchain-handler", "langchain-runnable-buffered", "langchain-runnable-passthrough",
]  # fmt: skip


class Upstream(ScriptedUpstream):
    """Answers each question with its scripted events: as a stream, or assembled into one
    ``chat.completion`` when the request is not streamed (LiteLLM's whole answers)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: dict[str, list[dict[str, Any]]] = {}
        self.cut: set[str] = set()
        """Questions whose stream ends without ``[DONE]`` (cut off)."""
        self.tails: dict[str, dict[str, Any]] = {}
        """Questions whose stream ends otherwise: more of their ``Reply`` (``tail``, raw
        bytes after the events; ``abort_after``)."""
        self.shapes: dict[str, Shape] = {}
        self.responder = self._reply

    def _reply(self, body: dict[str, Any]) -> Reply:
        question = body["messages"][-1]["content"]
        shape = self.shapes.get(question)
        if shape is not None:
            reply = shape.reply()
            return reply if body.get("stream") or reply.status != 200 else whole(reply)
        events = self.events[question]
        if body.get("stream"):
            tail = self.tails.get(question, {})
            return Reply(events, delay=0.0, done=question not in self.cut, **tail)
        return Reply(body=completion(events))


def completion(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The events as one completion: choice 0 assembled, every other choice (another index,
    a duplicate, one without an index) kept as a choice of its own. Fields besides the
    standard ones are kept too: a delta's text fields joined into the message (reasoning),
    a choice's and a chunk's as they came."""
    content: list[str] = []
    refusal: list[str] = []
    calls: list[Any] = []
    entries: list[Any] = []
    refusal_entries: list[Any] = []
    finish = None
    others: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}  # the message's fields besides the standard ones
    choice_extra: dict[str, Any] = {}
    top_extra: dict[str, Any] = {}
    for event in events:
        top_extra.update({k: v for k, v in event.items() if k not in _CHUNK})
        choices = event["choices"]
        for pos, choice in enumerate(choices):
            if pos > 0 or "index" not in choice or choice["index"] != 0:
                other = {"message": {"role": "assistant", **choice["delta"]},
                         "logprobs": choice.get("logprobs"), "finish_reason": "stop"}  # fmt: skip
                if "index" in choice:
                    other["index"] = choice["index"]
                others.append(other)
                continue
            delta = choice["delta"]
            choice_extra.update({k: v for k, v in choice.items() if k not in _CHOICE})
            for key, value in delta.items():
                if key not in _DELTA and isinstance(value, str):
                    extra[key] = extra.get(key, "") + value
            content.append(delta.get("content") or "")
            refusal.append(delta.get("refusal") or "")
            calls += delta.get("tool_calls") or []
            entries += (choice.get("logprobs") or {}).get("content") or []
            refusal_entries += (choice.get("logprobs") or {}).get("refusal") or []
            finish = choice.get("finish_reason") or finish
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content), **extra}
    if "".join(refusal):
        message["refusal"] = "".join(refusal)
    if calls:
        message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in calls]
    first = {
        **choice_extra,
        "index": 0,
        "message": message,
        "logprobs": {"content": entries, "refusal": refusal_entries or None},
        "finish_reason": finish,
    }
    return {**top_extra, "id": "chatcmpl-whole", "object": "chat.completion",
            "created": 1700000000, "model": "gpt-test", "choices": [first, *others]}  # fmt: skip


_CHUNK = frozenset(("id", "object", "created", "model", "system_fingerprint", "choices"))
_CHOICE = frozenset(("index", "delta", "logprobs", "finish_reason"))
_DELTA = frozenset(("role", "content", "refusal", "tool_calls"))


def whole(reply: Reply) -> Reply:
    """A streamed reply's fault in a whole answer: a body cut mid-JSON for a malformed event,
    the error object for an error event, an empty body for an empty stream, and a stall
    before the body for a stall; otherwise its events made one completion."""
    events = reply.events
    chunks = [e for e in events if isinstance(e, dict) and "choices" in e]
    data = completion(chunks)
    if not events:
        return Reply(body={}, raw=b"")
    if any(isinstance(e, str) for e in events):
        return Reply(body=data, raw=json.dumps(data).encode()[:80])
    errors = [e for e in events if isinstance(e, dict) and "error" in e]
    if errors:
        return Reply(body=errors[0])
    return Reply(body=data, stall=reply.stall)


def question_for(front_end: FrontEnd, case: str) -> str:
    return f"{case} via {front_end.name}"


def ask(
    upstream: Upstream, front_end: FrontEnd, case: str, events: list[Any], **kw: Any
) -> Outcome:
    question = question_for(front_end, case)
    upstream.events[question] = events
    return front_end.ask(question, **kw)
