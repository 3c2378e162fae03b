"""The strict parser of trace objects and JSONL text (format: :mod:`guardrail._traces`).

:func:`parse_trace` turns one decoded object into a :class:`Trace`, whose
per-token data are read-only numpy arrays; :func:`parse_trace_lines` parses
in-memory text line by line. Anything that does not follow the format raises
:class:`~guardrail._errors.TraceFormatError` naming the source, the 1-based
line and the field path (e.g. ``tokens[3].logprob``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from ._errors import TraceFormatError
from ._trace_checks import (
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
    _require_int,
    _require_str,
)
from ._trace_format import (
    _TOKEN_KEYS,
    _TOP_LEVEL_KEYS,
    DEFAULT_LOGZ_TEMPERATURES,
    FloatArray,
    IntArray,
    Trace,
)

__all__ = ["parse_trace", "parse_trace_lines"]

# A byte-order mark some editors put at the start of a UTF-8 file; it is skipped.
_BOM = "\ufeff"


# --------------------------------------------------------------------------- #
# Parsing one object
# --------------------------------------------------------------------------- #


def _parse_tokens(
    tokens: list[Any], vocab_size: int, top_k: int, ctx: _Ctx
) -> tuple[
    IntArray,
    tuple[str, ...],
    FloatArray,
    IntArray,
    FloatArray,
    FloatArray,
    dict[float, FloatArray],
    FloatArray,
]:
    n = len(tokens)

    # Structure: every token an object with every key.
    for i, tok in enumerate(tokens):
        if type(tok) is not dict:
            raise ctx.error(f"tokens[{i}]", f"expected an object, got {_json_type(tok)}")
        if len(tok) < len(_TOKEN_KEYS) or not all(k in tok for k in _TOKEN_KEYS):
            missing = next(k for k in _TOKEN_KEYS if k not in tok)
            raise ctx.error(f"tokens[{i}]", f"missing required key {missing!r}")

    ids = _column(tokens, "id", _INTEGER, ctx)
    texts = _column(tokens, "text", _STRING, ctx)
    lps = _column(tokens, "logprob", _NUMBER, ctx)
    ents = _column(tokens, "entropy", _NUMBER, ctx)
    pfls = _column(tokens, "prompt_free_logprob", _NUMBER, ctx)

    try:
        token_ids = np.array(ids, dtype=np.int64)
    except OverflowError:
        token_ids = np.full(n, -1, dtype=np.int64)  # reported as out of range below
        for i, v in enumerate(ids):
            if not -(2**63) <= v < 2**63:
                raise ctx.error(
                    f"tokens[{i}].id", f"token id {v} outside [0, vocab_size={vocab_size})"
                ) from None
    bad = (token_ids < 0) | (token_ids >= vocab_size)
    if bad.any():
        i = int(np.argmax(bad))
        raise ctx.error(
            f"tokens[{i}].id",
            f"token id {int(token_ids[i])} outside [0, vocab_size={vocab_size})",
        )
    logprobs = np.array(lps, dtype=np.float64)
    _check_logprobs(logprobs, lambda ix: f"tokens[{ix[0]}].logprob", ctx)
    entropy = np.array(ents, dtype=np.float64)
    bad = ~(np.isfinite(entropy) & (entropy >= -_ENTROPY_TOL))
    if bad.any():
        i = int(np.argmax(bad))
        raise ctx.error(
            f"tokens[{i}].entropy",
            f"expected a finite entropy >= 0, got {_fmt_number(entropy[i])}",
        )
    pf_logprobs = np.array(pfls, dtype=np.float64)
    _check_logprobs(pf_logprobs, lambda ix: f"tokens[{ix[0]}].prompt_free_logprob", ctx)

    # Top alternatives: a (T, k) block of [id, logprob] pairs.
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
    _check_types(flat_ids, _INTEGER, lambda f: f"tokens[{f // k}].top[{f % k}][0]", ctx)
    _check_types(flat_lps, _NUMBER, lambda f: f"tokens[{f // k}].top[{f % k}][1]", ctx)
    try:
        top_ids = np.array(flat_ids, dtype=np.int64).reshape(n, k)
    except OverflowError:
        f = next(f for f, v in enumerate(flat_ids) if not -(2**63) <= v < 2**63)
        raise ctx.error(
            f"tokens[{f // k}].top[{f % k}][0]",
            f"token id {flat_ids[f]} outside [0, vocab_size={vocab_size})",
        ) from None
    bad = (top_ids < 0) | (top_ids >= vocab_size)
    if bad.any():
        i, j = (int(x) for x in np.argwhere(bad)[0])
        raise ctx.error(
            f"tokens[{i}].top[{j}][0]",
            f"token id {int(top_ids[i, j])} outside [0, vocab_size={vocab_size})",
        )
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

    # logz: the same temperatures at every token.
    logz: dict[float, FloatArray] = {}
    if n == 0:
        for t in DEFAULT_LOGZ_TEMPERATURES:
            logz[t] = np.zeros(0, dtype=np.float64)
    else:
        lzs = [tok["logz"] for tok in tokens]
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
        for key, t in zip(keys, temps, strict=True):
            col = [lz[key] for lz in lzs]
            _check_types(col, _NUMBER, lambda i, key=key: f"tokens[{i}].logz.{key}", ctx)
            arr = np.array(col, dtype=np.float64)
            bad = ~np.isfinite(arr)
            if bad.any():
                i = int(np.argmax(bad))
                raise ctx.error(
                    f"tokens[{i}].logz.{key}",
                    f"expected a finite log-normalizer, got {_fmt_number(arr[i])}",
                )
            logz[t] = arr

    for a in (token_ids, logprobs, top_ids, top_logprobs, entropy, pf_logprobs, *logz.values()):
        a.flags.writeable = False
    return token_ids, tuple(texts), logprobs, top_ids, top_logprobs, entropy, logz, pf_logprobs


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
        if key not in obj and not (key == "correct" and not require_label):
            raise TraceFormatError(f"missing required key {key!r}", source=source, line=line)

    trace_id = _require_str(obj, "id", ctx)
    dataset = _require_str(obj, "dataset", ctx)
    model = _require_str(obj, "model", ctx)
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
    vocab_size = _require_int(obj, "vocab_size", ctx, minimum=1)
    top_k = _require_int(obj, "top_k", ctx, minimum=0)
    tokens = obj["tokens"]
    if type(tokens) is not list:
        raise ctx.error("tokens", f"expected an array, got {_json_type(tokens)}")

    token_ids, texts, logprobs, top_ids, top_logprobs, entropy, logz, pf_logprobs = _parse_tokens(
        tokens, vocab_size, top_k, ctx
    )
    return Trace(
        id=trace_id,
        dataset=dataset,
        model=model,
        question=question,
        references=tuple(references),
        prompt=prompt,
        answer=answer,
        correct=correct,
        vocab_size=vocab_size,
        top_k=top_k,
        token_ids=token_ids,
        token_texts=texts,
        logprobs=logprobs,
        top_ids=top_ids,
        top_logprobs=top_logprobs,
        entropy=entropy,
        logz=logz,
        prompt_free_logprobs=pf_logprobs,
    )


# --------------------------------------------------------------------------- #
# Reading lines
# --------------------------------------------------------------------------- #


def _check_limit(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be None or a non-negative integer, got {limit!r}")


def parse_trace_lines(
    lines: Iterable[str],
    *,
    source: str = "<traces>",
    limit: int | None = None,
    require_label: bool = True,
) -> Iterator[Trace]:
    """Parse JSONL text, one trace per line, lazily.

    ``lines`` is an iterable of lines (trailing newlines allowed); a single
    ``str`` is taken as the whole text and split on ``"\\n"``. A UTF-8
    byte-order mark at the start of the first line is skipped. Blank lines are
    skipped but still counted, so error line numbers (1-based) match the
    source. At most ``limit`` traces are produced. Invalid arguments raise
    at once; format errors are raised when the offending line is reached.
    """
    _check_limit(limit)
    if isinstance(lines, str):
        lines = lines.split("\n")
    return _parse_lines(lines, source, limit, require_label)


def _parse_lines(
    lines: Iterable[str], source: str, limit: int | None, require_label: bool
) -> Iterator[Trace]:
    if limit == 0:
        return
    count = 0
    for lineno, text in enumerate(lines, start=1):
        if lineno == 1 and text.startswith(_BOM):
            text = text[1:]
        if not text or text.isspace():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(
                f"invalid JSON: {exc.msg} (column {exc.colno})", source=source, line=lineno
            ) from None
        except RecursionError:
            raise TraceFormatError(
                "invalid JSON: nested too deeply", source=source, line=lineno
            ) from None
        yield parse_trace(obj, source=source, line=lineno, require_label=require_label)
        count += 1
        if limit is not None and count >= limit:
            return
