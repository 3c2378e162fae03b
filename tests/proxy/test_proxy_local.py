"""End to end with a real model: the bundled SmolLM2 behind its OpenAI-compatible server,
the proxy with a shipped certificate in front, the real openai client.

The proxy must reach the same verdict, and show the same text, as the adapters'
``guarded_chat_completion`` on the same server and question (same certificate,
same generation context). Two questions keep it short (llama.cpp on 2 cores).

A certificate file whose skeleton is the prompt-free model (the fitted certificate
shipped for SmolLM2, ``guardrail/data/smollm2_fitted_certificate.json``): the proxy
loads the model the spec names when it reads the file; without it the proxy could
not score a token (the request would be refused with HTTP 500).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import openai
import pytest
from proxy_harness import guarded_directly, running_proxy

from adapters import PromptFreeSkeleton
from adapters._serving._certs import FileCertificate
from adapters.proxy import StaticCertificate, certificate_source

pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')

from adapters._local._shipped import SMOLLM2_FITTED_CERTIFICATE
from adapters.local import (
    LocalChatServer,
    LocalModel,
    smollm2_certificate,
    smollm2_fitted_certificate,
)

QUESTIONS = ["What is the chemical symbol for gold?", "Which element has the atomic number 26?"]


@pytest.fixture(scope="module")
def model_server() -> Iterator[LocalChatServer]:
    with LocalChatServer(LocalModel()) as srv:
        yield srv


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
            direct_text, direct = await guarded_directly(
                model_server.base_url, question, cert.current()[0]
            )
            text, state, verdict = await _proxied(proxy.base_url, question)
            assert (text, state) == (direct_text, direct.state.value), question
            assert verdict["covered"] is True and verdict["context_mismatches"] == []
            assert verdict["certificate"] == "smollm2"
            if state == "blocked":
                assert text == ""  # buffered: nothing shown
            states.append(state)
            print(question, "->", state, repr(text))
    assert states == ["certified", "blocked"]  # greedy decoding: the same every run


@pytest.mark.slow
async def test_a_prompt_free_certificate_file_is_served_with_its_model(
    model_server: LocalChatServer,
) -> None:
    path = Path(str(resources.files("guardrail") / "data" / SMOLLM2_FITTED_CERTIFICATE))
    source = certificate_source(path)
    assert isinstance(source, FileCertificate)
    cert, label = source.current()
    assert cert.skeleton.kind == "prompt_free"
    assert isinstance(cert.bound_skeleton, PromptFreeSkeleton)  # loaded from the spec
    with running_proxy(model_server.base_url, certificate=source) as proxy:
        text, state, verdict = await _proxied(proxy.base_url, QUESTIONS[0])
    direct_text, direct = await guarded_directly(
        model_server.base_url, QUESTIONS[0], smollm2_fitted_certificate()
    )
    direct_reason = direct.reason
    assert (text, state, verdict["certificate"]) == (
        "The chemical symbol for gold is Au.", "certified", label,
    )  # fmt: skip
    # the same answer and verdict as the adapters give; the scores agree to about 1e-3:
    # llama.cpp's logits (the server's and the skeleton's) vary in their last digits
    # with what the model's KV cache held before, and here the second run reuses both
    assert direct_text == text and direct_reason.startswith("certified: final fitted score")
    assert _score(verdict["reason"]) == pytest.approx(_score(direct_reason), abs=0.01)


def _score(reason: str) -> float:
    found = re.search(r"fitted score (-?[0-9.]+) ", reason)
    assert found is not None, reason
    return float(found.group(1))
