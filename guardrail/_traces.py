"""Validating reader and writer for JSONL answer traces.

A trace file holds one JSON object per line (UTF-8), one generated answer per
line, with the full-vocabulary log-probability information of every answer
token. The format (documented with the shared trace data) is::

    {"id": str, "dataset": str, "model": str, "question": str,
     "references": [str, ...], "prompt": str, "answer": str, "correct": bool,
     "vocab_size": int, "top_k": int,
     "tokens": [{"id": int, "text": str, "logprob": float,
                 "top": [[int, float], ...], "entropy": float,
                 "logz": {"1.5": float, "2.0": float},
                 "prompt_free_logprob": float}, ...]}

:func:`parse_trace` turns one decoded object into a :class:`Trace`, whose
per-token data are read-only numpy arrays; :func:`iter_traces`,
:func:`read_traces` and :func:`parse_trace_lines` read whole files or
in-memory text. Anything that does not follow the format raises
:class:`~guardrail._errors.TraceFormatError` naming the source, the 1-based
line and the field path (e.g. ``tokens[3].logprob``).
:func:`trace_to_dict` and :func:`dump_trace_line` write the documented object
back, so that read -> write -> read round-trips exactly.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._errors import TraceFormatError

__all__ = [
    "CENSORED_LOGPROB",
    "DEFAULT_LOGZ_TEMPERATURES",
    "Trace",
    "dump_trace_line",
    "iter_traces",
    "parse_trace",
    "parse_trace_lines",
    "read_traces",
    "trace_to_dict",
]

#: Sentinel that the OpenAI API puts in place of a log-probability it does not
#: report. It is a finite number, so it must be rejected explicitly.
CENSORED_LOGPROB = -9999.0

#: Temperatures of ``logz`` given to a trace with no tokens (where they cannot be
#: read from the data): those of the documented format.
DEFAULT_LOGZ_TEMPERATURES: tuple[float, ...] = (1.5, 2.0)

# A byte-order mark some editors put at the start of a UTF-8 file; it is skipped.
_BOM = "\ufeff"

# Log-probabilities are stored rounded to 6 decimals, so allow this much above 0.
_LOGPROB_TOL = 1e-6
# Entropies likewise may round to a tiny negative number.
_ENTROPY_TOL = 1e-6

_TOP_LEVEL_KEYS = (
    "id",
    "dataset",
    "model",
    "question",
    "references",
    "prompt",
    "answer",
    "correct",
    "vocab_size",
    "top_k",
    "tokens",
)
_TOKEN_KEYS = ("id", "text", "logprob", "top", "entropy", "logz", "prompt_free_logprob")

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


# --------------------------------------------------------------------------- #
# The Trace record
# --------------------------------------------------------------------------- #


def _frozen(value: Any, dtype: type[np.generic], ndim: int, name: str) -> Any:
    """``value`` as a read-only array of ``dtype`` with ``ndim`` dimensions.

    An array that is already read-only with the right dtype is kept as is;
    anything else is copied, so that freezing never touches a caller's array.
    """
    if isinstance(value, np.ndarray) and value.dtype == dtype and not value.flags.writeable:
        arr = value
    else:
        arr = np.array(value, dtype=dtype)
        arr.flags.writeable = False
    if arr.ndim != ndim:
        raise TraceFormatError(
            f"{name}: expected a {ndim}-dimensional array, got shape {arr.shape}",
            source="Trace",
        )
    return arr


@dataclass(frozen=True, eq=False, repr=False)
class Trace:
    """One generated answer with per-token log-probability information.

    The per-token fields are read-only numpy arrays of length ``T`` (the
    number of answer tokens, possibly 0): ``token_ids`` (int64), ``logprobs``,
    ``entropy`` and ``prompt_free_logprobs`` (float64, shape ``(T,)``),
    ``top_ids`` (int64) and ``top_logprobs`` (float64) of shape ``(T, k)``
    with the ``k`` most likely tokens of each step in descending order, and
    ``logz``, a dict from temperature (float, e.g. ``1.5``) to the float64
    array of ``log Z_T`` per step. ``top_k`` is the declared number of
    alternatives; ``k = top_ids.shape[1]`` is at most ``top_k`` and equals it
    in the documented files. ``correct`` is ``None`` only for a trace read with
    ``require_label=False`` from a line that has no ``correct`` key.

    Equality is identity (``eq=False``); compare :func:`trace_to_dict` results
    to compare contents.
    """

    id: str
    dataset: str
    model: str
    question: str
    references: tuple[str, ...]
    prompt: str
    answer: str
    correct: bool | None
    vocab_size: int
    top_k: int
    token_ids: IntArray
    token_texts: tuple[str, ...]
    logprobs: FloatArray
    top_ids: IntArray
    top_logprobs: FloatArray
    entropy: FloatArray
    logz: dict[float, FloatArray]
    prompt_free_logprobs: FloatArray

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "references", tuple(self.references))
        put(self, "token_texts", tuple(self.token_texts))
        put(self, "token_ids", _frozen(self.token_ids, np.int64, 1, "token_ids"))
        put(self, "logprobs", _frozen(self.logprobs, np.float64, 1, "logprobs"))
        put(self, "top_ids", _frozen(self.top_ids, np.int64, 2, "top_ids"))
        put(self, "top_logprobs", _frozen(self.top_logprobs, np.float64, 2, "top_logprobs"))
        put(self, "entropy", _frozen(self.entropy, np.float64, 1, "entropy"))
        put(
            self,
            "prompt_free_logprobs",
            _frozen(self.prompt_free_logprobs, np.float64, 1, "prompt_free_logprobs"),
        )
        put(
            self,
            "logz",
            {
                float(t): _frozen(v, np.float64, 1, f"logz[{float(t)!r}]")
                for t, v in self.logz.items()
            },
        )
        n = self.token_ids.shape[0]
        lengths = {
            "token_texts": len(self.token_texts),
            "logprobs": self.logprobs.shape[0],
            "top_ids": self.top_ids.shape[0],
            "top_logprobs": self.top_logprobs.shape[0],
            "entropy": self.entropy.shape[0],
            "prompt_free_logprobs": self.prompt_free_logprobs.shape[0],
            **{f"logz[{t!r}]": v.shape[0] for t, v in self.logz.items()},
        }
        for name, length in lengths.items():
            if length != n:
                raise TraceFormatError(
                    f"{name}: has {length} entries but token_ids has {n}", source="Trace"
                )
        if self.top_logprobs.shape != self.top_ids.shape:
            raise TraceFormatError(
                f"top_logprobs: shape {self.top_logprobs.shape} differs from "
                f"top_ids shape {self.top_ids.shape}",
                source="Trace",
            )

    @property
    def n_tokens(self) -> int:
        """Number of answer tokens ``T``."""
        return int(self.token_ids.shape[0])

    def truncate_top(self, k: int) -> Trace:
        """A copy keeping only the ``k`` most likely alternatives of each step.

        ``top_k`` of the copy is ``min(top_k, k)``; asking for more
        alternatives than the trace holds keeps all of them.
        """
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be a non-negative integer, got {k!r}")
        return dataclasses.replace(
            self,
            top_k=min(self.top_k, k),
            top_ids=np.ascontiguousarray(self.top_ids[:, :k]),
            top_logprobs=np.ascontiguousarray(self.top_logprobs[:, :k]),
        )

    def __repr__(self) -> str:
        return (
            f"Trace(id={self.id!r}, model={self.model!r}, answer={self.answer!r}, "
            f"correct={self.correct!r}, n_tokens={self.n_tokens}, "
            f"top={self.top_ids.shape[1]})"
        )


# --------------------------------------------------------------------------- #
# Validation helpers
# --------------------------------------------------------------------------- #

_JSON_TYPE_NAMES: dict[type, str] = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


def _json_type(value: Any) -> str:
    return _JSON_TYPE_NAMES.get(type(value), type(value).__name__)


def _fmt_number(value: Any) -> str:
    x = float(value)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return repr(x)


class _Ctx:
    """Where the object being parsed came from, to build errors."""

    __slots__ = ("line", "source")

    def __init__(self, source: str, line: int | None) -> None:
        self.source = source
        self.line = line

    def error(self, path: str, message: str) -> TraceFormatError:
        return TraceFormatError(f"{path}: {message}", source=self.source, line=self.line)


def _get(obj: Mapping[str, Any], key: str, path: str, ctx: _Ctx) -> Any:
    try:
        return obj[key]
    except KeyError:
        raise ctx.error(path, f"missing required key {key!r}") from None


def _require_str(obj: Mapping[str, Any], key: str, ctx: _Ctx) -> str:
    value = _get(obj, key, key, ctx)
    if type(value) is not str:
        raise ctx.error(key, f"expected a string, got {_json_type(value)}")
    return value


def _require_int(obj: Mapping[str, Any], key: str, ctx: _Ctx, minimum: int) -> int:
    value = _get(obj, key, key, ctx)
    if type(value) is not int:
        raise ctx.error(key, f"expected an integer, got {_json_type(value)}")
    if value < minimum:
        raise ctx.error(key, f"expected an integer >= {minimum}, got {value}")
    return int(value)


def _bad_logprob_message(x: float) -> str:
    if x == CENSORED_LOGPROB:
        return (
            f"censored log-probability {CENSORED_LOGPROB} (the OpenAI sentinel for a "
            "value that was not reported); expected a finite log-probability <= 0"
        )
    return f"expected a finite log-probability <= 0, got {_fmt_number(x)}"


def _check_logprobs(values: FloatArray, paths: Any, ctx: _Ctx) -> None:
    """Raise for the first entry of ``values`` that is not a valid log-probability.

    ``paths(index_tuple)`` gives the field path of an entry.
    """
    bad = ~(np.isfinite(values) & (values <= _LOGPROB_TOL)) | (values == CENSORED_LOGPROB)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ctx.error(paths(idx), _bad_logprob_message(float(values[idx])))


_NUMBER = frozenset({int, float})
_INTEGER = frozenset({int})
_STRING = frozenset({str})
_WANT = {_NUMBER: "a number", _INTEGER: "an integer", _STRING: "a string"}


def _check_types(values: Sequence[Any], allowed: frozenset[type], path: Any, ctx: _Ctx) -> None:
    """Raise for the first value whose exact type is not in ``allowed``.

    ``path(i)`` gives the field path of ``values[i]``. Exact types are
    compared, so JSON booleans never pass for numbers.
    """
    if set(map(type, values)) <= allowed:
        return
    want = _WANT[allowed]
    for i, v in enumerate(values):
        if type(v) not in allowed:
            raise ctx.error(path(i), f"expected {want}, got {_json_type(v)}")


def _column(
    tokens: Sequence[Mapping[str, Any]], key: str, allowed: frozenset[type], ctx: _Ctx
) -> list[Any]:
    """``[tok[key] for tok in tokens]``, every value of a type in ``allowed``."""
    col = [tok[key] for tok in tokens]
    _check_types(col, allowed, lambda i: f"tokens[{i}].{key}", ctx)
    return col


def _parse_temperature(key: str, path: str, ctx: _Ctx) -> float:
    try:
        t = float(key)
    except ValueError:
        raise ctx.error(path, f"temperature key {key!r} is not a number") from None
    if not (math.isfinite(t) and t > 0):
        raise ctx.error(path, f"temperature key {key!r} is not a finite positive number")
    return t


def _temperature_key(t: float) -> str:
    return repr(float(t))


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
# Reading lines and files
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


def _decoded_lines(raw_lines: Iterable[bytes], source: str) -> Iterator[str]:
    for lineno, raw in enumerate(raw_lines, start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TraceFormatError(
                f"invalid UTF-8 at byte {exc.start} of the line", source=source, line=lineno
            ) from None


def iter_traces(
    path: str | os.PathLike[str],
    *,
    limit: int | None = None,
    require_label: bool = True,
) -> Iterator[Trace]:
    """Lazily read the traces of a UTF-8 JSONL file (see :func:`parse_trace_lines`).

    The file is opened when iteration starts and closed when it ends. A
    path that cannot be read raises :class:`OSError` (``FileNotFoundError``
    for a missing file, ``IsADirectoryError`` for a directory on POSIX);
    malformed content raises :class:`~guardrail._errors.TraceFormatError`
    naming the file and line. A UTF-8 byte-order mark at the start of the
    file is accepted. Lines are split on ``"\\n"`` only, as JSONL requires.
    """
    _check_limit(limit)
    return _iter_file(os.fspath(path), limit, require_label)


def _iter_file(path: str, limit: int | None, require_label: bool) -> Iterator[Trace]:
    with open(path, "rb") as fh:
        yield from _parse_lines(_decoded_lines(fh, path), path, limit, require_label)


def read_traces(
    path: str | os.PathLike[str],
    *,
    limit: int | None = None,
    require_label: bool = True,
) -> list[Trace]:
    """Read the traces of a UTF-8 JSONL file into a list (see :func:`iter_traces`)."""
    return list(iter_traces(path, limit=limit, require_label=require_label))


# --------------------------------------------------------------------------- #
# Writing
# --------------------------------------------------------------------------- #


def trace_to_dict(trace: Trace) -> dict[str, Any]:
    """The documented JSON object of ``trace``, keys in the documented order.

    Temperature keys of ``logz`` are written as ``repr(float)`` (``"1.5"``,
    ``"2.0"``). A trace with ``correct=None`` is written without the
    ``correct`` key.
    """
    token_ids = trace.token_ids.tolist()
    logprobs = trace.logprobs.tolist()
    top_ids = trace.top_ids.tolist()
    top_lps = trace.top_logprobs.tolist()
    entropy = trace.entropy.tolist()
    pfl = trace.prompt_free_logprobs.tolist()
    logz_cols = [(_temperature_key(t), v.tolist()) for t, v in trace.logz.items()]
    tokens = [
        {
            "id": token_ids[i],
            "text": trace.token_texts[i],
            "logprob": logprobs[i],
            "top": [[a, b] for a, b in zip(top_ids[i], top_lps[i], strict=True)],
            "entropy": entropy[i],
            "logz": {key: col[i] for key, col in logz_cols},
            "prompt_free_logprob": pfl[i],
        }
        for i in range(len(token_ids))
    ]
    out: dict[str, Any] = {
        "id": trace.id,
        "dataset": trace.dataset,
        "model": trace.model,
        "question": trace.question,
        "references": list(trace.references),
        "prompt": trace.prompt,
        "answer": trace.answer,
    }
    if trace.correct is not None:
        out["correct"] = trace.correct
    out["vocab_size"] = trace.vocab_size
    out["top_k"] = trace.top_k
    out["tokens"] = tokens
    return out


def dump_trace_line(trace: Trace) -> str:
    """``trace`` as one JSONL line (no trailing newline), UTF-8 text not escaped.

    Uses the same layout as the shared trace files, so a line read from them
    is reproduced byte for byte.
    """
    return json.dumps(trace_to_dict(trace), ensure_ascii=False, allow_nan=False)
