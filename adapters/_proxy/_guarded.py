"""One guarded answer, sans I/O: upstream chunks in, the chunks the client may see out.

:class:`AnswerGuard` drives the adapters' :class:`~adapters._guard._stream.GuardStep`
(every stream-ending rule lives there) with the chunks themselves as the units it
holds and releases, so that the client gets the upstream's own chunks (ids, roles,
finish reasons) minus what it did not ask for:

- ``buffered``: chunks are held until the answer is certified, then the held
  ones and every later one flow; on a block nothing was sent.
- ``passthrough``: chunks flow at once; the chunk whose token blocks is not sent.
- ``observe``: every chunk flows and nothing is blocked; the verdict is only
  reported (logs, metrics, the ``liftguard`` field, recording).

The chunk that carries ``finish_reason`` (and any after it) is held until the
upstream stream has ended, because only then is the final verdict known: it is
sent with the verdict attached if the answer is certified, and replaced by the
error event otherwise.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from guardrail import Cause, Monitor, State, Verdict

from .._guard._openai_events import ChunkParts, chat_chunk_parts
from .._guard._stream import GuardStep, Mode
from .._serving._prepare import GuardedRequest
from .._serving._wire import MAX_ID_CHARS, VERDICT_FIELD, strip_chunk, verdict_info

__all__ = ["AnswerGuard", "RequestInfo", "chunk_frame"]



@dataclass
class RequestInfo(GuardedRequest):
    """A guarded request as the proxy keeps it: the serving core's, with what it records of
    the request (its model name, whether it streams, its messages and settings)."""

    model: str = ""
    stream: bool = True
    messages: list[Any] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)


class AnswerGuard:
    """Feed upstream chunks (decoded JSON objects); get the chunks to send now.

    ``monitor`` is the answer's fresh ``certificate.monitor()`` (any monitor the
    adapters' :class:`GuardStep` takes). The step holds the chunks themselves, as
    the client will get them (without the alternatives it did not ask for: in
    buffered mode an answer is held whole, and alternatives are most of its bytes),
    and parses each chunk once.

    :meth:`feed` and :meth:`end` raise what :class:`GuardStep` raises
    (``ProviderFormatError`` for a malformed chunk, ``MissingLogprobsError``);
    the caller then ends the answer with :meth:`fail`. ``blocked`` is True once
    the answer must end with the block (never in ``observe`` mode).
    """

    def __init__(
        self,
        info: RequestInfo,
        monitor: Monitor,
        *,
        max_token_chars: int,
        record: bool = False,
    ) -> None:
        self.info = info
        self.monitor = monitor
        parse = partial(chat_chunk_parts, with_top=monitor.reads.uses_alternatives)
        step_mode: Mode = "buffered" if info.mode == "buffered" else "passthrough"
        self._observe = info.mode == "observe"
        self.step: GuardStep[dict[str, Any]] = GuardStep(
            monitor, step_mode, "stop", parse, unit=self._unit, max_token_chars=max_token_chars,
            hold_finish=True, enforce=not self._observe, max_tokens=info.max_tokens,
        )  # fmt: skip
        self._record = record
        self.heavy = _scores_with_a_model(monitor)
        """The monitor evaluates a local model per token (milliseconds, not microseconds)."""
        self.tokens_read = 0
        self.text: list[str] = []  # (kept only when recording)
        self.entries: list[Any] = []
        self.error: str | None = None
        self.ended = False
        self.finalized = False
        self.draining = False
        """The proxy is shutting down and ended this answer (:meth:`AnswerLoop.drain`)."""
        self.busy_s = 0.0
        self._upstream_id: str | None = None  # the first chunk's "id" ("" for none usable)

    # -- feeding ---------------------------------------------------------------------------

    @property
    def blocked(self) -> bool:
        return self.error is not None or (self.step.blocked is not None and not self._observe)

    @property
    def verdict(self) -> Verdict:
        verdict: Verdict = self.monitor.verdict
        return verdict

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """One upstream chunk: the chunks the client may see now."""
        if self._upstream_id is None:
            uid = chunk.get("id")
            self._upstream_id = uid if isinstance(uid, str) and 0 < len(uid) <= MAX_ID_CHARS else ""
        out = self.step.feed(chunk)
        if self._observe and self.error is None:
            over = self.step.blocked
            if over is not None and over.cause is Cause.OVER_TOKEN_LIMIT:
                self.error = over.cause.value  # observe mode too ends an answer past its limit
        return [] if self.error is not None else out

    def _unit(self, chunk: dict[str, Any], parts: ChunkParts) -> dict[str, Any]:
        """What the step holds of ``chunk``: the chunk as the client will get it."""
        count = len(parts.events)
        self.tokens_read += count
        if self._record:
            if parts.text:
                self.text.append(parts.text)
            if count:
                self._keep_entries(chunk, count, parts.text)
        info = self.info
        return strip_chunk(chunk, info.want_logprobs, info.top_k)

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

    # -- ending ----------------------------------------------------------------------------

    def end(self) -> list[dict[str, Any]]:
        """The upstream stream ended: the final verdict; the rest of the chunks if the
        answer stands (the verdict attached to the last one), else nothing."""
        self.ended = True
        out = self.step.end()
        if self.blocked:
            return []
        if not out:  # observe mode, no finish chunk held (a cut-off stream): say so anyway
            out = [self._verdict_chunk()]
        last = next((i for i in range(len(out) - 1, -1, -1) if _has_finish(out[i])), len(out) - 1)
        out[last] = {**out[last], VERDICT_FIELD: self.verdict_field()}
        return out

    def _verdict_chunk(self) -> dict[str, Any]:
        """A chunk with no choice that carries only the verdict (as a usage chunk does)."""
        return {**chunk_frame(self.info), "choices": []}

    def fail(self, error: str, reason: str, cause: Cause = Cause.TRUNCATED) -> None:
        """The answer ends without a finish (``error``: why, e.g. the upstream timed
        out): blocked with ``cause``, never certified; nothing held is sent."""
        if self.error is None:
            self.error = error
        self.monitor.abort(cause, reason)

    @property
    def finish_reason(self) -> str | None:
        return self.step.finish_reason

    @property
    def completion_id(self) -> str:
        """The ``id`` the client's answer carries: the upstream's (its first chunk's), or
        ``chatcmpl-<request id>`` when the upstream sent none (or one over
        :data:`MAX_ID_CHARS` characters, which is not kept)."""
        return self._upstream_id or f"chatcmpl-{self.info.request_id}"

    @property
    def certified(self) -> bool:
        return self.error is None and self.ended and self.verdict.state is State.CERTIFIED

    def verdict_field(self) -> dict[str, Any]:
        return verdict_info(self.verdict, self.info, tokens_read=self.tokens_read,
                            statistic=self.monitor.value, error=self.error)  # fmt: skip


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


def _has_finish(chunk: dict[str, Any]) -> bool:
    choices = chunk.get("choices")
    return isinstance(choices, list) and any(
        isinstance(c, dict) and c.get("finish_reason") is not None for c in choices
    )
