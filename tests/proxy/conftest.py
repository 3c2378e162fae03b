"""Fixtures of the guard proxy tests (the harness is in ``proxy_harness.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from proxy_harness import Upstream, VerdictLines, scripted_upstream, verdict_lines


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    """The scripted SSE upstream (replies queued with ``upstream.replies.put(Reply(...))``)."""
    with scripted_upstream() as srv:
        yield srv


@pytest.fixture
def lines() -> Iterator[VerdictLines]:
    """The proxy's verdict log lines, as they are written."""
    with verdict_lines() as handler:
        yield handler
