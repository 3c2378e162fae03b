"""Fixtures of the adapter tests that talk to the scripted SSE server through the real
OpenAI client (a module that needs another server defines its own ``server``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import openai
import pytest
from sse_server import SSEServer, running_server


@pytest.fixture
def server() -> Iterator[SSEServer]:
    with running_server() as srv:
        yield srv


@pytest.fixture
async def client(server: SSEServer) -> AsyncIterator[openai.AsyncOpenAI]:
    c = openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    yield c
    await c.close()
