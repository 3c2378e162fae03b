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
