"""LiteLLM with no way around the guardrail: what a client of a real ``litellm --config``
process tries, beyond the cases every front end shares.

- two requests in flight with the same client-set call id (``x-litellm-call-id``) are each
  guarded with their own settings: neither passes unguarded nor reports the other's settings;
  each answer is known by a request id of its own (the verdict's ``request_id``, the
  ``x-liftguard-request-id`` header), so each label reaches its own answer, and the shared
  call id selects none;
- a request the guardrail no longer keeps (more requests in flight than
  ``max_pending_requests``) has its answer refused, never passed through;
- a guarded model answers no route besides chat completions (``/v1/messages``,
  ``/v1/completions``): refused before anything reaches the upstream.

Concurrency is made deterministic at the upstream: one request's answer is held until the
other request has reached the upstream (:func:`held`), so both are in flight at once however
loaded the machine is.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from frontends import FrontEnd, HTTPFrontEnd, Outcome
from proxy_harness import BAD, GOOD, ROLE, STOP, tokens
from scripted import HAS_LITELLM, WORDS, Upstream
from sse_server import Reply

if not HAS_LITELLM:
    pytest.skip(
        'litellm is not installed (pip install "liftguard[litellm]")', allow_module_level=True
    )

CLEAN = [ROLE, *tokens([GOOD] * 3, WORDS), STOP]
BLOCKS = [ROLE, *tokens([GOOD, BAD, GOOD], WORDS), STOP]
WAIT_S = 120.0
"""The longest a held answer waits for the other request (only a broken run reaches it)."""


@pytest.fixture
def litellm(front_ends: dict[str, FrontEnd]) -> HTTPFrontEnd:
    front_end = front_ends["litellm-buffered-stream"]
    assert isinstance(front_end, HTTPFrontEnd)
    return front_end


def _question(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if isinstance(messages, list) and messages:
        return str(messages[-1].get("content"))
    return str(body.get("prompt"))


@contextlib.contextmanager
def held(
    upstream: Upstream, question: str | None = None, until: str | None = None
) -> Iterator[dict[str, threading.Event]]:
    """The upstream answers ``question`` only once a request for ``until`` reached it; the
    events say which of the two arrived. A text completion (``prompt``) is answered with the
    scripted words as its text, so a route that reaches the upstream shows them."""
    arrived = {q: threading.Event() for q in (question, until) if q is not None}
    inner = upstream.responder

    def responder(body: dict[str, Any]) -> Reply:
        asked = _question(body)
        if asked in arrived:
            arrived[asked].set()
        if asked == question and until is not None:
            assert arrived[until].wait(WAIT_S), f"{until!r} never reached the upstream"
        if "messages" not in body:  # a text completion
            text = {"index": 0, "text": "".join(WORDS), "logprobs": None, "finish_reason": "stop"}
            return Reply(body={"id": "cmpl-1", "object": "text_completion", "created": 1,
                               "model": "gpt-test", "choices": [text]})  # fmt: skip
        assert inner is not None
        return inner(body)

    upstream.responder = responder
    try:
        yield arrived
    finally:
        upstream.responder = inner


def _reached(upstream: Upstream, question: str) -> bool:
    return any(question in repr(r.body) for r in list(upstream.records))


def _in_flight_together(
    upstream: Upstream, first: tuple[FrontEnd, str, dict[str, Any]],
    second: tuple[FrontEnd, str, dict[str, Any]],
) -> tuple[Outcome, Outcome]:  # fmt: skip
    """Ask ``first`` and, once it reached the upstream (its answer held), ``second``: both
    requests are in flight at once; the first's answer goes out once the second arrived."""
    (fe1, q1, kw1), (fe2, q2, kw2) = first, second
    with held(upstream, q1, until=q2) as arrived, ThreadPoolExecutor(1) as pool:
        pending = pool.submit(fe1.ask, q1, **kw1)
        assert arrived[q1].wait(WAIT_S), "the first request never reached the upstream"
        out2 = fe2.ask(q2, **kw2)
        out1 = pending.result()
    return out1, out2


# --- per-request state under a key the guardrail mints ----------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_two_requests_with_one_call_id_are_each_guarded(
    upstream: Upstream, litellm: HTTPFrontEnd, stream: bool
) -> None:
    front_end = HTTPFrontEnd("dup", litellm.base_url, litellm.key, "buffered", stream)
    hot, cold = f"same call id hot {stream}", f"same call id cold {stream}"
    upstream.events[hot] = BLOCKS
    upstream.events[cold] = BLOCKS
    header = {"x-litellm-call-id": f"client-chosen-{stream}"}
    out_hot, out_cold = _in_flight_together(
        upstream,
        (front_end, hot, {"temperature": 1.9, "extra_headers": header}),
        (front_end, cold, {"extra_headers": header}),
    )
    for out in (out_hot, out_cold):  # each blocked with a verdict of its own: nothing shown
        assert out.cause == "below_threshold" and not out.certified, out
        assert out.text == "" and not out.tool_calls, out
    assert "temperature" in out_hot.mismatches, out_hot  # its own settings, not the other's
    assert "temperature" not in out_cold.mismatches, out_cold


def _label(front_end: HTTPFrontEnd, answer_id: str | None, correct: bool) -> httpx.Response:
    root = front_end.base_url.removesuffix("/v1")
    return httpx.post(
        f"{root}/v1/liftguard/feedback", json={"id": answer_id, "correct": correct},
        headers={"Authorization": f"Bearer {front_end.key}"}, timeout=60,
    )  # fmt: skip


def _code(reply: httpx.Response) -> tuple[int, str | None]:
    return reply.status_code, reply.json().get("error", {}).get("code")


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_two_answers_with_one_call_id_each_take_their_own_label(
    upstream: Upstream, litellm: HTTPFrontEnd, stream: bool
) -> None:
    # a label sent for one answer must not reach another answer that shares its call id
    front_end = HTTPFrontEnd("labelled", litellm.base_url, litellm.key, "labelled", stream)
    hot, cold = f"label call id hot {stream}", f"label call id cold {stream}"
    upstream.events[hot] = CLEAN
    upstream.events[cold] = CLEAN
    call_id = f"client-chosen-label-{stream}"
    header = {"x-litellm-call-id": call_id}
    out_hot, out_cold = _in_flight_together(
        upstream,
        (front_end, hot, {"temperature": 1.9, "extra_headers": header}),
        (front_end, cold, {"extra_headers": header}),
    )
    for out in (out_hot, out_cold):
        assert out.certified and out.text == "".join(WORDS[:3]), out
    assert out_hot.mismatches == ["temperature"] and out_cold.mismatches == [], (out_hot, out_cold)
    # the temperature-1.9 answer is not covered: its label is refused, the other's taken
    assert _code(_label(front_end, out_hot.request_id, False)) == (409, "answer_not_covered")
    taken = _label(front_end, out_cold.request_id, True)
    assert taken.status_code == 200, taken.text
    assert (taken.json()["request_id"], taken.json()["errors"]) == (out_cold.request_id, 0)
    # each its own id, given where the client reads its verdict and as the proxy's header
    assert out_hot.request_id != out_cold.request_id
    for out in (out_hot, out_cold):
        assert out.request_id and out.request_id != call_id, out
        assert out.headers.get("x-liftguard-request-id") == out.request_id, out.headers
    # the call id a client chose selects no answer (another client may have chosen it too)
    assert _code(_label(front_end, call_id, False)) == (404, "unknown_answer")


def test_a_call_id_twice_in_a_row_is_guarded_both_times(
    upstream: Upstream, litellm: HTTPFrontEnd
) -> None:
    header = {"x-litellm-call-id": "client-chosen-again"}
    for n in range(2):
        question = f"call id again {n}"
        upstream.events[question] = CLEAN
        out = litellm.ask(question, extra_headers=header)
        assert out.certified and out.text == "".join(WORDS[:3]), out


def test_a_client_set_request_key_is_replaced(upstream: Upstream, litellm: HTTPFrontEnd) -> None:
    question = "client metadata key"
    upstream.events[question] = BLOCKS
    out = litellm.ask(question, metadata={"liftguard_request": "guessed"})
    assert out.cause == "below_threshold" and out.text == "", out
    assert "liftguard_request" not in repr(upstream.request(question).body)


# --- a bounded state that fails closed ----------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_a_request_forgotten_past_the_bound_is_refused(
    upstream: Upstream, front_ends: dict[str, FrontEnd], stream: bool
) -> None:
    front_end = front_ends[f"litellm-bounded-{'stream' if stream else 'whole'}"]
    first, second = f"forgotten first {stream}", f"forgotten second {stream}"
    upstream.events[first] = CLEAN
    upstream.events[second] = CLEAN
    # max_pending_requests: 1, so the second request's pre-call hook forgets the first
    out_first, out_second = _in_flight_together(
        upstream, (front_end, first, {}), (front_end, second, {})
    )
    assert out_second.certified and out_second.text == "".join(WORDS[:3]), out_second
    assert out_first.status == 503 and not out_first.certified, out_first
    assert out_first.text == "" and "w0" not in out_first.seen, out_first
    assert "request_not_tracked" in out_first.seen, out_first


# --- the routes of a guarded model -------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("route", ["messages", "completions"])
def test_a_guarded_model_answers_no_other_route(
    upstream: Upstream, litellm: HTTPFrontEnd, route: str, stream: bool
) -> None:
    question = f"route {route} {stream}"
    upstream.events[question] = CLEAN
    body: dict[str, Any] = {"model": "buffered", "max_tokens": 8, "stream": stream}
    if route == "messages":
        body["messages"] = [{"role": "user", "content": question}]
    else:
        body["prompt"] = question
    root = litellm.base_url.removesuffix("/v1")
    with held(upstream):  # (a text completion is answered, if one reaches the upstream)
        reply = httpx.post(
            f"{root}/v1/{route}", json=body, timeout=60,
            headers={"Authorization": f"Bearer {litellm.key}"},
        )  # fmt: skip
    assert reply.status_code == 400, reply.text
    assert "route_not_guarded" in reply.text and "w0" not in reply.text, reply.text
    assert not _reached(upstream, question)


def test_a_chat_completion_of_a_guarded_model_still_passes(
    upstream: Upstream, litellm: HTTPFrontEnd
) -> None:
    question = "chat route"
    upstream.events[question] = CLEAN
    out = litellm.ask(question)
    assert out.certified and out.text == "".join(WORDS[:3]), out
