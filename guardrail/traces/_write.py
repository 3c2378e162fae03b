"""The one writer of trace lines (format: :mod:`guardrail.traces._read`).

Every trace line the project writes comes from here: ``liftguard traces
generate`` (:func:`dump_trace_line` of a :class:`Trace`), the proxy's recorder
(:func:`trace_line` of what an API stream carried) and ``liftguard traces
label`` (:func:`label_line` of a line read back). This module is the one place
that knows

- the documented key order (taken from the parser's own tables in
  :mod:`guardrail.traces._format`), and where keys the format does not name go:
  after the documented ones at the top level, right after ``top`` in a token
  (companions of the alternatives, such as a recording's ``top_text``);
- the null conventions of what a trace lacks: ``null``, and ``{}`` for ``logz``;
- the temperature keys of ``logz``: ``repr(float(T))`` (``"1.5"``, ``"2.0"``);
- the place of the label ``correct``: right after ``answer``, and no key at
  all for an unlabelled trace;
- the JSON encoding: UTF-8 text not escaped (``ensure_ascii=False``), ``", "``
  and ``": "`` separators, no NaN or infinity in a new line.

It returns strings; the callers open the files.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .._trace_format import _TOKEN_KEYS, _TOP_LEVEL_KEYS, Trace

__all__ = [
    "dump_trace_line",
    "label_line",
    "token_object",
    "trace_line",
    "trace_object",
    "trace_to_dict",
]

_LABEL = "correct"
# The key the label follows, and the token key that extra token keys follow.
_LABEL_AFTER = _TOP_LEVEL_KEYS[_TOP_LEVEL_KEYS.index(_LABEL) - 1]
_TOKEN_EXTRAS_AFTER = "top"
_TOKEN_HEAD = _TOKEN_KEYS[: _TOKEN_KEYS.index(_TOKEN_EXTRAS_AFTER) + 1]


def _encode(
    obj: Mapping[str, Any], *, allow_nan: bool = False, default: Callable[[Any], Any] | None = None
) -> str:
    return json.dumps(obj, ensure_ascii=False, allow_nan=allow_nan, default=default)


def _temperature_key(t: float | str) -> str:
    return repr(float(t))


# --------------------------------------------------------------------------- #
# New lines from the documented fields
# --------------------------------------------------------------------------- #


def token_object(
    text: str,
    logprob: float | None,
    top: Iterable[tuple[int | None, float]],
    *,
    id: int | None = None,
    entropy: float | None = None,
    logz: Mapping[float, float] | None = None,
    prompt_free_logprob: float | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One element of a trace's ``tokens``, keys in the documented order.

    ``top``: the ``(token id, logprob)`` pairs of the alternatives, most likely
    first (ids ``None`` where the source does not give them). What is not given
    is written as ``null`` (``logz`` as ``{}``: no temperature); ``logz`` maps a
    temperature to ``log Z_T``. ``extra`` keys (not in the format) follow ``top``.
    """
    head = (id, text, logprob, [[i, lp] for i, lp in top])
    out: dict[str, Any] = dict(zip(_TOKEN_HEAD, head, strict=True))
    if extra:
        out.update(extra)
    out["entropy"] = entropy
    out["logz"] = {} if logz is None else {_temperature_key(t): v for t, v in logz.items()}
    out["prompt_free_logprob"] = prompt_free_logprob
    return out


def trace_object(
    *,
    id: str,
    dataset: str,
    model: str,
    question: str,
    references: Iterable[str],
    prompt: str,
    answer: str,
    correct: bool | None,
    vocab_size: int | None,
    top_k: int,
    tokens: Iterable[Mapping[str, Any]],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The documented object of one trace, keys in the documented order.

    ``tokens``: :func:`token_object` results. ``correct=None`` (unlabelled)
    leaves the ``correct`` key out; ``vocab_size=None`` is written as ``null``.
    ``extra`` keys (not in the format) follow the documented ones.
    """
    fields = {
        "id": id,
        "dataset": dataset,
        "model": model,
        "question": question,
        "references": list(references),
        "prompt": prompt,
        "answer": answer,
        _LABEL: correct,
        "vocab_size": vocab_size,
        "top_k": top_k,
        "tokens": list(tokens),
    }
    out = {key: fields[key] for key in _TOP_LEVEL_KEYS if key != _LABEL or correct is not None}
    if extra:
        out.update(extra)
    return out


def trace_line(obj: Mapping[str, Any]) -> str:
    """One JSONL line (no newline) of a new trace object (:func:`trace_object`).

    For writers of what others sent (the proxy's recorder): a value that JSON
    cannot hold (in an ``extra`` key, say) is written as its ``str()`` instead
    of failing the line; NaN and infinity still raise ``ValueError``, as in
    every new line.
    """
    return _encode(obj, default=str)


# --------------------------------------------------------------------------- #
# A Trace
# --------------------------------------------------------------------------- #


def trace_to_dict(trace: Trace) -> dict[str, Any]:
    """The documented JSON object of ``trace``, keys in the documented order.

    Temperature keys of ``logz`` are written as ``repr(float)`` (``"1.5"``,
    ``"2.0"``). A trace with ``correct=None`` is written without the
    ``correct`` key. Fields the trace lacks (:attr:`Trace.missing`) are written as
    ``null`` (``logz`` as ``{}``).
    """
    n, lacks = trace.n_tokens, trace.missing
    none: list[Any] = [None] * n
    token_ids = none if "token_ids" in lacks else trace.token_ids.tolist()
    logprobs = trace.logprobs.tolist()
    top_ids = trace.top_ids.tolist()
    if "top_ids" in lacks:
        top_ids = [[None] * len(row) for row in top_ids]
    top_lps = trace.top_logprobs.tolist()
    entropy = none if "entropy" in lacks else trace.entropy.tolist()
    pfl = none if "prompt_free_logprobs" in lacks else trace.prompt_free_logprobs.tolist()
    logz_cols = [(t, v.tolist()) for t, v in trace.logz.items()]
    tokens = [
        token_object(
            trace.token_texts[i],
            logprobs[i],
            zip(top_ids[i], top_lps[i], strict=True),
            id=token_ids[i],
            entropy=entropy[i],
            logz={t: col[i] for t, col in logz_cols},
            prompt_free_logprob=pfl[i],
        )
        for i in range(n)
    ]
    return trace_object(
        id=trace.id,
        dataset=trace.dataset,
        model=trace.model,
        question=trace.question,
        references=trace.references,
        prompt=trace.prompt,
        answer=trace.answer,
        correct=trace.correct,
        vocab_size=None if "vocab_size" in lacks else trace.vocab_size,
        top_k=trace.top_k,
        tokens=tokens,
    )


def dump_trace_line(trace: Trace) -> str:
    """``trace`` as one JSONL line (no trailing newline), UTF-8 text not escaped.

    Uses the same layout as the shared trace files, so a line read from them
    is reproduced byte for byte.
    """
    return _encode(trace_to_dict(trace))


# --------------------------------------------------------------------------- #
# A line read back, labelled
# --------------------------------------------------------------------------- #


def label_line(obj: Mapping[str, Any], correct: bool | None) -> str:
    """A decoded trace line written back with the label ``correct``.

    The label goes right after ``answer`` (at the end if there is no
    ``answer``), moved there if the line had one elsewhere; every other key
    keeps its place and value, as read. ``correct=None`` writes the line back
    as read (a line left unlabelled). Values written as read include NaN and
    infinity in keys the format does not check (the decoder accepts them).
    """
    if correct is None:
        return _encode(obj, allow_nan=True)
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if key == _LABEL:
            continue
        out[key] = value
        if key == _LABEL_AFTER:
            out[_LABEL] = correct
    out.setdefault(_LABEL, correct)
    return _encode(out, allow_nan=True)
