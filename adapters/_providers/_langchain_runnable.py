"""Guard a LangChain runnable (LCEL) or an LLM-backed tool.

:func:`guard_runnable` wraps any runnable that streams text or messages (a chat
model, ``prompt | llm``, ``prompt | llm | StrOutputParser()``): each call gets
its own :class:`~adapters.LiftGuardCallbackHandler`, added to the call's
callbacks so that it watches every model run inside (LangChain hands callbacks
down to child runs). The handler raises on a BLOCK before the model yields the
token; the wrapper catches it and answers per ``on_block``. The wrapper yields
plain text (``str``) chunks, and, with ``on_block="abstain"``, an
:class:`Abstention` as the last item.

:func:`guard_tool` wraps a :class:`~langchain_core.tools.BaseTool` whose
implementation calls a chat model: a blocked (or uncertified) answer becomes a
:class:`~langchain_core.tools.ToolException`, which the agent sees as an error,
or as the tool's output with ``handle_tool_error=True``.

Both have a native sync path (``invoke``/``stream``, the tool's ``run``): the
handler's hooks are plain functions, which LangChain lets raise on the sync path
too (see :mod:`adapters._providers._langchain`). No private event loop is used: LangChain's
OpenAI client caches one ``httpx.AsyncClient`` per base URL, which fails with
"Event loop is closed" when a second loop reuses its connections.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from guardrail import Certificate, ConfigError, GuardrailBlocked, StreamPolicy, Verdict
from guardrail._errors import MissingDependencyError
from guardrail._reads import Skeleton

from .._guard._context import Guard, resolve_guard
from .._guard._stream import aclose_upstream, close_upstream
from ._langchain import (
    INSTALL_HINT,
    LiftGuardCallbackHandler,
    MissingPolicy,
    content_text,
)
from ._langchain_parts import LANGCHAIN_STREAM, check_model

try:
    from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager, Callbacks
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
except ImportError as exc:  # pragma: no cover - _langchain raises first
    raise MissingDependencyError(INSTALL_HINT) from exc

__all__ = ["DEFAULT_REFUSAL", "Abstention", "add_handler", "fresh_handler", "guard_runnable"]

OnBlock = Literal["raise", "replace", "abstain"]
GuardMode = Literal["buffered", "passthrough"]
DEFAULT_REFUSAL = "I can't answer that reliably."


@dataclass(frozen=True)
class Abstention:
    """Stands for a blocked answer (``on_block="abstain"``); ``verdict`` says why.

    Examples
    --------
        >>> from guardrail import Monitor, StreamPolicy, TokenEvent, UniformSkeleton
        >>> monitor = Monitor.lift(StreamPolicy(), tau=11.0, skeleton=UniformSkeleton(1000))
        >>> monitor.update(TokenEvent("maybe", logprob=-6.0)).state.value
        'continue'
        >>> abstention = Abstention(monitor.finish())
        >>> abstention.verdict.cause.value
        'below_threshold'
    """

    verdict: Verdict

    @property
    def reason(self) -> str:
        return self.verdict.reason


def add_handler(callbacks: Callbacks, handler: BaseCallbackHandler) -> Callbacks:
    """``callbacks`` (None, a list or a manager) plus ``handler``, inherited by child runs."""
    if callbacks is None:
        return [handler]
    if isinstance(callbacks, BaseCallbackManager):
        # langchain-core annotates copy() with typing.Self, which a Python 3.10 type check
        # cannot see (it reads as Any); the copy is a BaseCallbackManager either way.
        manager: BaseCallbackManager = callbacks.copy()
        manager.add_handler(handler, inherit=True)
        return manager
    return [*callbacks, handler]


def _chunk_text(chunk: Any) -> str:
    if isinstance(chunk, str):
        return chunk
    if isinstance(chunk, BaseMessage):
        return content_text(chunk.content)
    raise ConfigError(
        f"guard_runnable needs a runnable that streams text or messages, got {type(chunk).__name__}"
    )


class _Gate:
    """What of the runnable's output may be shown now, and how the call ends (pure; the
    sync and async loops only iterate, yield and close)."""

    __slots__ = ("_handler", "_held", "_open", "_tail", "on_block", "refusal")

    def __init__(
        self, handler: LiftGuardCallbackHandler, mode: GuardMode, on_block: OnBlock, refusal: str
    ) -> None:
        self._handler, self._open = handler, mode == "passthrough"
        self.on_block, self.refusal = on_block, refusal
        self._held: list[str] = []
        self._tail: str | Abstention | None = None

    def push(self, chunk: Any) -> str:
        blocked = self._handler._blocked_run()
        if blocked is not None:  # a step inside caught the handler's error: still blocked
            raise GuardrailBlocked(blocked, blocked.reason)
        text = _chunk_text(chunk)
        if self._open:
            return text
        self._held.append(text)
        if self._handler._all_certified():
            self._open = True
            return self._drain()
        return ""

    def blocked(self, exc: GuardrailBlocked) -> None:
        """The call was blocked: re-raise (``on_block="raise"``) or end with the
        replacement."""
        if self.on_block == "raise":
            raise exc
        self._tail = Abstention(exc.verdict) if self.on_block == "abstain" else self.refusal

    def end(self) -> str | Abstention:
        """What the call ends with: the replacement after a block, else the held text if
        every model run is certified (else blocked: :meth:`blocked`)."""
        if self._tail is None:
            verdict = self._handler._blocking_verdict()
            if verdict is None:
                return self._drain()
            self.blocked(GuardrailBlocked(verdict, verdict.reason))
        tail, self._tail = self._tail, None
        return tail if tail is not None else ""

    def _drain(self) -> str:
        out = "".join(self._held)
        self._held.clear()
        return out


class GuardedRunnable(Runnable[Any, str | Abstention]):
    """The runnable :func:`guard_runnable` returns (see there)."""

    def __init__(
        self,
        runnable: Runnable[Any, Any],
        guard: Guard,
        *,
        on_block: OnBlock,
        refusal: str,
        mode: GuardMode,
    ) -> None:
        self.runnable, self._guard = runnable, guard
        self.on_block, self.refusal, self.mode = on_block, refusal, mode
        self.name = f"Guarded{runnable.get_name()}"

    @property
    def InputType(self) -> Any:
        return self.runnable.InputType

    def get_input_schema(self, config: RunnableConfig | None = None) -> Any:
        return self.runnable.get_input_schema(config)

    def _start(
        self, config: RunnableConfig | None, mode: GuardMode
    ) -> tuple[_Gate, RunnableConfig]:
        handler = fresh_handler(self._guard)
        cfg = ensure_config(config)  # a fresh dict
        cfg["callbacks"] = add_handler(cfg.get("callbacks"), handler)
        return _Gate(handler, mode, self.on_block, self.refusal), cfg

    async def _aguarded(
        self, input: Any, config: RunnableConfig | None, kwargs: dict[str, Any], mode: GuardMode
    ) -> AsyncIterator[str | Abstention]:
        gate, cfg = self._start(config, mode)
        stream = self.runnable.astream(input, cfg, **kwargs)
        try:
            async for chunk in stream:
                if out := gate.push(chunk):
                    yield out
        except GuardrailBlocked as exc:
            gate.blocked(exc)
        finally:
            await aclose_upstream(stream)
        if tail := gate.end():
            yield tail

    def _guarded(
        self, input: Any, config: RunnableConfig | None, kwargs: dict[str, Any], mode: GuardMode
    ) -> Iterator[str | Abstention]:
        gate, cfg = self._start(config, mode)
        stream = self.runnable.stream(input, cfg, **kwargs)
        try:
            for chunk in stream:
                if out := gate.push(chunk):
                    yield out
        except GuardrailBlocked as exc:
            gate.blocked(exc)
        finally:
            close_upstream(stream)
        if tail := gate.end():
            yield tail

    def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[str | Abstention]:
        return self._aguarded(input, config, kwargs, self.mode)

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[str | Abstention]:
        return self._guarded(input, config, kwargs, self.mode)

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> str | Abstention:
        return _joined([p async for p in self._aguarded(input, config, kwargs, "buffered")])

    def invoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> str | Abstention:
        return _joined(list(self._guarded(input, config, kwargs, "buffered")))


def _joined(parts: list[str | Abstention]) -> str | Abstention:
    for part in parts:
        if isinstance(part, Abstention):
            return part
    return "".join(p for p in parts if isinstance(p, str))


def fresh_handler(guard: Guard) -> LiftGuardCallbackHandler:
    """A fresh handler for one call (it keeps every verdict of the call)."""
    return LiftGuardCallbackHandler(
        certificate=guard.certificate,
        skeleton=guard.skeleton,
        on_missing_logprobs=guard.on_missing_logprobs,
        keep=None,
    )


def guard_runnable(
    runnable: Runnable[Any, Any],
    policy: StreamPolicy | None = None,
    tau: float | None = None,
    *,
    certificate: Certificate | None = None,
    skeleton: Skeleton | None = None,
    on_block: OnBlock = "raise",
    refusal: str = DEFAULT_REFUSAL,
    mode: GuardMode = "buffered",
    on_missing_logprobs: MissingPolicy | None = None,
) -> GuardedRunnable:
    """Wrap ``runnable`` (streaming text or messages) so that only certified text gets out.

    ``astream``/``stream`` yield text chunks: ``mode="buffered"`` holds them
    until every model run inside is CERTIFIED (then releases the held text and
    lets the rest flow; on a BLOCK nothing was shown), ``"passthrough"`` yields
    at once and stops at the BLOCK (the blocking token is never yielded). On a
    BLOCK, also at the end of the stream by the final rule: ``on_block="raise"``
    raises :class:`~guardrail.GuardrailBlocked` carrying the verdict,
    ``"replace"`` yields ``refusal``, ``"abstain"`` yields an :class:`Abstention`.
    ``ainvoke``/``invoke`` return the whole certified text, the refusal or the
    Abstention (they always buffer). Output without a model run to judge is
    blocked (fail closed). The upstream stream is closed on every exit path;
    other errors propagate unchanged and held text is never released.

    The rule is ``certificate=`` (or a hand-made ``policy``, ``tau`` and
    ``skeleton``). Use the model with token logprobs (``ChatOpenAI(logprobs=True,
    top_logprobs=k)``): the chat models inside ``runnable`` (bound, or in a chain) are
    read now, and one that will not stream the logprobs and the alternatives the
    certificate reads (its fitted statistic's ``alternatives``) is a
    :class:`~guardrail.ConfigError` naming the fix, as is a certificate that reads
    exact entropies (a chat model's stream never carries them).
    In a chain, put the guard last (``guard_runnable(prompt | llm | parser, ...)``):
    an Abstention is not text for a later parser.
    """
    if not isinstance(runnable, Runnable):
        raise ConfigError(f"runnable must be a LangChain Runnable, got {type(runnable).__name__}")
    if on_block not in ("raise", "replace", "abstain"):
        raise ConfigError(f"on_block must be 'raise', 'replace' or 'abstain', got {on_block!r}")
    if mode not in ("buffered", "passthrough"):
        raise ConfigError(f"mode must be 'buffered' or 'passthrough', got {mode!r}")
    if not isinstance(refusal, str):
        raise ConfigError(f"refusal must be a string, got {type(refusal).__name__}")
    guard = resolve_guard(
        certificate, policy, tau, skeleton, on_missing_logprobs, supplies=LANGCHAIN_STREAM
    )
    check_model(guard.certificate, runnable)
    return GuardedRunnable(runnable, guard, on_block=on_block, refusal=refusal, mode=mode)


