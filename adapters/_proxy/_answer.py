"""One guarded answer as the proxy keeps it: the serving core's
:class:`~adapters._serving._answer.ServedAnswer` (the modes, the held finish chunk, the
token limit) over decoded JSON chunks, with what the proxy records of it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from guardrail import Monitor

from .._guard._openai_events import ChunkParts
from .._serving._answer import ServedAnswer
from .._serving._prepare import GuardedRequest
from .._serving._wire import MAX_ID_CHARS, relayed_stripped

__all__ = ["ProxyAnswer", "RequestInfo", "chunk_frame"]


@dataclass
class RequestInfo(GuardedRequest):
    """A guarded request as the proxy keeps it: the serving core's, with what it records of
    the request (its model name, whether it streams, its messages and settings)."""

    model: str = ""
    stream: bool = True
    messages: list[Any] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)


class ProxyAnswer(ServedAnswer[dict[str, Any]]):
    """The serving core's answer (:class:`~adapters._serving._answer.ServedAnswer`)
    over decoded JSON chunks, as the proxy keeps it: with what it records of the answer, the
    upstream's completion id, and a verdict-only chunk for an answer released without a
    finish chunk. ``monitor`` is the answer's fresh ``certificate.monitor()``.
    """

    def __init__(
        self,
        info: RequestInfo,
        monitor: Monitor,
        *,
        max_token_chars: int,
        record: bool = False,
    ) -> None:
        super().__init__(info, monitor, max_token_chars=max_token_chars)
        self.info = info
        self._record = record
        self.heavy = _scores_with_a_model(monitor)
        """The monitor evaluates a local model per token (milliseconds, not microseconds)."""
        self.text: list[str] = []  # (kept only when recording)
        self.entries: list[Any] = []
        self.finalized = False
        self.draining = False
        """The proxy is shutting down and ended this answer (:meth:`RelayLoop.drain`)."""
        self.busy_s = 0.0
        self._upstream_id: str | None = None  # the first chunk's "id" ("" for none usable)

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """One upstream chunk: the chunks the client may see now."""
        if self._upstream_id is None:
            uid = chunk.get("id")
            self._upstream_id = uid if isinstance(uid, str) and 0 < len(uid) <= MAX_ID_CHARS else ""
        return super().feed(chunk)

    def strip(self, chunk: dict[str, Any]) -> dict[str, Any]:
        info = self.info
        return relayed_stripped(chunk, info.want_logprobs, info.top_k)

    def _unit(self, chunk: dict[str, Any], parts: ChunkParts) -> dict[str, Any]:
        # (the serving core's, with keep and strip inline: this runs per chunk)
        count = len(parts.events)
        self.tokens_read += count
        if self._record:
            self.keep(chunk, parts)
        info = self.info
        return relayed_stripped(chunk, info.want_logprobs, info.top_k)

    def keep(self, chunk: dict[str, Any], parts: ChunkParts) -> None:
        count = len(parts.events)
        if self._record:
            if parts.text:
                self.text.append(parts.text)
            if count:
                self._keep_entries(chunk, count, parts.text)

    def _keep_entries(self, chunk: dict[str, Any], count: int, text: str) -> None:
        """The raw ``logprobs`` entries of choice 0 (converted by the recorder, later)."""
        choice = next((c for c in chunk.get("choices") or () if _index(c) == 0), None)
        lp = choice.get("logprobs") if isinstance(choice, dict) else None
        entries: list[Any] = []
        if isinstance(lp, dict):
            for key in ("content", "refusal"):
                if isinstance(lp.get(key), list):
                    entries += lp[key]
        if len(entries) != count:  # text without logprobs: one token, no logprob
            entries = [{"token": text, "logprob": None, "bytes": None, "top_logprobs": []}]
        self.entries += entries

    def verdict_chunk(self) -> dict[str, Any]:
        """A chunk with no choice that carries only the verdict (as a usage chunk does):
        observe mode says the verdict even when no finish chunk was held (a cut-off stream)."""
        return {**chunk_frame(self.info), "choices": []}

    @property
    def completion_id(self) -> str:
        """The ``id`` the client's answer carries: the upstream's (its first chunk's), or
        ``chatcmpl-<request id>`` when the upstream sent none (or one over
        :data:`MAX_ID_CHARS` characters, which is not kept)."""
        return self._upstream_id or f"chatcmpl-{self.info.request_id}"


def chunk_frame(info: RequestInfo, like: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fields of a chunk the proxy writes itself: ``like``'s (an upstream chunk of the
    same answer) where it has them, else the request's."""
    base = like or {}
    return {
        "id": base.get("id", f"chatcmpl-{info.request_id}"),
        "object": "chat.completion.chunk",
        "created": base.get("created", int(time.time())),
        "model": base.get("model", info.model),
    }


def _scores_with_a_model(monitor: Monitor) -> bool:
    """The monitor's skeleton says it evaluates a model per token (``evaluates_model``, as
    :class:`~adapters.PromptFreeSkeleton` does)."""
    return getattr(monitor.skeleton, "evaluates_model", False) is True


def _index(choice: Any) -> int | None:
    if not isinstance(choice, dict):
        return None
    index = choice.get("index", 0)
    return index if isinstance(index, int) else None
