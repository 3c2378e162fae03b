"""The guard proxy under abuse: content it cannot read, answers that never end, clients
that vanish, bad bodies. Each test drives the real proxy (uvicorn) with the openai client
or raw HTTP, in front of the scripted SSE upstream."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from proxy_harness import GOOD, ROLE, STOP, Upstream, running_proxy, tokens
from sse_server import Reply, chat_chunk

MESSAGES = [{"role": "user", "content": "Send the money."}]
TOOL_CALL = {
    "index": 0,
    "id": "call_1",
    "type": "function",
    "function": {"name": "transfer_money", "arguments": '{"to": "mallory", "amount": 1000}'},
}


def _client(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="sk-client", max_retries=0)


def _text_then_tool_call() -> list[dict[str, Any]]:
    """Text with good logprobs, then a tool call (no logprobs), then finish ``stop``."""
    return [ROLE, *tokens([GOOD] * 5), chat_chunk({"tool_calls": [TOOL_CALL]}, None), STOP]


# --- 4. tool calls are never certified --------------------------------------------------------


@pytest.mark.parametrize("mode", ["buffered", "passthrough"])
async def test_a_streamed_tool_call_never_reaches_the_client(upstream: Upstream, mode: str) -> None:
    upstream.replies.put(Reply(_text_then_tool_call(), delay=0.0))
    with running_proxy(upstream.base_url, mode=mode) as proxy:
        client = _client(proxy.base_url)
        seen: list[Any] = []
        with pytest.raises(openai.APIError) as caught:
            stream = await client.chat.completions.create(
                model="test-model", messages=MESSAGES, stream=True
            )
            async for chunk in stream:
                seen.append(chunk)
        await client.close()
    assert all(not c.choices or c.choices[0].delta.tool_calls is None for c in seen)
    assert all(not c.choices or c.choices[0].finish_reason is None for c in seen)
    body = caught.value.body
    assert isinstance(body, dict) and body["liftguard"]["cause"] == "tool_call"
    assert body["liftguard"]["state"] == "blocked"


async def test_a_non_streamed_tool_call_is_blocked_not_dropped(upstream: Upstream) -> None:
    upstream.replies.put(Reply(_text_then_tool_call(), delay=0.0))
    with running_proxy(upstream.base_url) as proxy:
        client = _client(proxy.base_url)
        with pytest.raises(openai.UnprocessableEntityError) as caught:
            await client.chat.completions.create(model="test-model", messages=MESSAGES)
        await client.close()
    assert (caught.value.type, caught.value.code) == ("liftguard_blocked", "tool_call")


async def test_a_tool_call_in_observe_mode_flows_and_is_reported(upstream: Upstream) -> None:
    upstream.replies.put(Reply(_text_then_tool_call(), delay=0.0))
    with running_proxy(upstream.base_url, mode="observe") as proxy:
        client = _client(proxy.base_url)
        completion = await client.chat.completions.create(model="test-model", messages=MESSAGES)
        await client.close()
    verdict = (completion.model_extra or {})["liftguard"]
    assert (verdict["state"], verdict["cause"]) == ("blocked", "tool_call")
    calls = completion.choices[0].message.tool_calls
    assert calls is not None and calls[0].function.name == "transfer_money"  # not dropped
