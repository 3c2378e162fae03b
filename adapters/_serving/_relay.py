"""What a server front end relays of an upstream answer: only what the guard read.

**The text shown is the text read.** Every front end (the proxy, the LiteLLM guardrail, the
SDK adapters, the LangChain handler) drives the one stream step
(:class:`~adapters._guard._stream.StreamStep`), which holds three rules:

- the text an item shows (``delta.content``, a whole answer's ``content``) must be the
  text of the tokens whose logprobs the guard scored (``logprobs.content``), compared as
  UTF-8 bytes, and every token read must be shown by the end: otherwise the answer is
  blocked, cause ``content_mismatch`` (:mod:`adapters._guard._shown`);
- nothing of an answer may follow its finish: text, tokens or a second finish after the
  chunk with ``finish_reason`` (``"length"`` then ``"stop"`` included) block it, cause
  ``after_finish`` (a chunk with no choice, such as the usage chunk, may follow); a
  malformed event after the finish is a malformed chunk, as anywhere;
- a server front end relays of each chunk only the fields below, an allowlist
  (:func:`~._wire.relayed_stripped` for the proxy's decoded JSON, in one pass with what
  the client did not ask for, :func:`unrelayed` and :func:`drop_unlisted` for what the
  LiteLLM guardrail clears on its chunk objects): reasoning fields
  (``delta.reasoning_content``, ``delta.reasoning``), a choice's ``text``, vendor fields
  and anything a server invents next are dropped, so that nothing the guard did not read
  rides along with a certified answer. A front end that yields text (the SDK adapters,
  LangChain) shows ``content`` alone, read the same way.

A denylist would fail open on the next name a server invents; an allowlist fails closed. A
field a client needs relayed is added here, once, for every server front end.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "RELAYED_CHOICE", "RELAYED_CHUNK", "RELAYED_DELTA", "RELAYED_LOGPROBS",
    "RELAYED_WHOLE_CHOICE", "drop_unlisted", "unrelayed",
]  # fmt: skip

RELAYED_CHUNK = frozenset(
    ("id", "object", "created", "model", "system_fingerprint", "service_tier", "choices",
     "usage")
)  # fmt: skip
"""The fields of a chunk (or a whole completion) relayed to the client; the verdict
(``liftguard``) is added by the front end itself."""
RELAYED_CHOICE = frozenset(("index", "delta", "logprobs", "finish_reason"))
"""The fields of a chunk's choice relayed."""
RELAYED_WHOLE_CHOICE = frozenset(("index", "message", "logprobs", "finish_reason"))
"""The fields of a whole completion's choice relayed."""
RELAYED_DELTA = frozenset(("role", "content", "refusal", "tool_calls", "function_call", "audio"))
"""The fields of a delta (or a completion's message) relayed: its text, and the content
that blocks an answer (a refusal, a tool call, audio), which observe mode still shows with
the verdict."""
RELAYED_LOGPROBS = frozenset(("content", "refusal"))
"""The fields of a choice's ``logprobs`` relayed (when the client asked for them)."""


def drop_unlisted(record: dict[str, Any], keys: frozenset[str]) -> None:
    """Delete from ``record``, in place, every field not in ``keys`` (an allowlist above)."""
    for key in [key for key in record if key not in keys]:
        del record[key]


def unrelayed(names: Any, keys: frozenset[str]) -> list[str]:
    """The names among ``names`` (a record's fields) that are not relayed."""
    return [name for name in names if name not in keys]
