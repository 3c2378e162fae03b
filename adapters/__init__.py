"""Provider adapters for liftguard (OpenAI, Anthropic, LangChain, local models).

Adapters depend on the :mod:`guardrail` core, never the reverse. Vendor SDKs are
optional extras, imported inside the adapter that needs them.

Each adapter states what its stream carries per token (logprobs, how many
alternatives, exact entropies) and checks it against what the certificate reads
when the guard is built, or before the request it makes is sent: a fitted
statistic that reads ``statistic.alternatives`` alternatives, or exact entropies
(group ``local``, which only a local model's stream carries), is refused then with
a :class:`~guardrail.ConfigError` naming the fix, not blocked mid-stream.

Note: the PyPI package of AdapterHub is also imported as ``adapters``; install
liftguard in an environment without it.

OpenAI (Chat Completions; also vLLM, llama.cpp, Ollama), ``pip install "liftguard[openai]"``:

- :func:`guarded_chat_completion`: request + guard in one async generator.
- :func:`escalated_chat_completion`: a calibrated escalation (one guarded pass, K samples
  only where its score is undecided), its decision and cost as an :class:`EscalatedAnswer`.
- :func:`guard_chat_stream` / :func:`guard_chat_stream_sync`: guard a stream you created
  (``top_logprobs=`` declares what it asked for; else its first token is checked).
- :func:`chat_chunk_parts`, :func:`events_from_responses_event`: parse a chunk (its token
  events, text and finish reason) or a Responses event (its token events).
- :class:`ProviderFormatError`: a chunk or event does not have the documented shape.

Anthropic Messages (no token log-probabilities: the streamed text is scored by a local
model), ``pip install "liftguard[anthropic,local]"``:

- :func:`guarded_message`: request + guard in one async generator; needs ``scorer_model``.
- :func:`guard_anthropic_stream`: guard an async stream you created, with a
  :class:`LocalTextScorer` (incremental teacher-forced scoring of streamed text; its
  probabilities are the scorer's own) and :func:`anthropic_scorer_prompt`.

Local models, ``pip install "liftguard[local]"`` (llama-cpp-python is imported only when
a model is loaded):

- ``LocalModel.guarded_generate`` (:mod:`adapters.local`): a guarded greedy answer whose
  stream carries everything a fitted statistic reads, exact entropies included.
- :class:`PromptFreeSkeleton`: the prompt-free skeleton, a local model (by default the
  bundled SmolLM2-135M-Instruct) scoring the answer without the question, token by
  token, by default after a question-free prefix of the bundled model's chat template.

LangChain, ``pip install "liftguard[langchain]"`` (loaded on first access, so
``import adapters`` never imports LangChain):

- :class:`LiftGuardCallbackHandler`: a callback that blocks chat-model runs mid-stream.
- :func:`guard_runnable`: an LCEL runnable that yields only certified text (buffered or
  passthrough), with a refusal or an :class:`Abstention` on a block; sync and async.
- :func:`guard_tool`: a tool whose blocked answer becomes a ``ToolException``.

Labelling recorded answers (``liftguard traces label --judge``; needs only httpx, not
the proxy's server stack):

- :class:`Judge`: asks any OpenAI-compatible endpoint whether an answer is correct,
  parsing its one-word reply strictly; :class:`JudgeFailure` is a judge that gave no
  usable verdict (the trace then stays unlabelled).

Labelling by checking (``liftguard traces label --check``; see ``docs/checking.md``):

- :func:`check_code`: runs an answer's Python (:func:`extract_python_code`) with its MBPP
  task's tests in :func:`run_sandboxed` (a child process in its own session, PID and
  network namespaces where allowed, under :class:`SandboxLimits`, as ``nobody`` when
  called as root); its result says whether the asserts really ran to the end.
- :func:`check_number`: compares an answer's :func:`final_number` with a GSM8K task's.
- :class:`CheckSkipped`: a check that cannot label an answer, with the reason.
"""

from __future__ import annotations

import typing as _typing

from ._errors import ProviderFormatError
from ._guard._openai_events import chat_chunk_parts
from ._guard._responses_events import events_from_responses_event
from ._labels._checks import (
    CheckSkipped,
    check_code,
    check_number,
    extract_python_code,
    final_number,
)
from ._labels._judge import Judge, JudgeFailure
from ._labels._sandbox import SandboxLimits, run_sandboxed
from ._local._prompt_free import PromptFreeSkeleton
from ._providers._anthropic import anthropic_scorer_prompt, guard_anthropic_stream, guarded_message
from ._providers._escalate import EscalatedAnswer, escalated_chat_completion
from ._providers._openai import guard_chat_stream, guard_chat_stream_sync, guarded_chat_completion
from ._providers._scorer import LocalTextScorer

if _typing.TYPE_CHECKING:
    from ._providers._langchain import LiftGuardCallbackHandler
    from ._providers._langchain_runnable import Abstention, guard_runnable
    from ._providers._langchain_tool import guard_tool

__all__ = [
    "Abstention",
    "CheckSkipped",
    "EscalatedAnswer",
    "Judge",
    "JudgeFailure",
    "LiftGuardCallbackHandler",
    "LocalTextScorer",
    "PromptFreeSkeleton",
    "ProviderFormatError",
    "SandboxLimits",
    "anthropic_scorer_prompt",
    "chat_chunk_parts",
    "check_code",
    "check_number",
    "escalated_chat_completion",
    "events_from_responses_event",
    "extract_python_code",
    "final_number",
    "guard_anthropic_stream",
    "guard_chat_stream",
    "guard_chat_stream_sync",
    "guard_runnable",
    "guard_tool",
    "guarded_chat_completion",
    "guarded_message",
    "run_sandboxed",
]

# names whose modules import an optional SDK: loaded on first access (PEP 562)
_LAZY = {
    "Abstention": "._providers._langchain_runnable",
    "LiftGuardCallbackHandler": "._providers._langchain",
    "guard_runnable": "._providers._langchain_runnable",
    "guard_tool": "._providers._langchain_tool",
}


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
