"""The guarded request for a client's chat body: the upstream request the proxy sends.

The upstream is always asked for a stream (``stream=True``, ``logprobs=True``,
the alternatives the certificate needs), with the certificate's generation
context filled in where the client left a setting unset (the serving core's
:func:`~adapters._serving._prepare.prepare_upstream`). A certificate the
upstream cannot feed (a fitted statistic that reads more alternatives than the
proxy's ``top_logprobs``, or exact entropies, which no Chat Completions stream
carries) is refused before anything is sent (HTTP 500, ``liftguard_config_error``:
the proxy is misconfigured, not the request). The route itself is
:meth:`adapters._proxy._app.Proxy.chat_completions`; the answer's loop is
:mod:`._relay_loop`, and what it sends back is shaped in :mod:`._replies`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse

from guardrail import ConfigError, Monitor

from .._serving._prepare import RequestError, prepare_upstream
from .._serving._wire import error_response
from ._answer import RequestInfo

__all__ = ["Prepared", "prepare"]

_SETTINGS = ("model", "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop",
             "repeat_penalty", "seed")  # fmt: skip


def request_id() -> str:
    """A new request id: ``lg-`` and the first 20 hex digits of a random UUID (version 4),
    made from its 10 bytes without the :class:`uuid.UUID` (per request, it cost more than
    the random bytes).

    >>> rid = request_id()
    >>> len(rid), rid[:3], rid[15], rid[19] in "89ab"
    (23, 'lg-', '4', True)
    """
    raw = bytearray(os.urandom(10))
    raw[6] = raw[6] & 0x0F | 0x40  # the version, 4
    raw[8] = raw[8] & 0x3F | 0x80  # the variant, RFC 4122
    return f"lg-{raw.hex()}"


@dataclass
class Prepared:
    info: RequestInfo
    monitor: Monitor
    body: dict[str, Any]


def _bad(message: str, param: str | None = None) -> JSONResponse:
    return error_response(400, message, code="invalid_request", param=param)


def prepare(
    body: dict[str, Any],
    *,
    source_for: Any,
    mode: str,
    top_logprobs: int | None,
    max_answer_tokens: int,
    allowed: tuple[str, ...] = (),
) -> Prepared | JSONResponse:
    """The guarded request for a client body (already checked by
    :func:`~._request.validate_chat`), or the client's error (400/404), or the proxy's
    (500: a certificate this upstream cannot feed). ``allowed``: the operator's additions to
    the allowlist of request fields."""
    model = body.get("model")
    source = source_for(model)
    if source is None:
        return error_response(
            404, f"no certificate for model {model!r} on this proxy", code="model_not_found",
            param="model",
        )  # fmt: skip
    certificate, label = source.current()
    try:
        ask = prepare_upstream(certificate, body, top_logprobs=top_logprobs, allowed=allowed)
        monitor = certificate.monitor(max_tokens=ask.limit)
    except RequestError as exc:
        return error_response(400, str(exc), code="invalid_request", param=exc.param)
    except ConfigError as exc:
        message = f"the proxy's certificate {label} cannot guard this upstream: {exc}"
        return error_response(500, message, "liftguard_config_error", "certificate_unsupported")
    out = {**ask.body, "stream": True}
    if body.get("stream") and isinstance(body.get("stream_options"), dict):
        out["stream_options"] = body["stream_options"]
    info = RequestInfo.of(
        ask, certificate, label, request_id=request_id(), mode=mode,
        max_answer_tokens=max_answer_tokens, model=str(model),
        stream=bool(body.get("stream", False)),
        messages=list(out.get("messages", body["messages"])),
        settings={k: out[k] for k in _SETTINGS if k in out},
    )  # fmt: skip
    return Prepared(info, monitor, out)
