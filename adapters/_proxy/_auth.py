"""Who may call the proxy, and which credentials go to the upstream.

- ``client_key`` set: a client must send ``Authorization: Bearer <client_key>``
  (compared in constant time); its header is never forwarded.
- ``upstream_key`` set: the upstream gets ``Authorization: Bearer <upstream_key>``.
- neither key: the client's ``Authorization`` header is passed through unchanged,
  so each client uses its own upstream key.

``OpenAI-Organization`` and ``OpenAI-Project`` headers are passed through. Every keyed
route goes through :meth:`Auth.required`, the one check.
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Awaitable, Callable, Mapping

from starlette.requests import Request
from starlette.responses import Response

from .._serving._wire import error_response

__all__ = ["Auth"]

_PASSED = ("openai-organization", "openai-project")


class Auth:
    def __init__(self, *, client_key: str | None, upstream_key: str | None) -> None:
        self._client = None if client_key is None else f"Bearer {client_key}".encode()
        self._upstream = upstream_key

    def allows(self, headers: Mapping[str, str]) -> bool:
        """The request may use the proxy."""
        if self._client is None:
            return True
        given = headers.get("authorization", "").encode()
        return hmac.compare_digest(given, self._client)

    def required(
        self, handler: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """``handler`` behind the client key: the one check of every keyed route (HTTP 401
        in OpenAI's error shape without it)."""

        @functools.wraps(handler)
        async def keyed(request: Request) -> Response:
            if not self.allows(request.headers):
                return error_response(
                    401,
                    "invalid or missing API key for the liftguard proxy",
                    "authentication_error",
                    "invalid_api_key",
                )
            return await handler(request)

        return keyed

    def upstream_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        """The headers the upstream request carries."""
        out = {"accept": "text/event-stream", "user-agent": "liftguard-proxy"}
        if self._upstream is not None:
            out["authorization"] = f"Bearer {self._upstream}"
        elif self._client is None and "authorization" in headers:
            out["authorization"] = headers["authorization"]
        for name in _PASSED:
            if name in headers:
                out[name] = headers[name]
        return out
