"""A guarded answer from a :class:`~adapters.local.LocalModel`: the one stream that carries
everything a fitted statistic reads (logprobs, ``top_k`` alternatives and exact entropies).

:func:`guarded_generate` is also the method ``LocalModel.guarded_generate``: the
model's greedy tokens, each with its exact entropy, go through the adapters'
:class:`~adapters._guard._stream.StreamStep`.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

from guardrail import Certificate, ConfigError, Monitor

from .._guard._context import Supplies, monitor_for
from .._guard._openai_events import ChunkParts
from .._guard._settings import warn_mismatch
from .._guard._stream import Mode, OnBlock, StreamStep, guard

if TYPE_CHECKING:
    from ._model import LocalModel, LocalToken

__all__ = ["DEFAULT_MAX_TOKENS", "guarded_generate", "local_supplies"]

DEFAULT_MAX_TOKENS = 24
"""The answer length of :meth:`LocalModel.generate` (and of the shared traces)."""


def local_supplies(model: LocalModel) -> Supplies:
    """What ``model``'s stream carries: exact logprobs, ``top_k`` alternatives, exact
    entropies."""
    name = f"a local model's stream ({model.path.name}, top_k={model.top_k})"
    fix = "load the model with LocalModel(..., top_k={k})"
    return Supplies(name, alternatives=model.top_k, exact_entropy=True, fix=fix)


def guarded_generate(
    model: LocalModel,
    prompt: str,
    *,
    certificate: Certificate | None = None,
    monitor: Monitor | None = None,
    mode: Mode = "buffered",
    on_block: OnBlock = "raise",
    max_tokens: int | None = None,
    add_bos: bool = False,
) -> Generator[str, None, None]:
    """Generate ``model``'s greedy answer to ``prompt`` (:meth:`LocalModel.generate`) and
    yield only the text ``mode`` allows, as :func:`~adapters.guard_chat_stream` does for
    an API stream: ``"buffered"`` holds it until CERTIFIED, ``"passthrough"`` shows it at
    once, ``"final"`` releases it at the end iff certified; on BLOCKED generation
    stops and :class:`~guardrail.GuardrailBlocked` is raised (``on_block="raise"``)
    or the iterator ends (``"stop"``).

    Each token goes to ``certificate.monitor()`` (or ``monitor``, which must apply
    the certificate's rule if both are given) with its exact logprob, the model's
    ``top_k`` alternatives and -- for a fitted statistic -- its exact entropy, so a
    certificate of any feature group works here; one that reads more alternatives
    than ``top_k`` is a :class:`~guardrail.ConfigError` now. ``max_tokens``: the
    certificate's ``context.max_tokens`` when unset (else 24; a different value
    warns, as does a calibration temperature other than greedy). The answer ends
    as :meth:`LocalModel.generate` ends it: ``"stop"`` before an end-of-generation token or a
    line break, ``"length"`` after ``max_tokens`` tokens. Checked now; generation
    starts on the first iteration."""
    limit = _token_limit(certificate, max_tokens)
    monitor = monitor_for(monitor, certificate, local_supplies(model), max_tokens=limit)
    step = StreamStep(monitor, mode, on_block, _LocalTokens().parse)
    return guard(_answer(model, prompt, limit, add_bos), step)


def _token_limit(certificate: Certificate | None, max_tokens: int | None) -> int:
    """``max_tokens``, or the certificate's; a warning for each setting of the
    certificate's context that greedy generation with this limit does not keep."""
    ctx = certificate.context if certificate is not None else None
    calibrated = ctx.max_tokens if ctx is not None else None
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise ConfigError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
    if ctx is not None and ctx.temperature not in (None, 0.0):
        warn_mismatch("temperature", 0.0, ctx.temperature)
    if max_tokens is None:
        return calibrated if calibrated is not None else DEFAULT_MAX_TOKENS
    if calibrated is not None and max_tokens != calibrated:
        warn_mismatch("max_tokens", max_tokens, calibrated)
    return max_tokens


def _answer(
    model: LocalModel, prompt: str, max_tokens: int, add_bos: bool
) -> Iterator[LocalToken | str]:
    """The answer's tokens, then its finish reason."""
    count = 0
    for token in model.generate(prompt, max_tokens=max_tokens, add_bos=add_bos):
        count += 1
        yield token
    yield "length" if count >= max_tokens else "stop"


class _LocalTokens:
    """The local stream's parser: each item is one token (its event carries the exact
    entropy), or the finish reason."""

    __slots__ = ("_index",)

    def __init__(self) -> None:
        self._index = 0

    def parse(self, item: LocalToken | str) -> ChunkParts:
        if isinstance(item, str):
            return ChunkParts([], "", item)
        event = item.event(self._index)
        self._index += 1
        return ChunkParts([event], item.text)
