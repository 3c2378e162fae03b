"""The certificates shipped for the bundled SmolLM2-135M-Instruct (in ``guardrail/data``);
public in :mod:`adapters.local`."""

from __future__ import annotations

from importlib import resources

from guardrail import Certificate
from guardrail._reads import Skeleton

__all__ = [
    "SMOLLM2_CERTIFICATE",
    "SMOLLM2_FITTED_CERTIFICATE",
    "smollm2_certificate",
    "smollm2_fitted_certificate",
]

SMOLLM2_CERTIFICATE = "smollm2_certificate.json"
"""File name of the shipped single-score certificate in ``guardrail/data`` (see its
README)."""
SMOLLM2_FITTED_CERTIFICATE = "smollm2_fitted_certificate.json"
"""File name of the shipped fitted certificate in ``guardrail/data``."""


def _shipped(name: str) -> Certificate:
    source = resources.files("guardrail") / "data" / name
    return Certificate.from_json(source.read_text(encoding="utf-8"))


def smollm2_certificate() -> Certificate:
    """The single-score certificate shipped for the bundled SmolLM2-135M-Instruct (Q4_1):
    the weakest token's lift against the uniform skeleton; needs only logprobs."""
    return _shipped(SMOLLM2_CERTIFICATE)


def smollm2_fitted_certificate(*, skeleton: Skeleton | None = None) -> Certificate:
    """The fitted certificate shipped for the bundled SmolLM2-135M-Instruct (Q4_1),
    with its prompt-free skeleton bound: ``skeleton``, else a new
    :class:`~adapters.PromptFreeSkeleton` (a second copy of the bundled model, loaded
    now; it must not be the model that generates). Streams must carry each token's
    logprob and at least 5 alternatives (``top_logprobs=5``)."""
    if skeleton is None:
        from ._prompt_free import PromptFreeSkeleton

        skeleton = PromptFreeSkeleton()
    return _shipped(SMOLLM2_FITTED_CERTIFICATE).with_skeleton(skeleton)
