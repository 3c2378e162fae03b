"""One recorded answer as a trace line (``--record``; the files: :mod:`._recording`).

The line is the project's trace format (``guardrail/traces/_read.py``) for what an
API stream carries, without a label, plus what the request was, written by the
format's one writer (:mod:`guardrail.traces`: key order, nulls, encoding):

- ``id`` (the request id), ``dataset``, ``model`` (the certificate's model id),
  ``question`` (the last user message), ``references`` (``[]``), ``prompt``
  (``""``: the server applies its own template; see ``messages``), ``answer``,
  ``vocab_size``, ``top_k``, ``tokens``;
- each token: ``text``, ``logprob``, ``top`` (``[null, logprob]`` pairs, the same
  number for every token, most likely first) with ``top_text`` (their texts),
  ``bytes``; ``id``, ``entropy`` and ``prompt_free_logprob`` are ``null`` and
  ``logz`` is ``{}`` (an API stream does not carry them);
- ``messages`` and ``request`` (the settings sent upstream), ``finish_reason``,
  ``complete`` (the upstream finished the answer and it was read to its end; a
  blocked or cut-off answer is a prefix), ``verdict`` (the ``liftguard`` field),
  ``created``.

``guardrail.read_traces(path, require_label=False)`` reads these lines (the extra
keys are ignored; ``Trace.missing`` names what the stream did not carry), and
``liftguard traces label`` adds the label that ``calibrate``, ``fit`` and ``eval``
need (with ``--vocab-size N`` when ``vocab_size`` is null).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from guardrail import ConfigError
from guardrail.traces._write import token_object, trace_line, trace_object

__all__ = ["AnswerRecord", "check_dataset_name", "record_line"]


@dataclass
class AnswerRecord:
    """What :func:`record_line` needs of one answer (built on the request path, cheaply)."""

    request_id: str
    model_id: str
    vocab_size: int | None
    top_k: int
    messages: list[Any]
    settings: dict[str, Any]
    text: list[str]
    entries: list[Any]
    finish_reason: str | None
    complete: bool
    verdict: dict[str, Any]
    created: float = field(default_factory=time.time)


def _question(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):  # content parts: the text ones
                return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _alternatives(entry: dict[str, Any]) -> list[tuple[str, float]]:
    out = []
    for alt in entry.get("top_logprobs") or ():
        if isinstance(alt, dict) and isinstance(alt.get("logprob"), int | float):
            out.append((str(alt.get("token", "")), float(alt["logprob"])))
    out.sort(key=lambda pair: -pair[1])
    return out


def record_line(record: AnswerRecord, dataset: str) -> str:
    """One JSONL line (no newline) for ``record`` (see the module docstring)."""
    entries = [e for e in record.entries if isinstance(e, dict)]
    alts = [_alternatives(e) for e in entries]
    k = min((len(a) for a in alts), default=0)
    tokens = []
    for entry, alt in zip(entries, alts, strict=True):
        lp, raw = entry.get("logprob"), entry.get("bytes")
        tokens.append(
            token_object(
                str(entry.get("token", "")),
                float(lp) if isinstance(lp, int | float) else None,
                [(None, v) for _, v in alt[:k]],
                extra={
                    "top_text": [t for t, _ in alt[:k]],
                    "bytes": raw if isinstance(raw, list) else None,
                },
            )
        )
    extra = {
        "messages": record.messages,
        "request": record.settings,
        "finish_reason": record.finish_reason,
        "complete": record.complete,
        "verdict": record.verdict,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created)),
    }
    return trace_line(
        trace_object(
            id=record.request_id,
            dataset=dataset,
            model=record.model_id,
            question=_question(record.messages),
            references=[],
            prompt="",
            answer="".join(record.text).strip(),
            correct=None,
            vocab_size=record.vocab_size,
            top_k=k,
            tokens=tokens,
            extra=extra,
        )
    )


_DATASET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_dataset_name(name: object, field: str = "record_dataset") -> str:
    """``name`` if it is a simple dataset name (it starts the recording files' names, so
    it must keep them inside the recording directory): 1 to 64 letters, digits, ``_``,
    ``.`` and ``-``, starting with a letter or digit, without ``..``; else a ConfigError
    naming ``field``."""
    if not isinstance(name, str) or not _DATASET_NAME.fullmatch(name) or ".." in name:
        raise ConfigError(
            f"{field} must be a simple name (1 to 64 letters, digits, '_', '.' or '-', "
            f"starting with a letter or digit, no '..'), got {name!r}"
        )
    return name
