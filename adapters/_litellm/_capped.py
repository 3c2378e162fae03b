"""A whole (non-streamed) answer read under a byte cap: the OpenAI client a guarded request's
attempt is sent with, whose HTTP client stops reading the upstream's body past a limit.

LiteLLM 1.110.2 reads a non-streamed answer's body to its end (in the OpenAI SDK's ``post``)
before any post-call hook sees it, so the guardrail's token cap cannot stop an upstream whose
body never ends. What bounds it is the client the body is read with: LiteLLM runs every
callback's ``async_pre_call_deployment_hook`` for each attempt (``litellm/utils.py``,
``wrapper_async``), after the router picked the deployment and merged its ``api_base`` and
``api_key`` into the call, and its OpenAI handler uses a ``client`` of the call as given
(``litellm/llms/openai/openai.py``, ``_get_openai_client``). :func:`capped_client` is that
client: an ``openai.AsyncOpenAI`` built as LiteLLM builds its own (key, base URL; LiteLLM sets
its organization and retries on it), over an ``httpx.AsyncClient`` whose transport
(:class:`CappedTransport`) sends through LiteLLM's own HTTP client for OpenAI (its TLS, proxy
and connection settings) and reads at most ``limit`` bytes of the body, decoded: past them it
raises :class:`AnswerTooLarge`, and the connection is closed.

:class:`AnswerTooLarge` is no ``httpx.RequestError``, so the OpenAI SDK does not retry it
(it retries transport errors, timeouts and some statuses only); a retry of LiteLLM's router
runs the deployment hook again, each attempt under its own cap.

:func:`unbounded_reason` says when an attempt is not one this client can carry (another
provider than ``openai``, no key or base URL of the deployment's own, a client of another
kind): the guardrail then forwards it as before, logged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

__all__ = [
    "AnswerTooLarge",
    "CappedTransport",
    "capped_client",
    "found_cut",
    "unbounded_reason",
]

_DECODED = frozenset({b"content-encoding", b"content-length", b"transfer-encoding"})
"""Response headers that describe the body as sent, not as the capped stream yields it."""


class AnswerTooLarge(Exception):
    """The upstream sent more than ``limit`` bytes of one whole answer (read no further).
    ``status_code`` and ``message`` are what LiteLLM's OpenAI handler reads of an error."""

    status_code = 502

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.message = (
            f"the upstream sent more than {limit} bytes for one whole answer "
            "(the guardrail's max_answer_bytes): read no further"
        )
        super().__init__(self.message)


class _CappedBody(httpx.AsyncByteStream):
    """``response``'s body, decoded, until more than ``limit`` bytes came."""

    def __init__(self, response: httpx.Response, limit: int) -> None:
        self._response = response
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for part in self._response.aiter_bytes():
            read += len(part)
            if read > self._limit:
                raise AnswerTooLarge(self._limit)
            yield part

    async def aclose(self) -> None:
        await self._response.aclose()  # (a body not read to its end: the connection closes)


class CappedTransport(httpx.AsyncBaseTransport):
    """Send each request with ``inner`` (an HTTP client of LiteLLM's); its response's body
    is read at most ``limit`` bytes far (:class:`AnswerTooLarge` past them).

    Examples
    --------
        >>> import asyncio
        >>> def endless(request: httpx.Request) -> httpx.Response:
        ...     return httpx.Response(200, content=b"w " * 4096)
        >>> inner = httpx.AsyncClient(transport=httpx.MockTransport(endless))
        >>> async def get(limit: int) -> str:
        ...     async with httpx.AsyncClient(transport=CappedTransport(inner, limit)) as client:
        ...         try:
        ...             return str(len((await client.get("http://upstream/")).content))
        ...         except AnswerTooLarge as exc:
        ...             return f"cut past {exc.limit}"
        >>> asyncio.run(get(8192))
        '8192'
        >>> asyncio.run(get(1024))
        'cut past 1024'
    """

    def __init__(self, inner: httpx.AsyncClient, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.send(request, stream=True)
        headers = [(k, v) for k, v in response.headers.raw if k.lower() not in _DECODED]
        return httpx.Response(
            response.status_code,
            headers=headers,
            stream=_CappedBody(response, self._limit),
            extensions=response.extensions,
        )


def capped_client(inner: httpx.AsyncClient, limit: int, *, api_key: str, base_url: str) -> Any:
    """An ``openai.AsyncOpenAI`` for ``base_url`` with ``api_key``, as LiteLLM builds its own
    (no retries of the SDK's: LiteLLM sets them on it), whose answers are read through
    ``inner`` at most ``limit`` bytes far (:class:`CappedTransport`)."""
    import openai

    http = httpx.AsyncClient(transport=CappedTransport(inner, limit), trust_env=False)
    return openai.AsyncOpenAI(
        api_key=api_key,
        base_url=base_url,
        http_client=http,  # type: ignore[arg-type]  # (the SDK takes httpx's client too)
        max_retries=0,
    )


def unbounded_reason(
    data: Mapping[str, Any], provider: str, *, base_handler: bool = False
) -> str | None:
    """Why the attempt ``data`` (LiteLLM's call after the deployment hook's merge) cannot be
    sent with :func:`capped_client`, or None: it can. ``provider``: LiteLLM's provider of it;
    ``base_handler``: LiteLLM's ``EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER`` is on (its
    OpenAI handler then takes another kind of client)."""
    if provider != "openai":
        return f"its provider is {provider!r}, not 'openai'"
    if base_handler:
        return "LiteLLM's EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER is on"
    client = data.get("client")
    if client is not None and type(client).__name__ != "AsyncOpenAI":
        return f"LiteLLM gave it a {type(client).__name__} client"
    if data.get("litellm_credential_name"):
        return "its deployment reads a LiteLLM credential (resolved after this hook)"
    # (a plain string: LiteLLM swaps a str subclass, an admin's secret reference, for the
    # secret after this hook; a missing one it takes from a credential or the environment)
    if type(data.get("api_key")) is not str or not data["api_key"]:
        return "its deployment names no api_key of its own as text (a reference, a credential)"
    if type(data.get("api_base")) is not str or not data["api_base"]:
        return "its deployment names no api_base"
    return None


def found_cut(exc: BaseException | None) -> AnswerTooLarge | None:
    """The :class:`AnswerTooLarge` that ``exc`` was raised from (LiteLLM re-raises an upstream's
    error as its own while handling it), if any."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, AnswerTooLarge):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None
