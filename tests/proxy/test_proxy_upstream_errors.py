"""An upstream's refusal that is about logprobs but is not the model refusing them.

llama.cpp's ``llama-server`` refuses ``tools`` together with ``stream`` and ``logprobs``
(HTTP 400, the body below, as the real server sends it). The proxy always streams
upstream with logprobs, so a client's request with tools fails even when the client
asked for no stream: the client must get the upstream's own error (with a hint), not
"the model does not provide token logprobs", which would send it looking for another
model. Real openai clients against the proxy and the scripted upstream.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from proxy_harness import Upstream, running_proxy
from sse_server import Reply

from adapters import guarded_chat_completion
from guardrail import Monitor, StreamPolicy, UniformSkeleton

TOOLS_REFUSED = {
    "error": {
        "code": 400,
        "message": "logprobs is not supported with tools + stream",
        "type": "invalid_request_error",
    }
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "capital",
            "description": "The capital of a country.",
            "parameters": {"type": "object", "properties": {"country": {"type": "string"}}},
        },
    }
]
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def _ask(client: openai.OpenAI, stream: bool) -> Any:
    answer = client.chat.completions.create(
        model="test-model", messages=MESSAGES, tools=TOOLS, stream=stream
    )
    return list(answer) if stream else answer


@pytest.mark.parametrize("stream", [False, True])
def test_tools_refused_with_stream_and_logprobs_pass_through_with_a_hint(
    upstream: Upstream, stream: bool
) -> None:
    upstream.replies.put(Reply(status=400, body=TOOLS_REFUSED))
    with (
        running_proxy(upstream.base_url) as proxy,
        openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0) as client,
        pytest.raises(openai.BadRequestError) as info,
    ):
        _ask(client, stream)
    sent = upstream.last().body
    assert sent["tools"] == TOOLS and sent["stream"] is True and sent["logprobs"] is True
    error = info.value.body
    assert isinstance(error, dict)
    assert error["type"] == "invalid_request_error" and error["code"] == 400  # the upstream's
    assert error["message"].startswith("logprobs is not supported with tools + stream (")
    assert "always asks the upstream for a stream with logprobs" in error["message"]


def test_a_model_refusing_logprobs_is_still_named_as_such(upstream: Upstream) -> None:
    refused = {"error": {"message": "logprobs is not supported with this model.",
                         "type": "invalid_request_error", "param": None}}  # fmt: skip
    upstream.replies.put(Reply(status=400, body=refused))
    with (
        running_proxy(upstream.base_url) as proxy,
        openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0) as client,
        pytest.raises(openai.BadRequestError) as info,
    ):
        client.chat.completions.create(model="test-model", messages=MESSAGES)
    assert isinstance(info.value.body, dict)
    assert info.value.body["type"] == "liftguard_logprobs_refused"


async def test_the_adapter_passes_the_tools_refusal_through(upstream: Upstream) -> None:
    upstream.replies.put(Reply(status=400, body=TOOLS_REFUSED))
    monitor = Monitor.lift(StreamPolicy(aggregate="min"), 4.0, skeleton=UniformSkeleton(50))
    client = openai.AsyncOpenAI(base_url=upstream.base_url, api_key="k", max_retries=0)
    guarded = guarded_chat_completion(
        client, monitor=monitor, model="test-model", messages=MESSAGES, tools=TOOLS
    )
    with pytest.raises(openai.BadRequestError, match="not supported with tools"):
        await anext(guarded)
    await client.close()
