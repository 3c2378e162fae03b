"""End to end with a real model: the bundled SmolLM2 behind its OpenAI-compatible server,
the proxy with the shipped certificate in front, the real openai client.

The proxy must reach the same verdict, and show the same text, as the adapters'
``guarded_chat_completion`` on the same server and question (same certificate,
same generation context). Two questions keep it short (llama.cpp on 2 cores).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from proxy_harness import running_proxy

from adapters import guarded_chat_completion
from adapters.proxy import StaticCertificate
from guardrail import GuardrailBlocked

pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')

from adapters.local import LocalChatServer, LocalModel, smollm2_certificate

QUESTIONS = ["What is the chemical symbol for gold?", "Which element has the atomic number 26?"]


@pytest.fixture(scope="module")
def model_server() -> Iterator[LocalChatServer]:
    with LocalChatServer(LocalModel()) as srv:
        yield srv


async def _direct(base_url: str, question: str) -> tuple[str, str]:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="local", max_retries=0)
    cert = smollm2_certificate()
    monitor = cert.monitor()
    parts: list[str] = []
    try:
        async for text in guarded_chat_completion(
            client, certificate=cert, monitor=monitor, model="smollm2",
            messages=[{"role": "user", "content": question}],
        ):  # fmt: skip
            parts.append(text)
    except GuardrailBlocked:
        pass
    finally:
        await client.close()
    return "".join(parts), monitor.verdict.state.value


async def _proxied(base_url: str, question: str) -> tuple[str, str, dict[str, Any]]:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="local", max_retries=0)
    parts: list[str] = []
    verdict: dict[str, Any] = {}
    try:
        stream = await client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": question}], stream=True
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
            verdict = (chunk.model_extra or {}).get("liftguard", verdict)
    except openai.APIError as exc:
        assert isinstance(exc.body, dict) and exc.type == "liftguard_blocked"
        verdict = exc.body["liftguard"]
    finally:
        await client.close()
    return "".join(parts), verdict["state"], verdict


@pytest.mark.slow
async def test_the_proxy_decides_as_the_adapter_does(model_server: LocalChatServer) -> None:
    cert = StaticCertificate(smollm2_certificate(), "smollm2")
    states = []
    with running_proxy(model_server.base_url, certificate=cert) as proxy:
        for question in QUESTIONS:
            direct_text, direct_state = await _direct(model_server.base_url, question)
            text, state, verdict = await _proxied(proxy.base_url, question)
            assert (text, state) == (direct_text, direct_state), question
            assert verdict["covered"] is True and verdict["context_mismatches"] == []
            assert verdict["certificate"] == "smollm2"
            if state == "blocked":
                assert text == ""  # buffered: nothing shown
            states.append(state)
            print(question, "->", state, repr(text))
    assert states == ["certified", "blocked"]  # greedy decoding: the same every run
