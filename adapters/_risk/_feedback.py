"""``POST /v1/liftguard/feedback``: labels after the fact for a front end's risk monitors
(:mod:`._risk_watch`).

The body is ``{"id": ..., "correct": true|false}`` (at most :data:`MAX_FEEDBACK_BYTES`); a
malformed body is HTTP 400 naming the field, a label the watch refuses a 4xx naming why
(:class:`~._risk_watch.FeedbackRefused`; with ``Retry-After`` where sending it again
later may succeed), and nothing changes. Every label sent is counted
with ``accepted`` or the refusal's code.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._serving._request import BadRequest, parse_json, read_body
from .._serving._wire import MAX_ID_CHARS, error_response
from ._risk_replies import FeedbackRefused
from ._risk_watch import RiskWatch

__all__ = [
    "FEEDBACK_PATH",
    "MAX_FEEDBACK_BYTES",
    "feedback_response",
    "read_feedback",
]

FEEDBACK_PATH = "/v1/liftguard/feedback"
MAX_FEEDBACK_BYTES = 16 * 1024
"""The largest feedback body (at most the proxy's ``max_body_bytes``): HTTP 413 beyond."""


async def feedback_response(
    watches: list[RiskWatch],
    request: Request,
    *,
    max_bytes: int = MAX_FEEDBACK_BYTES,
    timeout_s: float = 30.0,
) -> Response:
    """The reply to one feedback request: the label goes to the first of ``watches`` whose
    store knows the id (the caller has checked the client's key)."""
    count = watches[0].count if watches else (lambda result: None)
    try:
        answer_id, correct = await read_feedback(request, max_bytes=max_bytes, timeout_s=timeout_s)
    except BadRequest as exc:
        count(exc.code)
        return error_response(exc.status, str(exc), code=exc.code, param=exc.param)
    refusal = FeedbackRefused(404, "unknown_answer", "no risk monitor is running here")
    for watch in watches:
        try:
            out = await watch.alabel(answer_id, correct)
        except FeedbackRefused as exc:
            refusal = exc
            if exc.code != "unknown_answer":
                break
        else:
            count("accepted")
            return JSONResponse(out)
    count(refusal.code)
    retry = refusal.retry_after
    return error_response(
        refusal.status, str(refusal), code=refusal.code, param="id",
        headers=None if retry is None else {"retry-after": str(retry)},
    )  # fmt: skip


async def read_feedback(
    request: Request, *, max_bytes: int = MAX_FEEDBACK_BYTES, timeout_s: float = 30.0
) -> tuple[str, bool]:
    """``(id, correct)`` of a feedback request's body, else :class:`BadRequest` (too
    large, too slow, not JSON, a field missing or of the wrong type)."""
    raw = await read_body(
        request, max_bytes=min(max_bytes, MAX_FEEDBACK_BYTES), timeout_s=timeout_s
    )
    return _validate(parse_json(raw))


def _validate(body: Any) -> tuple[str, bool]:
    """``(id, correct)`` of a feedback body, else :class:`BadRequest` naming the field."""
    if not isinstance(body, dict):
        raise BadRequest('the feedback body must be a JSON object {"id": ..., "correct": ...}')
    answer_id, correct = body.get("id"), body.get("correct")
    if not isinstance(answer_id, str) or not answer_id:
        raise BadRequest("id: the answer's id (a non-empty string) is required", param="id")
    if len(answer_id) > MAX_ID_CHARS:
        raise BadRequest(f"id: longer than {MAX_ID_CHARS} characters", param="id")
    if not isinstance(correct, bool):
        raise BadRequest(f"correct: must be true or false (got {correct!r:.40})", param="correct")
    return answer_id, correct
