"""What the proxy sends back for an answer: the verdict headers, a whole ``chat.completion``
assembled from a guarded stream, the refusal chunk and the in-stream error that end a
blocked answer, the non-streamed blocked reply, the upstream's own error passed on, and
the recorder's line of a finished answer. Shapes only: no I/O, no guarding (that is
:mod:`._relay_loop` over the serving core's :class:`~adapters._serving._answer.ServedAnswer`).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse, Response

from .._providers._openai import logprob_refusal, logprobs_refused_error
from .._serving._wire import (
    BLOCKED_TYPE,
    HEADER_CAUSE,
    HEADER_CERTIFICATE,
    HEADER_MODE,
    HEADER_REQUEST_ID,
    HEADER_TOKENS,
    HEADER_VERDICT,
    UPSTREAM_TYPE,
    VERDICT_FIELD,
    error_body,
    error_response,
    header_value,
)
from ._answer import _index, chunk_frame
from ._recording import AnswerRecord

if TYPE_CHECKING:
    from ._answer import ProxyAnswer

__all__ = [
    "answer_record",
    "assemble",
    "blocked_response",
    "error_event",
    "refusal_chunk",
    "upstream_status_response",
    "verdict_headers",
]


def upstream_status_response(status: int, raw: bytes, media_type: str, model: Any) -> Response:
    """The upstream's own error, passed through; a model that refuses logprobs gets the
    adapters' explanation (liftguard cannot certify it), with the same status.

    Any other error whose message is about logprobs (llama.cpp's server: "logprobs is
    not supported with tools + stream") keeps its body, with a hint added to the message:
    the proxy always streams with logprobs, whatever the client asked for."""
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    error = data.get("error") if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if logprob_refusal(status, error, str(message or "")):
        text = str(logprobs_refused_error(status, str(message or ""), model))
        return error_response(status, text, "liftguard_logprobs_refused", "logprobs_refused")
    if isinstance(error, dict) and isinstance(message, str) and "logprob" in message.lower():
        hint = (
            "liftguard's proxy always asks the upstream for a stream with logprobs, whatever "
            "the client asked for, and this upstream refuses that for this request"
        )
        hinted = {**data, "error": {**error, "message": f"{message} ({hint})"}}
        return JSONResponse(hinted, status_code=status)
    return Response(raw, status_code=status, media_type=media_type or "application/json")


def verdict_headers(answer: ProxyAnswer) -> dict[str, str]:
    info, verdict = answer.info, answer.verdict
    return {
        HEADER_REQUEST_ID: info.request_id,
        HEADER_CERTIFICATE: header_value(info.label),
        HEADER_MODE: info.mode,
        HEADER_VERDICT: verdict.state.value,
        HEADER_CAUSE: verdict.cause.value,
        HEADER_TOKENS: str(verdict.t),
    }


def blocked_response(answer: ProxyAnswer, on_block: str, refusal: str) -> JSONResponse:
    """A non-streamed answer that is not certified: 502/504 for an upstream failure,
    else 422 (``on_block="error"``) or the refusal (``"refusal"``)."""
    headers, verdict = verdict_headers(answer), answer.verdict_field()
    if answer.error is not None and answer.error.startswith(_NOT_JUDGED):
        status = {"upstream_timeout": 504, "proxy_shutdown": 503}.get(answer.error, 502)
        return error_response(
            status, answer.verdict.reason, UPSTREAM_TYPE, answer.error, headers=headers,
            verdict=verdict,
        )  # fmt: skip
    if on_block == "refusal":
        chunk = refusal_chunk(answer, refusal)
        return JSONResponse(assemble([chunk], answer), headers=headers)
    cause = answer.verdict.cause.value
    message = f"liftguard {answer.verdict.reason}"
    return error_response(422, message, BLOCKED_TYPE, cause, headers=headers, verdict=verdict)


def refusal_chunk(
    answer: ProxyAnswer, refusal: str, like: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The chunk that ends a blocked answer with ``refusal`` (finish ``content_filter``)."""
    choice = {
        "index": 0,
        "delta": {"role": "assistant", "content": refusal},
        "logprobs": None,
        "finish_reason": "content_filter",
    }
    return {
        **chunk_frame(answer.info, like),
        "choices": [choice],
        VERDICT_FIELD: answer.verdict_field(),
    }


def assemble(chunks: list[dict[str, Any]], answer: ProxyAnswer) -> dict[str, Any]:
    """One ``chat.completion`` object from the chunks of a guarded answer."""
    first = chunks[0] if chunks else {}
    content: list[str] = []
    refusal: list[str] = []
    lp: dict[str, list[Any]] = {"content": [], "refusal": []}
    finish, usage = None, None
    calls: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if _index(choice) != 0:
                continue
            delta = choice.get("delta") or {}
            for key, parts in (("content", content), ("refusal", refusal)):
                if isinstance(delta.get(key), str):
                    parts.append(delta[key])
            for call in delta.get("tool_calls") or ():
                _merge_call(calls, call)
            logprobs = choice.get("logprobs")
            if isinstance(logprobs, dict):
                for key in ("content", "refusal"):
                    if isinstance(logprobs.get(key), list):
                        lp[key] += logprobs[key]
            if choice.get("finish_reason") is not None:
                finish = choice["finish_reason"]
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(content),
        "refusal": "".join(refusal) or None,
    }
    if calls:  # only in observe mode: an answer with a tool call is never certified
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    logprobs_out = None
    if answer.info.want_logprobs:
        logprobs_out = {"content": lp["content"], "refusal": lp["refusal"] or None}
    out: dict[str, Any] = {
        "id": first.get("id", f"chatcmpl-{answer.info.request_id}"),
        "object": "chat.completion",
        "created": first.get("created", int(time.time())),
        "model": first.get("model", answer.info.model),
        "choices": [
            {"index": 0, "message": message, "logprobs": logprobs_out, "finish_reason": finish}
        ],
    }
    if first.get("system_fingerprint") is not None:
        out["system_fingerprint"] = first["system_fingerprint"]
    if usage is not None:
        out["usage"] = usage
    out[VERDICT_FIELD] = answer.verdict_field()
    return out


def _merge_call(calls: dict[int, dict[str, Any]], delta: Any) -> None:
    """One streamed ``tool_calls`` delta into the whole calls (arguments concatenated)."""
    if not isinstance(delta, dict):
        return
    index = delta.get("index", 0)
    call = calls.setdefault(index if isinstance(index, int) else 0, {"type": "function"})
    for key in ("id", "type"):
        if isinstance(delta.get(key), str):
            call[key] = delta[key]
    function = delta.get("function")
    if isinstance(function, dict):
        whole = call.setdefault("function", {"name": "", "arguments": ""})
        for key in ("name", "arguments"):
            if isinstance(function.get(key), str):
                whole[key] += function[key]


_NOT_JUDGED = ("upstream_", "malformed", "proxy_")
"""The errors that ended an answer before it could be judged (the upstream's, or the proxy's
shutdown), as against a block."""


def error_event(answer: ProxyAnswer) -> dict[str, Any]:
    """The in-stream error that ends an answer that is not certified."""
    verdict = answer.verdict
    if answer.error is not None and answer.error.startswith(_NOT_JUDGED):
        return error_body(
            verdict.reason, UPSTREAM_TYPE, answer.error, verdict=answer.verdict_field()
        )
    cause = verdict.cause.value
    return error_body(
        f"liftguard {verdict.reason}",
        BLOCKED_TYPE,
        cause,
        verdict=answer.verdict_field(),
    )


def answer_record(answer: ProxyAnswer, verdict: dict[str, Any]) -> AnswerRecord:
    """What the recorder writes of a finished answer."""
    info = answer.info
    cert = info.certificate
    vocab = cert.model.vocab_size or cert.skeleton.params.get("vocab_size")
    return AnswerRecord(
        request_id=info.request_id,
        model_id=cert.model.model_id,
        vocab_size=vocab if isinstance(vocab, int) else None,
        top_k=info.upstream_top,
        messages=info.messages,
        settings=info.settings,
        text=answer.text,
        entries=answer.entries,
        finish_reason=answer.finish_reason,
        complete=answer.ended and answer.error is None and answer.finish_reason is not None,
        verdict=verdict,
    )
