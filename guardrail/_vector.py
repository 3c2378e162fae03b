"""A fixed skeleton vector ``log S`` over the vocabulary: :class:`VectorSkeleton`.

A VSD skeleton, a unigram LM (:meth:`VectorSkeleton.unigram`) or any stored vector;
the skeleton store serves its versions' vectors as this class. Its spec (kinds
``vector``, ``vsd``, ``unigram``) holds the vocabulary size, the content hash of the
array and, once the array was saved, its ``source`` (see :mod:`guardrail._skeleton_spec`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from ._errors import ConfigError
from ._reads import Reads
from ._skeleton_spec import VECTOR_KINDS, SkeletonSpec, arrays_sha256
from ._verdict import TokenEvent

__all__ = ["VectorSkeleton"]


class VectorSkeleton:
    """``log S(token)`` read from a vector over the vocabulary, indexed by ``event.token_id``.

    Events without a ``token_id`` (or with one outside the vocabulary) raise
    :class:`~guardrail.ConfigError`: a vector skeleton cannot score a token it cannot
    identify. ``kind``: ``"vector"``, ``"vsd"`` or ``"unigram"`` (what the vector is;
    scoring is the same); ``source``: where its data is saved, if it is (see
    :meth:`to_spec`). :meth:`unigram` makes the smoothed unigram LM of a corpus.

    Examples
    --------
        >>> import numpy as np
        >>> skeleton = VectorSkeleton(np.log([0.5, 0.25, 0.25]))
        >>> round(skeleton.log_prob(TokenEvent("b", logprob=-0.1, token_id=1)), 3)
        -1.386
    """

    reads = Reads(token_ids=True)

    __slots__ = ("_data", "_lp", "_sha256", "kind", "source", "vocab_size")

    def __init__(
        self, log_probs: npt.ArrayLike, *, kind: str = "vector", source: str | None = None
    ) -> None:
        lp = np.asarray(log_probs, dtype=np.float64)
        self._init({"log_probs": lp}, lp, kind, source)

    def _init(
        self,
        data: dict[str, npt.NDArray[Any]],
        lp: npt.NDArray[np.float64],
        kind: str,
        source: str | None,
    ) -> None:
        if lp.ndim != 1 or lp.size == 0:
            raise ConfigError(f"log_probs must be a non-empty 1-d vector, got shape {lp.shape}")
        if kind not in VECTOR_KINDS:
            raise ConfigError(f"kind must be one of {', '.join(VECTOR_KINDS)}, got {kind!r}")
        if source is not None and (not isinstance(source, str) or not source):
            raise ConfigError(f"source must be a non-empty string or None, got {source!r}")
        self._data, self._lp = data, lp
        self._sha256: str | None = None
        self.vocab_size, self.kind, self.source = int(lp.size), kind, source

    @classmethod
    def from_arrays(
        cls,
        arrays: Mapping[str, npt.NDArray[Any]],
        *,
        kind: str = "vector",
        source: str | None = None,
    ) -> VectorSkeleton:
        """The skeleton of a ``log_probs`` array, or else a ``probs`` array (its log;
        ``-inf`` where a probability is 0). :meth:`to_arrays` gives that array back."""
        if "log_probs" in arrays:
            data = {"log_probs": arrays["log_probs"]}
            lp = np.asarray(arrays["log_probs"], dtype=np.float64)
        elif "probs" in arrays:
            data = {"probs": arrays["probs"]}
            with np.errstate(divide="ignore"):
                lp = np.log(np.asarray(arrays["probs"], dtype=np.float64))
        else:
            raise ConfigError(
                f"a vector skeleton needs a 'log_probs' or 'probs' array, got {sorted(arrays)}"
            )
        out = cls.__new__(cls)
        out._init(data, lp, kind, source)
        return out

    @classmethod
    def unigram(
        cls,
        token_ids: npt.ArrayLike,
        vocab_size: int,
        *,
        smoothing: float = 1.0,
        floor: float = 1e-3,
    ) -> VectorSkeleton:
        """The unigram LM of a corpus's token ids: add-``smoothing`` counts, mixed with the
        uniform distribution with weight ``floor`` (kind ``unigram``)."""
        from ._scores import unigram_log_probs

        lp = unigram_log_probs(token_ids, vocab_size, smoothing=smoothing, floor=floor)
        return cls(lp, kind="unigram")

    def log_prob(self, event: TokenEvent) -> float:
        i = event.token_id
        if i is None or not (0 <= i < self.vocab_size):
            raise ConfigError(
                f"vector skeleton over {self.vocab_size} tokens needs a token_id in range, "
                f"got {i!r}"
            )
        return float(self._lp[i])

    def to_arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The array the skeleton was made from (``log_probs`` or ``probs``)."""
        return dict(self._data)

    def to_spec(self) -> SkeletonSpec:
        """Kind, vocabulary size, the content hash of :meth:`to_arrays` and, if the data was
        saved, its ``source``."""
        if self._sha256 is None:
            self._sha256 = arrays_sha256(self._data)
        params: dict[str, object] = {"vocab_size": self.vocab_size, "sha256": self._sha256}
        if self.source is not None:
            params["source"] = self.source
        return SkeletonSpec(self.kind, params)
