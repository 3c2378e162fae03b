"""What a client receives when the proxy releases a held answer at once.

A buffered answer is held whole and released in one write at certification. Its
plain text chunks go out joined (``adapters._serving._wire.merge_released``): one
chunk with the text and the logprob entries of all of them, then the finish chunk
that carries the verdict. Token by token the client would parse a hundred chunks
after the upstream ended, for text that arrives in the same instant. Checked here
with the real ``openai`` client through the proxy (text, logprobs, verdict; in
passthrough mode every chunk still goes out as it came) and, on the function
itself, that nothing is lost, re-cut or reordered: fixed cases and seeded random
batches.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import openai
import pytest
from proxy_harness import GOOD, ROLE, STOP, WORDS, Upstream, running_proxy, tokens
from sse_server import Reply, chat_chunk, token_entry

from adapters._serving._wire import merge_released

MESSAGES: Any = [{"role": "user", "content": "What is the capital of France?"}]
TEXT = "".join(WORDS)


async def _chunks(base_url: str, **request: Any) -> list[Any]:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0)
    try:
        stream = await client.chat.completions.create(
            model="test-model", messages=MESSAGES, stream=True, **request
        )
        return [chunk async for chunk in stream]
    finally:
        await client.close()


def _text(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


@pytest.mark.parametrize("want_logprobs", [False, True])
async def test_a_buffered_answer_arrives_as_one_text_chunk_and_the_finish(
    upstream: Upstream, want_logprobs: bool
) -> None:
    upstream.replies.put(Reply([ROLE, *tokens([GOOD] * len(WORDS)), STOP], delay=0.0))
    request = {"logprobs": True, "top_logprobs": 2} if want_logprobs else {}
    with running_proxy(upstream.base_url, mode="buffered") as proxy:
        chunks = await _chunks(proxy.base_url, **request)
    assert len(chunks) == 2, [c.choices for c in chunks]
    answer, finish = chunks
    assert answer.choices[0].delta.role == "assistant"
    assert answer.choices[0].delta.content == TEXT
    assert answer.id == finish.id == "chatcmpl-test"
    assert finish.choices[0].finish_reason == "stop"
    assert (finish.model_extra or {})["liftguard"]["state"] == "certified"
    logprobs = answer.choices[0].logprobs
    if not want_logprobs:
        assert logprobs is None
        return
    assert logprobs is not None and logprobs.content is not None
    assert [e.token for e in logprobs.content] == WORDS
    assert [e.logprob for e in logprobs.content] == [GOOD] * len(WORDS)
    assert all(len(e.top_logprobs) == 2 for e in logprobs.content)  # trimmed as asked


async def test_passthrough_still_sends_every_chunk_as_it_came(upstream: Upstream) -> None:
    events = [ROLE, *tokens([GOOD] * len(WORDS)), STOP]
    upstream.replies.put(Reply(events, delay=0.0))
    with running_proxy(upstream.base_url, mode="passthrough") as proxy:
        chunks = await _chunks(proxy.base_url)
    assert [c.choices[0].delta.content or "" for c in chunks] == ["", *WORDS, ""]
    assert (chunks[-1].model_extra or {})["liftguard"]["state"] == "certified"


async def test_passthrough_sends_what_a_burst_released_before_a_malformed_chunk(
    upstream: Upstream,
) -> None:
    # (the events one network read brings go out in one write: the chunks before the fault
    # still go out, then the error event; the whole body is one HTTP chunk here)
    body = b"".join(b"data: %s\n\n" % json.dumps(e).encode() for e in [ROLE, *tokens([GOOD] * 4)])
    upstream.replies.put(Reply([], delay=0.0, tail=body + b'data: {"choices": [\n\n', done=False))
    shown: list[str] = []
    with running_proxy(upstream.base_url, mode="passthrough") as proxy:
        client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
        stream = await client.chat.completions.create(
            model="test-model", messages=MESSAGES, stream=True
        )
        with pytest.raises(openai.APIError) as caught:
            async for chunk in stream:
                shown.append(chunk.choices[0].delta.content or "")
        await client.close()
    assert shown == ["", *WORDS[:4]]
    assert caught.value.code == "malformed_chunk"


# --- the function ------------------------------------------------------------------------


def _word(text: str, entries: bool = True, **frame: Any) -> dict[str, Any]:
    chunk = chat_chunk(
        {"content": text}, {"content": [token_entry(text, GOOD)]} if entries else None
    )
    return {**chunk, **frame}


TOOL = chat_chunk(
    {"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                     "function": {"name": "f", "arguments": "{}"}}]},
    None,
)  # fmt: skip
USAGE = {**chat_chunk({}, None), "choices": [], "usage": {"prompt_tokens": 3}}
TWO_CHOICES = {**_word("a"), "choices": [_word("a")["choices"][0], {
    **_word("b")["choices"][0], "index": 1}]}  # fmt: skip
REFUSAL = chat_chunk({"refusal": "No."}, {"content": None, "refusal": [token_entry("No.", GOOD)]})


def test_a_run_of_text_chunks_becomes_one_chunk_with_all_its_entries() -> None:
    batch = [ROLE, *tokens([GOOD] * len(WORDS)), STOP]
    before = copy.deepcopy(batch)
    out = merge_released(batch)
    assert batch == before  # the chunks released are not changed
    assert len(out) == 2 and out[1] is STOP
    choice = out[0]["choices"][0]
    assert choice["delta"] == {"role": "assistant", "content": TEXT}
    assert [e["token"] for e in choice["logprobs"]["content"]] == WORDS
    assert {k: v for k, v in out[0].items() if k != "choices"} == {
        k: v for k, v in ROLE.items() if k != "choices"
    }


def test_what_is_not_plain_text_goes_out_as_it_came_and_splits_the_runs() -> None:
    for other in (TOOL, USAGE, TWO_CHOICES, REFUSAL, STOP):
        out = merge_released([_word("a"), _word("b"), other, _word("c"), _word("d")])
        assert len(out) == 3 and out[1] is other
        assert [_only_text(out[0]), _only_text(out[2])] == ["ab", "cd"]


def test_chunks_with_other_fields_or_a_new_role_open_a_new_run() -> None:
    assert len(merge_released([_word("a"), _word("b"), _word("c", id="chatcmpl-2")])) == 2
    assert len(merge_released([_word("a"), _word("b"), _word("c", system_fingerprint="x")])) == 2
    assert len(merge_released([_word("a"), _word("b"), _word("c", service_tier="x")])) == 2
    assert len(merge_released([_word("a"), _word("b"), ROLE, _word("c")])) == 2


def test_text_with_entries_and_text_without_are_never_joined() -> None:
    out = merge_released([_word("a"), _word("b"), _word("c", entries=False), _word("d")])
    assert [_only_text(c) for c in out] == ["ab", "c", "d"]
    assert [c["choices"][0]["logprobs"] is None for c in out] == [False, True, False]
    # a role chunk with an empty entry list goes with text that has none: null, as they came
    out = merge_released([ROLE, _word("a", entries=False), _word("b", entries=False)])
    assert len(out) == 1 and out[0]["choices"][0]["logprobs"] is None


def test_a_batch_of_one_or_two_chunks_is_returned_as_it_is() -> None:
    batch = [_word("a"), _word("b")]
    assert merge_released(batch) is batch


def _only_text(chunk: dict[str, Any]) -> str:
    return str(chunk["choices"][0]["delta"]["content"])


def _plain_parts(chunks: list[dict[str, Any]]) -> tuple[str, list[Any], list[Any]]:
    """The text and entries of choice 0 over ``chunks``, and the chunks that are not
    plain text (by identity)."""
    text, entries, others = "", [], []
    for c in chunks:
        choices = c.get("choices") or []
        choice = choices[0] if len(choices) == 1 else None
        delta = choice.get("delta") if choice else None
        if choice is None or choice.get("finish_reason") or set(delta or {}) - {"role", "content"}:
            others.append(c)
            continue
        text += delta.get("content") or ""
        entries += (choice.get("logprobs") or {}).get("content") or []
    return text, entries, others


def test_random_batches_lose_nothing_and_keep_the_order() -> None:
    rng = random.Random(20261126)
    menu = [
        lambda: _word(rng.choice(WORDS)),
        lambda: _word(rng.choice(WORDS), entries=False),
        lambda: _word(rng.choice(WORDS), id=rng.choice(["chatcmpl-test", "chatcmpl-2"])),
        lambda: ROLE,
        lambda: TOOL,
        lambda: USAGE,
        lambda: TWO_CHOICES,
        lambda: STOP,
        lambda: chat_chunk({"content": ""}, {"content": [token_entry("", GOOD)]}),
    ]
    merged_any = 0
    for _ in range(500):
        batch = [rng.choice(menu)() for _ in range(rng.randint(0, 30))]
        out = merge_released(batch)
        text, entries, others = _plain_parts(out)
        want_text, want_entries, want_others = _plain_parts(batch)
        assert text == want_text and entries == want_entries
        assert len(others) == len(want_others)
        assert all(a is b for a, b in zip(others, want_others, strict=True))
        assert len(out) <= len(batch)
        merged_any += len(out) < len(batch)
    assert merged_any > 100  # the batches did exercise the joining
