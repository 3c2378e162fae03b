"""Bits of HTTP/1.1 for the loopback servers that write their responses byte by byte."""

from __future__ import annotations

import asyncio

__all__ = ["read_request"]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request from ``reader``: its head, its body (``Content-Length`` bytes) read and
    dropped; the head. ``asyncio.IncompleteReadError`` once the client has closed."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return head
