"""OpenAI chunk/event parsers: SDK objects and plain dicts, odd-but-valid data, malformed data."""

from __future__ import annotations

import copy
import subprocess
import sys
from typing import Any

import pytest
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent, ResponseTextDeltaEvent
from pydantic import TypeAdapter

from adapters import ProviderFormatError, events_from_responses_event
from adapters._guard._openai_events import events_from_chat_chunk
from guardrail import ConfigError, GuardrailError, TokenEvent

USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def _chunk(choice: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "gpt-test",
        "choices": [choice],
    }


MULTI = _chunk(
    {
        "index": 0,
        "delta": {"content": "Paris is"},
        "logprobs": {
            "content": [
                {
                    "token": "Paris",
                    "logprob": -0.01,
                    "bytes": [80, 97, 114, 105, 115],
                    "top_logprobs": [
                        {"token": "Paris", "logprob": -0.01, "bytes": [80, 97, 114, 105, 115]},
                        {"token": "Lyon", "logprob": -4.6, "bytes": None},
                    ],  # fewer than the 20 asked
                },
                {"token": " is", "logprob": -9999.0, "bytes": None, "top_logprobs": []},
            ],
            "refusal": None,
        },
        "finish_reason": None,
    }
)
EXPECTED = [
    TokenEvent("Paris", -0.01, bytes=b"Paris", top_logprobs=(("Paris", -0.01), ("Lyon", -4.6))),
    TokenEvent(" is", -9999.0),  # censored: passed on unchanged, the monitor decides
]


@pytest.mark.parametrize("as_sdk", [False, True], ids=["dict", "sdk"])
def test_several_tokens_per_chunk(as_sdk: bool) -> None:
    chunk: Any = ChatCompletionChunk.model_validate(MULTI) if as_sdk else MULTI
    assert events_from_chat_chunk(chunk) == EXPECTED


def test_text_without_logprobs_gives_one_event_without_a_value() -> None:
    choice = {"index": 0, "delta": {"content": "Hi"}, "logprobs": None, "finish_reason": None}
    for data in (_chunk(choice), ChatCompletionChunk.model_validate(_chunk(choice))):
        assert events_from_chat_chunk(data) == [TokenEvent("Hi", None)]
    choice["logprobs"] = {"content": [], "refusal": None}
    assert events_from_chat_chunk(_chunk(choice)) == [TokenEvent("Hi", None)]
    null_value = copy.deepcopy(MULTI)
    null_value["choices"][0]["logprobs"]["content"][0]["logprob"] = None
    assert events_from_chat_chunk(null_value)[0].logprob is None


@pytest.mark.parametrize(
    "chunk",
    [
        _chunk(
            {
                "index": 0,
                "delta": {"role": "assistant", "content": "", "refusal": None},
                "logprobs": {"content": [], "refusal": []},
                "finish_reason": None,
            }
        ),
        _chunk({"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}),
        {**_chunk({}), "choices": [], "usage": USAGE},
        _chunk({"index": 1, "delta": {"content": "other choice"}, "logprobs": None}),
    ],
    ids=["role", "finish", "usage", "other-choice"],
)
def test_chunks_without_tokens(chunk: dict[str, Any]) -> None:
    assert events_from_chat_chunk(chunk) == []
    assert events_from_chat_chunk(ChatCompletionChunk.model_validate(chunk)) == []


def test_refusal_tokens_count_as_text() -> None:
    tok = {"token": "No", "logprob": -0.2, "bytes": [78, 111], "top_logprobs": []}
    chunk = _chunk(
        {"index": 0, "delta": {"refusal": "No"}, "logprobs": {"content": None, "refusal": [tok]}}
    )
    assert events_from_chat_chunk(chunk) == [TokenEvent("No", -0.2, bytes=b"No")]


def _set(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(MULTI)
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


LP = ("choices", 0, "logprobs", "content", 0)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ("not a chunk", "chunk"),
        ({"id": "x"}, "choices"),
        (_set(("choices",), {"index": 0}), "choices"),
        (_set(("choices", 0, "index"), "0"), "choices[0].index"),
        (_set(("choices", 0, "delta"), "Paris"), "choices[0].delta"),
        (_set(("choices", 0, "delta", "content"), 7), "choices[0].delta.content"),
        (_set(("choices", 0, "logprobs", "content"), {"token": "x"}), "logprobs.content"),
        (_set((*LP, "logprob"), "-0.1"), "logprobs.content[0].logprob"),
        (_set((*LP, "logprob"), True), "logprobs.content[0].logprob"),
        (_set((*LP, "token"), None), "logprobs.content[0].token"),
        (_set((*LP, "bytes"), [80, 256]), "logprobs.content[0].bytes"),
        (_set((*LP, "bytes"), "Paris"), "logprobs.content[0].bytes"),
        (_set((*LP, "top_logprobs"), [["Paris", -0.1]]), "content[0].top_logprobs[0]"),
        (_set((*LP, "top_logprobs", 1, "logprob"), "x"), "top_logprobs[1].logprob"),
    ],
)
def test_malformed_chunks_name_the_field(data: Any, field: str) -> None:
    with pytest.raises(ProviderFormatError) as info:
        events_from_chat_chunk(data)
    assert field in info.value.field
    assert info.value.field in str(info.value)
    assert isinstance(info.value, GuardrailError) and isinstance(info.value, ValueError)
    assert not isinstance(info.value, ConfigError)


DELTA_EVENT = {
    "type": "response.output_text.delta",
    "item_id": "msg_1",
    "output_index": 0,
    "content_index": 0,
    "sequence_number": 4,
    "delta": "Paris is",
    "logprobs": [
        {
            "token": "Paris",
            "logprob": -0.01,
            "top_logprobs": [
                {"token": "Paris", "logprob": -0.01},
                {"token": None, "logprob": -3.0},
            ],
        },
        {"token": " is", "logprob": -0.3},
    ],
}


def test_responses_delta_event_sdk_typed() -> None:
    typed = ResponseTextDeltaEvent.model_validate(DELTA_EVENT)
    parsed = TypeAdapter(ResponseStreamEvent).validate_python(DELTA_EVENT)
    assert isinstance(parsed, ResponseTextDeltaEvent)
    expected = [
        TokenEvent("Paris", -0.01, top_logprobs=(("Paris", -0.01),)),  # no bytes in Responses
        TokenEvent(" is", -0.3),
    ]
    for event in (typed, parsed, DELTA_EVENT):
        assert events_from_responses_event(event) == expected


def test_responses_other_events_and_missing_logprobs() -> None:
    done = {
        "type": "response.output_text.done",
        "item_id": "msg_1",
        "output_index": 0,
        "content_index": 0,
        "sequence_number": 9,
        "text": "Paris is",
        "logprobs": [],
    }
    assert events_from_responses_event(TypeAdapter(ResponseStreamEvent).validate_python(done)) == []
    bare = ResponseTextDeltaEvent.model_validate({**DELTA_EVENT, "logprobs": []})
    assert events_from_responses_event(bare) == [TokenEvent("Paris is", None)]
    with pytest.raises(ProviderFormatError, match=r"delta"):
        events_from_responses_event({**DELTA_EVENT, "delta": None})
    with pytest.raises(ProviderFormatError, match=r"logprobs\[1\]\.logprob"):
        events_from_responses_event(
            {
                **DELTA_EVENT,
                "logprobs": [DELTA_EVENT["logprobs"][0], {"token": "x", "logprob": "?"}],
            }
        )


def test_import_adapters_does_not_import_vendor_sdks() -> None:
    code = (
        "import sys, adapters\n"
        "print(','.join(m for m in ('openai', 'anthropic', 'langchain_core', 'httpx2')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_alternatives_are_skipped_when_the_skeleton_does_not_read_them() -> None:
    from adapters._guard._openai_events import chat_chunk_parts
    from adapters._providers._openai import _chunk_parser
    from guardrail import Monitor, StreamPolicy, TemperatureSkeleton, UniformSkeleton

    top = [{"token": f"t{i}", "logprob": -0.5 * i, "bytes": None} for i in range(5)]
    chunk = {
        "choices": [
            {
                "index": 0,
                "delta": {"content": " a"},
                "logprobs": {"content": [{"token": " a", "logprob": -0.1, "top_logprobs": top}]},
            }
        ]
    }
    full = chat_chunk_parts(chunk).events
    bare = chat_chunk_parts(chunk, with_top=False).events
    assert len(full[0].top_logprobs) == 5 and bare[0].top_logprobs == ()
    assert (bare[0].text, bare[0].logprob) == (full[0].text, full[0].logprob)
    uniform = Monitor.lift(StreamPolicy(), 1.0, skeleton=UniformSkeleton(100))
    temperature = Monitor.lift(StreamPolicy(), 1.0, skeleton=TemperatureSkeleton(100))
    assert _chunk_parser(uniform)(chunk)[0][0].top_logprobs == ()
    assert len(_chunk_parser(temperature)(chunk)[0][0].top_logprobs) == 5
