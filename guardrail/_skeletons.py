"""Skeletons usable from API streams (top-k) and local models, behind one protocol.

Every skeleton exposes ``log_prob(event) -> float``: the natural-log
probability of the emitted token under the baseline (see
:class:`guardrail._reads.Skeleton`), and ``to_spec()``: its
:class:`~guardrail.SkeletonSpec` (the way back is ``spec.build(...)``; see
:mod:`guardrail._skeleton_spec`).

- :class:`UniformSkeleton`: ``S = 1/|V|``.
- :class:`TemperatureSkeleton`: ``S = P^(1/T)/Z_T``; ``log Z_T`` is estimated
  from the event's top-k alternatives by top-k compensation.
- :class:`~guardrail.VectorSkeleton` (:mod:`guardrail._vector`): a fixed vector
  ``log S`` over the vocabulary (a VSD skeleton, a unigram LM), indexed by token id.
- :class:`NGramSkeleton`: a token n-gram model with interpolated absolute
  discounting (backing off to lower orders, then to a floored unigram), for
  low-diversity domains; stateful per stream (``for_stream()``).
- :func:`select_skeleton_kind`: the paper's rule from the type-token ratio.

The data of a vector or n-gram skeleton (``to_arrays()``, ``from_arrays()``) never
goes into its spec: the spec holds the data's content hash and, once the data was
saved (``skeleton_store.save_skeleton``, ``SkeletonStore.put_skeleton``), its
``source``.

What a skeleton reads of a stream, as a ``reads`` attribute
(:class:`~guardrail._reads.Reads`) every skeleton may set: ``uses_alternatives`` (the
event's alternatives; adapters skip parsing them otherwise) and ``token_ids`` (the
emitted token's id in the model's vocabulary). API streams carry token text and
bytes but no ids: an id-based skeleton (n-gram, a stored vector) runs on them
through :class:`WithTokenIds`, which asks a :class:`TokenIds` resolver (tiktoken
for OpenAI models, the GGUF vocabulary for local ones; see
``adapters._guard._token_ids.token_ids_for``) for each token's id.
:func:`~guardrail._reads.skeleton_reads` reads the attribute, defaulting to what is safe
(alternatives parsed, ids not required).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ._errors import ConfigError, MissingLogprobsError
from ._reads import Reads, Skeleton, skeleton_reads
from ._skeleton_spec import SkeletonSpec, arrays_sha256
from ._topk import TailRule, estimate_logz
from ._verdict import TokenEvent

__all__ = [
    "NGramSkeleton",
    "TemperatureSkeleton",
    "TokenIds",
    "UniformSkeleton",
    "WithTokenIds",
    "select_skeleton_kind",
    "type_token_ratio",
]


@runtime_checkable
class TokenIds(Protocol):
    """Resolves a streamed token to its id in one model's vocabulary (None if it cannot:
    the token's bytes are not exactly one token of that vocabulary).

    Examples
    --------
        >>> class ByteIds:
        ...     name = "bytes"
        ...     def token_id(self, event):
        ...         return event.bytes[0] if event.bytes and len(event.bytes) == 1 else None
        >>> isinstance(ByteIds(), TokenIds)
        True
    """

    name: str

    def token_id(self, event: TokenEvent) -> int | None: ...


class WithTokenIds:
    """An id-based skeleton on a stream without ids: each event gets its ``token_id``
    from ``ids`` before ``skeleton`` scores it. A token the resolver cannot map raises
    :class:`~guardrail.MissingLogprobsError` (its lift cannot be computed).

    Examples
    --------
        >>> class ByteIds:
        ...     name = "bytes"
        ...     def token_id(self, event):
        ...         return event.bytes[0] if event.bytes and len(event.bytes) == 1 else None
        >>> skeleton = WithTokenIds(VectorSkeleton([-1.0] * 256), ByteIds())
        >>> skeleton.log_prob(TokenEvent("a", logprob=-0.1, bytes=b"a"))
        -1.0
    """

    def __init__(self, skeleton: Skeleton, ids: TokenIds) -> None:
        if not isinstance(ids, TokenIds):
            raise ConfigError(f"ids must resolve token ids (token_id(event)), got {ids!r}")
        self.skeleton, self.ids = skeleton, ids
        self.reads = replace(skeleton_reads(skeleton), token_ids=False)

    def for_stream(self) -> WithTokenIds:
        for_stream = getattr(self.skeleton, "for_stream", None)
        return WithTokenIds(for_stream(), self.ids) if callable(for_stream) else self

    def to_spec(self) -> SkeletonSpec:
        """The wrapped skeleton's spec (the resolver comes from the model's tokenizer)."""
        return SkeletonSpec.of(self.skeleton)

    def log_prob(self, event: TokenEvent) -> float:
        if event.token_id is None:
            token_id = self.ids.token_id(event)
            if token_id is None:
                raise MissingLogprobsError(
                    f"token {event.text!r} is not one token of {self.ids.name}: its id, and so "
                    "its skeleton probability, is unknown"
                )
            event = replace(event, token_id=token_id)
        return self.skeleton.log_prob(event)


class UniformSkeleton:
    """``S = 1/|V|`` for every token: the lift is ``log P + log |V|``.

    Examples
    --------
        >>> skeleton = UniformSkeleton(vocab_size=1000)
        >>> round(skeleton.log_prob(TokenEvent("a", logprob=-0.1)), 3)
        -6.908
    """

    __slots__ = ("_log_prob", "vocab_size")

    reads = Reads()
    """Scores need only the emitted token: stream adapters skip the alternatives."""

    def __init__(self, vocab_size: int) -> None:
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
            raise ConfigError(f"vocab_size must be an integer >= 1, got {vocab_size!r}")
        self.vocab_size, self._log_prob = vocab_size, -math.log(vocab_size)

    def log_prob(self, event: TokenEvent) -> float:
        return self._log_prob

    def to_spec(self) -> SkeletonSpec:
        return SkeletonSpec("uniform", {"vocab_size": self.vocab_size})


class TemperatureSkeleton:
    """Temperature-smoothed prior of the model itself: ``log S = log P / T - log Z_T``.

    ``log Z_T`` comes from the event's ``top_logprobs`` (values only; at least
    the emitted token's own logprob is used when the provider sent none) with
    top-k compensation over ``vocab_size``. T = 1.5 (general) or 2.0 (code).

    Examples
    --------
        >>> skeleton = TemperatureSkeleton(vocab_size=1000, temperature=1.5)
        >>> event = TokenEvent("a", logprob=-0.1, top_logprobs=(("a", -0.1), ("b", -2.5)))
        >>> round(skeleton.log_prob(event), 3)
        -0.254
    """

    reads = Reads(uses_alternatives=True)

    def __init__(self, vocab_size: int, temperature: float = 1.5, rule: TailRule = "anchored"):
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
            raise ConfigError(f"vocab_size must be an integer >= 1, got {vocab_size!r}")
        if isinstance(temperature, bool) or not temperature > 1.0:
            raise ConfigError(f"temperature must be a number > 1, got {temperature!r}")
        if rule not in ("anchored", "paper"):
            raise ConfigError(f"rule must be 'anchored' or 'paper', got {rule!r}")
        self.vocab_size, self.temperature, self.rule = vocab_size, temperature, rule

    def log_prob(self, event: TokenEvent) -> float:
        lp = event.logprob
        if lp is None or math.isnan(lp):
            raise ConfigError("the temperature skeleton needs the token's logprob")
        top = sorted((v for _, v in event.top_logprobs), reverse=True) or [lp]
        logz = estimate_logz(top, self.vocab_size, self.temperature, rule=self.rule)
        return lp / self.temperature - logz

    def to_spec(self) -> SkeletonSpec:
        params = {"vocab_size": self.vocab_size, "temperature": self.temperature}
        return SkeletonSpec("temperature", {**params, "rule": self.rule})


class NGramSkeleton:
    """Token n-gram model (order ``n``) with interpolated absolute discounting.

    ``P(y | h) = max(c(h, y) - d, 0) / c(h) + d * N1+(h) / c(h) * P(y | h')``
    with ``h'`` the context shortened by one token, ending in a unigram model
    mixed with the uniform distribution (weight ``floor``) so every token of
    the vocabulary keeps some mass. Train with :meth:`fit` on token-id
    sequences of the domain; score a stream through :meth:`for_stream`.

    Examples
    --------
        >>> skeleton = NGramSkeleton(vocab_size=10, n=2).fit([[1, 2, 3], [1, 2, 4]])
        >>> round(skeleton.prob([1], 2), 3)
        0.749
    """

    def __init__(self, vocab_size: int, n: int = 3, discount: float = 0.75, floor: float = 0.01):
        if vocab_size < 1 or n < 1 or not (0.0 < discount < 1.0) or not (0.0 < floor < 1.0):
            raise ConfigError("NGramSkeleton needs vocab_size, n >= 1, 0 < discount, floor < 1")
        self.vocab_size, self.n, self.discount, self.floor = vocab_size, n, discount, floor
        self._counts: list[defaultdict[tuple[int, ...], Counter[int]]] = [
            defaultdict(Counter) for _ in range(n)
        ]
        self._total = 0
        self.source: str | None = None
        """Where the counts are saved (see :meth:`to_spec`); :meth:`fit` clears it."""

    def fit(self, sequences: Iterable[Sequence[int]]) -> NGramSkeleton:
        """Add counts from token-id sequences (each a separate text)."""
        for seq in sequences:
            ids = [int(t) for t in seq]
            if any(not 0 <= t < self.vocab_size for t in ids):
                raise ConfigError("token ids must lie in [0, vocab_size)")
            for i, tok in enumerate(ids):
                for order in range(self.n):
                    if i - order < 0:
                        break
                    self._counts[order][tuple(ids[i - order : i])][tok] += 1
            self._total += len(ids)
        self.source = None  # the saved counts are no longer these
        return self

    def to_arrays(self) -> dict[str, npt.NDArray[np.int64]]:
        """The counts: ``order{k}`` (k = 0 .. n-1) has one row per seen (context, token),
        ``k`` context ids, the token id and the count, in sorted order."""
        out = {}
        for k, table in enumerate(self._counts):
            rows = sorted(
                (*ctx, tok, c) for ctx, counter in table.items() for tok, c in counter.items() if c
            )
            out[f"order{k}"] = np.array(rows, dtype=np.int64).reshape(-1, k + 2)
        return out

    @classmethod
    def from_arrays(
        cls,
        arrays: Mapping[str, npt.NDArray[Any]],
        *,
        vocab_size: int,
        n: int = 3,
        discount: float = 0.75,
        floor: float = 0.01,
        source: str | None = None,
    ) -> NGramSkeleton:
        """The model whose :meth:`to_arrays` are ``arrays`` (other arrays are ignored)."""
        model = cls(vocab_size, n, discount, floor)
        for k in range(n):
            a = arrays.get(f"order{k}")
            if a is None:
                raise ConfigError(f"n-gram counts: array 'order{k}' is missing (n={n})")
            a = np.asarray(a)
            if a.dtype.kind not in "iu" or a.ndim != 2 or a.shape[1] != k + 2:
                raise ConfigError(
                    f"n-gram counts: 'order{k}' must be an integer array of shape (rows, {k + 2})"
                )
            if a.size and (
                a[:, : k + 1].min() < 0
                or a[:, : k + 1].max() >= vocab_size
                or a[:, k + 1].min() < 1
            ):
                raise ConfigError(
                    f"n-gram counts: 'order{k}' has ids outside [0, {vocab_size}) or counts < 1"
                )
            table = model._counts[k]
            for row in a.tolist():
                table[tuple(row[:k])][row[k]] = row[k + 1]
        model._total = sum(model._counts[0][()].values())
        model.source = source
        return model

    def to_spec(self) -> SkeletonSpec:
        """Vocabulary size, ``n``, ``discount``, ``floor``, the content hash of
        :meth:`to_arrays` and, if the counts were saved, their ``source``."""
        params: dict[str, object] = {
            "vocab_size": self.vocab_size,
            "n": self.n,
            "discount": self.discount,
            "floor": self.floor,
            "sha256": arrays_sha256(self.to_arrays()),
        }
        if self.source is not None:
            params["source"] = self.source
        return SkeletonSpec("ngram", params)

    def prob(self, context: Sequence[int], token: int) -> float:
        """``P(token | last n-1 tokens of context)``."""
        unigram = self._counts[0][()]
        p = (1.0 - self.floor) * (
            unigram[token] / self._total if self._total else 1.0 / self.vocab_size
        ) + self.floor / self.vocab_size
        ctx = tuple(int(t) for t in context)
        for order in range(1, self.n):
            if len(ctx) < order:
                break
            counts = self._counts[order].get(ctx[len(ctx) - order :])
            if not counts:
                break
            total = sum(counts.values())
            d = self.discount
            p = max(counts[token] - d, 0.0) / total + d * len(counts) / total * p
        return p

    reads = Reads(token_ids=True)

    def for_stream(self) -> _NGramStream:
        """A per-stream skeleton that remembers the tokens already emitted."""
        return _NGramStream(self)


class _NGramStream:
    """One answer's n-gram skeleton (a :class:`~guardrail._reads.Skeleton`); :meth:`for_stream`
    gives the next answer's, :attr:`model` the shared counts."""

    reads = Reads(token_ids=True)

    def __init__(self, model: NGramSkeleton) -> None:
        self._model = model
        self._history: list[int] | None = [] if model.n > 1 else None

    @property
    def model(self) -> NGramSkeleton:
        return self._model

    def for_stream(self) -> _NGramStream:
        return _NGramStream(self._model)

    def to_spec(self) -> SkeletonSpec:
        return self._model.to_spec()

    def log_prob(self, event: TokenEvent) -> float:
        if event.token_id is None:
            raise ConfigError("the n-gram skeleton needs token ids in the events")
        hist = self._history or []
        p = self._model.prob(
            hist[-(self._model.n - 1) :] if self._model.n > 1 else (), event.token_id
        )
        if self._history is not None:
            self._history.append(event.token_id)
        return math.log(p)


def type_token_ratio(tokens: Iterable[str | int]) -> float:
    """Distinct tokens / tokens of a corpus (lexical diversity); 0.0 if empty."""
    items = list(tokens)
    return len(set(items)) / len(items) if items else 0.0


def select_skeleton_kind(ttr: float | None) -> str:
    """The paper's rule: TTR > 0.7 -> ``"temperature"`` (T = 1.5), TTR < 0.3 ->
    ``"ngram"`` (domain n-gram), otherwise or unknown -> ``"vsd"`` (lambda 0.5 from
    the temperature prior)."""
    if ttr is None or math.isnan(ttr):
        return "vsd"
    if ttr > 0.7:
        return "temperature"
    if ttr < 0.3:
        return "ngram"
    return "vsd"
