"""Exceptions raised by the adapters (in addition to those of :mod:`guardrail`).

The hierarchy::

    guardrail.GuardrailError
    └── ProviderFormatError     a provider chunk/event does not have the documented shape
                                (also ValueError)
"""

from __future__ import annotations

from guardrail import GuardrailError

__all__ = ["ProviderFormatError"]


class ProviderFormatError(GuardrailError, ValueError):
    """A provider chunk or event is malformed; ``field`` names where (e.g.
    ``choices[0].logprobs.content[1].logprob``)."""

    def __init__(self, message: str, *, field: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")
