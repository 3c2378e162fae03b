"""Every adversarial upstream stream shape (``tests/stream_shapes.py``) through every
front end: a JSON event cut off, an error event mid-answer, a stalled upstream (met by each
front end's upstream timeout, ``scripted.TIMEOUT_S``), a token too large to take, a token
whose text cannot be read, a stream with no event, a refusal, a content filter, a finish at
the token limit, an upstream that refuses logprobs. None may be certified; the client is
shown at most the text the upstream sent before the fault (never a token the guard did not
read, nor one it blocked), nothing at all in buffered mode; the cause is the guard's where
the front end reports one. A whole answer (LiteLLM's, not streamed upstream) carries the
same fault in its body (:func:`scripted.whole`).
"""

from __future__ import annotations

import pytest
from frontends import FrontEnd, HTTPFrontEnd
from scripted import Upstream, question_for
from stream_shapes import SHAPES, Shape

ADVERSE = [shape for shape in SHAPES if shape.type is not None]

LITELLM_GAPS = {
    ("refusal", True): "LiteLLM 1.110.2 drops a streamed delta.refusal before the hook sees it",
}
"""Known gaps of the LiteLLM front end, (shape, streamed) -> why (strict: a fixed upstream
shows). What the guard certifies is all the client gets: the refusal reaches neither."""


LITELLM_CAUSES = {
    "huge_token": "truncated",  # no byte cap of ours: the per-token character cap meets it
    "empty_stream": "empty_answer",  # LiteLLM ends an empty upstream stream with a finish
    # LiteLLM holds back a streamed chunk whose text is empty: the stall behind it ends the
    # answer (the guardrail's upstream error), before the guard reads the empty token
    "empty_text_token": "truncated",
}
"""Where the LiteLLM front end's cause differs from the proxy's, and why: the answer is
blocked all the same."""


@pytest.mark.parametrize("shape", ADVERSE, ids=[shape.name for shape in ADVERSE])
def test_no_front_end_certifies_an_adversarial_stream(
    upstream: Upstream, front_end: FrontEnd, shape: Shape, request: pytest.FixtureRequest
) -> None:
    if isinstance(front_end, HTTPFrontEnd) and front_end.name.startswith("litellm"):
        gap = LITELLM_GAPS.get((shape.name, front_end.stream))
        if gap is not None:
            request.applymarker(pytest.mark.xfail(strict=True, reason=gap))
    question = question_for(front_end, f"shape {shape.name}")
    upstream.shapes[question] = shape
    out = front_end.ask(question)
    assert not out.certified, out
    assert shape.before.startswith(out.text), out  # nothing past the fault
    if "buffered" in front_end.name:
        assert out.text == "", out
    causes = {shape.cause, None}
    if front_end.name.startswith("litellm"):
        causes.add(LITELLM_CAUSES.get(shape.name))
    assert out.cause in causes, out
    assert out.cause is not None or out.error is not None or out.status is not None, out
