"""The LiteLLM guardrail's hooks driven in-process with LiteLLM's own chunk types (the
server's side of the hooks stands in for LiteLLM's proxy process).

A buffered answer is counted as shown only once every held chunk was taken: LiteLLM
(with starlette's ASGI 2.4 responses) notices a client that left only when a write fails,
which closes the hook's generator at the yield of the first held chunk. Such an answer was
not shown, so it takes no label.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

if find_spec("litellm") is None or find_spec("fastapi") is None:
    pytest.skip(
        'litellm is not installed (pip install "liftguard[litellm]")', allow_module_level=True
    )

from litellm_harness import OFFLINE_ENV
from proxy_harness import GOOD, ROLE, STOP, calibrated_certificate, tokens

for _key, _value in OFFLINE_ENV.items():
    os.environ.setdefault(_key, _value)


async def _chunks(events: list[dict[str, Any]]) -> AsyncIterator[Any]:
    from litellm.types.utils import ModelResponseStream

    for event in events:
        yield ModelResponseStream(**event)


async def _guarded(tmp_path: Path, name: str) -> tuple[Any, dict[str, Any]]:
    from adapters.litellm import LiftGuardGuardrail

    calibrated_certificate(0.3).save(tmp_path / "cert.json")
    guard = LiftGuardGuardrail(
        guardrail_name=name, certificate=str(tmp_path / "cert.json"),
        event_hook=["pre_call", "post_call"], guard_mode="buffered",
    )  # fmt: skip
    data: dict[str, Any] = {
        "model": "m", "litellm_call_id": f"call-{name}", "stream": True,
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
    }  # fmt: skip
    await guard.async_pre_call_hook(None, None, data, "acompletion")
    return guard, data


EVENTS = [ROLE, *tokens([GOOD] * 7), STOP]


async def test_a_buffered_answer_whose_client_left_is_not_shown(tmp_path: Path) -> None:
    from adapters._risk._risk_watch import FeedbackRefused

    guard, data = await _guarded(tmp_path, "left")
    hook = guard.async_post_call_streaming_iterator_hook(None, _chunks(EVENTS), data)
    first = await anext(hook)  # the first held chunk goes out ...
    assert first is not None
    await hook.aclose()  # ... and its write fails: the client is gone
    with pytest.raises(FeedbackRefused) as refused:
        guard.risk.label("chatcmpl-test", True)
    assert refused.value.code != "duplicate_feedback"


async def test_a_buffered_answer_taken_whole_is_shown(tmp_path: Path) -> None:
    guard, data = await _guarded(tmp_path, "whole")
    hook = guard.async_post_call_streaming_iterator_hook(None, _chunks(EVENTS), data)
    out = [chunk async for chunk in hook]
    assert out and out[-1].liftguard["state"] == "certified"
    assert guard.risk.label("chatcmpl-test", True)["labels"] == 1


# --- whole answers: the attempt's client reads at most max_answer_bytes ----------------------


async def _whole(tmp_path: Path, **settings: Any) -> tuple[Any, dict[str, Any]]:
    from adapters.litellm import LiftGuardGuardrail

    calibrated_certificate(0.3).save(tmp_path / "cert.json")
    guard = LiftGuardGuardrail(
        guardrail_name="whole-cap", certificate=str(tmp_path / "cert.json"),
        event_hook=["pre_call", "post_call"], **settings,
    )  # fmt: skip
    data: dict[str, Any] = {
        "model": "guarded", "stream": False,
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
    }  # fmt: skip
    await guard.async_pre_call_hook(None, None, data, "acompletion")
    return guard, data


def _attempt(data: dict[str, Any], **more: Any) -> dict[str, Any]:
    """LiteLLM's call for one attempt: the request with its deployment's parameters."""
    return {
        **data, "model": "openai/gpt-test", "api_base": "http://127.0.0.1:9/v1",
        "api_key": "upstream-key", "client": None, **more,
    }  # fmt: skip


async def test_a_whole_answer_is_read_with_a_client_capped_at_max_answer_bytes(
    tmp_path: Path,
) -> None:
    import httpx
    import openai
    from litellm.types.utils import CallTypes

    from adapters._litellm._capped import CappedTransport

    guard, data = await _whole(tmp_path, max_answer_bytes=4096)
    attempt = await guard.async_pre_call_deployment_hook(_attempt(data), CallTypes.acompletion)
    client = attempt["client"]
    assert isinstance(client, openai.AsyncOpenAI)
    assert str(client.base_url).startswith("http://127.0.0.1:9/v1")
    assert client.api_key == "upstream-key" and client.max_retries == 0
    transport = client._client._transport
    assert isinstance(transport, CappedTransport) and transport._limit == 4096

    # a stream (capped as it comes), another guardrail's request, another provider: as given
    streamed = await guard.async_pre_call_deployment_hook(
        _attempt(data, stream=True), CallTypes.acompletion
    )
    assert streamed["client"] is None
    other = await guard.async_pre_call_deployment_hook(
        _attempt({**data, "metadata": {}}), CallTypes.acompletion
    )
    assert other["client"] is None
    vllm = await guard.async_pre_call_deployment_hook(
        _attempt(data, model="hosted_vllm/gpt-test"), CallTypes.acompletion
    )
    assert vllm["client"] is None

    # the body past the cap is not read: the SDK raises it unretried
    sent: list[int] = []

    def long(request: httpx.Request) -> httpx.Response:
        sent.append(1)
        return httpx.Response(200, json={"choices": [{"message": {"content": "w " * 8192}}]})

    transport._inner = httpx.AsyncClient(transport=httpx.MockTransport(long))
    from adapters._litellm._capped import AnswerTooLarge

    with pytest.raises(AnswerTooLarge):
        await client.chat.completions.create(model="gpt-test", messages=[])
    assert len(sent) == 1


async def test_a_whole_answer_cut_at_the_byte_cap_is_blocked(tmp_path: Path) -> None:
    from adapters._litellm._capped import AnswerTooLarge
    from adapters._litellm._wire import GuardrailHTTPError

    guard, data = await _whole(tmp_path)
    try:
        try:
            raise AnswerTooLarge(guard.max_answer_bytes)
        except AnswerTooLarge as exc:  # LiteLLM re-raises it as an error of its own
            raise RuntimeError("litellm.BadGatewayError: upstream-key ...") from exc
    except RuntimeError as wrapped:
        out = await guard.async_post_call_failure_hook(data, wrapped, None)
    assert isinstance(out, GuardrailHTTPError) and out.status_code == 502
    error = out.detail["error"]
    assert error["code"] == "upstream_too_large" and "upstream-key" not in str(out.detail)
    assert error["liftguard"]["state"] == "blocked"
    assert error["liftguard"]["cause"] == "over_token_limit"
    assert str(8 * 1024 * 1024) in error["message"]
