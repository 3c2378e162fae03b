"""The LiteLLM guardrail in a real LiteLLM proxy process in front of a real model: the bundled
SmolLM2 behind liftguard's OpenAI-compatible local server, the shipped SmolLM2 certificate,
the openai client. Through LiteLLM the guardrail reaches the verdict, and shows the text,
that the adapters' ``guarded_chat_completion`` gives on the same server and question.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib.util import find_spec
from typing import Any

import pytest

if find_spec("litellm") is None or find_spec("fastapi") is None:
    pytest.skip(
        'litellm is not installed (pip install "liftguard[litellm]")', allow_module_level=True
    )
pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')

import openai
from litellm_harness import LiteLLM, blocked_verdict, running_litellm
from proxy_harness import guarded_directly

from adapters.local import LocalChatServer, LocalModel, smollm2_certificate

QUESTIONS = ["What is the chemical symbol for gold?", "Which element has the atomic number 26?"]


@pytest.fixture(scope="module")
def model_server() -> Iterator[LocalChatServer]:
    with LocalChatServer(LocalModel()) as srv:
        yield srv


@pytest.fixture(scope="module")
def litellm(
    model_server: LocalChatServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiteLLM]:
    with running_litellm(
        tmp_path_factory.mktemp("litellm"), model_server.base_url,
        certificate=smollm2_certificate(), guardrails={"guarded": {"guard_mode": "buffered"}},
        timeout_s=120.0,
    ) as proc:  # fmt: skip
        yield proc


async def _through_litellm(proc: LiteLLM, question: str) -> tuple[str, dict[str, Any]]:
    client = openai.AsyncOpenAI(base_url=proc.base_url, api_key=proc.key, max_retries=0,
                                timeout=120)  # fmt: skip
    parts: list[str] = []
    verdict: dict[str, Any] = {}
    try:
        stream = await client.chat.completions.create(
            model="guarded", messages=[{"role": "user", "content": question}], stream=True
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
            verdict = (chunk.model_extra or {}).get("liftguard", verdict)
    except openai.APIError as exc:  # buffered: a block before anything was sent, HTTP 422
        verdict = blocked_verdict(exc)
    finally:
        await client.close()
    return "".join(parts), verdict


@pytest.mark.slow
async def test_litellm_decides_as_the_adapter_does(
    model_server: LocalChatServer, litellm: LiteLLM
) -> None:
    cert = smollm2_certificate()
    states = []
    for question in QUESTIONS:
        direct_text, direct = await guarded_directly(model_server.base_url, question, cert)
        text, verdict = await _through_litellm(litellm, question)
        assert (text, verdict["state"]) == (direct_text, direct.state.value), question
        assert verdict["covered"] is True and verdict["context_mismatches"] == []
        # the same rule at the same token; the lifts agree to about 0.05 (llama.cpp's logits
        # vary in their last digits with what the server's KV cache held before)
        assert verdict["tokens"] == direct.t and verdict["cause"] == direct.cause.value
        assert _numbers(verdict["reason"]) == pytest.approx(_numbers(direct.reason), abs=0.05)
        if verdict["state"] == "blocked":
            assert text == ""  # buffered: nothing shown
        states.append(verdict["state"])
    assert states == ["certified", "blocked"]  # greedy decoding: the same every run


def _numbers(reason: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?[0-9]+(?:[.][0-9]+)?", reason)]
