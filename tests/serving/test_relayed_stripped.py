"""The proxy's per-chunk fast path, ``relayed_stripped``, and its readable twin below (keep
the allowlisted fields, then null or trim the logprobs): the two agree on every chunk shape."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from adapters._serving._relay import (
    RELAYED_CHOICE,
    RELAYED_CHUNK,
    RELAYED_DELTA,
    RELAYED_LOGPROBS,
)
from adapters._serving._wire import relayed_stripped


def _only(record: Any, keys: frozenset[str]) -> Any:
    return {k: v for k, v in record.items() if k in keys} if isinstance(record, dict) else record


def _trimmed(entries: Any, top_k: int) -> Any:
    if not isinstance(entries, list):
        return entries
    return [
        {**e, "top_logprobs": e["top_logprobs"][:top_k]}
        if isinstance(e, dict) and isinstance(e.get("top_logprobs"), list)
        else e
        for e in entries
    ]


def _twin(chunk: dict[str, Any], want_logprobs: bool, top_k: int) -> dict[str, Any]:
    """What the client gets of ``chunk``, written plainly: a new dict, field by field."""
    out = _only(chunk, RELAYED_CHUNK)
    if not isinstance(out.get("choices"), list):
        return out
    choices = []
    for choice in out["choices"]:
        if isinstance(choice, dict):
            choice = _only(choice, RELAYED_CHOICE)
            if "delta" in choice:
                choice["delta"] = _only(choice["delta"], RELAYED_DELTA)
            if choice.get("logprobs") is not None:
                lp = _only(choice["logprobs"], RELAYED_LOGPROBS)
                if not want_logprobs:
                    lp = None
                elif isinstance(lp, dict):
                    lp = {key: _trimmed(value, top_k) for key, value in lp.items()}
                choice["logprobs"] = lp
        choices.append(choice)
    return {**out, "choices": choices}


def _entry(text: str, alternatives: int) -> dict[str, Any]:
    top = [{"token": f"t{i}", "logprob": -float(i), "bytes": None} for i in range(alternatives)]
    return {"token": text, "logprob": -0.1, "bytes": [104], "top_logprobs": top}


CHUNKS: list[dict[str, Any]] = [
    {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
     "choices": [{"index": 0, "delta": {"content": "hi"},
                  "logprobs": {"content": [_entry("hi", 8)]}, "finish_reason": None}]},
    {"id": "c", "choices": [{"index": 0, "delta": {"content": "x", "reasoning_content": "r"},
                             "logprobs": {"content": [_entry("x", 3)], "extra": 1},
                             "text": "smuggled", "finish_reason": None}],
     "invented": {"a": 1}},
    {"id": "c", "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}],
     "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}},
    {"id": "c", "choices": "not a list"},
    {"id": "c", "choices": [7, {"index": 1, "delta": "not a dict", "logprobs": [1]}]},
    {"id": "c"},
]  # fmt: skip


@pytest.mark.parametrize("want_logprobs", [True, False])
@pytest.mark.parametrize("top_k", [0, 2, 5, 20])
@pytest.mark.parametrize("index", range(len(CHUNKS)))
def test_the_fast_path_is_its_twin(index: int, want_logprobs: bool, top_k: int) -> None:
    chunk = CHUNKS[index]
    slow = _twin(copy.deepcopy(chunk), want_logprobs, top_k)
    fast = relayed_stripped(copy.deepcopy(chunk), want_logprobs, top_k)
    assert fast == slow


def test_the_twin_drops_what_is_not_relayed() -> None:
    # the comparison above must be able to fail: the second chunk loses its unknown fields
    out = relayed_stripped(copy.deepcopy(CHUNKS[1]), True, 2)
    assert "invented" not in out
    choice = out["choices"][0]
    assert "text" not in choice and "reasoning_content" not in choice["delta"]
    assert len(choice["logprobs"]["content"][0]["top_logprobs"]) == 2
