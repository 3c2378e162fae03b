"""The spec of the prompt-free skeleton (kind ``prompt_free``), and the way back.

Parameters (see :class:`guardrail.SkeletonSpec`):

- ``model``: ``"smollm2"`` (the SmolLM2-135M-Instruct GGUF of ``liftguard[local]``),
  ``"gemma3"`` (the Gemma 3 270M GGUF of ``liftguard[gemma]``), ``"qwen"`` (the
  Qwen2.5-Coder-1.5B-Instruct GGUF of ``liftguard[qwen]``) or the GGUF file's path;
- ``model_sha256``: the sha256 of that file, checked before the model is loaded (for the
  assembled Qwen file, against the sha256 recorded when it was verified, not hashed again);
- ``vocab_size``: the model's vocabulary, checked after;
- ``prefix``: the question-free prompt the answer is scored after;
- ``n_ctx``: the context size the model is loaded with.

A spec written before these were recorded (no parameters) means the bundled SmolLM2
with its default prefix, unchecked. Errors are ConfigErrors naming the field.
"""

from __future__ import annotations

from pathlib import Path

from guardrail import ConfigError, SkeletonSpec
from guardrail.traces._read import file_sha256 as _hash_file

from ._packaged import PACKAGED_MODELS, packaged_model_name, packaged_model_path
from ._qwen import qwen_verified_sha256

__all__ = ["BUNDLED_MODELS", "file_sha256", "model_name", "model_path", "spec_settings"]

BUNDLED_MODELS = PACKAGED_MODELS
"""Names of the packaged models a spec may give as its ``model``."""


def file_sha256(path: Path) -> str:
    """The sha256 of a model file: the one recorded at verification for the assembled
    Qwen GGUF while it is unchanged (1.1 GB is not hashed on every load), else hashed."""
    return qwen_verified_sha256(path) or _hash_file(path)


def model_name(path: Path) -> str:
    """``"smollm2"`` or ``"qwen"`` for those packaged models' files, else the file's
    absolute path."""
    return packaged_model_name(path) or str(path.resolve())


def model_path(model: object) -> Path:
    """The GGUF file a spec's ``model`` names (``None``: the bundled SmolLM2)."""
    if model is None:
        return packaged_model_path("smollm2")
    if model in PACKAGED_MODELS:
        return packaged_model_path(str(model))
    if not isinstance(model, str):
        raise ConfigError(f"skeleton.params.model: expected a string, got {model!r}")
    path = Path(model)
    if not path.is_file():
        raise ConfigError(
            f"skeleton.params.model: no such file: {model} (a GGUF path, or one of "
            f"{', '.join(BUNDLED_MODELS)})"
        )
    return path


def spec_settings(spec: SkeletonSpec) -> tuple[Path, str | None, int | None, int | None]:
    """``(model path, prefix, n_ctx, vocab_size)`` of a ``prompt_free`` spec, with the
    model file's sha256 checked against ``model_sha256`` when the spec records one."""
    if not isinstance(spec, SkeletonSpec) or spec.kind != "prompt_free":
        got = spec.kind if isinstance(spec, SkeletonSpec) else type(spec).__name__
        raise ConfigError(f"skeleton.kind: expected 'prompt_free', got {got!r}")
    p = spec.params  # types checked by SkeletonSpec
    path = model_path(p.get("model"))
    expected = p.get("model_sha256")
    if expected is not None:
        actual = file_sha256(path)
        if actual != expected:
            raise ConfigError(
                f"skeleton.params.model_sha256: {path} has sha256 {actual}, the spec records "
                f"{expected} (another model file)"
            )
    prefix, n_ctx, vocab = p.get("prefix"), p.get("n_ctx"), p.get("vocab_size")
    return (
        path,
        prefix if isinstance(prefix, str) else None,
        n_ctx if isinstance(n_ctx, int) else None,
        vocab if isinstance(vocab, int) else None,
    )
