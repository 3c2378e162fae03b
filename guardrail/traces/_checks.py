"""Checks of decoded JSON fields for the trace parser (:mod:`guardrail.traces._parse`).

Each check raises :class:`~guardrail._errors.TraceFormatError` through the
parse context :class:`_Ctx`, naming the source, the 1-based line and the field
path (e.g. ``tokens[3].logprob``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .._errors import TraceFormatError
from .._reads import LOGPROB_SLACK
from .._trace_format import CENSORED_LOGPROB, FloatArray

__all__: list[str] = []  # private helpers of the parser, imported by name

# Entropies likewise may round to a tiny negative number.
_ENTROPY_TOL = 1e-6

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


def _raise_first(
    bad: Any, values: Any, paths: Any, message: Callable[[Any], str], ctx: _Ctx
) -> None:
    """Raise for the first entry (in row-major order) where the mask ``bad`` is set.

    ``paths(index_tuple)`` gives the field path of an entry and ``message(value)``
    what is wrong with the entry's value.
    """
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ctx.error(paths(idx), message(values[idx]))


def _check_logprobs(values: FloatArray, paths: Any, ctx: _Ctx) -> None:
    """Raise for the first entry of ``values`` that is not a valid log-probability.

    ``paths(index_tuple)`` gives the field path of an entry.
    """
    bad = ~(np.isfinite(values) & (values <= LOGPROB_SLACK)) | (values == CENSORED_LOGPROB)
    _raise_first(bad, values, paths, lambda x: _bad_logprob_message(float(x)), ctx)


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
