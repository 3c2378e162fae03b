"""What an upstream may say that no client and no log may see (its key, echoed; a Bearer
token), and what of its headers a client needs (to back off)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["redact_secrets", "redact_text", "relayed_headers"]


def redact_secrets(raw: bytes, secrets: list[str]) -> bytes:
    r"""``raw`` (an upstream's error body, relayed to the client) with every ``secret`` and
    every ``Bearer`` token replaced by ``***`` (an upstream may echo the key it got). A JSON
    body is redacted in its decoded strings and written anew; any other body (a JSON body
    cut at a cap no longer parses) byte for byte, each ``secret`` found however JSON text
    may spell it: any of its characters as a ``\u`` escape (hex digits in either case) or
    a two-character escape such as ``\/``.

    >>> redact_secrets(rb'{"error": "bad key sk-\u0061b\/c", "cut', ["sk-ab/c"])
    b'{"error": "bad key ***", "cut'
    """
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if isinstance(data, dict | list):
        return json.dumps(_redact_json(data, secrets), ensure_ascii=False).encode()
    for secret in secrets:
        if secret:
            raw = re.sub(_spellings(secret).encode(), b"***", raw)
    return _BEARER.sub(rb"\1***", raw)


_SHORT_ESCAPES = {
    '"': r"\"", "\\": r"\\", "/": r"\/",
    "\b": r"\b", "\f": r"\f", "\n": r"\n", "\r": r"\r", "\t": r"\t",
}  # fmt: skip
"""JSON's two-character escapes (RFC 8259, section 7)."""


def _spellings(secret: str) -> str:
    """A pattern of ``secret`` as JSON text may write it: each character as it is, as its
    ``\\u`` escape (a surrogate pair past U+FFFF) or as its two-character escape."""
    parts = []
    for char in secret:
        forms = [re.escape(char), _unicode_escape(char)]
        if char in _SHORT_ESCAPES:
            forms.append(re.escape(_SHORT_ESCAPES[char]))
        parts.append(f"(?:{'|'.join(forms)})")
    return "".join(parts)


def _unicode_escape(char: str) -> str:
    """A pattern of ``char``'s ``\\u`` escape, its hex digits in either case."""
    code = ord(char)
    units = [code]
    if code > 0xFFFF:
        code -= 0x10000
        units = [0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)]
    escapes = (
        r"\\u" + "".join(f"[{d}{d.upper()}]" if d.isalpha() else d for d in f"{unit:04x}")
        for unit in units
    )
    return "".join(escapes)


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
