"""A real local model behind an OpenAI-compatible loopback endpoint, guarded end to end."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from adapters import guarded_chat_completion
from adapters._local import LocalModel
from adapters._local_server import LocalChatServer
from adapters.local import smollm2_certificate
from guardrail import CertificateMonitor, GuardrailBlocked, State, StreamPolicy, UniformSkeleton

pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')


@pytest.fixture(scope="module")
def server() -> Iterator[LocalChatServer]:
    with LocalChatServer(LocalModel()) as srv:
        yield srv


def _monitor(vocab: int) -> CertificateMonitor:
    cal = smollm2_certificate().calibration
    assert cal is not None and cal.policy is not None
    return CertificateMonitor(
        StreamPolicy.from_dict(cal.policy), cal.tau, skeleton=UniformSkeleton(vocab)
    )


async def test_certified_answer_is_released(server: LocalChatServer) -> None:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="local", max_retries=0)
    monitor = _monitor(server.model.vocab_size)
    parts = [
        p
        async for p in guarded_chat_completion(
            client,
            monitor=monitor,
            model="smollm2",
            messages=[{"role": "user", "content": "What is the chemical symbol for gold?"}],
        )
    ]
    assert monitor.verdict.state is State.CERTIFIED
    assert "Au" in "".join(parts)
    await client.close()


async def test_blocked_answer_stops_generation(server: LocalChatServer) -> None:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="local", max_retries=0)
    monitor = _monitor(server.model.vocab_size)
    shown: list[str] = []
    with pytest.raises(GuardrailBlocked) as info:
        async for p in guarded_chat_completion(
            client,
            monitor=monitor,
            model="smollm2",
            messages=[{"role": "user", "content": "Which element has the atomic number 26?"}],
        ):
            shown.append(p)
    assert shown == []  # buffered: nothing of a blocked answer reaches the user
    assert info.value.verdict.state is State.BLOCKED
    assert info.value.verdict.t < 24  # blocked before the answer was complete
    await client.close()
