"""LangChain callback handler: certify or block each chat-model run while it streams.

``langchain-core`` is an optional extra (``pip install "liftguard[langchain]"``).
This module imports it at the top, so importing it without the extra raises
ImportError with that hint; :mod:`adapters` exposes the names lazily (PEP 562
``__getattr__``), so ``import adapters`` never imports LangChain.

Sync and async error propagation (checked in ``langchain_core`` 1.7.2,
``callbacks/manager.py``): a hook that is a coroutine (an
:class:`~langchain_core.callbacks.AsyncCallbackHandler`) can stop a run only on
the async path: ``_ahandle_event_for_handler`` re-raises when ``raise_error`` is
set (lines 453-461), but on the sync path ``handle_event`` (line 296) only
collects the coroutines and ``_run_coros`` (lines 381-412) runs them in a fresh
event loop, logging and swallowing every error whatever ``raise_error`` says. A
hook that is a plain function is called directly on both paths and re-raised on
both when ``raise_error`` is set: ``handle_event`` lines 351-359 (``stream`` /
``invoke``), ``_ahandle_event_for_handler`` lines 427-428 with ``run_inline``
(``astream`` / ``ainvoke``). The handler's work is O(1) pure Python per token,
so its hooks are plain functions (a :class:`~langchain_core.callbacks.BaseCallbackHandler`
with ``raise_error = run_inline = True``): a BLOCK stops the run on every path.
LangChain logs each raised error as a warning ("Error in
LiftGuardCallbackHandler.on_llm_new_token callback") before re-raising it.

Logprobs: ``BaseChatModel.stream``/``astream`` call ``on_llm_new_token`` before
they yield the chunk (``language_models/chat_models.py`` lines 854 and 991) and
pass no ``logprobs=`` keyword (``langchain_openai`` passes it only when its
``_astream`` gets a run manager, which those callers do not give it), so the
logprobs come from ``chunk.generation_info["logprobs"]``
(``langchain_openai/chat_models/base.py`` lines 1674-1676), also merged into
``chunk.message.response_metadata``.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from guardrail import Cause, Certificate, ConfigError, GuardrailError, State, StreamPolicy, Verdict
from guardrail._errors import MissingDependencyError
from guardrail._reads import Skeleton

from .._errors import ProviderFormatError
from .._guard._context import Guard, resolve_guard
from .._guard._openai_events import ChunkParts
from .._guard._settings import request_limit, top_logprobs_problem, warn_mismatch
from .._guard._stream import (
    DEFAULT_MAX_TOKEN_CHARS,
    EMPTY_STREAM_REASON,
    StreamStep,
    blocked_error,
    check_max_token_chars,
)
from ._langchain_parts import (
    LANGCHAIN_STREAM,
    IgnoresOtherEvents,
    Run,
    check_model,
    content_text,
    context_checks,
    finish_of,
    has_tool_calls,
    logprobs_of,
    refusal_of,
    token_events,
    token_parts,
)
from ._langchain_parts import blocked as _blocked
from ._langchain_parts import given as _given
from ._openai import logprobs_refused, refuses_logprobs

INSTALL_HINT = 'the LangChain adapter needs langchain-core: pip install "liftguard[langchain]"'

try:
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.messages import BaseMessage
except ImportError as exc:  # pragma: no cover - exercised with the extra missing
    raise MissingDependencyError(INSTALL_HINT) from exc

if TYPE_CHECKING:
    from langchain_core.outputs import ChatGenerationChunk, GenerationChunk, LLMResult
    from langchain_core.runnables import Runnable

__all__ = [
    "INSTALL_HINT",
    "LiftGuardCallbackHandler",
    "content_text",
    "token_events",
]

logger = logging.getLogger(__name__)

MissingPolicy = Literal["block", "pass", "error"]
HandlerMode = Literal["passthrough", "final"]
_NO_CHUNKS = ("No generation chunks were returned", "No generations found in stream")
"""langchain-core's errors for a stream without a chunk (``stream`` / ``invoke`` paths)."""


class LiftGuardCallbackHandler(IgnoresOtherEvents, BaseCallbackHandler):
    """Certify or block every chat-model / LLM run it sees, one monitor per ``run_id``.

    The rule: ``certificate=`` (a :class:`~guardrail.Certificate`; ``skeleton=``
    overrides its skeleton spec where the spec cannot build one), or a
    hand-made ``policy``, ``tau`` and ``skeleton`` (no guarantee). A callback
    cannot change the request: a run whose settings differ from the
    certificate's generation context (model, system prompt, temperature, top_p,
    max_tokens) gives one :class:`~guardrail.ContextMismatchWarning` per setting.

    ``on_llm_new_token`` reads the chunk's token logprobs (the ``logprobs``
    keyword if the model passes it, else ``chunk.generation_info["logprobs"]``,
    else ``chunk.message.response_metadata["logprobs"]``) and feeds them to the
    run's :class:`~guardrail.Monitor`, created on the run's first
    token. On BLOCKED it raises :class:`~guardrail.GuardrailBlocked` carrying
    the verdict: the hook runs before the model yields the chunk, so the
    blocking token is never shown, and the model's stream stops (the HTTP
    response is closed once LangChain drops its generator). ``on_llm_end``
    applies the final rule after the run's finish reason (``generation_info
    ["finish_reason"]``; a run that ended without one is truncated: raises
    :class:`~guardrail.StreamTruncated`) and raises the same way; a run that streamed no
    token (``invoke`` without streaming, a cache hit) is scored there from the
    final generation's logprobs. A run that ends with tool calls and no text is
    not judged (an agent's tool step); a run with text and a tool call is blocked
    (cause ``tool_call``: nothing certifies the call). ``on_llm_end`` /
    ``on_llm_error`` drop the run's monitor.

    ``mode``: ``"passthrough"`` (tokens flow until a BLOCK) or ``"final"`` (the
    verdict comes at the end; needs ``StreamPolicy(early=False)``). A callback
    cannot hold tokens back: for ``"buffered"`` use :func:`~adapters.guard_runnable`.
    Missing logprobs follow ``on_missing_logprobs`` (``"error"`` raises
    :class:`~guardrail.MissingLogprobsError`). ``verdicts`` keeps ``(run_id,
    final verdict)`` of the last ``keep`` judged runs (None: all) for logging.

    What the runs must carry is checked now: ``model=`` (the chat model, bound or in
    a chain) is read for ``logprobs`` / ``top_logprobs`` and a model that will not
    stream what the certificate reads (every token's logprob; its fitted statistic's
    ``alternatives``) is a :class:`~guardrail.ConfigError` naming the fix; a
    certificate that reads exact entropies is refused with or without it (a chat
    model's stream never carries them). Without ``model=``, a run that lacks them is
    blocked by the missing-logprobs policy.

    Errors propagate on the sync and async paths alike (see the module docstring).

    Examples
    --------
        >>> from uuid import uuid4
        >>> from guardrail import GuardrailBlocked, StreamPolicy, UniformSkeleton
        >>> handler = LiftGuardCallbackHandler(StreamPolicy(), tau=11.0,
        ...                                    skeleton=UniformSkeleton(1000))
        >>> token = {"token": "maybe", "logprob": -6.0, "top_logprobs": []}
        >>> try:
        ...     handler.on_llm_new_token("maybe", run_id=uuid4(), logprobs=[token])
        ... except GuardrailBlocked as exc:
        ...     print(exc.verdict.state.value)
    """

    raise_error: bool = True
    run_inline: bool = True

    def __init__(
        self,
        policy: StreamPolicy | None = None,
        tau: float | None = None,
        *,
        certificate: Certificate | None = None,
        skeleton: Skeleton | None = None,
        on_missing_logprobs: MissingPolicy | None = None,
        mode: HandlerMode = "passthrough",
        keep: int | None = 100,
        max_token_chars: int = DEFAULT_MAX_TOKEN_CHARS,
        model: Runnable[Any, Any] | None = None,
    ) -> None:
        name: str = mode
        if name == "buffered":
            raise ConfigError(
                "a callback cannot hold tokens back: use guard_runnable(..., mode='buffered')"
            )
        if mode not in ("passthrough", "final"):
            raise ConfigError(f"mode must be 'passthrough' or 'final', got {mode!r}")
        self._guard = resolve_guard(
            certificate, policy, tau, skeleton, on_missing_logprobs, supplies=LANGCHAIN_STREAM
        )
        check_model(self._guard.certificate, model)
        if mode == "final" and self._guard.certificate.policy.early:
            raise ConfigError(
                "mode 'final' decides only at the end: use StreamPolicy(early=False) "
                "so that calibration replays the same rule"
            )
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise ConfigError(f"keep must be an integer >= 1 or None, got {keep!r}")
        self._max_chars = check_max_token_chars(max_token_chars)
        self._warned: set[str] = set()
        self.mode: HandlerMode = mode
        self._runs: dict[UUID, Run] = {}
        self._limits: dict[UUID, int | None] = {}  # runs started, not yet streaming
        self.verdicts: deque[tuple[UUID, Verdict]] = deque(maxlen=keep)

    @property
    def certificate(self) -> Certificate:
        """The rule this handler deploys (built from ``policy``/``tau`` if none was given)."""
        return self._guard.certificate

    @property
    def guard(self) -> Guard:
        return self._guard

    def _new_run(self, run_id: UUID) -> Run:
        """One run's stream step and monitor; a skeleton with per-answer state
        (``for_stream()``, as :class:`~guardrail.NGramSkeleton` and
        :class:`~adapters.PromptFreeSkeleton` have) gives each run a fresh stream of its
        own. Its token limit is the run's ``max_tokens`` (read when the run started),
        else none: the handler does not make the request, so a limit it was not told of
        is not assumed. The step's units are ignored: a callback cannot hold text back."""
        limit = self._limits.pop(run_id, None)
        monitor = self._guard.monitor(max_tokens=limit)
        step = StreamStep(
            monitor, self.mode, "raise", _given, max_token_chars=self._max_chars, max_tokens=limit
        )
        return Run(step)

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Warn (once per setting) when the run generates answers otherwise than the
        certificate's calibration answers were (the one settings check, on the run's
        invocation parameters and messages: model, system prompt, decoding settings, token
        limit, stop sequences, penalties, ...); note the run's token limit for its monitor."""
        params = kwargs.get("invocation_params")
        params = params if isinstance(params, Mapping) else {}
        if (problem := top_logprobs_problem(params)) is not None:
            raise ConfigError(f"the chat model's request: {problem}")
        self._limits[run_id] = request_limit(params)
        for name, given, calibrated in context_checks(self._guard.certificate, params, messages):
            if name not in self._warned:
                self._warned.add(name)
                warn_mismatch(name, given, calibrated)

    @property
    def active_runs(self) -> int:
        """Runs being watched now (their monitors are dropped when they end or fail)."""
        return len(self._runs)

    def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: GenerationChunk | ChatGenerationChunk | None = None,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = self._new_run(run_id)
        logprobs = kwargs.get("logprobs")
        if logprobs is None and chunk is not None:
            logprobs = logprobs_of(chunk)
        text = token if isinstance(token, str) else getattr(chunk, "text", "") or ""
        run.tool_call = run.tool_call or has_tool_calls(chunk)
        self._feed(run, text, logprobs, finish_of(chunk), refusal_of(chunk))

    def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        run = self._runs.pop(run_id, None)
        first = response.generations[0] if response.generations else None
        generation = first[0] if first else None
        if run is None or not run.fed:  # nothing streamed: judge the final generation
            if generation is None or (not generation.text and has_tool_calls(generation)):
                self._limits.pop(run_id, None)
                return
            run = run or self._new_run(run_id)
            refusal = refusal_of(generation)
            self._feed(run, generation.text, logprobs_of(generation), None, refusal, end=True)
        step = run.step
        if generation is not None:
            if has_tool_calls(generation):
                run.tool_call = True
                self._feed(run, "", None, None, False, end=True)
            if step.finish_reason is None:  # the chunks' finish reason, else the result's
                step.finish_reason = finish_of(generation)
        step.end()
        verdict = step.monitor.verdict
        self._record(run_id, verdict)
        if verdict.state is State.BLOCKED:
            raise _blocked(verdict)

    def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Drop the run; raise the typed error the adapters raise for the same failure:
        a chunk that is not JSON -> :class:`~adapters.ProviderFormatError`, a model that
        refuses logprobs -> :class:`~guardrail.ConfigError`, a stream without a chunk
        (LangChain's "No generation chunks were returned") ->
        :class:`~guardrail.StreamTruncated`. LangChain re-raises it in place of
        ``error`` (``raise_error``); other errors pass unchanged."""
        run = self._runs.pop(run_id, None)
        self._limits.pop(run_id, None)
        if run is not None and run.step.monitor.verdict.final:
            self._record(run_id, run.step.monitor.verdict)
        if isinstance(error, GuardrailError):
            return
        if isinstance(error, json.JSONDecodeError):
            raise ProviderFormatError(
                f"malformed stream chunk, not valid JSON ({error})", field="chunk"
            ) from error
        if refuses_logprobs(error):
            raise logprobs_refused(error, "(LangChain chat model)") from error
        if isinstance(error, ValueError) and str(error).startswith(_NO_CHUNKS):
            step = run.step if run is not None else self._new_run(run_id).step
            verdict = step.monitor.abort(Cause.EMPTY_STREAM, EMPTY_STREAM_REASON)
            self._record(run_id, verdict)
            raise blocked_error(verdict) from error

    def _feed(
        self,
        run: Run,
        text: str,
        logprobs: Any,
        finish: str | None,
        refusal: bool,
        *,
        end: bool = False,
    ) -> None:
        """One chunk (or the final generation) to the run's step; raise on a BLOCK unless
        ``end`` (``on_llm_end`` raises after the final rule). A tool call blocks the run
        once it has text (nothing certifies the call); a run of tool calls alone is an
        agent's tool step, not an answer, and is not judged."""
        events, refusal_tokens = token_parts(text, logprobs)
        run.fed = run.fed or bool(events)
        step = run.step
        step.feed(
            ChunkParts(events, text, finish, refusal or refusal_tokens, run.tool_call and run.fed)
        )
        if step.blocked is not None and not end:
            raise _blocked(step.blocked)

    def _record(self, run_id: UUID, verdict: Verdict) -> None:
        self.verdicts.append((run_id, verdict))
        state, t, why = verdict.state.value, verdict.t, verdict.reason
        logger.info("run %s %s after %d tokens: %s", run_id, state, t, why)

    def _verdicts(self) -> list[Verdict]:
        return [r.step.monitor.verdict for r in self._runs.values()] + [v for _, v in self.verdicts]

    def _blocked_run(self) -> Verdict | None:
        """The verdict of a blocked run among those seen (None if none is blocked)."""
        return next((v for v in self._verdicts() if v.state is State.BLOCKED), None)

    def _all_certified(self) -> bool:
        """At least one run was seen, and every run seen is certified."""
        verdicts = self._verdicts()
        return bool(verdicts) and all(v.state is State.CERTIFIED for v in verdicts)

    def _blocking_verdict(self) -> Verdict | None:
        """None if :meth:`_all_certified`, else the verdict to block on (fail closed: a
        synthetic one when no run was seen or a run is unfinished)."""
        if self._all_certified():
            return None
        verdict = self._blocked_run()
        if verdict is not None:
            return verdict
        why = (
            "a language-model run did not finish"
            if self._runs
            else "no language-model run with text was observed (nothing to certify)"
        )
        return self._guard.monitor(max_tokens=None).abort(Cause.NOT_OBSERVED, why)
