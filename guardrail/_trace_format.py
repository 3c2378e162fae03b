"""The :class:`Trace` record of one generated answer and the constants of the trace format.

The JSONL format itself is documented in :mod:`guardrail.traces._read`, which
re-exports everything public here.

A trace recorded from an API stream (``liftguard serve --record``) lacks what
only a local model gives: token ids, exact entropies and ``log Z_T``,
prompt-free log-probabilities, often the vocabulary size. Such a trace names
the absent fields in :attr:`Trace.missing`; their arrays hold placeholders
that no computation can mistake for data (NaN, an id outside every
vocabulary, vocabulary size 0), and :meth:`Trace.require` refuses, with a
message naming the field and the purpose, whatever needs one of them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._errors import ConfigError, TraceFormatError

__all__ = [
    "CENSORED_LOGPROB",
    "DEFAULT_LOGZ_TEMPERATURES",
    "MISSING_ID",
    "OPTIONAL_FIELDS",
    "Trace",
]

#: Sentinel that the OpenAI API puts in place of a log-probability it does not
#: report. It is a finite number, so it must be rejected explicitly.
CENSORED_LOGPROB = -9999.0

#: Temperatures of ``logz`` given to a trace with no tokens (where they cannot be
#: read from the data): those of the documented format.
DEFAULT_LOGZ_TEMPERATURES: tuple[float, ...] = (1.5, 2.0)

_TOP_LEVEL_KEYS = (
    "id",
    "dataset",
    "model",
    "question",
    "references",
    "prompt",
    "answer",
    "correct",
    "vocab_size",
    "top_k",
    "tokens",
)
_TOKEN_KEYS = ("id", "text", "logprob", "top", "entropy", "logz", "prompt_free_logprob")

#: Keys that an API recording may give as ``null`` or leave out: the top-level
#: ``vocab_size`` and, per token, ``id``, ``entropy``, ``logz`` (also ``{}``),
#: ``prompt_free_logprob`` and the ids of the ``top`` pairs.
_NULLABLE_TOP_LEVEL_KEYS = frozenset({"vocab_size"})
_NULLABLE_TOKEN_KEYS = frozenset({"id", "entropy", "logz", "prompt_free_logprob"})

#: Fields of a :class:`Trace` that may be absent (named in :attr:`Trace.missing`),
#: with the words that error messages use for them.
OPTIONAL_FIELDS: dict[str, str] = {
    "vocab_size": "vocabulary size",
    "token_ids": "token ids",
    "top_ids": "token ids of the alternatives",
    "entropy": "exact entropies",
    "logz": "exact log Z_T",
    "prompt_free_logprobs": "prompt-free log-probabilities",
}

#: The placeholder of an absent token id: outside every vocabulary, so that
#: indexing with it fails instead of reading some other token's value.
MISSING_ID = int(np.iinfo(np.int64).min)

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: The ``missing`` of every trace that lacks nothing: one object, however many traces.
_NOTHING_MISSING: frozenset[str] = frozenset()


# --------------------------------------------------------------------------- #
# The Trace record
# --------------------------------------------------------------------------- #


def _frozen(value: Any, dtype: type[np.generic], ndim: int, name: str) -> Any:
    """``value`` as a read-only array of ``dtype`` with ``ndim`` dimensions.

    An array that is already read-only with the right dtype is kept as is;
    anything else is copied, so that freezing never touches a caller's array.
    """
    if isinstance(value, np.ndarray) and value.dtype == dtype and not value.flags.writeable:
        arr = value
    else:
        arr = np.array(value, dtype=dtype)
        arr.flags.writeable = False
    if arr.ndim != ndim:
        raise TraceFormatError(
            f"{name}: expected a {ndim}-dimensional array, got shape {arr.shape}",
            source="Trace",
        )
    return arr


@dataclass(frozen=True, eq=False, repr=False)
class Trace:
    """One generated answer with per-token log-probability information.

    The per-token fields are read-only numpy arrays of length ``T`` (the
    number of answer tokens, possibly 0): ``token_ids`` (int64), ``logprobs``,
    ``entropy`` and ``prompt_free_logprobs`` (float64, shape ``(T,)``),
    ``top_ids`` (int64) and ``top_logprobs`` (float64) of shape ``(T, k)``
    with the ``k`` most likely tokens of each step in descending order, and
    ``logz``, a dict from temperature (float, e.g. ``1.5``) to the float64
    array of ``log Z_T`` per step. ``top_k`` is the declared number of
    alternatives; ``k = top_ids.shape[1]`` is at most ``top_k`` and equals it
    in the documented files. ``correct`` is ``None`` only for a trace read with
    ``require_label=False`` from a line that has no ``correct`` key.

    Equality is identity (``eq=False``); compare :func:`dump_trace_line` results
    to compare contents.

    Examples
    --------
        >>> tokens = [{"id": 1, "text": "Paris", "logprob": -0.1, "top": [[1, -0.1], [2, -2.5]]}]
        >>> trace = parse_trace({
        ...     "id": "q1", "dataset": "demo", "model": "m", "question": "Capital?",
        ...     "references": ["Paris"], "prompt": "Capital?", "answer": "Paris", "correct": True,
        ...     "vocab_size": 1000, "top_k": 2, "tokens": tokens})
        >>> trace.n_tokens, trace.logprobs.tolist(), trace.top_ids.shape
        (1, [-0.1], (1, 2))
    """

    id: str
    dataset: str
    model: str
    question: str
    references: tuple[str, ...]
    prompt: str
    answer: str
    correct: bool | None
    vocab_size: int
    top_k: int
    token_ids: IntArray
    token_texts: tuple[str, ...]
    logprobs: FloatArray
    top_ids: IntArray
    top_logprobs: FloatArray
    entropy: FloatArray
    logz: dict[float, FloatArray]
    prompt_free_logprobs: FloatArray
    missing: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "missing", frozenset(self.missing) or _NOTHING_MISSING)
        unknown = sorted(self.missing - OPTIONAL_FIELDS.keys())
        if unknown:
            raise TraceFormatError(
                f"missing: {unknown} are not optional fields ({', '.join(OPTIONAL_FIELDS)})",
                source="Trace",
            )
        if ("vocab_size" in self.missing) != (self.vocab_size == 0):
            raise TraceFormatError(
                "vocab_size: 0 exactly when 'vocab_size' is missing, got "
                f"{self.vocab_size} (use with_vocab_size to supply it)",
                source="Trace",
            )
        put(self, "references", tuple(self.references))
        put(self, "token_texts", tuple(self.token_texts))
        put(self, "token_ids", _frozen(self.token_ids, np.int64, 1, "token_ids"))
        put(self, "logprobs", _frozen(self.logprobs, np.float64, 1, "logprobs"))
        put(self, "top_ids", _frozen(self.top_ids, np.int64, 2, "top_ids"))
        put(self, "top_logprobs", _frozen(self.top_logprobs, np.float64, 2, "top_logprobs"))
        put(self, "entropy", _frozen(self.entropy, np.float64, 1, "entropy"))
        put(
            self,
            "prompt_free_logprobs",
            _frozen(self.prompt_free_logprobs, np.float64, 1, "prompt_free_logprobs"),
        )
        put(
            self,
            "logz",
            {
                float(t): _frozen(v, np.float64, 1, f"logz[{float(t)!r}]")
                for t, v in self.logz.items()
            },
        )
        n = self.token_ids.shape[0]
        lengths = {
            "token_texts": len(self.token_texts),
            "logprobs": self.logprobs.shape[0],
            "top_ids": self.top_ids.shape[0],
            "top_logprobs": self.top_logprobs.shape[0],
            "entropy": self.entropy.shape[0],
            "prompt_free_logprobs": self.prompt_free_logprobs.shape[0],
            **{f"logz[{t!r}]": v.shape[0] for t, v in self.logz.items()},
        }
        for name, length in lengths.items():
            if length != n:
                raise TraceFormatError(
                    f"{name}: has {length} entries but token_ids has {n}", source="Trace"
                )
        if self.top_logprobs.shape != self.top_ids.shape:
            raise TraceFormatError(
                f"top_logprobs: shape {self.top_logprobs.shape} differs from "
                f"top_ids shape {self.top_ids.shape}",
                source="Trace",
            )

    @property
    def n_tokens(self) -> int:
        """Number of answer tokens ``T``."""
        return int(self.token_ids.shape[0])

    def require(self, *fields: str, purpose: str) -> None:
        """Raise :class:`~guardrail.ConfigError` if the trace lacks one of ``fields``.

        The message names the trace, what it lacks and ``purpose`` (what needs
        it, e.g. ``"the prompt-free skeleton"``).
        """
        lacking = [OPTIONAL_FIELDS[f] for f in fields if f in self.missing]
        if lacking:
            raise ConfigError(
                f"trace {self.id!r} carries no {' and no '.join(lacking)} (as a trace "
                f"recorded from an API stream), which {purpose} needs"
            )

    def with_vocab_size(self, vocab_size: int) -> Trace:
        """A copy with the vocabulary size given (for a trace that lacks it).

        Raises :class:`~guardrail.ConfigError` if the trace carries a different
        size, or a token id outside the new vocabulary.
        """
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
            raise ConfigError(f"vocab_size must be an integer >= 1, got {vocab_size!r}")
        if "vocab_size" not in self.missing:
            if self.vocab_size != vocab_size:
                raise ConfigError(
                    f"trace {self.id!r} has vocabulary size {self.vocab_size}, not {vocab_size}"
                )
            return self
        for name in ("token_ids", "top_ids"):
            ids = getattr(self, name)
            if name not in self.missing and ids.size and int(ids.max()) >= vocab_size:
                raise ConfigError(
                    f"trace {self.id!r} has token id {int(ids.max())} outside a "
                    f"vocabulary of {vocab_size}"
                )
        return dataclasses.replace(
            self, vocab_size=vocab_size, missing=self.missing - {"vocab_size"}
        )

    def compact(self) -> Trace:
        """A copy to hold with many others: the per-token data, the token texts, the
        identity (``id``, ``dataset``, ``model``), the label and the sizes kept; the texts
        only a writer of trace lines reads (``question``, ``references``, ``prompt``,
        ``answer``) left empty. Scores, replays and checks read nothing it drops; write
        the trace back from the full one.

        >>> full = parse_trace(trace_object(
        ...     id="q1", dataset="demo", model="m", question="Capital?", references=["Paris"],
        ...     prompt="Capital?", answer="Paris", correct=True, vocab_size=1000, top_k=1,
        ...     tokens=[token_object("Paris", -0.1, [(1, -0.1)], id=1)]))
        >>> small = full.compact()
        >>> small.answer, small.references, small.token_texts, small.logprobs is full.logprobs
        ('', (), ('Paris',), True)
        """
        return dataclasses.replace(self, question="", references=(), prompt="", answer="")

    def truncate_top(self, k: int) -> Trace:
        """A copy keeping only the ``k`` most likely alternatives of each step.

        ``top_k`` of the copy is ``min(top_k, k)``; asking for more
        alternatives than the trace holds keeps all of them.
        """
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be a non-negative integer, got {k!r}")
        return dataclasses.replace(
            self,
            top_k=min(self.top_k, k),
            top_ids=np.ascontiguousarray(self.top_ids[:, :k]),
            top_logprobs=np.ascontiguousarray(self.top_logprobs[:, :k]),
        )

    def __repr__(self) -> str:
        lacks = f", missing={sorted(self.missing)}" if self.missing else ""
        return (
            f"Trace(id={self.id!r}, model={self.model!r}, answer={self.answer!r}, "
            f"correct={self.correct!r}, n_tokens={self.n_tokens}, "
            f"top={self.top_ids.shape[1]}{lacks})"
        )
