"""What an upstream may say that no client and no log may see, and what of its headers a client
needs (to back off).

A credential can reach an error body, an error event, a header or a log line in any of its
forms: the key itself (an upstream may echo the key it got), an ``Authorization: Bearer`` or
``Basic`` value, the ``user:password`` of a URL and that pair's base64 (what HTTP basic auth
sends), a key in a URL's query (``?api_key=...``). :func:`credential_forms` spells out the
forms of the keys a front end knows; :func:`redact_text` and :func:`redact_secrets` replace
each of them, and every ``Bearer``/``Basic`` value, URL password and query key whoever's it
is, with ``***``. A body cut at a cap may end in the first part of a key: that part goes too
(``cut=True``).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = ["credential_forms", "redact_secrets", "redact_text", "relayed_headers"]


def credential_forms(keys: Iterable[str | None], url: str | None = None) -> list[str]:
    """Every form in which ``keys`` (API keys, tokens) and the credentials of ``url`` (an
    upstream's ``http://user:password@host/v1``) may be written: each key; the URL's
    password, as written and percent-decoded; its ``user:password`` pair and the pair's
    base64, with and without padding (HTTP basic auth). Longest first.

    >>> credential_forms(["sk-1"], "http://me:pw@host/v1")
    ['bWU6cHc=', 'bWU6cHc', 'me:pw', 'sk-1', 'pw']
    """
    forms = {k for k in keys if k}
    parts = urlsplit(url) if url else None
    if parts is not None and parts.password:
        user = unquote(parts.username or "")
        for password in {parts.password, unquote(parts.password)}:
            pair = f"{user}:{password}"
            encoded = base64.b64encode(pair.encode()).decode("ascii")
            forms |= {password, pair, encoded, encoded.rstrip("=")}
    return sorted(forms, key=lambda f: (-len(f), f))


def redact_secrets(raw: bytes, secrets: list[str], *, cut: bool = False) -> bytes:
    r"""``raw`` (an upstream's error body, relayed to the client) with every ``secret`` and
    every credential pattern (a ``Bearer`` or ``Basic`` value, a URL's password, a key in a
    URL's query) replaced by ``***``. A JSON body is redacted in its decoded strings and
    written anew; any other body (a JSON body cut at a cap no longer parses) byte for byte,
    each ``secret`` found however JSON text may spell it: any of its characters as a ``\u``
    escape (hex digits in either case) or a two-character escape such as ``\/``.

    ``cut``: ``raw`` is the first part of a longer body (read to a cap): an end that may be
    the start of a ``secret`` (or of an escape in one) is redacted too.

    >>> redact_secrets(rb'{"error": "bad key sk-\u0061b\/c", "cut', ["sk-ab/c"])
    b'{"error": "bad key ***", "cut'
    >>> redact_secrets(b'{"error": "bad key sk-a', ["sk-ab/c"], cut=True)
    b'{"error": "bad key ***'
    """
    try:
        data = None if cut else json.loads(raw)
    except ValueError:
        data = None
    if isinstance(data, dict | list):
        return json.dumps(_redact_json(data, secrets), ensure_ascii=False).encode()
    for secret in secrets:
        if secret:
            raw = re.sub(_spellings(secret).encode(), b"***", raw)
    for pattern, keep in _PATTERNS_BYTES:
        raw = pattern.sub(keep, raw)
    if cut:
        raw = _cut_tail(raw, secrets)
    return raw


def redact_text(text: str, secrets: list[str]) -> str:
    """``text`` (an upstream's error message, a header's value; for the client and the logs)
    with every ``secret`` and every credential pattern replaced by ``***``.

    >>> redact_text("GET http://u:pw@h/v1?api_key=abc&x=1 Basic dTpwdw==", [])
    'GET http://u:***@h/v1?api_key=***&x=1 Basic ***'
    """
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    for pattern, keep in _PATTERNS_TEXT:
        text = pattern.sub(keep, text)
    return text


_SHORT_ESCAPES = {
    '"': r"\"", "\\": r"\\", "/": r"\/",
    "\b": r"\b", "\f": r"\f", "\n": r"\n", "\r": r"\r", "\t": r"\t",
}  # fmt: skip
"""JSON's two-character escapes (RFC 8259, section 7)."""


def _char_forms(char: str) -> str:
    """A pattern of ``char`` as JSON text may write it: as it is, as its ``\\u`` escape (a
    surrogate pair past U+FFFF) or as its two-character escape."""
    forms = [re.escape(char), _unicode_escape(char)]
    if char in _SHORT_ESCAPES:
        forms.append(re.escape(_SHORT_ESCAPES[char]))
    return f"(?:{'|'.join(forms)})"


def _spellings(secret: str) -> str:
    """A pattern of ``secret`` as JSON text may write it, each character in any of its
    forms."""
    return "".join(_char_forms(char) for char in secret)


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


_OPEN_ESCAPE = re.compile(rb"\\(?:u[0-9a-fA-F]{0,3})?\Z")
"""An escape cut before its end."""


def _cut_tail(raw: bytes, secrets: list[str]) -> bytes:
    """``raw`` (cut at a cap) with an escape cut before its end dropped, and an end that
    starts a ``secret`` in any of its spellings replaced by ``***``."""
    raw = _OPEN_ESCAPE.sub(b"", raw)
    for secret in secrets:
        if not secret:
            continue
        nested = _char_forms(secret[-1])
        for char in reversed(secret[:-1]):
            nested = f"{_char_forms(char)}(?:{nested})?"
        window = max(0, len(raw) - 12 * len(secret))  # (12 bytes: a surrogate pair's escapes)
        found = re.compile(f"(?:{nested})\\Z".encode()).search(raw, window)
        if found is not None:
            return raw[: found.start()] + b"***"
    return raw


_CREDENTIALS = (
    r"(?i)(\b(?:bearer|basic)\s+)[^\s\"',;\\]+",
    r"(?i)(\b[a-z][a-z0-9+.-]*://[^/\s:@\"'\\]*:)[^/\s@\"'\\]+(?=@)",
    r"(?i)([?&;](?:api[-_]?key|key|token|access[-_]?token|auth|password|secret"
    r"|client[-_]?secret|sig|signature)=)[^&#\s\"'\\<>]+",
)
"""A ``Bearer``/``Basic`` value, a URL's password, a key in a URL's query: what precedes the
credential is kept (group 1)."""
_PATTERNS_TEXT = [(re.compile(p), r"\1***") for p in _CREDENTIALS]
_PATTERNS_BYTES = [(re.compile(p.encode()), rb"\1***") for p in _CREDENTIALS]


_RETRY_AFTER = re.compile(
    r"\d{1,10}|[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT"
)
_AMOUNT = re.compile(r"\d[\d.]{0,19}(?:[a-z]{1,3}[\d.]{0,19}){0,3}")
"""A count, or a duration such as ``6m0s`` or ``20ms`` (OpenAI's ``x-ratelimit-reset-*``)."""
_RATE_LIMIT_NAME = re.compile(r"x-ratelimit-(?:limit|remaining|reset)-[a-z]{1,20}")


def relayed_headers(headers: Mapping[str, str], secrets: Sequence[str] = ()) -> dict[str, str]:
    """The upstream's headers a client needs to back off, relayed with an upstream error:
    ``Retry-After`` (seconds or an HTTP date), ``retry-after-ms`` and OpenAI's
    ``x-ratelimit-{limit,remaining,reset}-*`` (counts and durations). A header with another
    value, or one that holds a ``secret``, is not relayed: an upstream may write anything
    there, its key too.

    >>> relayed_headers({"Retry-After": "7", "x-ratelimit-reset-tokens": "6m0s",
    ...                  "x-ratelimit-limit-requests": "sk-1", "x-other": "1"}, ["sk-1"])
    {'Retry-After': '7', 'x-ratelimit-reset-tokens': '6m0s'}
    """
    out = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower == "retry-after":
            fits = _RETRY_AFTER.fullmatch(value)
        elif lower == "retry-after-ms" or _RATE_LIMIT_NAME.fullmatch(lower):
            fits = _AMOUNT.fullmatch(value)
        else:
            continue
        if fits and not any(s and s in value for s in secrets):
            out[name] = value
    return out


def _redact_json(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, dict):
        return {redact_text(str(k), secrets): _redact_json(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_json(v, secrets) for v in value]
    return value
