"""The client's request, read and checked before anything is forwarded.

:func:`read_body` reads at most ``max_body_bytes`` (HTTP 413 beyond), within
``body_timeout_s`` (HTTP 408 for a client that trickles its body), and only as
JSON (HTTP 415 for another content type: a web page's cross-origin "simple"
POST is ``text/plain``, and a JSON POST needs a CORS preflight the proxy never
grants). :func:`parse_json` refuses, before it decodes, a body of more values than
:data:`MAX_VALUES` or more objects and lists than :data:`MAX_CONTAINERS` (by default; counted
from its separators and brackets: a body of tiny values would cost seconds and
hundreds of megabytes as Python objects), and then what Python's decoder accepts
but the wire must not carry: ``NaN``/``Infinity`` and numbers that overflow to them,
nesting deeper than :data:`MAX_DEPTH`, and lone surrogates (they cannot be encoded
as UTF-8 to the upstream). :func:`parse_chat` does both steps of a chat request, in
a worker thread for a large body, one such body at a time (:func:`off_loop`), so that the
event loop goes on serving.
:class:`ChatRequest` then checks the Chat Completions fields the proxy or the upstream
reads, with strict types (no ``"abc"`` for an integer, no ``1.5`` for a token count),
OpenAI's documented ranges, at most :data:`MAX_MESSAGES` messages and
:data:`MAX_CONTENT_PARTS` parts of one message's content; what fields a request may
carry at all is the settings check's allowlist. Every refusal is an OpenAI-shaped
HTTP 400 naming the parameter (``param``).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import sys
import weakref
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import ClientDisconnect, Request

__all__ = [
    "MAX_CONTAINERS",
    "MAX_CONTENT_PARTS",
    "MAX_DEPTH",
    "MAX_MESSAGES",
    "MAX_VALUES",
    "BadRequest",
    "ChatRequest",
    "Message",
    "off_loop",
    "parse_chat",
    "parse_json",
    "read_body",
    "validate_chat",
]

T = TypeVar("T")

MAX_DEPTH = 64
"""Deepest nesting of objects and lists a request may have (OpenAI's own are < 10 deep)."""
MAX_VALUES = 250_000
"""Most values a request may hold by default (``Limits.max_json_values``), counted before
it is decoded as its separators (``,`` and ``:``, those inside strings too, so a long text
full of commas counts more than it holds): a 4 MiB body of tiny values holds two million.
Decoding holds the GIL for the whole body, whatever thread runs it, at about 0.16 us a
string: at this limit and :data:`MAX_CONTAINERS` the costliest body the proxy accepts
decodes in about 50 ms, so the event loop (``/healthz``, every other answer) waits at most
that long behind it (``benchmarks/bench_proxy_bodies.py``)."""
MAX_CONTAINERS = 50_000
"""Most objects and lists a request may hold by default (``Limits.max_json_containers``),
counted before it is decoded as its opening brackets (those inside strings too)."""
MAX_MESSAGES = 4096
"""Most messages one request may carry."""
MAX_CONTENT_PARTS = 1024
"""Most content parts one message may carry."""
OFF_LOOP_BYTES = 256 * 1024
"""A body at least this large is decoded, checked and encoded for the upstream in a worker
thread (:func:`off_loop`)."""


class BadRequest(Exception):
    """A request the proxy refuses: ``status``, a message, ``code`` and ``param``."""

    def __init__(
        self, message: str, *, status: int = 400, code: str = "invalid_request",
        param: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.code, self.param = status, code, param


def _json_media(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


async def read_body(request: Request, *, max_bytes: int, timeout_s: float) -> bytes:
    """The request's body: JSON only, at most ``max_bytes``, read within ``timeout_s``."""
    if not _json_media(request.headers.get("content-type")):
        raise BadRequest(
            "the request body must be JSON (Content-Type: application/json)",
            status=415, code="unsupported_media_type",
        )  # fmt: skip
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)

    async def read() -> bytes:
        parts, size = [], 0
        async for part in request.stream():
            size += len(part)
            if size > max_bytes:
                raise _too_large(max_bytes)
            parts.append(part)
        return b"".join(parts)

    try:
        if sys.version_info >= (3, 11):  # (no task of its own, as wait_for makes: per request)
            async with asyncio.timeout(timeout_s):
                return await read()
        return await asyncio.wait_for(read(), timeout_s)
    except asyncio.TimeoutError:  # (TimeoutError itself only from Python 3.11)
        raise BadRequest(
            f"the request body did not arrive within {timeout_s:g} s",
            status=408, code="request_timeout",
        ) from None  # fmt: skip
    except ClientDisconnect:
        raise BadRequest("the client closed the connection", code="client_closed") from None


def _too_large(max_bytes: int) -> BadRequest:
    return BadRequest(
        f"the request body is larger than this proxy accepts ({max_bytes} bytes)",
        status=413, code="request_too_large",
    )  # fmt: skip


def _no_constant(name: str) -> Any:
    raise BadRequest(f"{name} is not a JSON number", code="invalid_json")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadRequest(f"the number {text[:40]} is out of range", code="invalid_json")
    return value


def parse_json(
    raw: bytes, *, max_values: int = MAX_VALUES, max_containers: int = MAX_CONTAINERS
) -> Any:
    """The body as JSON, refusing more than ``max_values`` values or ``max_containers``
    objects and lists (counted before it is decoded), non-finite numbers, deep nesting and
    lone surrogates.

    >>> parse_json(b'{"a": [1, 2]}')
    {'a': [1, 2]}
    """
    values = raw.count(b",") + raw.count(b":") + 1
    containers = raw.count(b"{") + raw.count(b"[")
    if values > max_values or containers > max_containers:
        raise BadRequest(
            f"the request holds more than {max_values} values or {max_containers} objects "
            "and lists (counted as its separators and brackets, those inside strings too)",
            status=413, code="request_too_large",
        )  # fmt: skip
    try:
        value = json.loads(raw, parse_constant=_no_constant, parse_float=_finite_float)
    except RecursionError:
        raise _too_deep() from None
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("the request body is not valid JSON", code="invalid_json") from None
    _check_tree(value, strings=_may_hold_surrogates(raw))
    return value


def _too_deep() -> BadRequest:
    return BadRequest(f"the request nests deeper than {MAX_DEPTH} levels", code="invalid_json")


_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
"""Where a lone surrogate can come from in a UTF-8 body: an escape of one (``\\ud800`` to
``\\udfff``), or its bytes as UTF-8 (which the decoder lets through)."""


def _may_hold_surrogates(raw: bytes) -> bool:
    """Whether ``raw`` can decode to a string with a lone surrogate (one scan of the bytes,
    where checking every decoded string costs a Python call per value)."""
    if json.detect_encoding(raw) != "utf-8":
        return True
    maybe = b"\\ud" in raw or b"\\uD" in raw or b"\xed" in raw  # (memchr-fast)
    return maybe and _SURROGATE.search(raw) is not None


def _check_tree(root: Any, strings: bool = True) -> None:
    """Depth at most :data:`MAX_DEPTH`; with ``strings``, every string (keys too) encodable
    as UTF-8. Only containers go on the stack (a body of tiny values holds hundreds of
    thousands)."""
    if type(root) is str:
        if strings:
            _utf8(root)
        return
    if type(root) not in (dict, list):
        return
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep()
        if type(value) is dict:
            if strings:
                for key in value:
                    if type(key) is str:
                        _utf8(key)
            items = value.values()
        else:
            items = value
        for item in items:
            kind = type(item)
            if kind is dict or kind is list:
                stack.append((item, depth + 1))
            elif kind is str and strings:
                _utf8(item)


def _utf8(text: str) -> None:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequest(
                "the request holds a lone surrogate (\\ud800-\\udfff), which is not text",
                code="invalid_json",
            ) from None


# --- the Chat Completions request ---------------------------------------------------------

_Strict = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]


class Message(BaseModel):
    """One chat message: its role and content (text, or a list of content parts)."""

    model_config = _Strict
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | Annotated[list[dict[str, Any]], Field(max_length=MAX_CONTENT_PARTS)] | None = (
        None
    )


class ChatRequest(BaseModel):
    """The Chat Completions fields the proxy or the upstream reads, typed (which other fields
    a request may carry is the settings check's allowlist)."""

    model_config = _Strict
    model: Annotated[str, Field(min_length=1, max_length=256)]
    messages: Annotated[list[Message], Field(min_length=1, max_length=MAX_MESSAGES)]
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    n: Annotated[int, Field(ge=1)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    stop: str | Annotated[list[str], Field(max_length=16)] | None = None
    seed: int | None = None
    frequency_penalty: Penalty | None = None
    presence_penalty: Penalty | None = None
    logit_bias: dict[str, Annotated[float, Field(ge=-100.0, le=100.0)]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    user: str | None = None
    # llama.cpp's and vLLM's sampling settings
    top_k: Annotated[int, Field(ge=0)] | None = None
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    repeat_penalty: Annotated[float, Field(gt=0.0)] | None = None


_LANES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, anyio.CapacityLimiter]] = (
    weakref.WeakKeyDictionary()
)


async def off_loop(work: Callable[[], T], size: int, lane: str = "decode") -> T:
    """``work()``, for a body of ``size`` bytes: at once when it is under
    :data:`OFF_LOOP_BYTES`, else in a worker thread of its ``lane``, one large body at a
    time per lane (and event loop). One at a time, because decoding holds the GIL for tens
    of milliseconds per call: each more thread that decodes at once is one more the event
    loop queues behind for the GIL (``/healthz`` waited seconds behind eight), for no more
    throughput. A lane per step (``decode``, ``encode``), so that a request decoded goes on
    to the upstream without queueing behind the bodies decoded after it (each held whole
    meanwhile)."""
    if size < OFF_LOOP_BYTES:
        return work()
    loop = asyncio.get_running_loop()
    lanes = _LANES.get(loop)
    if lanes is None:
        lanes = _LANES[loop] = {}
    limiter = lanes.get(lane)
    if limiter is None:
        limiter = lanes[lane] = anyio.CapacityLimiter(1)
    return await anyio.to_thread.run_sync(work, limiter=limiter)


async def parse_chat(
    raw: bytes, *, max_values: int = MAX_VALUES, max_containers: int = MAX_CONTAINERS
) -> dict[str, Any]:
    """A chat request's body decoded (:func:`parse_json`, within ``max_values`` and
    ``max_containers``) and checked (:func:`validate_chat`), off the event loop when it is
    large (:func:`off_loop`)."""

    def work() -> dict[str, Any]:
        body = parse_json(raw, max_values=max_values, max_containers=max_containers)
        return validate_chat(body)

    return await off_loop(work, len(raw))


def validate_chat(body: Any) -> dict[str, Any]:
    """``body`` if it is a valid Chat Completions request, else :class:`BadRequest`. A
    literal ``extra_body`` object is checked merged in, as the upstream will read it."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    extra = body.get("extra_body")
    if extra is not None and not isinstance(extra, dict):
        raise BadRequest("extra_body: must be an object", param="extra_body")
    try:
        ChatRequest.model_validate({**body, **(extra or {})})
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        path = [str(part) for part in first["loc"] if not _is_type_tag(part)]
        given = "" if first["type"] == "missing" else f" (got {_short(first.get('input'))})"
        where = ".".join(path) or "body"
        param = path[0] if path else None
        raise BadRequest(f"{where}: {first['msg']}{given}", param=param) from None
    return body


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "dict", "list", "none"})


def _is_type_tag(part: Any) -> bool:
    """pydantic names the member of a union in an error's location (``stop.list[str]``)."""
    return isinstance(part, str) and ("[" in part or part in _TYPE_TAGS or "-" in part)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
