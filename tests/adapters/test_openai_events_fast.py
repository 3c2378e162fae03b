"""The fast reader of plain-dict chunks agrees with the general reader on every chunk.

``chat_chunk_parts`` reads a decoded-JSON chunk through ``_plain_chunk_parts``
(once per token in the proxy) and falls back to ``_chunk_parts``, which checks
every field, for anything unusual. Seeded random chunks, well-formed and
malformed, must give equal parts or the same error from both.
"""

from __future__ import annotations

import copy
import math
import random
from typing import Any

import pytest

from adapters import ProviderFormatError
from adapters._guard._openai_events import _chunk_parts, chat_chunk_parts

_TOKEN = ["a", None, 5, ""]
_LOGPROB: list[Any] = [-1.0, -1, 0.0, None, "x", True, math.nan]
_BYTES: list[Any] = [[97], None, [], [256], [True], "x", (97, 98)]
_TOP: list[Any] = [
    None, [], [{"token": "b", "logprob": -2.0}], "x", [{"token": None, "logprob": -1.0}],
    [{"token": "b", "logprob": "x"}], [5], [{"token": "c", "logprob": -3, "bytes": [99]}],
]  # fmt: skip
_TEXT: list[Any] = ["a", None, "", 5, "ab"]
_FINISH: list[Any] = [None, "stop", "length", 3]
_INDEX: list[Any] = [0, 1, None, "0", True]


def _entry(rng: random.Random) -> Any:
    if rng.random() < 0.05:
        return rng.choice([None, "x", 3])
    entry: dict[str, Any] = {}
    for key, values in (("token", _TOKEN), ("logprob", _LOGPROB), ("bytes", _BYTES),
                        ("top_logprobs", _TOP)):  # fmt: skip
        if rng.random() < 0.9:
            entry[key] = rng.choice(values) if rng.random() < 0.3 else values[0]
    return entry


def _entries(rng: random.Random) -> Any:
    r = rng.random()
    if r < 0.1:
        return rng.choice([None, "x", []])
    return [_entry(rng) for _ in range(rng.randint(1, 3))]


def _choice(rng: random.Random, pos: int) -> Any:
    if rng.random() < 0.03:
        return rng.choice([None, "x"])
    delta: Any = {}
    if rng.random() < 0.95:
        delta["content"] = rng.choice(_TEXT) if rng.random() < 0.3 else "a"
    if rng.random() < 0.1:
        delta["refusal"] = rng.choice(["no", "", None])
    if rng.random() < 0.1:
        delta[rng.choice(["tool_calls", "function_call", "audio"])] = rng.choice([None, [], [{}]])
    if rng.random() < 0.05:
        delta = rng.choice([None, "x", 3])
    logprobs: Any = {"content": _entries(rng)}
    if rng.random() < 0.1:
        logprobs["refusal"] = rng.choice([None, [], _entries(rng)])
    if rng.random() < 0.1:
        logprobs = rng.choice([None, "x", {}])
    choice: dict[str, Any] = {"delta": delta, "logprobs": logprobs}
    if rng.random() < 0.9:
        choice["index"] = rng.choice(_INDEX) if rng.random() < 0.2 else pos
    if rng.random() < 0.9:
        choice["finish_reason"] = rng.choice(_FINISH) if rng.random() < 0.3 else None
    return choice


def _chunk(rng: random.Random) -> Any:
    if rng.random() < 0.03:
        return {"choices": rng.choice([None, "x", [], 3])}
    return {"id": "c", "choices": [_choice(rng, pos) for pos in range(rng.choice([1, 1, 1, 2]))]}


def _outcome(read: Any, chunk: Any, with_top: bool) -> Any:
    try:
        return read(copy.deepcopy(chunk), with_top=with_top)
    except ProviderFormatError as exc:
        return ("error", str(exc), exc.field)


def _general(chunk: Any, *, with_top: bool) -> Any:
    return _chunk_parts(chunk, with_top)


def test_the_fast_reader_agrees_with_the_general_one_on_random_chunks() -> None:
    rng = random.Random(20261126)
    kinds = {"parts": 0, "error": 0, "stray": 0}
    for _ in range(4000):
        chunk = _chunk(rng)
        with_top = rng.random() < 0.5
        fast = _outcome(chat_chunk_parts, chunk, with_top)
        general = _outcome(_general, chunk, with_top)
        assert repr(fast) == repr(general), chunk  # repr: NaN logprobs compare equal
        error = isinstance(fast, tuple) and fast[0] == "error"
        kinds["error" if error else "stray" if fast.stray_choice else "parts"] += 1
    # every kind of chunk was drawn often enough to mean something
    assert kinds["parts"] > 500 and kinds["error"] > 300 and kinds["stray"] > 300, kinds


@pytest.mark.parametrize("with_top", [False, True])
def test_a_well_formed_chunk_takes_the_fast_path_and_reads_the_same(with_top: bool) -> None:
    top = [{"token": " t", "logprob": -2.5, "bytes": [32, 116]}]
    chunk = {"choices": [{"index": 0, "delta": {"content": " a"}, "finish_reason": None,
             "logprobs": {"content": [{"token": " a", "logprob": -0.5, "bytes": [32, 97],
                                       "top_logprobs": top}]}}]}  # fmt: skip
    parts = chat_chunk_parts(chunk, with_top=with_top)
    assert parts == _chunk_parts(chunk, with_top)
    (event,) = parts.events
    assert (event.text, event.logprob, event.bytes) == (" a", -0.5, b" a")
    assert event.top_logprobs == ((" t", -2.5),) if with_top else event.top_logprobs == ()
