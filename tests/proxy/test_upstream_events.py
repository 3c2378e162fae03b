"""The proxy's reader of the upstream's server-sent events, against a plain reference.

The reader works on the body's bytes as they arrive (any split, line ends ``\\n``,
``\\r\\n`` or ``\\r``, a ``\\r\\n`` split between two reads) and hands each event's data
on as bytes; :func:`decode_chunk` reads them as the text the body decodes to (bytes
that are not UTF-8 become U+FFFD). The reference below decodes the whole body first and
splits it with a regular expression: both must give the same events.
"""

from __future__ import annotations

import random
import re
from collections.abc import AsyncIterator

import pytest

from adapters._proxy._upstream import UpstreamFailure, decode_chunk, event_batches, events


async def _parts(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def _read(parts: list[bytes], max_bytes: int = 1 << 20) -> list[tuple[str | None, str]]:
    out = []
    async for name, data in events(_parts(parts), max_bytes):
        assert isinstance(data, bytes)
        out.append((name, data.decode("utf-8", "replace")))
    return out


def _reference(body: bytes) -> list[tuple[str | None, str]]:
    """Server-sent events as the text of the whole body says (comments and ids skipped)."""
    lines = re.split(r"\r\n|\r|\n", body.decode("utf-8", "replace"))
    out: list[tuple[str | None, str]] = []
    data: list[str] = []
    name: str | None = None
    for line in lines:
        if not line:
            if data:
                out.append((name, "\n".join(data)))
            data, name = [], None
        elif line.startswith("data:"):
            data.append(line[6:] if line.startswith("data: ") else line[5:])
        elif line.startswith("event:"):
            name = line[6:].strip()
    if data:
        out.append((name, "\n".join(data)))
    return out


def _split(body: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(body)), min(len(body) - 1, rng.randint(0, 12))))
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]


BODIES = [
    b'data: {"a": 1}\n\ndata: {"b": 2}\n\ndata: [DONE]\n\n',
    b'data: {"a": 1}\r\n\r\ndata: {"b": 2}\r\n\r\n',
    b'data: {"a": 1}\r\rdata: {"b": 2}\r\r',
    b'event: error\ndata: {"error": {"message": "x"}}\n\n',
    b'event:  error \r\ndata:{"a":\r\ndata: 1}\r\n\r\n: a comment\nid: 7\n\n',
    b'data: {"a": "\xff\xfe caf\xc3\xa9"}\n\ndata: {"b": 2}',
    b'data: {"a": 1}\n\ndata: {"b": 2}\r',
    b'data: {"a": 1}\n\ndata: {"b": 2}\n',
    b"\n\n\r\n: nothing\r\n\r\n",
    b'data: {"a": 1}\n\ndata: {"b": 2}\r\ndata: {"c": 3}\n\n',
    b"event: named\nno data here\n\ndata: x\n\n",
]


@pytest.mark.parametrize("body", BODIES)
async def test_events_match_the_reference_however_the_body_is_split(body: bytes) -> None:
    expected = _reference(body)
    assert await _read([body]) == expected
    assert await _read([bytes([b]) for b in body]) == expected
    rng = random.Random(body)
    for _ in range(40):
        assert await _read(_split(body, rng)) == expected


async def test_random_bodies_match_the_reference() -> None:
    rng = random.Random(7)
    pieces = [b"data: ", b"data:", b"event: error", b"event:x", b": c", b"id: 1", b'{"k": 1}']
    pieces += [b"\xc3\xa9", b"\xff", b"[DONE]", b"\n", b"\r", b"\r\n", b"\n\n", b"\r\n\r\n"]
    for _ in range(300):
        body = b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 30)))
        assert await _read(_split(body, rng)) == _reference(body), body


async def test_the_events_a_read_completes_come_as_one_batch() -> None:
    # (the proxy writes what one batch releases at once: a burst is one write, not one each)
    parts = [b"data: a\n\ndata: b\n\ndata: c", b"\n\n: comment\n\n", b"data: d\n\ndata: e"]
    batches = [batch async for batch in event_batches(_parts(parts))]
    assert batches == [[(None, b"a"), (None, b"b")], [(None, b"c")], [(None, b"d")], [(None, b"e")]]


async def test_too_many_bytes_fail_however_they_come() -> None:
    body = b'data: {"a": 1}\n\n' * 10
    with pytest.raises(UpstreamFailure) as caught:
        await _read([body[:100], body[100:]], max_bytes=len(body) - 1)
    assert caught.value.kind == "upstream_too_large"
    with pytest.raises(UpstreamFailure):
        await _read([b"data: " + b"x" * 200], max_bytes=100)  # one endless line
    assert len(await _read([body], max_bytes=len(body))) == 10


def test_decode_chunk_reads_bytes_as_the_text_they_decode_to() -> None:
    assert decode_chunk(None, b"[DONE]") is None
    assert decode_chunk(None, "[DONE]") is None
    raw = b'{"choices": [], "x": "\xff caf\xc3\xa9"}'
    assert decode_chunk(None, raw) == decode_chunk(None, raw.decode("utf-8", "replace"))
    assert decode_chunk(None, raw) == {"choices": [], "x": "\ufffd café"}
    assert decode_chunk(None, b'{"v": NaN}') is not None  # the standard library's reading
    for bad in (b"not json", b"[1, 2]", b'{"a": 1'):
        with pytest.raises(UpstreamFailure) as caught:
            decode_chunk(None, bad)
        assert caught.value.kind == "malformed_chunk"
    with pytest.raises(UpstreamFailure) as caught:
        decode_chunk("error", b'{"message": "boom"}')
    assert caught.value.kind == "upstream_error"
