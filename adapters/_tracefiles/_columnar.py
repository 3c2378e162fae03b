"""The columnar trace format: one Parquet row per trace, per-token list columns.

A Parquet trace file holds what a JSONL trace file holds (the format of
:mod:`guardrail.traces`, recordings' keys included) so that reading it gives back
exactly the decoded JSON objects of the JSONL it was converted from: the same keys
in the same order, the same values (floats bit for bit: a float64 column holds the
decoded double itself). The schema (:data:`SCHEMA`, marked by the file metadata
``liftguard.traces = "1"``):

- ``keys`` (list<string>): the object's top-level keys, in order; null for a line
  that is not a JSON object (then ``extra`` holds its JSON text);
- typed top-level columns: ``id``, ``dataset``, ``model``, ``question``, ``prompt``,
  ``answer``, ``finish_reason``, ``created`` (string), ``references``
  (list<string>), ``correct``, ``complete`` (bool), ``vocab_size``, ``top_k``
  (int64), and ``messages``, ``request``, ``verdict`` as JSON text;
- per token (one list entry per token): ``token_id`` (int64), ``token_text``
  (string), ``logprob``, ``entropy``, ``prompt_free_logprob`` (float64),
  ``top_id`` / ``top_logprob`` (list<list<int64>> / list<list<float64>>: the
  ``top`` pairs, most likely first), ``top_text`` (list<list<string>>, a
  recording's texts of the alternatives), ``bytes`` (list<list<uint8>>), ``logz``
  (list<list<float64>>: one value per temperature, in the order of the row's
  ``logz_t``, e.g. ``["1.5", "2.0"]``);
- ``token_keys`` (list<string>): the keys every token has, in order (null when the
  tokens are not a list of objects with one key order: then ``tokens`` is in
  ``extra`` as it was);
- ``extra`` (string, JSON object) and ``token_extra`` (list<string>, one JSON
  object or null per token): every value no typed column holds as it was (a key
  the format does not name, such as ``label_rule``; an integer where a float is
  documented; a ``logz`` with other temperatures than the row's). A key listed in
  ``keys`` (``token_keys``) is read from ``extra`` (``token_extra``) when it is
  there, else from its typed column, where null is JSON ``null``.

A reader that wants the numbers goes to the typed columns; a reader that wants the
objects gets them from :func:`batch_objects`; :func:`objects_batch` builds a batch
of rows from decoded objects.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

__all__ = ["FORMAT_KEY", "FORMAT_VERSION", "SCHEMA", "batch_objects", "objects_batch"]

FORMAT_KEY = b"liftguard.traces"
FORMAT_VERSION = b"1"

_STR = ("id", "dataset", "model", "question", "prompt", "answer", "finish_reason", "created")
_BOOL = ("correct", "complete")
_INT = ("vocab_size", "top_k")
_JSON = ("messages", "request", "verdict")
_TOKEN_FLOAT = {
    "logprob": "logprob",
    "entropy": "entropy",
    "prompt_free_logprob": "prompt_free_logprob",
}
_INT64_RANGE = range(-(2**63), 2**63)

_s, _i, _f = pa.string(), pa.int64(), pa.float64()
SCHEMA = pa.schema(
    [
        ("keys", pa.list_(_s)),
        ("extra", _s),
        *((name, _s) for name in _STR),
        ("references", pa.list_(_s)),
        *((name, pa.bool_()) for name in _BOOL),
        *((name, _i) for name in _INT),
        *((name, _s) for name in _JSON),
        ("token_keys", pa.list_(_s)),
        ("logz_t", pa.list_(_s)),
        ("token_id", pa.list_(_i)),
        ("token_text", pa.list_(_s)),
        ("logprob", pa.list_(_f)),
        ("top_id", pa.list_(pa.list_(_i))),
        ("top_logprob", pa.list_(pa.list_(_f))),
        ("top_text", pa.list_(pa.list_(_s))),
        ("bytes", pa.list_(pa.list_(pa.uint8()))),
        ("entropy", pa.list_(_f)),
        ("logz", pa.list_(pa.list_(_f))),
        ("prompt_free_logprob", pa.list_(_f)),
        ("token_extra", pa.list_(_s)),
    ],
    metadata={FORMAT_KEY: FORMAT_VERSION},
)
_TOKEN_COLUMNS = (
    "token_id",
    "token_text",
    "logprob",
    "top_id",
    "top_logprob",
    "top_text",
    "bytes",
    "entropy",
    "logz",
    "prompt_free_logprob",
    "token_extra",
)


def _dumps(value: Any, ascii: bool = False) -> str:
    """JSON text of a decoded value (``ascii``: with every non-ASCII character escaped, for a
    lone surrogate that UTF-8 cannot hold)."""
    return json.dumps(value, ensure_ascii=ascii, allow_nan=True)


class _Fit:
    """Whether a value fits a typed column (``checked``: strings must also be UTF-8)."""

    def __init__(self, checked: bool) -> None:
        self.checked = checked

    def str(self, v: Any) -> bool:
        if v is None:
            return True
        if type(v) is not str:
            return False
        if self.checked:
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return False
        return True

    def strs(self, v: Any) -> bool:
        return v is None or (type(v) is list and all(x is not None and self.str(x) for x in v))

    @staticmethod
    def int(v: Any) -> bool:
        return v is None or (type(v) is int and v in _INT64_RANGE)

    @staticmethod
    def float(v: Any) -> bool:
        return v is None or type(v) is float

    @staticmethod
    def bool(v: Any) -> bool:
        return v is None or type(v) is bool


class _Columns:
    """The column values of a batch of rows, filled row by row."""

    def __init__(self, checked: bool) -> None:
        self.fit = fit = _Fit(checked)
        self.checks = {
            "references": fit.strs,
            **dict.fromkeys(_STR, fit.str),
            **dict.fromkeys(_BOOL, fit.bool),
            **dict.fromkeys(_INT, fit.int),
        }
        self.cols: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
        self.checked = checked

    def dumps(self, value: Any) -> str:
        return _dumps(value, ascii=self.checked)

    def add(self, obj: Any) -> None:
        cols = self.cols
        if type(obj) is not dict:
            for name, values in cols.items():
                values.append(self.dumps(obj) if name == "extra" else None)
            return
        extra: dict[str, Any] = {}
        for name, check in self.checks.items():
            value = obj.get(name)
            if name in obj and not check(value):
                extra[name], value = value, None
            cols[name].append(value)
        for name in _JSON:
            cols[name].append(self.dumps(obj[name]) if obj.get(name) is not None else None)
        tokens = obj.get("tokens")
        if not self._tokens(tokens):
            if "tokens" in obj:
                extra["tokens"] = tokens
            for name in ("token_keys", "logz_t", *_TOKEN_COLUMNS):
                cols[name].append(None)
        known = {"tokens", "references", *_STR, *_BOOL, *_INT, *_JSON}
        extra.update((k, v) for k, v in obj.items() if k not in known)
        cols["keys"].append(list(obj))
        cols["extra"].append(self.dumps(extra) if extra else None)

    def _tokens(self, tokens: Any) -> bool:
        """Add the per-token columns of ``tokens``; False (nothing added) if they are not
        a list of objects with one key order."""
        if type(tokens) is not list or any(type(t) is not dict for t in tokens):
            return False
        keys = list(tokens[0]) if tokens else []
        if any(list(t) != keys for t in tokens):
            return False
        first: dict[str, Any] = next((t["logz"] for t in tokens if type(t.get("logz")) is dict), {})
        temps = list(first)
        out: dict[str, list[Any]] = {name: [] for name in _TOKEN_COLUMNS}
        for token in tokens:
            self._token(token, temps, out)
        cols = self.cols
        cols["token_keys"].append(keys)
        cols["logz_t"].append(temps)
        for name, values in out.items():
            cols[name].append(values)
        return True

    def _token(self, token: dict[str, Any], temps: list[str], out: dict[str, list[Any]]) -> None:
        fit, extra = self.fit, dict[str, Any]()
        for key, name, ok in (
            ("id", "token_id", fit.int(token.get("id"))),
            ("text", "token_text", fit.str(token.get("text"))),
            *((k, c, fit.float(token.get(k))) for k, c in _TOKEN_FLOAT.items()),
            ("top_text", "top_text", fit.strs(token.get("top_text"))),
        ):
            value = token.get(key)
            if key in token and not ok:
                extra[key], value = value, None
            out[name].append(value)
        top = token.get("top")
        pairs = top is None or (
            type(top) is list
            and all(
                type(p) is list and len(p) == 2 and fit.int(p[0]) and fit.float(p[1]) for p in top
            )
        )
        if "top" in token and not pairs:
            extra["top"], top = top, None
        out["top_id"].append(None if top is None else [p[0] for p in top])
        out["top_logprob"].append(None if top is None else [p[1] for p in top])
        raw = token.get("bytes")
        if raw is not None and not (
            type(raw) is list and all(type(b) is int and 0 <= b < 256 for b in raw)
        ):
            extra["bytes"], raw = raw, None
        out["bytes"].append(raw)
        logz = token.get("logz")
        if logz is not None and not (
            type(logz) is dict and list(logz) == temps and all(map(fit.float, logz.values()))
        ):
            extra["logz"], logz = logz, None
        out["logz"].append(None if logz is None else list(logz.values()))
        known = {"id", "text", "top", "top_text", "bytes", "logz", *_TOKEN_FLOAT}
        extra.update((k, v) for k, v in token.items() if k not in known)
        out["token_extra"].append(self.dumps(extra) if extra else None)

    def batch(self) -> pa.RecordBatch:
        arrays = [pa.array(self.cols[f.name], type=f.type) for f in SCHEMA]
        return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


def objects_batch(objects: Sequence[Any]) -> pa.RecordBatch:
    """One row per decoded JSON value of ``objects`` (trace objects; anything else is
    kept as its JSON text, so that a reader meets it where it was)."""
    cols = _Columns(checked=False)
    for obj in objects:
        cols.add(obj)
    try:
        return cols.batch()
    except (pa.ArrowInvalid, UnicodeEncodeError):  # a lone surrogate: such strings to extra
        cols = _Columns(checked=True)
        for obj in objects:
            cols.add(obj)
        return cols.batch()


def _loads(text: str | None) -> dict[str, Any]:
    return {} if text is None else dict(json.loads(text))


def batch_objects(batch: pa.RecordBatch) -> Iterator[Any]:
    """The decoded JSON values of the rows of ``batch`` (the inverse of :func:`objects_batch`)."""
    cols = {name: batch.column(name).to_pylist() for name in SCHEMA.names}
    for row in range(batch.num_rows):
        keys = cols["keys"][row]
        if keys is None:
            yield json.loads(cols["extra"][row])
            continue
        extra = _loads(cols["extra"][row])
        out: dict[str, Any] = {}
        for key in keys:
            if key in extra:
                out[key] = extra[key]
            elif key in _JSON:
                text = cols[key][row]
                out[key] = None if text is None else json.loads(text)
            elif key == "tokens":
                out[key] = _tokens(cols, row)
            else:
                out[key] = cols[key][row]
        yield out


def _tokens(cols: dict[str, list[Any]], row: int) -> list[dict[str, Any]]:
    keys, temps = cols["token_keys"][row], cols["logz_t"][row]
    per = {name: cols[name][row] for name in _TOKEN_COLUMNS}
    out = []
    for i in range(len(per["token_text"])):
        extra = _loads(per["token_extra"][i])
        token: dict[str, Any] = {}
        for key in keys:
            if key in extra:
                token[key] = extra[key]
            elif key == "top":
                ids, lps = per["top_id"][i], per["top_logprob"][i]
                token[key] = None if ids is None else [list(p) for p in zip(ids, lps, strict=True)]
            elif key == "logz":
                values = per["logz"][i]
                token[key] = None if values is None else dict(zip(temps, values, strict=True))
            else:
                token[key] = per[_COLUMN_OF.get(key, key)][i]
        out.append(token)
    return out


_COLUMN_OF = {"id": "token_id", "text": "token_text"}
