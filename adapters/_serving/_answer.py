"""One guarded answer as a server front end keeps it, sans I/O: upstream chunks in, the
chunks the client may see out.

:class:`ServedAnswer` drives the adapters' :class:`~adapters._guard._stream.StreamStep`
(every stream-ending rule lives there) with the chunks themselves as the units it holds and
releases, so that the client gets the upstream's own chunks (ids, roles, finish reasons)
minus what it did not ask for, and minus every field the guard does not read (the rule, and
the allowlist of relayed fields, in :mod:`._relay`: the text shown is the text read). Both
server front ends use it: the proxy with decoded JSON
chunks (:class:`~adapters._proxy._answer.ProxyAnswer`), the LiteLLM guardrail with
LiteLLM's chunk objects (:class:`~adapters._litellm._answer.Answer`). Per the request's
``mode``:

- ``buffered``: chunks are held until the answer is certified, then the held ones and
  every later one flow; on a block nothing was sent.
- ``passthrough``: chunks flow at once; the chunk whose token blocks is not sent.
- ``observe``: every chunk flows and nothing is blocked (the verdict is only reported),
  except that an answer past its token limit still ends there.

The chunk that carries ``finish_reason`` (and any after it) is held until the upstream
has ended, because only then is the final verdict known: it is released with the verdict
attached (the ``liftguard`` field) if the answer stands, and not at all otherwise. A front
end then ends a blocked answer its own way (an error event, HTTP 422, a refusal).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Generic, TypeVar

from guardrail import Cause, Monitor, State, Verdict

from .._guard._openai_events import ChunkParts, chat_chunk_parts
from .._guard._stream import DEFAULT_MAX_TOKEN_CHARS, Mode, StreamStep
from ._prepare import GuardedRequest
from ._wire import VERDICT_FIELD, verdict_info

__all__ = ["ServedAnswer", "has_finish"]

C = TypeVar("C")


class ServedAnswer(Generic[C]):
    """Feed upstream chunks (dicts or objects); get the chunks to send now.

    ``monitor``: the answer's fresh monitor (by default ``request.monitor()``, the
    certificate's, told the request's token limit). The step parses each chunk once and
    holds it as the client will get it (:meth:`strip`: without the alternatives it did not
    ask for; in buffered mode an answer is held whole, and alternatives are most of its
    bytes). :meth:`feed` and :meth:`end` raise what :class:`StreamStep` raises
    (``ProviderFormatError`` for a malformed chunk, ``MissingLogprobsError``); the front
    end then ends the answer with :meth:`fail`. ``blocked`` is True once the answer must
    end with the block.

    Examples
    --------
        >>> from guardrail import Certificate, SkeletonSpec, StreamPolicy, ModelIdentity
        >>> from adapters._serving._prepare import GuardedRequest
        >>> cert = Certificate(StreamPolicy(aggregate="min"), 2.5,
        ...                    SkeletonSpec("uniform", {"vocab_size": 1000}), ModelIdentity("m"))
        >>> answer = ServedAnswer(GuardedRequest("req-1", cert, "v1", "buffered", max_tokens=4))
        >>> def chunk(text, finish=None):
        ...     entry = {"token": text, "logprob": -0.1, "bytes": None, "top_logprobs": []}
        ...     return {"choices": [{"index": 0, "delta": {"content": text},
        ...             "logprobs": {"content": [entry] if text else None},
        ...             "finish_reason": finish}]}
        >>> answer.feed(chunk("Paris"))  # buffered: held until the verdict
        []
        >>> out = answer.end() if answer.feed(chunk("", "stop")) == [] else None
        >>> answer.blocked, answer.verdict.state.value, len(out), out[-1]["liftguard"]["state"]
        (False, 'certified', 2, 'certified')
    """

    def __init__(
        self,
        request: GuardedRequest,
        monitor: Monitor | None = None,
        *,
        max_token_chars: int = DEFAULT_MAX_TOKEN_CHARS,
    ) -> None:
        self.request = request
        self.monitor: Monitor = request.monitor() if monitor is None else monitor
        parse = partial(chat_chunk_parts, with_top=self.monitor.reads.uses_alternatives)
        self.observe = request.mode == "observe"
        mode: Mode = "buffered" if request.mode == "buffered" else "passthrough"
        self.step: StreamStep[C] = StreamStep(
            self.monitor, mode, "stop", parse, unit=self._unit, max_token_chars=max_token_chars,
            hold_finish=True, enforce=not self.observe, max_tokens=request.max_tokens,
        )  # fmt: skip
        self.tokens_read = 0
        self.error: str | None = None
        """Why the answer ended before it could be judged (set by :meth:`fail`), if it did."""
        self.ended = False
        """The upstream ended and :meth:`end` ran."""

    # -- what a front end adapts -----------------------------------------------------------

    def strip(self, chunk: C) -> C:
        """``chunk`` as the client gets it (the front end drops what it did not ask for)."""
        return chunk

    def keep(self, chunk: C, parts: ChunkParts) -> None:
        """What a front end keeps of ``chunk`` before it is stripped (e.g. to record it)."""

    def released(self, chunks: list[C]) -> list[C]:
        """The chunks released at the end, before the verdict is attached (a front end may
        join them)."""
        return chunks

    def verdict_chunk(self) -> C | None:
        """A chunk that carries only the verdict, for an answer released with no finish
        chunk held (observe mode, a cut-off stream); None: none is sent."""
        return None

    # -- feeding ---------------------------------------------------------------------------

    def _unit(self, chunk: C, parts: ChunkParts) -> C:
        self.tokens_read += len(parts.events)
        self.keep(chunk, parts)
        return self.strip(chunk)

    @property
    def blocked(self) -> bool:
        return self.error is not None or (self.step.blocked is not None and not self.observe)

    @property
    def verdict(self) -> Verdict:
        verdict: Verdict = self.monitor.verdict
        return verdict

    def feed(self, chunk: C) -> list[C]:
        """One upstream chunk: the chunks the client may see now."""
        out = self.step.feed(chunk)
        if self.observe and self.error is None:
            over = self.step.blocked
            if over is not None and over.cause is Cause.OVER_TOKEN_LIMIT:
                self.error = over.cause.value  # observe mode too ends an answer past its limit
        return [] if self.error is not None else out

    def end(self) -> list[C]:
        """The upstream ended: the final verdict; the rest of the chunks if the answer
        stands, the verdict attached to the last that carries a finish reason (else to
        the last), or nothing if it is blocked."""
        self.ended = True
        out = self.step.end()
        if self.blocked:
            return []
        out = self.released(out)
        if not out:
            extra = self.verdict_chunk()
            if extra is None:
                return out
            out = [extra]
        last = next((i for i in range(len(out) - 1, -1, -1) if has_finish(out[i])), len(out) - 1)
        out[last] = _with_field(out[last], VERDICT_FIELD, self.verdict_field())
        return out

    def fail(self, error: str, reason: str, cause: Cause = Cause.TRUNCATED) -> None:
        """The answer ends without a finish (``error``: why, e.g. the upstream timed out or
        sent a malformed chunk): blocked with ``cause``, never certified; nothing held is
        sent."""
        if self.error is None:
            self.error = error
        self.monitor.abort(cause, reason)

    # -- the outcome -----------------------------------------------------------------------

    @property
    def finish_reason(self) -> str | None:
        return self.step.finish_reason

    @property
    def certified(self) -> bool:
        return self.error is None and self.ended and self.verdict.state is State.CERTIFIED

    def verdict_field(self) -> dict[str, Any]:
        """The documented ``liftguard`` field."""
        return verdict_info(self.verdict, self.request, tokens_read=self.tokens_read,
                            statistic=self.monitor.value, error=self.error)  # fmt: skip


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _with_field(chunk: C, name: str, value: Any) -> C:
    """``chunk`` with ``name`` set: a new dict for a dict (the chunk may be kept elsewhere),
    the same object, changed, for an object."""
    if isinstance(chunk, dict):
        out: C = {**chunk, name: value}  # type: ignore[assignment]
        return out
    setattr(chunk, name, value)
    return chunk


def has_finish(chunk: Any) -> bool:
    """``chunk`` (a dict or an object) carries a finish reason for some choice."""
    choices = _field(chunk, "choices")
    return isinstance(choices, list | tuple) and any(
        _field(c, "finish_reason") is not None for c in choices
    )
