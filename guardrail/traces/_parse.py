"""The strict parser of trace objects (format: :mod:`guardrail.traces._read`).

:func:`parse_trace` turns one decoded object into a :class:`Trace`, whose
per-token data are read-only numpy arrays (the lines of a file or of in-memory
text are read in :mod:`guardrail.traces._read`). The strings that repeat from
trace to trace (token texts, ``dataset``, ``model``) are interned
(:func:`sys.intern`): one copy of each, however many traces are held.
Anything that does not follow the format raises
:class:`~guardrail._errors.TraceFormatError` naming the source, the 1-based
line and the field path (e.g. ``tokens[3].logprob``).

What an API stream does not carry may be ``null`` or left out (a trace that
``liftguard serve --record`` wrote): ``vocab_size``, and per token ``id``,
``entropy``, ``logz`` (also ``{}``), ``prompt_free_logprob`` and the ids of
the ``top`` pairs. Each is given for every token of a trace or for none; the
trace names the absent ones in :attr:`~guardrail.Trace.missing`. Everything
else is as strict as for the documented files.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._errors import TraceFormatError
from .._trace_format import (
    _NULLABLE_TOKEN_KEYS,
    _NULLABLE_TOP_LEVEL_KEYS,
    _TOKEN_KEYS,
    _TOP_LEVEL_KEYS,
    DEFAULT_LOGZ_TEMPERATURES,
    MISSING_ID,
    FloatArray,
    IntArray,
    Trace,
)
from ._checks import (
    _ENTROPY_TOL,
    _INTEGER,
    _NUMBER,
    _STRING,
    _check_logprobs,
    _check_types,
    _column,
    _Ctx,
    _fmt_number,
    _json_type,
    _parse_temperature,
    _raise_first,
    _require_int,
    _require_str,
)

__all__ = ["parse_trace"]

# The keys every token must have (the others may be null or absent: an API recording).
_REQUIRED_TOKEN_KEYS = tuple(k for k in _TOKEN_KEYS if k not in _NULLABLE_TOKEN_KEYS)


# --------------------------------------------------------------------------- #
# Parsing one object
# --------------------------------------------------------------------------- #


def _optional_column(
    tokens: list[dict[str, Any]], key: str, allowed: frozenset[type], ctx: _Ctx
) -> list[Any] | None:
    """``[tok[key] for tok in tokens]``, or None when no token gives ``key`` (null or left
    out, as in an API recording): a trace gives it for every token or for none."""
    col = [tok.get(key) for tok in tokens]
    if not col:
        return col
    given = [v is not None for v in col]
    if not any(given):
        return None
    if not all(given):
        i, j = given.index(False), given.index(True)
        raise ctx.error(
            f"tokens[{i}].{key}",
            f"null or absent, but tokens[{j}].{key} is given; "
            "a trace gives it for every token or for none",
        )
    _check_types(col, allowed, lambda i: f"tokens[{i}].{key}", ctx)
    return col


def _check_ids(ids: IntArray, vocab_size: int | None, path: Any, ctx: _Ctx) -> None:
    """Raise for the first id outside ``[0, vocab_size)`` (``>= 0`` if the size is unknown)."""
    bad = (ids < 0) if vocab_size is None else (ids < 0) | (ids >= vocab_size)
    where = "is negative" if vocab_size is None else f"outside [0, vocab_size={vocab_size})"
    _raise_first(bad, ids, path, lambda v: f"token id {int(v)} {where}", ctx)


def _id_array(values: list[Any], vocab_size: int | None, path: Any, ctx: _Ctx) -> IntArray:
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        f = next(f for f, v in enumerate(values) if not -(2**63) <= v < 2**63)
        where = "is out of range" if vocab_size is None else f"outside [0, {vocab_size=})"
        raise ctx.error(path((f,)), f"token id {values[f]} {where}") from None


def _parse_tokens(
    tokens: list[Any], vocab_size: int | None, top_k: int, ctx: _Ctx
) -> tuple[
    IntArray,
    tuple[str, ...],
    FloatArray,
    IntArray,
    FloatArray,
    FloatArray,
    dict[float, FloatArray],
    FloatArray,
    set[str],
]:
    n = len(tokens)
    missing: set[str] = set()

    # Structure: every token an object with every key that an API stream gives.
    for i, tok in enumerate(tokens):
        if type(tok) is not dict:
            raise ctx.error(f"tokens[{i}]", f"expected an object, got {_json_type(tok)}")
        if len(tok) < len(_REQUIRED_TOKEN_KEYS) or not all(k in tok for k in _REQUIRED_TOKEN_KEYS):
            missing_key = next(k for k in _REQUIRED_TOKEN_KEYS if k not in tok)
            raise ctx.error(f"tokens[{i}]", f"missing required key {missing_key!r}")

    ids = _optional_column(tokens, "id", _INTEGER, ctx)
    texts = [sys.intern(text) for text in _column(tokens, "text", _STRING, ctx)]
    lps = _column(tokens, "logprob", _NUMBER, ctx)
    ents = _optional_column(tokens, "entropy", _NUMBER, ctx)
    pfls = _optional_column(tokens, "prompt_free_logprob", _NUMBER, ctx)

    if ids is None:
        token_ids = np.full(n, MISSING_ID, dtype=np.int64)
        missing.add("token_ids")
    else:
        token_ids = _id_array(ids, vocab_size, lambda ix: f"tokens[{ix[0]}].id", ctx)
        _check_ids(token_ids, vocab_size, lambda ix: f"tokens[{ix[0]}].id", ctx)
    logprobs = np.array(lps, dtype=np.float64)
    _check_logprobs(logprobs, lambda ix: f"tokens[{ix[0]}].logprob", ctx)
    entropy = np.full(n, np.nan) if ents is None else np.array(ents, dtype=np.float64)
    if ents is None:
        missing.add("entropy")
    else:
        _raise_first(
            ~(np.isfinite(entropy) & (entropy >= -_ENTROPY_TOL)),
            entropy,
            lambda ix: f"tokens[{ix[0]}].entropy",
            lambda x: f"expected a finite entropy >= 0, got {_fmt_number(x)}",
            ctx,
        )
    pf_logprobs = np.full(n, np.nan) if pfls is None else np.array(pfls, dtype=np.float64)
    if pfls is None:
        missing.add("prompt_free_logprobs")
    else:
        _check_logprobs(pf_logprobs, lambda ix: f"tokens[{ix[0]}].prompt_free_logprob", ctx)

    # Top alternatives: a (T, k) block of [id, logprob] pairs (ids null in an API recording).
    tops = [tok["top"] for tok in tokens]
    for i, top in enumerate(tops):
        if type(top) is not list:
            raise ctx.error(f"tokens[{i}].top", f"expected an array, got {_json_type(top)}")
    k = len(tops[0]) if n else top_k
    for i, top in enumerate(tops):
        if len(top) > top_k:
            raise ctx.error(f"tokens[{i}].top", f"has {len(top)} entries, more than top_k={top_k}")
        if len(top) != k:
            raise ctx.error(
                f"tokens[{i}].top",
                f"has {len(top)} entries but tokens[0].top has {k}; "
                "every token must list the same number of alternatives",
            )
    pairs = [p for top in tops for p in top]
    if set(map(type, pairs)) - {list} or set(map(len, pairs)) - {2}:
        for i, top in enumerate(tops):
            for j, p in enumerate(top):
                if type(p) is not list or len(p) != 2:
                    raise ctx.error(
                        f"tokens[{i}].top[{j}]",
                        f"expected a [token_id, logprob] pair, got {json.dumps(p)[:60]}",
                    )
    flat_ids = [p[0] for p in pairs]
    flat_lps = [p[1] for p in pairs]

    def top_path(ix: tuple[int, ...]) -> str:
        return f"tokens[{ix[0] // k}].top[{ix[0] % k}][0]"

    if pairs and all(v is None for v in flat_ids):
        top_ids = np.full((n, k), MISSING_ID, dtype=np.int64)
        missing.add("top_ids")
    else:
        if None in flat_ids and any(v is not None for v in flat_ids):
            f, g = flat_ids.index(None), next(g for g, v in enumerate(flat_ids) if v is not None)
            raise ctx.error(
                top_path((f,)),
                f"null, but {top_path((g,))} is an id; a trace gives the ids of every "
                "alternative or of none",
            )
        _check_types(flat_ids, _INTEGER, lambda f: top_path((f,)), ctx)
        top_ids = _id_array(flat_ids, vocab_size, top_path, ctx).reshape(n, k)
        _check_ids(top_ids, vocab_size, lambda ix: f"tokens[{ix[0]}].top[{ix[1]}][0]", ctx)
    _check_types(flat_lps, _NUMBER, lambda f: f"tokens[{f // k}].top[{f % k}][1]", ctx)
    top_logprobs = np.array(flat_lps, dtype=np.float64).reshape(n, k)
    _check_logprobs(top_logprobs, lambda ix: f"tokens[{ix[0]}].top[{ix[1]}][1]", ctx)
    if k > 1:
        rising = top_logprobs[:, 1:] > top_logprobs[:, :-1]
        if rising.any():
            i, j = (int(x) for x in np.argwhere(rising)[0])
            raise ctx.error(
                f"tokens[{i}].top",
                "alternatives are not in non-increasing order of log-probability: "
                f"top[{j + 1}] has {_fmt_number(top_logprobs[i, j + 1])} after "
                f"top[{j}] with {_fmt_number(top_logprobs[i, j])}",
            )

    # logz: the same temperatures at every token; none at all ({} or null) in an API recording.
    logz: dict[float, FloatArray] = {}
    if n == 0:
        for t in DEFAULT_LOGZ_TEMPERATURES:
            logz[t] = np.zeros(0, dtype=np.float64)
    else:
        lzs = [{} if tok.get("logz") is None else tok["logz"] for tok in tokens]
        for i, lz in enumerate(lzs):
            if type(lz) is not dict:
                raise ctx.error(f"tokens[{i}].logz", f"expected an object, got {_json_type(lz)}")
        keys = list(lzs[0])
        temps = [_parse_temperature(key, "tokens[0].logz", ctx) for key in keys]
        if len(set(temps)) != len(temps):
            raise ctx.error("tokens[0].logz", f"duplicate temperatures in keys {keys}")
        first = lzs[0].keys()
        for i, lz in enumerate(lzs):
            if lz.keys() != first:
                raise ctx.error(
                    f"tokens[{i}].logz",
                    f"temperature keys {list(lz)} differ from those of tokens[0] {keys}",
                )
        if not keys:
            missing.add("logz")
        for key, t in zip(keys, temps, strict=True):
            col = [lz[key] for lz in lzs]
            _check_types(col, _NUMBER, lambda i, key=key: f"tokens[{i}].logz.{key}", ctx)
            arr = np.array(col, dtype=np.float64)
            _raise_first(
                ~np.isfinite(arr),
                arr,
                lambda ix, key=key: f"tokens[{ix[0]}].logz.{key}",
                lambda x: f"expected a finite log-normalizer, got {_fmt_number(x)}",
                ctx,
            )
            logz[t] = arr

    for a in (token_ids, logprobs, top_ids, top_logprobs, entropy, pf_logprobs, *logz.values()):
        a.flags.writeable = False
    return (
        token_ids, tuple(texts), logprobs, top_ids, top_logprobs, entropy, logz, pf_logprobs,
        missing,
    )  # fmt: skip


def parse_trace(
    obj: Mapping[str, Any],
    *,
    source: str = "<traces>",
    line: int | None = None,
    require_label: bool = True,
) -> Trace:
    """Validate one decoded JSON object and return it as a :class:`Trace`.

    ``source`` and ``line`` (1-based) only serve to locate errors. With
    ``require_label=False`` a missing ``correct`` key gives ``correct=None``
    (a present one must still be a boolean). Unknown extra keys are ignored.

    Raises :class:`~guardrail._errors.TraceFormatError` naming the offending
    field path, e.g. ``tokens[3].logprob``.
    """
    ctx = _Ctx(source, line)
    if not isinstance(obj, Mapping):
        raise TraceFormatError(
            f"expected a JSON object, got {_json_type(obj)}", source=source, line=line
        )
    for key in _TOP_LEVEL_KEYS:
        optional = key in _NULLABLE_TOP_LEVEL_KEYS or (key == "correct" and not require_label)
        if key not in obj and not optional:
            raise TraceFormatError(f"missing required key {key!r}", source=source, line=line)

    trace_id = _require_str(obj, "id", ctx)
    dataset = sys.intern(_require_str(obj, "dataset", ctx))
    model = sys.intern(_require_str(obj, "model", ctx))
    question = _require_str(obj, "question", ctx)
    references = obj["references"]
    if type(references) is not list:
        raise ctx.error("references", f"expected an array, got {_json_type(references)}")
    for i, ref in enumerate(references):
        if type(ref) is not str:
            raise ctx.error(f"references[{i}]", f"expected a string, got {_json_type(ref)}")
    prompt = _require_str(obj, "prompt", ctx)
    answer = _require_str(obj, "answer", ctx)
    correct: bool | None = obj.get("correct")
    if "correct" in obj and type(correct) is not bool:
        raise ctx.error("correct", f"expected a boolean, got {_json_type(correct)}")
    vocab_size = (
        None if obj.get("vocab_size") is None else _require_int(obj, "vocab_size", ctx, minimum=1)
    )
    top_k = _require_int(obj, "top_k", ctx, minimum=0)
    tokens = obj["tokens"]
    if type(tokens) is not list:
        raise ctx.error("tokens", f"expected an array, got {_json_type(tokens)}")

    token_ids, texts, logprobs, top_ids, top_logprobs, entropy, logz, pf_logprobs, missing = (
        _parse_tokens(tokens, vocab_size, top_k, ctx)
    )
    if vocab_size is None:
        missing.add("vocab_size")
    return Trace(
        id=trace_id,
        dataset=dataset,
        model=model,
        question=question,
        references=tuple(references),
        prompt=prompt,
        answer=answer,
        correct=correct,
        vocab_size=0 if vocab_size is None else vocab_size,
        top_k=top_k,
        token_ids=token_ids,
        token_texts=texts,
        logprobs=logprobs,
        top_ids=top_ids,
        top_logprobs=top_logprobs,
        entropy=entropy,
        logz=logz,
        prompt_free_logprobs=pf_logprobs,
        missing=frozenset(missing),
    )
