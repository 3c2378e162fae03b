"""A certificate file whose skeleton is the prompt-free model: the proxy loads the model
the spec names when it reads the file, and decides as the adapters do.

Without the skeleton built from the spec the proxy could not score a token (the
request would be refused with HTTP 500). The file is the fitted certificate
shipped for the bundled SmolLM2 (``guardrail/data/smollm2_fitted_certificate.json``,
skeleton ``prompt_free``). Loads llama.cpp: run under ``flock /tmp/llama.lock``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import openai
import pytest
from proxy_harness import running_proxy

from adapters import PromptFreeSkeleton, guarded_chat_completion
from adapters.proxy import FileCertificate, certificate_source
from guardrail import GuardrailBlocked

pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')

from adapters.local import (
    SMOLLM2_FITTED_CERTIFICATE,
    LocalChatServer,
    LocalModel,
    smollm2_fitted_certificate,
)

QUESTION = "What is the chemical symbol for gold?"


@pytest.fixture(scope="module")
def model_server() -> Iterator[LocalChatServer]:
    with LocalChatServer(LocalModel()) as srv:
        yield srv


async def _direct(base_url: str) -> tuple[str, str]:
    """Text and verdict reason of the adapters' guarded_chat_completion."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key="local", max_retries=0)
    cert = smollm2_fitted_certificate()
    monitor = cert.monitor()
    parts: list[str] = []
    try:
        async for text in guarded_chat_completion(
            client, certificate=cert, monitor=monitor, model="smollm2",
            messages=[{"role": "user", "content": QUESTION}],
        ):  # fmt: skip
            parts.append(text)
    except GuardrailBlocked:
        pass
    finally:
        await client.close()
    return "".join(parts), monitor.verdict.reason


async def _proxied(base_url: str) -> tuple[str, dict[str, Any]]:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="local", max_retries=0)
    try:
        answer = await client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": QUESTION}]
        )
    finally:
        await client.close()
    return str(answer.choices[0].message.content), dict((answer.model_extra or {})["liftguard"])


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
        text, verdict = await _proxied(proxy.base_url)
    direct_text, direct_reason = await _direct(model_server.base_url)
    assert (text, verdict["state"], verdict["certificate"]) == (
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
