"""Provider adapters for liftguard (OpenAI, Anthropic, LangChain, local models).

Adapters depend on the :mod:`guardrail` core, never the reverse. Vendor SDKs are
optional extras, imported inside the adapter that needs them.

Note: the PyPI package of AdapterHub is also imported as ``adapters``; install
liftguard in an environment without it.

OpenAI (Chat Completions; also vLLM, llama.cpp, Ollama), ``pip install "liftguard[openai]"``:

- :func:`guarded_chat_completion`: request + guard in one async generator.
- :func:`guard_chat_stream` / :func:`guard_chat_stream_sync`: guard a stream you created.
- :func:`events_from_chat_chunk`, :func:`events_from_responses_event`: parse chunks/events
  into :class:`guardrail.TokenEvent` objects.
- :class:`ProviderFormatError`: a chunk or event does not have the documented shape.
"""

from __future__ import annotations

from ._errors import ProviderFormatError
from ._openai import guard_chat_stream, guard_chat_stream_sync, guarded_chat_completion
from ._openai_events import events_from_chat_chunk, events_from_responses_event

__all__ = [
    "ProviderFormatError",
    "events_from_chat_chunk",
    "events_from_responses_event",
    "guard_chat_stream",
    "guard_chat_stream_sync",
    "guarded_chat_completion",
]
