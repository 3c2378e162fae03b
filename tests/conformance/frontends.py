"""Every front end behind one interface: ask a question, get what the client saw.

A front end sends one chat request (``messages`` and settings, as a client would) towards the
scripted upstream (``litellm_harness.ScriptedUpstream``: it answers each request by its last
user message) and reports an :class:`Outcome`: the text and tool calls the client received,
whether it was told the answer is certified, the cause of a block, the settings the guard
reported as changed, and the HTTP status of a refusal. The front ends:

- ``sdk-buffered`` / ``sdk-passthrough``: :func:`adapters.guarded_chat_completion` with the
  real ``openai.AsyncOpenAI`` (it streams; changes are ``ContextMismatchWarning`` warnings);
- ``proxy-<mode>-<stream|whole>``: ``liftguard serve`` (a real uvicorn server) in buffered and
  passthrough mode, asked with the openai client, streamed and not;
- ``litellm-<mode>-<stream|whole>``: a real ``litellm --config`` process with the guardrail;
- ``langchain-handler`` and ``langchain-runnable-<mode>``: langchain-openai's ``ChatOpenAI``
  with the callback handler, or wrapped by :func:`adapters.guard_runnable`.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai

from adapters import guarded_chat_completion
from guardrail import Certificate, ContextMismatchWarning, GuardrailBlocked, GuardrailError


@dataclass
class Outcome:
    """What the client of a front end saw of one answer."""

    text: str = ""
    tool_calls: bool = False
    certified: bool = False
    cause: str | None = None
    mismatches: list[str] = field(default_factory=list)
    status: int | None = None
    choices: set[int] = field(default_factory=set)
    logprobs: int = 0
    """Token logprob entries the client received."""
    top: int = 0
    """The most alternatives it received for one token."""
    param: str | None = None
    """The request parameter a refusal names (``error.param``; HTTP front ends)."""
    error: str | None = None
    """An error the front end raised or sent that names no verdict (a timeout, a broken
    stream): the answer ended uncertified."""
    request_id: str | None = None
    """The ``request_id`` of the verdict the client got (HTTP front ends)."""
    headers: dict[str, str] = field(default_factory=dict)
    """The response's HTTP headers (HTTP front ends; none for an error raised mid-stream)."""
    seen: str = ""
    """Everything the client received, serialised: the text an SDK or LangChain caller
    gets (LangChain's whole chunks), every field of every chunk, completion and error body
    of an HTTP front end. Text the guard did not read must not be in it."""


class FrontEnd:
    name: str

    def ask(self, question: str, **settings: Any) -> Outcome:
        raise NotImplementedError


class SDK(FrontEnd):
    def __init__(self, base_url: str, certificate: Certificate, mode: str, timeout: float) -> None:
        self.name, self.base_url, self.certificate, self.mode, self.timeout = (
            f"sdk-{mode}", base_url, certificate, mode, timeout,
        )  # fmt: skip

    def ask(self, question: str, **settings: Any) -> Outcome:
        return asyncio.run(self._ask(question, settings))

    async def _ask(self, question: str, settings: dict[str, Any]) -> Outcome:
        out = Outcome()
        messages = settings.pop("messages", [{"role": "user", "content": question}])
        async with openai.AsyncOpenAI(
            base_url=self.base_url, api_key="k", max_retries=0, timeout=self.timeout
        ) as client:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always", ContextMismatchWarning)
                try:
                    parts = guarded_chat_completion(
                        client, certificate=self.certificate, mode=self.mode,  # type: ignore[arg-type]
                        model="test-model", messages=messages, **settings,
                    )  # fmt: skip
                    async for part in parts:
                        out.text += part
                        out.seen += part
                    out.certified = True
                except GuardrailBlocked as blocked:
                    out.cause = blocked.verdict.cause.value
                except (ValueError, openai.APIStatusError) as exc:
                    out.status = getattr(exc, "status_code", 400)
                except (GuardrailError, openai.APIError, httpx.HTTPError) as exc:
                    out.error = repr(exc)
            out.mismatches = [
                _setting(str(w.message))
                for w in seen
                if issubclass(w.category, ContextMismatchWarning)
            ]
        return out


class LangChain(FrontEnd):
    """A ``ChatOpenAI`` run (langchain-openai, streamed) with the callback handler, or
    wrapped by :func:`adapters.guard_runnable` (``runnable``: its mode): the settings go in
    as a LangChain user sets them (``model_kwargs``, ``extra_body``); changes are warned
    about, as the SDK adapter does."""

    def __init__(
        self, base_url: str, certificate: Certificate, runnable: str | None, timeout: float
    ) -> None:
        self.base_url, self.certificate, self.runnable = base_url, certificate, runnable
        self.timeout = timeout
        self.name = "langchain-handler" if runnable is None else f"langchain-runnable-{runnable}"

    def ask(self, question: str, **settings: Any) -> Outcome:
        return asyncio.run(self._ask(question, settings))

    async def _ask(self, question: str, settings: dict[str, Any]) -> Outcome:
        from langchain_openai import ChatOpenAI

        from adapters import LiftGuardCallbackHandler, guard_runnable

        out = Outcome()
        ctx = self.certificate.context
        messages = settings.pop("messages", None) or [
            {"role": "system", "content": ctx.system_prompt},
            {"role": "user", "content": question},
        ]
        pairs = [(m["role"], m["content"]) for m in messages]
        extra = settings.pop("extra_body", None)
        logprobs, top = settings.pop("logprobs", True), settings.pop("top_logprobs", 5)
        # a client of this event loop (langchain-openai's shared one outlives asyncio.run)
        client = httpx.AsyncClient(timeout=self.timeout)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always", ContextMismatchWarning)
            callbacks = []
            if self.runnable is None:
                callbacks = [LiftGuardCallbackHandler(certificate=self.certificate)]
            llm: Any = ChatOpenAI(
                base_url=self.base_url, api_key="k", model="test-model", max_retries=0,
                temperature=ctx.temperature, max_tokens=ctx.max_tokens, stop=list(ctx.stop) or None,
                logprobs=logprobs, top_logprobs=top, streaming=True, callbacks=callbacks,
                timeout=self.timeout,
                extra_body=extra, model_kwargs=settings, http_async_client=client,
            )  # fmt: skip
            try:
                if self.runnable is not None:  # (it refuses a model it cannot guard)
                    llm = guard_runnable(llm, certificate=self.certificate, mode=self.runnable)  # type: ignore[arg-type]
                async for chunk in llm.astream(pairs):
                    out.text += str(getattr(chunk, "content", chunk))
                    out.seen += repr(chunk)
                out.certified = True
            except GuardrailBlocked as blocked:
                out.cause = blocked.verdict.cause.value
            except (ValueError, openai.APIStatusError) as exc:
                out.status = getattr(exc, "status_code", 400)
            except (GuardrailError, openai.APIError, httpx.HTTPError) as exc:
                out.error = repr(exc)
            finally:
                await client.aclose()
        out.mismatches = [
            _setting(str(w.message))
            for w in seen
            if issubclass(w.category, ContextMismatchWarning)
        ]
        return out


def _setting(warning: str) -> str:
    """The setting a ContextMismatchWarning names."""
    if warning.startswith("the request leaves "):
        return warning.removeprefix("the request leaves ").split(" unset", 1)[0]
    return warning.removeprefix("the request sets ").split("=", 1)[0]


def _read_verdict(obj: Any) -> dict[str, Any] | None:
    extra = getattr(obj, "model_extra", None) or {}
    verdict = extra.get("liftguard")
    return verdict if isinstance(verdict, dict) else None


class HTTPFrontEnd(FrontEnd):
    """A server the openai client talks to: the guard proxy or LiteLLM."""

    def __init__(self, name: str, base_url: str, key: str, model: str, stream: bool) -> None:
        self.name, self.base_url, self.key, self.model, self.stream = (
            name, base_url, key, model, stream,
        )  # fmt: skip

    def ask(self, question: str, **settings: Any) -> Outcome:
        out = Outcome()
        messages = settings.pop("messages", [{"role": "user", "content": question}])
        extra_body = settings.pop("extra_body", None)
        client = openai.OpenAI(base_url=self.base_url, api_key=self.key, max_retries=0, timeout=60)
        with client:
            try:
                kwargs: dict[str, Any] = dict(model=self.model, messages=messages, **settings)
                if extra_body is not None:  # a literal "extra_body" key in the request's JSON
                    kwargs["extra_body"] = {"extra_body": extra_body}
                raw = client.chat.completions.with_raw_response.create(stream=self.stream, **kwargs)
                out.headers = dict(raw.headers)
                if self.stream:
                    for chunk in raw.parse():
                        self._take_chunk(out, chunk)
                else:
                    self._take_completion(out, raw.parse())
            except openai.APIStatusError as exc:
                out.status, out.param = exc.status_code, exc.param
                out.seen += repr(exc.body)
                self._take_error(out, exc.body)
            except openai.APIError as exc:  # an in-stream error event, a timeout
                out.error = repr(exc)
                out.seen += repr(exc.body)
                self._take_error(out, exc.body)
            except httpx.HTTPError as exc:  # the stream broke off
                out.error = repr(exc)
        return out

    @staticmethod
    def _take_verdict(out: Outcome, verdict: dict[str, Any] | None) -> None:
        if verdict is None:
            return
        out.request_id = verdict.get("request_id")
        out.certified = verdict.get("state") == "certified"
        if verdict.get("state") == "blocked":
            out.cause = verdict.get("cause")
        out.mismatches = list(verdict.get("context_mismatches") or [])

    def _take_chunk(self, out: Outcome, chunk: Any) -> None:
        out.seen += chunk.model_dump_json()
        for choice in chunk.choices:
            out.choices.add(choice.index)
            delta = choice.delta
            if choice.finish_reason == "content_filter":
                out.cause = out.cause or "refused"
                continue
            out.text += delta.content or ""
            out.tool_calls |= bool(delta.tool_calls or delta.function_call)
            self._take_logprobs(out, choice.logprobs)
        self._take_verdict(out, _read_verdict(chunk))

    @staticmethod
    def _take_logprobs(out: Outcome, logprobs: Any) -> None:
        for entry in getattr(logprobs, "content", None) or ():
            out.logprobs += 1
            out.top = max(out.top, len(entry.top_logprobs or ()))

    def _take_completion(self, out: Outcome, completion: Any) -> None:
        out.seen += completion.model_dump_json()
        for choice in completion.choices:
            out.choices.add(choice.index)
            if choice.finish_reason == "content_filter":
                continue
            out.text += choice.message.content or ""
            out.tool_calls |= bool(choice.message.tool_calls or choice.message.function_call)
            self._take_logprobs(out, choice.logprobs)
        self._take_verdict(out, _read_verdict(completion))

    def _take_error(self, out: Outcome, body: Any) -> None:
        if isinstance(body, str) and "data: " in body:  # LiteLLM's error event as an HTTP body
            body = json.loads(body.split("data: ", 1)[1].split("\n", 1)[0]).get("error")
        if not isinstance(body, dict):
            return
        verdict = body.get("liftguard")
        if verdict is None:
            nested = (body.get("provider_specific_fields") or {}).get("error") or {}
            verdict = nested.get("liftguard")
        if isinstance(verdict, dict):
            out.request_id = verdict.get("request_id")
            out.certified = False
            out.cause = verdict.get("cause")
            out.mismatches = list(verdict.get("context_mismatches") or [])
