"""The shapes the proxy writes on the OpenAI wire (documented on the docs site's proxy page).

**Errors** use OpenAI's error body, ``{"error": {"message", "type", "param",
"code"}}``, with the verdict under ``error.liftguard``:

- ``type`` ``"liftguard_blocked"``: the certificate (or a stream-ending rule)
  blocked the answer; ``code`` is the verdict's cause (``below_threshold``,
  ``truncated``, ``refusal``, ...).
- ``type`` ``"liftguard_upstream_error"``: the upstream failed mid-answer;
  ``code`` is ``upstream_timeout``, ``upstream_error`` (an error event),
  ``upstream_transport`` (the connection broke) or ``malformed_chunk``.
- ``type`` ``"invalid_request_error"`` / ``"authentication_error"`` for the
  client's own mistakes (HTTP 400 / 401 / 404), before any upstream request.

In a stream, the error is one server-sent event ``data: {"error": ...}`` that
ends the stream (no ``[DONE]`` follows): the openai SDK raises it as
``openai.APIError`` (``.type``, ``.code``, ``.body["liftguard"]``), and
langchain-openai lets that error through. A non-streamed request that is
blocked gets HTTP 422 with the same body (``openai.UnprocessableEntityError``).

**The verdict** travels in the field ``liftguard`` (:data:`VERDICT_FIELD`): on
the last chunk of a stream (the one with ``finish_reason``), on a non-streamed
completion, and in every error body; non-streamed responses also carry it in
``x-liftguard-*`` headers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import orjson
from starlette.responses import JSONResponse

from guardrail import Verdict

from ._relay import RELAYED_CHOICE, RELAYED_CHUNK, RELAYED_DELTA, RELAYED_LOGPROBS, drop_unlisted

__all__ = [
    "BLOCKED_TYPE",
    "DONE",
    "HEADER_CAUSE",
    "HEADER_CERTIFICATE",
    "HEADER_MODE",
    "HEADER_REQUEST_ID",
    "HEADER_TOKENS",
    "HEADER_VERDICT",
    "MAX_ID_CHARS",
    "UPSTREAM_TYPE",
    "VERDICT_FIELD",
    "error_body",
    "error_response",
    "header_value",
    "loads",
    "redact_url",
    "relayed_stripped",
    "sse",
    "verdict_info",
]

VERDICT_FIELD = "liftguard"
BLOCKED_TYPE = "liftguard_blocked"
UPSTREAM_TYPE = "liftguard_upstream_error"
HEADER_REQUEST_ID = "x-liftguard-request-id"
HEADER_CERTIFICATE = "x-liftguard-certificate"
HEADER_MODE = "x-liftguard-mode"
HEADER_VERDICT = "x-liftguard-verdict"
HEADER_CAUSE = "x-liftguard-cause"
HEADER_TOKENS = "x-liftguard-tokens"
DONE = b"data: [DONE]\n\n"


def redact_url(url: str) -> str:
    """``url`` without the password of its user part (``http://user:***@host/v1``), for
    logs, ``/healthz`` and the start-up line."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


MAX_ID_CHARS = 256
"""The longest answer id kept for feedback (an upstream's id may be longer)."""


def header_value(text: str) -> str:
    """``text`` as an HTTP header value (ASCII; anything else escaped)."""
    return text.encode("ascii", "backslashreplace").decode("ascii").replace("\n", " ")


def _finite(x: float | None) -> float | None:
    return round(x, 6) if x is not None and math.isfinite(x) else None


class VerdictRequest(Protocol):
    """What the ``liftguard`` field says of the request an answer belongs to."""

    @property
    def request_id(self) -> str: ...
    @property
    def label(self) -> str: ...
    @property
    def mode(self) -> str: ...
    @property
    def covered(self) -> bool: ...
    @property
    def mismatches(self) -> Sequence[str]: ...


def verdict_info(
    verdict: Verdict,
    request: VerdictRequest,
    *,
    tokens_read: int,
    statistic: float | None,
    error: str | None,
) -> dict[str, Any]:
    """The documented ``liftguard`` field: the verdict and what it applies to (the proxy's
    answers and the LiteLLM guardrail's).

    ``tokens``: tokens read before the verdict; ``tokens_read``: all tokens read
    from the upstream; ``covered``: the certificate is calibrated and the request
    kept its generation context (so its risk guarantee applies);
    ``context_mismatches``: the settings the request changed; ``error``: the
    upstream failure that ended the answer, if any.
    """
    return {
        "request_id": request.request_id,
        "state": verdict.state.value,
        "cause": verdict.cause.value,
        "reason": verdict.reason,
        "tokens": verdict.t,
        "tokens_read": tokens_read,
        "statistic": _finite(statistic),
        "tau": verdict.tau,
        "certificate": request.label,
        "mode": request.mode,
        "covered": request.covered,
        "context_mismatches": list(request.mismatches),
        "error": error,
    }


def error_body(
    message: str,
    type_: str,
    code: str | None,
    *,
    param: str | None = None,
    verdict: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """OpenAI's error shape, with the verdict under ``liftguard`` when there is one."""
    error: dict[str, Any] = {"message": message, "type": type_, "param": param, "code": code}
    if verdict is not None:
        error[VERDICT_FIELD] = dict(verdict)
    return {"error": error}


def sse(obj: Mapping[str, Any]) -> bytes:
    """One server-sent event carrying ``obj`` as JSON (UTF-8; orjson, or the standard
    library for what orjson does not encode: keys that are not strings, huge integers)."""
    try:
        data = orjson.dumps(obj)
    except TypeError:
        data = json.dumps(obj, ensure_ascii=False).encode("utf-8")
    return b"data: " + data + b"\n\n"


def loads(data: bytes | str) -> Any:
    """``data`` decoded as JSON (orjson; the standard library for what only it reads:
    ``NaN``, ``Infinity``, integers past 64 bits). Bytes that are not UTF-8 are read with
    U+FFFD in their place. A ``ValueError`` if it is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        if not isinstance(data, str):
            data = data.decode("utf-8", "replace")
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            return json.loads(data)


def _trim_entries(entries: Any, k: int) -> Any:
    if not isinstance(entries, list):
        return entries
    out = []
    for entry in entries:
        top = entry.get("top_logprobs") if isinstance(entry, dict) else None
        if isinstance(top, list) and len(top) > k:
            entry = {**entry, "top_logprobs": top[:k]}
        out.append(entry)
    return out


def relayed_stripped(chunk: dict[str, Any], want_logprobs: bool, top_k: int) -> dict[str, Any]:
    """``chunk`` (decoded JSON) with only the relayed fields (the allowlists of
    :mod:`._relay`), ``logprobs`` null unless the client asked for them and at most
    ``top_k`` alternatives per token: one pass over the choices, changed in place (no copy;
    the logprob entries themselves are not changed, the recorder keeps them). This runs
    per chunk; its readable twin is in ``tests/serving/test_relayed_stripped.py``."""
    if not RELAYED_CHUNK.issuperset(chunk):
        drop_unlisted(chunk, RELAYED_CHUNK)
    choices = chunk.get("choices")
    if type(choices) is not list:
        return chunk
    for choice in choices:
        if type(choice) is not dict:
            continue
        if not RELAYED_CHOICE.issuperset(choice):
            drop_unlisted(choice, RELAYED_CHOICE)
        delta, lp = choice.get("delta"), choice.get("logprobs")
        if type(delta) is dict and not RELAYED_DELTA.issuperset(delta):
            drop_unlisted(delta, RELAYED_DELTA)
        if lp is None:
            continue
        if type(lp) is dict and not RELAYED_LOGPROBS.issuperset(lp):
            drop_unlisted(lp, RELAYED_LOGPROBS)
        if not want_logprobs:
            choice["logprobs"] = None
        elif isinstance(lp, dict):
            choice["logprobs"] = {key: _trim_entries(value, top_k) for key, value in lp.items()}
    return chunk


_PLAIN_CHOICE = frozenset(("index", "delta", "logprobs", "finish_reason"))
_PLAIN_DELTA = frozenset(("role", "content", "refusal"))
_PLAIN_LP = frozenset(("content", "refusal"))
_CHOICE_FIELDS = itemgetter("index", "delta", "logprobs", "finish_reason")


def _plain(chunk: dict[str, Any]) -> tuple[dict[str, Any], str, Any] | None:
    """``(delta, text, logprob entries)`` of a chunk that is only text for choice 0
    (entries None when it has no ``logprobs``), else None: a finish, a tool call, a
    refusal, usage, several choices or anything unknown in the choice is not plain."""
    choices = chunk.get("choices")
    if type(choices) is not list or len(choices) != 1:
        return None
    choice = choices[0]
    if type(choice) is not dict or not _PLAIN_CHOICE.issuperset(choice):
        return None
    try:  # (one C call for a choice with the four fields: this runs per chunk released)
        index, delta, lp, finish = _CHOICE_FIELDS(choice)
    except KeyError:
        get = choice.get
        index, delta, lp, finish = get("index"), get("delta"), get("logprobs"), \
            get("finish_reason")  # fmt: skip
    if type(delta) is not dict or finish is not None or index != 0:
        return None
    if not _PLAIN_DELTA.issuperset(delta) or delta.get("refusal") is not None:
        return None
    text = delta.get("content")
    if text is not None and type(text) is not str:
        return None
    if lp is None:
        return delta, text or "", None
    if type(lp) is not dict or lp.get("refusal") is not None or not _PLAIN_LP.issuperset(lp):
        return None
    entries = lp.get("content")
    return (delta, text or "", entries) if type(entries) is list else None


def merge_released(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``batch`` (chunks released in one write) with each run of plain text chunks of
    choice 0 joined into one chunk: the text concatenated, the logprob entries too.

    A run takes chunks whose other fields (``id``, ``model``, ``created``, ...) equal its
    first chunk's; a role only opens a run; text with entries and text without never mix.
    Nothing is re-cut: each chunk's text and entries move whole. Everything else (the
    finish chunk that carries the verdict, tool calls, usage) goes out as it came. A
    buffered answer released at certification is then three events instead of one per
    token, and the client parses one chunk where it parsed hundreds."""
    if len(batch) < 3:
        return batch
    out: list[dict[str, Any]] = []
    run = _Run()
    for chunk in batch:
        parts = _plain(chunk)
        if parts is None or not run.takes(chunk, parts):
            run.flush(out)
            if parts is None:
                out.append(chunk)
                continue
            run.start(chunk, parts)
    run.flush(out)
    return out


class _Run:
    """Plain chunks to join: their text and entries, and whether the text came with
    entries (None until a chunk carried either)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.chunks: list[dict[str, Any]] = []
        self.frame: tuple[Any, Any] | None = None  # the first chunk's other fields: getter, values
        self.texts: list[str] = []
        self.entries: list[Any] = []
        self.with_entries: bool | None = None
        self.any_logprobs = False

    def start(self, chunk: dict[str, Any], parts: tuple[dict[str, Any], str, Any]) -> None:
        self.chunks.append(chunk)
        keys = [key for key in chunk if key != "choices"]
        if keys:  # (one C-level lookup per chunk to compare: this runs per token)
            getter = itemgetter(*keys)
            self.frame = getter, getter(chunk)
        self._add(parts, _kind(parts))

    def takes(self, chunk: dict[str, Any], parts: tuple[dict[str, Any], str, Any]) -> bool:
        """Add ``chunk`` if it can join the run (an empty run takes nothing)."""
        chunks = self.chunks
        if not chunks or "role" in parts[0] or len(chunk) != len(chunks[0]):
            return False
        if self.frame is not None:
            getter, values = self.frame
            try:
                if getter(chunk) != values:
                    return False
            except KeyError:
                return False
        kind = _kind(parts)
        if kind is not None and self.with_entries not in (None, kind):
            return False
        chunks.append(chunk)
        self._add(parts, kind)
        return True

    def _add(self, parts: tuple[dict[str, Any], str, Any], kind: bool | None) -> None:
        _, text, entries = parts
        self.texts.append(text)
        if entries is not None:
            self.entries += entries
            self.any_logprobs = True
        if kind is not None:
            self.with_entries = kind

    def flush(self, out: list[dict[str, Any]]) -> None:
        if len(self.chunks) == 1:
            out.append(self.chunks[0])
        elif self.chunks:
            out.append(self._joined())
        self._reset()

    def _joined(self) -> dict[str, Any]:
        first = self.chunks[0]
        choice = first["choices"][0]
        lp: dict[str, Any] | None = None
        if self.with_entries or (self.with_entries is None and self.any_logprobs):
            lp = {"content": self.entries}
            if any("refusal" in (c["choices"][0].get("logprobs") or ()) for c in self.chunks):
                lp["refusal"] = None
        delta = {**choice["delta"], "content": "".join(self.texts)}
        return {**first, "choices": [{**choice, "delta": delta, "logprobs": lp}]}


def _kind(parts: tuple[dict[str, Any], str, Any]) -> bool | None:
    """Whether a chunk's text comes with logprob entries; None when it carries neither."""
    _, text, entries = parts
    return None if not text and not entries else entries is not None


def error_response(
    status: int,
    message: str,
    type_: str = "invalid_request_error",
    code: str | None = None,
    *,
    param: str | None = None,
    headers: dict[str, str] | None = None,
    verdict: dict[str, Any] | None = None,
) -> JSONResponse:
    body = error_body(message, type_, code, param=param, verdict=verdict)
    return JSONResponse(body, status_code=status, headers=headers)
