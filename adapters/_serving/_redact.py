"""What an upstream may say that no client and no log may see (its key, echoed; a Bearer
token), and what of its headers a client needs (to back off)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["redact_secrets", "redact_text", "relayed_headers"]


def redact_secrets(raw: bytes, secrets: list[str]) -> bytes:
    """``raw`` (an upstream's error body, relayed to the client) with every ``secret`` and
    every ``Bearer`` token replaced by ``***`` (an upstream may echo the key it got). A JSON
    body is redacted in its decoded strings and written anew, so that a key spelled with
    ``\\u`` escapes is found too; any other body byte for byte."""
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if isinstance(data, dict | list):
        return json.dumps(_redact_json(data, secrets), ensure_ascii=False).encode()
    for secret in secrets:
        if secret:
            raw = raw.replace(secret.encode(), b"***")
    return _BEARER.sub(rb"\1***", raw)


RELAYED_HEADERS = ("retry-after", "retry-after-ms")
RELAYED_PREFIXES = ("x-ratelimit-",)


def relayed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The upstream's headers a client needs to back off (``Retry-After``, OpenAI's
    ``x-ratelimit-*``), relayed with an upstream error."""
    return {
        k: v
        for k, v in headers.items()
        if k.lower() in RELAYED_HEADERS or k.lower().startswith(RELAYED_PREFIXES)
    }


def redact_text(text: str, secrets: list[str]) -> str:
    """``text`` (an upstream's error message, for the client and the logs) with every
    ``secret`` and every ``Bearer`` token replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return _BEARER_TEXT.sub(r"\1***", text)


def _redact_json(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, dict):
        return {redact_text(str(k), secrets): _redact_json(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_json(v, secrets) for v in value]
    return value


_BEARER = re.compile(rb"(?i)(bearer\s+)[^\s\"',;]+")
_BEARER_TEXT = re.compile(r"(?i)(bearer\s+)[^\s\"',;]+")
