"""An LLM-backed LangChain tool whose answer must be certified: a blocked answer becomes a
:class:`~langchain_core.tools.ToolException` (see :func:`guard_tool`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from guardrail import Certificate, ConfigError, GuardrailBlocked, StreamPolicy, Verdict
from guardrail._errors import MissingDependencyError
from guardrail._reads import Skeleton

from .._guard._context import Guard, resolve_guard
from ._langchain import INSTALL_HINT, LiftGuardCallbackHandler, MissingPolicy
from ._langchain_parts import LANGCHAIN_STREAM, check_model
from ._langchain_runnable import add_handler, fresh_handler

try:
    from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
    from langchain_core.tools import BaseTool, ToolException
except ImportError as exc:  # pragma: no cover - _langchain raises first
    raise MissingDependencyError(INSTALL_HINT) from exc

__all__ = ["guard_tool"]

ToolErrorHandling = bool | str | Callable[[ToolException], Any] | None


class _GuardedTool(BaseTool):
    """A tool that runs ``inner`` under a fresh handler and turns a BLOCK into a ToolException."""

    inner: BaseTool
    guard: Guard

    def _handler(self) -> LiftGuardCallbackHandler:
        return fresh_handler(self.guard)

    @staticmethod
    def _config(handler: LiftGuardCallbackHandler) -> RunnableConfig:
        config = ensure_config()  # a copy of the tool run's child config (BaseTool.run/arun)
        config["callbacks"] = add_handler(config.get("callbacks"), handler)
        return config

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        handler = self._handler()
        try:
            out = self.inner.invoke(args[0] if args else kwargs, self._config(handler))
        except GuardrailBlocked as exc:
            raise _tool_error(exc.verdict) from exc
        _check_tool(handler)
        return out

    async def _arun(self, *args: Any, **kwargs: Any) -> Any:
        handler = self._handler()
        try:
            out = await self.inner.ainvoke(args[0] if args else kwargs, self._config(handler))
        except GuardrailBlocked as exc:
            raise _tool_error(exc.verdict) from exc
        _check_tool(handler)
        return out


def _tool_error(verdict: Verdict) -> ToolException:
    return ToolException(f"the tool's answer was blocked by liftguard: {verdict.reason}")


def _check_tool(handler: LiftGuardCallbackHandler) -> None:
    """The tool returned: its model runs must all be certified (it may have caught the error)."""
    verdict = handler._blocking_verdict()
    if verdict is not None:
        raise _tool_error(verdict) from GuardrailBlocked(verdict, verdict.reason)


def guard_tool(
    tool: BaseTool,
    policy: StreamPolicy | None = None,
    tau: float | None = None,
    *,
    certificate: Certificate | None = None,
    skeleton: Skeleton | None = None,
    on_missing_logprobs: MissingPolicy | None = None,
    handle_tool_error: ToolErrorHandling = None,
    model: Runnable[Any, Any] | None = None,
) -> BaseTool:
    """A tool with ``tool``'s name, description and arguments whose answer must be certified.

    Each call runs ``tool`` with a fresh :class:`~adapters.LiftGuardCallbackHandler`
    in its callbacks; the chat model that ``tool`` calls inherits them (LangChain
    passes the tool run's config down through a context variable; a model used
    from another thread or event loop needs ``config`` passed explicitly). If a
    model run is blocked, also when ``tool`` catches the error, or no model run
    is observed at all (fail closed), the call raises
    :class:`~langchain_core.tools.ToolException` with the verdict's reason (its
    ``__cause__`` is the :class:`~guardrail.GuardrailBlocked` with the verdict).
    ``handle_tool_error`` (default: ``tool``'s) then applies as LangChain
    defines it: ``True`` gives the agent the message as the tool's output. Other
    errors propagate unchanged. ``response_format="content_and_artifact"`` is
    not supported (only the content is returned).

    ``model``: the chat model ``tool`` calls, checked now as :func:`guard_runnable`
    checks its runnable (a tool's code cannot be read); a certificate that reads
    exact entropies is refused either way.
    """
    if not isinstance(tool, BaseTool):
        raise ConfigError(f"tool must be a LangChain BaseTool, got {type(tool).__name__}")
    guard = resolve_guard(
        certificate, policy, tau, skeleton, on_missing_logprobs, supplies=LANGCHAIN_STREAM
    )
    check_model(guard.certificate, model)
    if handle_tool_error is None:
        handle_tool_error = tool.handle_tool_error
    return _GuardedTool(
        name=tool.name,
        description=tool.description,
        args_schema=tool.args_schema if tool.args_schema is not None else tool.get_input_schema(),
        return_direct=tool.return_direct,
        handle_tool_error=tool.handle_tool_error
        if handle_tool_error is None
        else handle_tool_error,
        inner=tool,
        guard=guard,
    )
