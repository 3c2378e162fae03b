"""A real local model behind an OpenAI-compatible loopback endpoint, guarded end to end,
and the parts of OpenAI's wire format it keeps (multi-byte characters, usage, models)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from adapters import guarded_chat_completion
from adapters._local._model import LocalModel
from adapters._local._server import LocalChatServer
from adapters.local import smollm2_certificate
from guardrail import GuardrailBlocked, Monitor, State, StreamPolicy, UniformSkeleton

pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')


@pytest.fixture(scope="module")
def server() -> Iterator[LocalChatServer]:
    with LocalChatServer(LocalModel()) as srv:
        yield srv


def _monitor(vocab: int) -> Monitor:
    cal = smollm2_certificate().calibration
    assert cal is not None and cal.policy is not None
    return Monitor.lift(
        StreamPolicy.from_dict(cal.policy), cal.tau, skeleton=UniformSkeleton(vocab)
    )


async def test_certified_answer_is_released(server: LocalChatServer) -> None:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="local", max_retries=0)
    monitor = _monitor(server.model.vocab_size)
    parts = [
        p
        async for p in guarded_chat_completion(
            client,
            monitor=monitor,
            model="smollm2",
            messages=[{"role": "user", "content": "What is the chemical symbol for gold?"}],
        )
    ]
    assert monitor.verdict.state is State.CERTIFIED
    assert "Au" in "".join(parts)
    await client.close()


async def test_blocked_answer_stops_generation(server: LocalChatServer) -> None:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="local", max_retries=0)
    monitor = _monitor(server.model.vocab_size)
    shown: list[str] = []
    with pytest.raises(GuardrailBlocked) as info:
        async for p in guarded_chat_completion(
            client,
            monitor=monitor,
            model="smollm2",
            messages=[{"role": "user", "content": "Which element has the atomic number 26?"}],
        ):
            shown.append(p)
    assert shown == []  # buffered: nothing of a blocked answer reaches the user
    assert info.value.verdict.state is State.BLOCKED
    assert info.value.verdict.t < 24  # blocked before the answer was complete
    await client.close()


# greedy SmolLM2 answers this with 👌 (U+1F44C) over and over, three byte tokens each:
# b"\xf0\x9f", b"\x91", b"\x8c"
EMOJI = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Give me a smiley face emoji."},
]


def _chunks(server: LocalChatServer, **kwargs: Any) -> list[ChatCompletionChunk]:
    client = openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0)
    with client:
        return list(client.chat.completions.create(model="smollm2", stream=True, **kwargs))


def test_a_character_of_several_tokens_is_streamed_whole(server: LocalChatServer) -> None:
    chunks = _chunks(server, messages=EMOJI, max_tokens=9, logprobs=True, top_logprobs=3)
    texts = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    entries = [t for c in chunks if c.choices and c.choices[0].logprobs
               for t in c.choices[0].logprobs.content or []]  # fmt: skip
    assert "".join(texts) == "\N{OK HAND SIGN}" * 3
    # each piece of delta.content is whole characters; a partial one is never shown
    assert all("\ufffd" not in t for t in texts)
    # one entry per token, as OpenAI: the exact bytes, the text partial (escaped bytes)
    assert len(entries) == 9
    assert b"".join(bytes(e.bytes or []) for e in entries) == "".join(texts).encode()
    assert [(e.token, e.bytes) for e in entries[:3]] == [
        ("\\xf0\\x9f", [0xF0, 0x9F]),
        ("\\x91", [0x91]),
        ("\\x8c", [0x8C]),
    ]
    assert all(len(e.top_logprobs) == 3 and e.top_logprobs[0].bytes for e in entries)
    assert chunks[-1].choices[0].finish_reason == "length"


def test_an_answer_cut_inside_a_character_ends_with_a_replacement(
    server: LocalChatServer,
) -> None:
    chunks = _chunks(server, messages=EMOJI, max_tokens=8, logprobs=True)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "\N{OK HAND SIGN}" * 2 + "\ufffd"  # the 8th token is 2 of 4 bytes


def test_usage_is_the_last_chunk_when_asked_for(server: LocalChatServer) -> None:
    question = [{"role": "user", "content": "What is the capital of France?"}]
    chunks = _chunks(
        server, messages=question, max_tokens=6, logprobs=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    *answer, last = chunks
    n = sum(len(c.choices[0].logprobs.content or []) for c in answer if c.choices[0].logprobs)
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == n > 0
    assert last.usage.prompt_tokens > 0
    assert last.usage.total_tokens == last.usage.prompt_tokens + n
    assert all(c.choices and c.usage is None for c in answer)
    plain = _chunks(server, messages=question, max_tokens=6)
    assert all(c.choices and c.usage is None for c in plain)  # not asked: no usage chunk


def test_models_lists_the_served_model(server: LocalChatServer) -> None:
    with openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0) as client:
        models = list(client.models.list())
    assert [(m.id, m.object) for m in models] == [("SmolLM2-135M-Instruct.Q4_1.gguf", "model")]
    assert models[0].owned_by == "liftguard" and models[0].created > 0


def test_a_non_streamed_request_gets_one_completion(server: LocalChatServer) -> None:
    question = [{"role": "user", "content": "What is the capital of France?"}]
    with openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0) as client:
        completion = client.chat.completions.create(
            model="local", messages=question, max_tokens=6, logprobs=True, top_logprobs=2
        )
    streamed = _chunks(server, messages=question, max_tokens=6, logprobs=True, top_logprobs=2)
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    choice = completion.choices[0]
    assert completion.object == "chat.completion"
    assert choice.message.content == text  # greedy: the same answer either way
    assert choice.logprobs is not None and choice.logprobs.content is not None
    assert completion.usage is not None
    assert len(choice.logprobs.content) == completion.usage.completion_tokens
    assert all(len(entry.top_logprobs) == 2 for entry in choice.logprobs.content)
    assert choice.finish_reason in ("stop", "length")
