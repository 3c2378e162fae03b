"""The scripted upstream the docs' blocks run against (``tests/docs/test_docs_python.py``,
``tests/docs/test_docs_proxy.py``), and the certificate they use as ``cert.json``: the one
shipped for the bundled SmolLM2, a uniform-skeleton lift rule at tau 9.43, so an answer
whose tokens all have logprob -0.05 is certified at its end, and a token at -12 blocks
at once."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "adapters"))

from sse_server import Reply, SSEServer, chat_chunk, clean_answer, serving, token_entry

__all__ = ["BLOCKED_QUESTION", "CERT", "scripted_upstream"]

CERT = Path(__file__).resolve().parents[2] / "guardrail" / "data" / "smollm2_certificate.json"
BLOCKED_QUESTION = "Which element has the atomic number 8?"
GOLD = ["Au", "."]
WRONG = ["Nitrogen", "."]


def _reply(body: dict[str, Any]) -> Reply:
    """``WRONG`` (its first token at -12: blocked at once) for :data:`BLOCKED_QUESTION`,
    else ``GOLD`` ("Au.", certified at its end)."""
    if body["messages"][-1]["content"] != BLOCKED_QUESTION:
        return clean_answer(GOLD)
    reply = clean_answer(WRONG)
    reply.events[1] = chat_chunk({"content": WRONG[0]}, {"content": [token_entry(WRONG[0], -12)]})
    return reply


@contextlib.contextmanager
def scripted_upstream() -> Iterator[SSEServer]:
    """The scripted SSE server answering every request as :func:`_reply` says."""
    with serving(SSEServer()) as srv:
        srv.responder = _reply
        yield srv
