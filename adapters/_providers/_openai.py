"""Guard OpenAI Chat Completions streams (and OpenAI-compatible servers: vLLM, llama.cpp, Ollama).

The SDK is an optional extra, imported lazily (``pip install "liftguard[openai]"``);
:func:`guard_chat_stream` only duck-types the stream and needs no import at all.

Usage::

    certificate = Certificate.load("cert.json")  # from ``liftguard calibrate --out``
    async with contextlib.aclosing(
        guarded_chat_completion(client, certificate=certificate, messages=...)
    ) as answer:
        async for text in answer:  # GuardrailBlocked if the answer is blocked
            print(text, end="")

Closing the generator (``aclosing``, or running it to the end) closes the HTTP
response, so a consumer that stops early also stops the upstream request.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterable, Generator, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from guardrail import Certificate, ConfigError, Monitor
from guardrail._errors import MissingDependencyError

from .._errors import ProviderFormatError
from .._guard._context import Supplies, check_supplies, monitor_for
from .._guard._openai_events import ChunkParts, chat_chunk_parts
from .._guard._settings import (
    REPEAT_PENALTY_NAMES,
    apply_context,
    filled_limit,
    flatten_request,
    pack_extra_body,
    request_limit,
    warn_mismatch,
)
from .._guard._stream import (
    DEFAULT_MAX_TOKEN_CHARS,
    Mode,
    OnBlock,
    Parser,
    StreamStep,
    aguard,
    guard,
)

if TYPE_CHECKING:
    from types import ModuleType

    from openai import AsyncOpenAI
    from openai.types.chat import ChatCompletionChunk

    Chunk = ChatCompletionChunk | Mapping[str, Any]

__all__ = ["guard_chat_stream", "guard_chat_stream_sync", "guarded_chat_completion"]

INSTALL_HINT = 'the OpenAI adapter needs the openai SDK: pip install "liftguard[openai]"'
DEFAULT_TOP_LOGPROBS = 20
SDK_OPTIONS = ("extra_headers", "extra_query", "timeout")
"""What ``chat.completions.create`` takes besides the request's fields (the SDK's own
options): no change of the generation context."""


def _import_openai() -> ModuleType:
    try:
        import openai
    except ImportError as exc:
        raise MissingDependencyError(INSTALL_HINT) from exc
    return openai


def _chunk_parser(monitor: Monitor) -> Parser:
    """The chunk parser for ``monitor``: alternatives are parsed only when its rule reads
    them (``monitor.reads.uses_alternatives``)."""
    if not monitor.reads.uses_alternatives:
        return partial(chat_chunk_parts, with_top=False)
    return chat_chunk_parts


_CREATE_FIX = "create it with client.chat.completions.create(..., logprobs=True, top_logprobs={k})"


def _stream_supplies(top_logprobs: int | None) -> Supplies:
    """What a stream the caller created carries: what ``top_logprobs`` declares, or not
    known (then the first token tells, see :class:`_FirstToken`)."""
    if top_logprobs is None:
        return Supplies("a Chat Completions stream", logprobs=None, fix=_CREATE_FIX)
    if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int) or top_logprobs < 0:
        raise ConfigError(f"top_logprobs must be an integer >= 0 or None, got {top_logprobs!r}")
    source = f"a Chat Completions stream created with top_logprobs={top_logprobs}"
    return Supplies(source, alternatives=top_logprobs, fix=_CREATE_FIX)


_JUDGED = "this stream (judged by its first token)"
_FIRST_FIX = f"{_CREATE_FIX} (if it was, declare it: guard_chat_stream(..., top_logprobs={{k}}))"


class _FirstToken:
    """A chunk parser that checks, on the stream's first token, that the stream carries
    the logprob and the alternatives ``monitor`` reads (for a stream whose request is not
    known): a request without them is a :class:`~guardrail.ConfigError` there, before any
    text is shown, not a block."""

    __slots__ = ("_monitor", "_parse")

    def __init__(self, parse: Parser, monitor: Monitor | None) -> None:
        self._parse, self._monitor = parse, monitor

    def __call__(self, item: Any) -> ChunkParts:
        parts = self._parse(item)
        monitor = self._monitor
        if monitor is not None and parts.events:
            self._monitor = None
            first = parts.events[0]
            has_lp = first.logprob is not None
            alternatives = len(first.top_logprobs) if has_lp else 0
            check_supplies(monitor, Supplies(_JUDGED, has_lp, alternatives, fix=_FIRST_FIX))
        return parts


def _stream_step(
    monitor: Monitor | None,
    certificate: Certificate | None,
    top_logprobs: int | None,
    mode: Mode,
    on_block: OnBlock,
    max_token_chars: int,
) -> StreamStep[str]:
    """The step of :func:`guard_chat_stream` and its sync twin (checked now)."""
    monitor = monitor_for(monitor, certificate, _stream_supplies(top_logprobs))
    parse = _chunk_parser(monitor)
    if top_logprobs is None and monitor.reads.alternatives:
        parse = _FirstToken(parse, monitor)
    return StreamStep(monitor, mode, on_block, parse, max_token_chars=max_token_chars)


def guard_chat_stream(
    stream: AsyncIterable[Chunk],
    monitor: Monitor | None = None,
    *,
    certificate: Certificate | None = None,
    top_logprobs: int | None = None,
    mode: Mode = "buffered",
    on_block: OnBlock = "raise",
    max_token_chars: int = DEFAULT_MAX_TOKEN_CHARS,
) -> AsyncGenerator[str, None]:
    """Guard an ``AsyncStream[ChatCompletionChunk]``: yield only the text ``mode`` allows.

    ``stream`` comes from ``client.chat.completions.create(..., stream=True,
    logprobs=True, top_logprobs=k)`` (any async iterable of chunks or chunk dicts
    works). Each token goes to ``monitor`` (one monitor per answer, with a
    skeleton), or to a fresh ``certificate.monitor()``;
    :class:`~guardrail.TextGate` decides what is shown:
    ``"buffered"`` holds the text until CERTIFIED, ``"passthrough"`` shows it at
    once, ``"final"`` releases it at the end iff certified (``early=False``).

    On BLOCKED the upstream stream is closed at once (the server sees the
    connection close and stops generating), then :class:`~guardrail.GuardrailBlocked`
    carrying the verdict is raised (``on_block="raise"``) or the iterator just
    ends (``"stop"``; read ``monitor.verdict``).

    At the end of the stream the final rule applies the same way, but only
    after the documented finish: ``finish_reason`` ``"stop"`` (``"length"`` if
    the policy's ``on_length`` is ``"answer"``). A stream that ends without a
    finish (the connection closed mid-answer) or sends no chunk at all raises
    :class:`~guardrail.StreamTruncated` (a ``GuardrailBlocked``; cause
    ``truncated`` / ``empty_stream``), also after an early certification;
    ``"content_filter"``, a refusal, tool calls or a token with no text and no
    bytes block with that cause. A chunk that is not valid JSON, or a token
    longer than ``max_token_chars``, raises
    :class:`~adapters.ProviderFormatError`. Provider errors
    (``openai.APIError``, transport errors) and
    :class:`~guardrail.MissingLogprobsError` propagate unchanged after the
    stream is closed; text held back is never released.
    ``mode``/``on_block``/``monitor`` are checked here, before anything is read.

    What the stream must carry: every rule reads each token's logprob; a fitted
    statistic may read ``statistic.alternatives`` alternatives per token and
    exact entropies (group ``local``). The request is the caller's, so this
    function cannot see it: ``top_logprobs=`` declares what it asked for, and is
    checked now (fewer than the statistic reads: a
    :class:`~guardrail.ConfigError` naming the fix). Undeclared, the stream's
    first token tells: without a logprob, or with fewer alternatives than the
    statistic reads, it is a ConfigError there, before any text is shown (a
    provider that sends fewer alternatives than asked, as llama.cpp's server
    may, needs the declaration). A certificate that reads exact entropies is
    refused now: a Chat Completions stream never carries them.
    """
    step = _stream_step(monitor, certificate, top_logprobs, mode, on_block, max_token_chars)
    return aguard(stream, step)


def guard_chat_stream_sync(
    stream: Iterable[Chunk],
    monitor: Monitor | None = None,
    *,
    certificate: Certificate | None = None,
    top_logprobs: int | None = None,
    mode: Mode = "buffered",
    on_block: OnBlock = "raise",
    max_token_chars: int = DEFAULT_MAX_TOKEN_CHARS,
) -> Generator[str, None, None]:
    """Sync twin of :func:`guard_chat_stream` for ``openai.OpenAI`` streams (same rules)."""
    step = _stream_step(monitor, certificate, top_logprobs, mode, on_block, max_token_chars)
    return guard(stream, step)


_REFUSAL_PHRASES = (
    "not supported",
    "unsupported",
    "does not support",
    "not allowed",
    "not available",
)


def refuses_logprobs(exc: Any) -> bool:
    """Whether an SDK error (``status_code``, ``body``, ``message``) is a model refusing
    logprobs: :func:`logprob_refusal` on its fields."""
    status = getattr(exc, "status_code", None)
    return logprob_refusal(status, getattr(exc, "body", None), str(getattr(exc, "message", "")))


def logprob_refusal(status: object, body: object, message: str) -> bool:
    """A 403 mentioning logprobs, or a 400 saying logprobs are not supported/allowed.

    (A 400 about a bad ``top_logprobs`` value is the caller's error and stays as it is,
    and so does one that refuses logprobs only together with tools, as llama.cpp's
    server does for a streamed request with tools: the model does give logprobs.)
    """
    if status not in (400, 403):
        return False
    parts = [message]
    if isinstance(body, dict):
        parts += [str(body.get(k) or "") for k in ("message", "param", "code")]
    elif body is not None:
        parts.append(str(body))
    text = " ".join(parts).lower()
    if "logprob" not in text or "tool" in text:
        return False
    return status == 403 or any(p in text for p in _REFUSAL_PHRASES)


def logprobs_refused(exc: Any, model: object) -> ConfigError:
    """The error for a model that refuses token logprobs, from an SDK error."""
    status = getattr(exc, "status_code", "?")
    return logprobs_refused_error(status, str(getattr(exc, "message", str(exc))), model)


def logprobs_refused_error(status: object, message: str, model: object) -> ConfigError:
    """The error for a model that refuses token logprobs (the same on every path)."""
    return ConfigError(
        f"model {model!r} does not provide token logprobs (HTTP {status}: {message}); "
        "liftguard cannot certify its answers. Use a model that returns logprobs, or "
        "score the text with a local model."
    )


def _create_kwargs(kwargs: dict[str, Any], alternatives: int) -> dict[str, Any]:
    """The request: ``stream``, ``logprobs`` forced; ``top_logprobs`` as given, else 20
    (or the ``alternatives`` the rule reads, if more). Read as the upstream reads it: what
    ``extra_body`` holds counts (:func:`~adapters._guard._settings.flatten_request`)."""
    try:
        flat = flatten_request(kwargs)
    except ValueError as exc:
        raise ConfigError(f"guarded_chat_completion: {exc}") from None
    for key in ("stream", "logprobs"):
        if flat.get(key, True) is not True:
            raise ConfigError(f"guarded_chat_completion needs {key}=True, got {flat[key]!r}")
    n = flat.get("n")
    if n is not None and n != 1:
        raise ConfigError(f"guarded_chat_completion guards one answer: n must be 1, got {n!r}")
    out = dict(kwargs, stream=True, logprobs=True)
    extra = out.get("extra_body")
    if isinstance(extra, Mapping):  # what the guard asks for is sent once, at the top
        forced = ("stream", "logprobs", "top_logprobs")
        out["extra_body"] = {k: v for k, v in extra.items() if k not in forced}
        if extra.get("top_logprobs") is not None:
            out["top_logprobs"] = extra["top_logprobs"]
    if out.get("top_logprobs") is None:
        out["top_logprobs"] = max(DEFAULT_TOP_LOGPROBS, alternatives)
    return out


def _with_context(certificate: Certificate, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the certificate's generation context filled in, each change warned
    about; llama.cpp's ``repeat_penalty`` and whatever came in ``extra_body`` are sent
    there again (the SDK's ``create`` takes no other unknown argument)."""
    extra = kwargs.get("extra_body")
    keys = set(extra) if isinstance(extra, Mapping) else set()
    out, mismatches = apply_context(certificate, kwargs, allowed=SDK_OPTIONS)
    for m in mismatches:  # (the caller of guarded_chat_completion, or of a front end on it)
        warn_mismatch(m.setting, m.requested, m.calibrated, stacklevel=5)
    return pack_extra_body(out, keys | {k for k in REPEAT_PENALTY_NAMES if k in out})


def _request_supplies(top_logprobs: Any) -> Supplies:
    source = f"a Chat Completions stream asked for top_logprobs={top_logprobs!r}"
    alternatives = top_logprobs if isinstance(top_logprobs, int) else None
    fix = "ask for top_logprobs={k} or more (or leave it unset)"
    return Supplies(source, alternatives=alternatives, fix=fix)


async def guarded_chat_completion(
    client: AsyncOpenAI,
    *,
    certificate: Certificate | None = None,
    monitor: Monitor | None = None,
    apply_certificate_context: bool = True,
    mode: Mode = "buffered",
    on_block: OnBlock = "raise",
    max_token_chars: int = DEFAULT_MAX_TOKEN_CHARS,
    **create_kwargs: Any,
) -> AsyncGenerator[str, None]:
    """Stream a guarded chat completion: ``client.chat.completions.create(**create_kwargs)``
    with ``stream=True, logprobs=True`` forced and ``top_logprobs`` 20 unless given.

    Pass ``certificate=`` (a fresh monitor per call; also give ``monitor=
    certificate.monitor()`` to read its verdict afterwards) or a hand-made
    ``monitor``. With a
    certificate, its generation context fills the request where the caller left
    a setting unset (``model`` from ``certificate.model.api_model``, the system
    prompt, temperature, top_p, max_tokens, stop, llama.cpp's repeat_penalty)
    and a setting the caller changed raises a
    :class:`~guardrail.ContextMismatchWarning`: the guarantee covers only
    answers generated like the calibration's (``apply_certificate_context=False``
    sends the request as given, still warning on nothing).

    An async generator: arguments are checked and the request is sent on the
    first iteration. The request asks for the alternatives the rule reads (a
    fitted statistic's ``alternatives``); a ``top_logprobs`` below that, or a
    certificate that reads exact entropies (which a Chat Completions stream
    never carries), is a :class:`~guardrail.ConfigError` before the request is
    sent. A model that refuses logprobs (a 403 mentioning logprobs,
    or a 400 saying they are not supported, as reasoning models answer) raises
    :class:`~guardrail.ConfigError`: liftguard cannot certify it. Other API
    errors propagate unchanged. Otherwise as :func:`guard_chat_stream`.
    """
    openai = _import_openai()
    kwargs, monitor, limit = prepared_request(
        certificate, monitor, create_kwargs, apply_certificate_context=apply_certificate_context
    )
    step = StreamStep(
        monitor, mode, on_block, _chunk_parser(monitor), max_token_chars=max_token_chars,
        max_tokens=limit,
    )  # fmt: skip
    try:
        stream = await cast(Any, client).chat.completions.create(**kwargs)
    except openai.APIStatusError as exc:
        if not refuses_logprobs(exc):
            raise
        raise logprobs_refused(exc, kwargs.get("model", "?")) from exc
    _watch_body_end(stream)
    async with contextlib.aclosing(aguard(stream, step)) as texts:
        async for text in texts:
            yield text


def prepared_request(
    certificate: Certificate | None,
    monitor: Monitor | None,
    create_kwargs: dict[str, Any],
    *,
    apply_certificate_context: bool = True,
) -> tuple[dict[str, Any], Monitor, int | None]:
    """The request :func:`guarded_chat_completion` sends (checked; the certificate's context
    applied unless ``apply_certificate_context=False``, each change warned about), the
    monitor of its answer and the answer's token limit (``None``: not known)."""
    rule = monitor if monitor is not None else certificate
    if rule is None:
        raise ConfigError("pass certificate=... (or a monitor=...)")
    kwargs = _create_kwargs(create_kwargs, rule.reads.alternatives)
    applied = certificate if apply_certificate_context else None
    limit = request_limit(kwargs) if applied is None else filled_limit(applied, kwargs)
    supplies = _request_supplies(kwargs["top_logprobs"])
    monitor = monitor_for(monitor, certificate, supplies, max_tokens=limit)
    if applied is not None:
        kwargs = _with_context(applied, kwargs)
    return kwargs, monitor, limit


_EVENT_ENDS = (b"\n\n", b"\r\r", b"\r\n\r\n")


def _watch_body_end(stream: Any) -> None:
    """Make ``stream`` (an ``AsyncStream`` not yet read) raise
    :class:`~adapters.ProviderFormatError` when its body ends inside an event: the openai SDK
    drops such a half event unread, so a stream that ends with one would end as if nothing
    followed its finish (the proxy reads it, and blocks it). A stream without an HTTP
    response is left as it is."""
    response: Any = getattr(stream, "response", None)
    read = getattr(response, "aiter_bytes", None)
    if read is None:
        return

    async def watched(*args: Any, **kwargs: Any) -> AsyncGenerator[bytes, None]:
        last, open_ = b"", b""  # the bytes after the last event's end (the first 16)
        async for part in read(*args, **kwargs):
            data = last + part
            cut = max((i + len(e) for e in _EVENT_ENDS if (i := data.rfind(e)) >= 0), default=-1)
            open_ = (data[cut:] if cut >= 0 else open_ + part)[:16]
            last = data[-3:]
            yield part
        if open_.strip() not in (b"", b"data: [DONE]"):
            raise ProviderFormatError(
                "the stream ended inside an event (half an event after the last one, which "
                "the openai SDK drops unread): what followed was never read",
                field="chunk",
            )

    response.aiter_bytes = watched
