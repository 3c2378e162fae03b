"""The LiteLLM guardrail's requests in flight (``adapters/_litellm/_pending.py``) and the hooks
that fail closed without one, driven in-process with LiteLLM's own chunk types."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from guardrail import ConfigError

if find_spec("litellm") is None or find_spec("fastapi") is None:
    pytest.skip(
        'litellm is not installed (pip install "liftguard[litellm]")', allow_module_level=True
    )

from litellm_harness import OFFLINE_ENV
from proxy_harness import GOOD, ROLE, STOP, calibrated_certificate, tokens

from adapters._litellm._pending import KEY, PendingRequests

for _key, _value in OFFLINE_ENV.items():
    os.environ.setdefault(_key, _value)


class _Logging:
    """Stands in for LiteLLM's per-request logging object (any object with an identity)."""


def test_a_request_is_given_only_to_its_own_logging_object() -> None:
    pending = PendingRequests[str]()
    data: dict[str, Any] = {"litellm_logging_obj": _Logging()}
    pending.add(data, "mine")
    other = {"metadata": dict(data["metadata"]), "litellm_logging_obj": _Logging()}
    assert pending.take(other) is None  # the key copied to another request: not given
    again: dict[str, Any] = {"litellm_logging_obj": data["litellm_logging_obj"]}
    pending.add(again, "again")
    assert pending.take(again) == "again"


def test_a_request_without_its_logging_object_is_given_its_own() -> None:
    # LiteLLM's failure hook gets a copy of the request without the logging object
    pending = PendingRequests[str]()
    data: dict[str, Any] = {"litellm_logging_obj": _Logging()}
    pending.add(data, "mine")
    assert pending.take({"metadata": data["metadata"]}) == "mine"


def test_metadata_that_is_not_an_object_and_a_bad_limit_are_refused() -> None:
    with pytest.raises(ValueError, match="metadata must be an object"):
        PendingRequests[str]().add({"metadata": "a string"}, "x")
    for limit in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="max_pending_requests"):
            PendingRequests[str](limit)  # type: ignore[arg-type]


async def _chunks(events: list[dict[str, Any]], closed: list[bool]) -> AsyncIterator[Any]:
    from litellm.types.utils import ModelResponseStream

    try:
        for event in events:
            yield ModelResponseStream(**event)
    finally:
        closed.append(True)


async def test_an_answer_whose_request_was_not_prepared_is_refused_unread(tmp_path: Path) -> None:
    from adapters._litellm._wire import GuardrailHTTPError
    from adapters.litellm import LiftGuardGuardrail

    calibrated_certificate(0.3).save(tmp_path / "cert.json")
    guard = LiftGuardGuardrail(
        certificate=str(tmp_path / "cert.json"), event_hook=["pre_call", "post_call"]
    )
    data: dict[str, Any] = {"model": "m", "metadata": {KEY: "a key no pre-call hook made"}}
    closed: list[bool] = []
    stream = _chunks([ROLE, *tokens([GOOD] * 3), STOP], closed)
    await anext(stream)  # (an upstream answer in flight)
    hook = guard.async_post_call_streaming_iterator_hook(None, stream, data)
    with pytest.raises(GuardrailHTTPError) as refused:
        await anext(hook)
    assert refused.value.status_code == 503 and closed == [True]
    with pytest.raises(GuardrailHTTPError):
        await guard.async_post_call_success_hook(data, None, object())
    text = {"model": "m", "prompt": "x"}
    with pytest.raises(GuardrailHTTPError) as route:
        await guard.async_pre_call_hook(None, None, text, "atext_completion")
    assert route.value.status_code == 400
    assert route.value.detail["error"]["code"] == "route_not_guarded"


async def test_a_label_for_an_answer_still_being_served_is_told_to_come_back(
    tmp_path: Path,
) -> None:
    # the pre-call hook marks the request in flight, so a label that overtakes the
    # answer gets 503 answer_in_flight (come back), never 404 (unknown: give up)
    from adapters._risk._risk_replies import FeedbackRefused
    from adapters.litellm import LiftGuardGuardrail

    calibrated_certificate(0.3).save(tmp_path / "cert.json")
    guard = LiftGuardGuardrail(
        certificate=str(tmp_path / "cert.json"), event_hook=["pre_call", "post_call"]
    )
    data: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": "Capital of France?"}],
        "stream": True,
        "litellm_call_id": "call-1",
        "litellm_logging_obj": _Logging(),
    }
    await guard.async_pre_call_hook(None, None, data, "acompletion")
    # the client has the request id from the stream's headers before its first chunk
    headers = await guard.async_post_call_response_headers_hook(data, None, None)
    request_id = headers["x-liftguard-request-id"]
    with pytest.raises(FeedbackRefused) as early:
        guard.risk.label(request_id, correct=True)
    assert (early.value.status, early.value.code) == (503, "answer_in_flight")
    for other in ("call-1", "call-2"):  # LiteLLM's call id (the client's choice) is no id here
        with pytest.raises(FeedbackRefused) as unknown:
            guard.risk.label(other, correct=True)
        assert (unknown.value.status, unknown.value.code) == (404, "unknown_answer")


async def test_only_a_request_the_guardrail_prepared_gets_a_request_id_header(
    tmp_path: Path,
) -> None:
    from adapters.litellm import LiftGuardGuardrail

    calibrated_certificate(0.3).save(tmp_path / "cert.json")
    guard = LiftGuardGuardrail(
        certificate=str(tmp_path / "cert.json"), event_hook=["pre_call", "post_call"]
    )
    hook = guard.async_post_call_response_headers_hook
    guessed: dict[str, Any] = {"model": "m", "metadata": {KEY: "a key no pre-call hook made"}}
    assert await hook(guessed, None, None) is None
    prepared: dict[str, Any] = {
        "model": "m", "messages": [{"role": "user", "content": "Hi?"}], "stream": True,
        "litellm_call_id": "call-1", "litellm_logging_obj": _Logging(),
    }  # fmt: skip
    await guard.async_pre_call_hook(None, None, prepared, "acompletion")
    request_id = (await hook(prepared, None, None))["x-liftguard-request-id"]
    assert request_id.startswith("lg-") and "call-1" not in request_id
    other = {**prepared, "litellm_logging_obj": _Logging()}  # its key, another request
    assert await hook(other, None, None) is None
