"""What a rule reads of each token: :class:`Reads`, and the one test of a usable logprob.

Every rule reads the emitted token's logprob. Beyond it, an evidence rule (and the
skeleton it scores lifts with) declares what else it reads, so that an adapter asks
the provider for exactly that, parses no more, and refuses up front a stream that
cannot carry it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ._trace_format import CENSORED_LOGPROB
from ._verdict import TokenEvent

__all__ = ["LOGPROB_SLACK", "Reads", "Skeleton", "skeleton_reads", "usable_logprob"]

LOGPROB_SLACK = 1e-6
"""The largest logprob accepted as a probability (providers round ``log 1`` up to ~1e-7)."""


@runtime_checkable
class Skeleton(Protocol):
    """A skeleton baseline ``S``: the log-probability it gives the emitted token. It may
    say what it reads of each token in a ``reads`` attribute (:func:`skeleton_reads`).

    Examples
    --------
        >>> skeleton = UniformSkeleton(vocab_size=1000)
        >>> isinstance(skeleton, Skeleton)
        True
        >>> round(skeleton.log_prob(TokenEvent("a", logprob=-0.1)), 3)
        -6.908
    """

    def log_prob(self, event: TokenEvent) -> float: ...


def usable_logprob(value: float | None) -> bool:
    """Whether ``value`` is a logprob a rule can read: a number in ``(CENSORED_LOGPROB,
    LOGPROB_SLACK]`` (not None, NaN, +/-inf, censored outside the top-k, or positive)."""
    return value is not None and CENSORED_LOGPROB < value <= LOGPROB_SLACK


@dataclass(frozen=True, slots=True)
class Reads:
    """What a rule reads of each token besides its logprob.

    ``alternatives``: the top alternatives it needs per token (0: none required);
    ``uses_alternatives``: it reads whatever alternatives come (an adapter should ask
    for and parse them; true whenever ``alternatives > 0``); ``exact_entropy``: the
    entropy of each token's full distribution (only a local model supplies it);
    ``token_ids``: each token's id in the model's vocabulary; ``skeleton``: it scores
    lifts against a skeleton object; ``group``: a fitted statistic's feature group
    (``None`` for a lift rule), for messages.

    Examples
    --------
        >>> reads = TemperatureSkeleton(vocab_size=1000).reads
        >>> reads.uses_alternatives, reads.token_ids
        (True, False)
    """

    alternatives: int = 0
    uses_alternatives: bool = False
    exact_entropy: bool = False
    token_ids: bool = False
    skeleton: bool = False
    group: str | None = None

    def __post_init__(self) -> None:
        if self.alternatives > 0 and not self.uses_alternatives:
            object.__setattr__(self, "uses_alternatives", True)

    def __or__(self, other: Reads) -> Reads:
        """Everything either reads (``group`` from the left if it has one)."""
        return Reads(
            max(self.alternatives, other.alternatives),
            self.uses_alternatives or other.uses_alternatives,
            self.exact_entropy or other.exact_entropy,
            self.token_ids or other.token_ids,
            self.skeleton or other.skeleton,
            self.group if self.group is not None else other.group,
        )


_UNKNOWN = Reads(uses_alternatives=True)


def skeleton_reads(skeleton: object) -> Reads:
    """What ``skeleton`` reads of each token (its ``reads`` attribute). A skeleton that
    does not say is assumed to read the alternatives and not the token ids."""
    reads = getattr(skeleton, "reads", _UNKNOWN)
    return reads if isinstance(reads, Reads) else _UNKNOWN
