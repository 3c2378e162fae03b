"""A skeleton as JSON data (:class:`SkeletonSpec`), and the way back to the object.

Three sorts of kinds:

- **parametric**, built from the spec alone: ``uniform`` (``vocab_size``) and
  ``temperature`` (``vocab_size``, ``temperature``, ``rule``);
- **data-backed**, whose data never goes into the spec: ``vector``, ``vsd`` and
  ``unigram`` (a vector ``log S`` over the vocabulary,
  :class:`~guardrail.VectorSkeleton`) and ``ngram`` (token n-gram counts,
  :class:`~guardrail.NGramSkeleton`; ``n``, ``discount`` and ``floor`` are in the
  spec). ``sha256`` is the content hash of the arrays (:func:`arrays_sha256`) and
  ``source`` says where they are: a skeleton-store version ``STORE_URL#NAME@vN``
  or a safetensors file;
- **model**: ``prompt_free`` (``model``: a GGUF path or a packaged model name,
  ``prefix``: the question-free prompt, ``n_ctx``, ``vocab_size``, ``model_sha256``),
  a local model scoring the answer without the question.

The core does no I/O. :meth:`SkeletonSpec.build` builds the parametric kinds and
asks a **resolver** for the others: any callable ``resolver(spec)`` that returns
the skeleton, or ``None`` for a kind it does not build (see :class:`SkeletonResolver`;
``skeleton_store.resolve_skeleton`` reads data kinds from a store or a file,
``adapters.PromptFreeSkeleton.resolve`` loads the model of ``prompt_free``). A data
resolver reads the arrays and passes them to :meth:`SkeletonSpec.from_arrays`, which
checks their hash against the spec (a mismatch is a ConfigError naming
``skeleton.params.sha256``) before building.

Every error names the field (``skeleton.kind``, ``skeleton.params.<name>``). Specs
written before data kinds recorded their data (``vector`` with no parameters or
with ``store_name`` and ``version``; ``ngram`` with only ``n``) are still read: they
name a skeleton the caller binds or passes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

import numpy as np
import numpy.typing as npt

from ._errors import ConfigError, GuardrailError
from ._monitor import Skeleton

__all__ = [
    "DATA_KINDS",
    "PARAMETRIC_KINDS",
    "SkeletonResolver",
    "SkeletonSpec",
    "arrays_sha256",
]

PARAMETRIC_KINDS = ("uniform", "temperature")
"""Kinds built from the spec alone."""
VECTOR_KINDS = ("vector", "vsd", "unigram")
DATA_KINDS = (*VECTOR_KINDS, "ngram")
"""Kinds whose spec references their data by content hash and source."""

_PARAMS: dict[str, frozenset[str]] = {
    "uniform": frozenset({"vocab_size"}),
    "temperature": frozenset({"vocab_size", "temperature", "rule"}),
    **{
        k: frozenset({"vocab_size", "sha256", "source", "store_name", "version"})
        for k in VECTOR_KINDS
    },
    "ngram": frozenset({"vocab_size", "n", "discount", "floor", "sha256", "source"}),
    "prompt_free": frozenset({"model", "prefix", "n_ctx", "vocab_size", "model_sha256"}),
}
_HEX64 = re.compile(r"[0-9a-f]{64}")
_ARRAYS_FORMAT = b"liftguard.arrays/1\n"


class SkeletonResolver(Protocol):
    """Builds what a spec references but does not hold (data, a model): the skeleton,
    or ``None`` when the spec's kind is not one it builds.

    Examples
    --------
        >>> def resolver(spec):
        ...     if spec.kind != "vector":
        ...         return None
        ...     return VectorSkeleton([-1.0, -2.0, -0.5], source=spec.source)
        >>> spec = SkeletonSpec("vector")
        >>> spec.build(resolver).vocab_size
        3
    """

    def __call__(self, spec: SkeletonSpec, /) -> Skeleton | None: ...


Resolvers: TypeAlias = "SkeletonResolver | Iterable[SkeletonResolver] | None"


def arrays_sha256(arrays: Mapping[str, npt.NDArray[Any]]) -> str:
    """The content hash of named arrays: sha256 over, in name order, each array's name,
    dtype and shape (one JSON line) and its little-endian C-order bytes."""
    import hashlib  # here, not at import: ``import guardrail`` stays lighter

    digest = hashlib.sha256(_ARRAYS_FORMAT)
    for name in sorted(arrays):
        a = np.asarray(arrays[name])
        a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
        head = json.dumps([name, a.dtype.name, list(a.shape)], separators=(",", ":"))
        digest.update(head.encode() + b"\n")
        digest.update(a.reshape(-1).view(np.uint8).data)
    return digest.hexdigest()


def _where(name: str) -> str:
    return f"skeleton.params.{name}"


def _int(params: Mapping[str, object], name: str, low: int = 1) -> None:
    value = params.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
        raise ConfigError(f"{_where(name)}: expected an integer >= {low}, got {value!r}")


def _fraction(params: Mapping[str, object], name: str) -> None:
    value = params.get(name)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0.0 < value < 1.0
    if value is not None and not ok:
        raise ConfigError(f"{_where(name)}: expected a number in (0, 1), got {value!r}")


def _text(params: Mapping[str, object], name: str) -> None:
    value = params.get(name)
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(f"{_where(name)}: expected a non-empty string, got {value!r}")


def _hash(params: Mapping[str, object], name: str) -> None:
    value = params.get(name)
    if value is not None and not (isinstance(value, str) and _HEX64.fullmatch(value)):
        raise ConfigError(f"{_where(name)}: expected 64 lower-case hex digits, got {value!r}")


def _check_params(kind: str, params: Mapping[str, object]) -> None:
    allowed = _PARAMS.get(kind)
    if allowed is None:  # a kind the core does not know: the caller supplies its skeleton
        return
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ConfigError(
            f"skeleton.params: unknown field(s) {', '.join(map(repr, unknown))} for kind {kind!r}"
        )
    if kind in PARAMETRIC_KINDS:  # checked by building (the constructors name the field)
        return
    for name in ("vocab_size", "n", "n_ctx", "version"):
        _int(params, name)
    for name in ("discount", "floor"):
        _fraction(params, name)
    for name in ("source", "model", "prefix", "store_name"):
        _text(params, name)
    for name in ("sha256", "model_sha256"):
        _hash(params, name)
    if kind in DATA_KINDS and "sha256" in params and "vocab_size" not in params:
        raise ConfigError(f"{_where('vocab_size')}: missing (a data spec records its vocabulary)")


@dataclass(frozen=True)
class SkeletonSpec:
    """A skeleton by kind and parameters (JSON values), validated on construction; see
    the module docstring for the kinds. :meth:`build` gives the skeleton object (with a
    resolver for data and model kinds); every skeleton's ``to_spec()`` gives its spec.

    Examples
    --------
        >>> spec = SkeletonSpec("uniform", {"vocab_size": 1000})
        >>> spec.to_dict()
        {'kind': 'uniform', 'params': {'vocab_size': 1000}}
        >>> type(spec.build()).__name__
        'UniformSkeleton'
    """

    kind: str
    params: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not self.kind:
            raise ConfigError(f"skeleton.kind: expected a non-empty string, got {self.kind!r}")
        if not isinstance(self.params, Mapping):
            raise ConfigError(f"skeleton.params: expected an object, got {self.params!r}")
        object.__setattr__(self, "params", dict(self.params))
        _check_params(self.kind, self.params)
        if self.kind in PARAMETRIC_KINDS:
            self.build()  # validates the parameters now

    @classmethod
    def from_dict(cls, data: Any) -> SkeletonSpec:
        """The spec of the JSON object ``{"kind": ..., "params": {...}}``."""
        from ._certificate_parts import _check_fields

        out = _check_fields(cls, data, "skeleton")
        if "kind" not in out:
            raise ConfigError("skeleton.kind: missing")
        return cls(**out)

    def to_dict(self) -> dict[str, object]:
        """The JSON object of this spec."""
        return {"kind": self.kind, "params": dict(self.params)}

    @classmethod
    def of_trace_skeleton(cls, name: str, vocab_size: int) -> SkeletonSpec:
        """The streaming skeleton the trace skeleton ``name`` (one of
        :data:`~guardrail._scores.TRACE_SKELETONS`) stands for, recording the traces'
        vocabulary size; ``prompt-free`` names no model (the bundled SmolLM2 with its
        default prefix)."""
        if name == "uniform":
            return cls("uniform", {"vocab_size": vocab_size})
        if name.startswith("temperature"):
            temperature = float(name.partition("-")[2] or 1.5)
            params = {"vocab_size": vocab_size, "temperature": temperature, "rule": "anchored"}
            return cls("temperature", params)
        if name == "prompt-free":
            return cls("prompt_free", {"vocab_size": vocab_size})
        raise ConfigError(f"no streaming skeleton for the trace skeleton {name!r}")

    def with_vocab_size(self, vocab_size: int) -> SkeletonSpec:
        """This spec recording the traces' ``vocab_size``: itself where it records that
        size already, a :class:`ConfigError` (``records vocab_size ...; the traces have
        ...``) where it records another.

        Examples
        --------
            >>> SkeletonSpec("uniform").with_vocab_size(49152).params["vocab_size"]
            49152
        """
        given = self.params.get("vocab_size")
        if given is None:
            return SkeletonSpec(self.kind, {**self.params, "vocab_size": vocab_size})
        if given != vocab_size:
            raise ConfigError(f"records vocab_size {given}; the traces have {vocab_size}")
        return self

    @classmethod
    def of(cls, skeleton: object) -> SkeletonSpec:
        """The spec of a skeleton object: its ``to_spec()``, or for an object without one
        (or whose ``to_spec()`` fails) a spec naming its class, which only that object
        can stand for."""
        to_spec = getattr(skeleton, "to_spec", None)
        if callable(to_spec):
            try:
                spec = to_spec()
            except GuardrailError:  # e.g. a store handle whose version holds no skeleton
                spec = None
            if isinstance(spec, SkeletonSpec):
                return spec
        return cls(type(skeleton).__name__)

    @property
    def sha256(self) -> str | None:
        """The content hash of a data kind's arrays (None if the spec records none)."""
        value = self.params.get("sha256")
        return value if isinstance(value, str) else None

    @property
    def source(self) -> str | None:
        """Where a data kind's arrays are: ``STORE_URL#NAME@vN`` or a file path (or None)."""
        value = self.params.get("source")
        return value if isinstance(value, str) else None

    @property
    def data_backed(self) -> bool:
        """True for the kinds whose data the spec references (``sha256``, ``source``)."""
        return self.kind in DATA_KINDS

    @property
    def builds_alone(self) -> bool:
        """True for the parametric kinds, which :meth:`build` makes without a resolver."""
        return self.kind in PARAMETRIC_KINDS

    def with_source(self, source: str) -> SkeletonSpec:
        """The same data spec with its data at ``source``."""
        if self.kind not in DATA_KINDS:
            raise ConfigError(f"skeleton.params.source: kind {self.kind!r} holds no data")
        return SkeletonSpec(self.kind, {**self.params, "source": source})

    def build(self, resolver: Resolvers = None) -> Skeleton:
        """The skeleton object. Parametric kinds are built here; the others by the first
        ``resolver`` (one, or several tried in order) that returns one. A ConfigError
        naming the field for a bad parameter, and saying what to pass when no resolver
        builds the kind."""
        params = dict(self.params)
        try:
            if self.kind == "uniform":
                from ._skeletons import UniformSkeleton

                return UniformSkeleton(**params)  # type: ignore[arg-type]
            if self.kind == "temperature":
                from ._skeletons import TemperatureSkeleton

                return TemperatureSkeleton(**params)  # type: ignore[arg-type]
        except TypeError as exc:
            raise ConfigError(f"skeleton.params for {self.kind!r}: {exc}") from exc
        except ConfigError as exc:
            raise ConfigError(f"skeleton.params: {exc}") from exc
        if resolver is None:
            resolvers: tuple[SkeletonResolver, ...] = ()
        elif callable(resolver):
            resolvers = (resolver,)
        else:
            resolvers = tuple(resolver)
        for resolve in resolvers:
            skeleton = resolve(self)
            if skeleton is not None:
                if not isinstance(skeleton, Skeleton):
                    raise ConfigError(
                        f"the resolver {resolve!r} returned {type(skeleton).__name__}, "
                        "not a skeleton (an object with log_prob(event))"
                    )
                return skeleton
        raise ConfigError(self._unbuilt_reason(bool(resolvers)))

    def _unbuilt_reason(self, tried: bool) -> str:
        kind = f"skeleton kind {self.kind!r}"
        if tried:
            kind += " (no resolver given builds it)"
        if self.kind in DATA_KINDS:
            if self.sha256 is None or self.source is None:
                return (
                    f"{kind} records no data to build it from (skeleton.params.sha256 and "
                    ".source): pass skeleton=... (or bind one with certificate.with_skeleton); "
                    "skeleton_store.save_skeleton(...) or SkeletonStore.put_skeleton(...) saves "
                    "a skeleton's data and gives its full spec"
                )
            return (
                f"{kind} references its data at {self.source!r}: build it with a resolver, "
                "e.g. spec.build(skeleton_store.resolve_skeleton) or "
                "Certificate.load(path, resolver=skeleton_store.resolve_skeleton); "
                "or pass skeleton=..."
            )
        if self.kind == "prompt_free":
            return (
                f"{kind} needs a local model: build it with "
                "resolver=adapters.PromptFreeSkeleton.resolve, or pass skeleton=... "
                "(e.g. adapters.PromptFreeSkeleton())"
            )
        return f"{kind} is not built from its spec: pass skeleton=..."

    def from_arrays(self, arrays: Mapping[str, npt.NDArray[Any]]) -> Skeleton:
        """The skeleton of a data kind from its arrays (a resolver read them from
        :attr:`source`; other arrays are ignored), after checking them against
        :attr:`sha256` and ``vocab_size``: a mismatch is a ConfigError naming the field."""
        from ._skeletons import NGramSkeleton
        from ._vector import VectorSkeleton

        if self.kind not in DATA_KINDS:
            raise ConfigError(f"skeleton.kind: {self.kind!r} is not built from arrays")
        expected, vocab = self.sha256, self.params.get("vocab_size")
        if expected is None:
            raise ConfigError(f"{_where('sha256')}: missing (the spec records no data hash)")
        skeleton: VectorSkeleton | NGramSkeleton
        p = self.params
        try:
            if self.kind == "ngram":  # built as a stream (a Skeleton); for_stream() gives more
                skeleton = NGramSkeleton.from_arrays(
                    arrays,
                    vocab_size=_int_of(p, "vocab_size"),
                    n=_int_of(p, "n"),
                    discount=_float_of(p, "discount"),
                    floor=_float_of(p, "floor"),
                    source=self.source,
                )
            else:
                skeleton = VectorSkeleton.from_arrays(arrays, kind=self.kind, source=self.source)
        except ConfigError as exc:
            if str(exc).startswith("skeleton.params."):
                raise
            raise ConfigError(
                f"{_where('source')}: the data at {self.source!r} does not fit this "
                f"{self.kind!r} spec: {exc}"
            ) from exc
        actual = arrays_sha256(skeleton.to_arrays())
        if actual != expected:
            raise ConfigError(
                f"{_where('sha256')}: the data at {self.source!r} has sha256 {actual}, the spec "
                f"records {expected} (changed or wrong data)"
            )
        if skeleton.vocab_size != vocab:
            raise ConfigError(
                f"{_where('vocab_size')}: the data has a vocabulary of {skeleton.vocab_size}, "
                f"the spec records {vocab!r}"
            )
        return skeleton.for_stream() if isinstance(skeleton, NGramSkeleton) else skeleton


def _int_of(params: Mapping[str, object], name: str) -> int:
    value = params.get(name)
    if not isinstance(value, int):  # validated on construction: present or not
        raise ConfigError(f"{_where(name)}: missing")
    return value


def _float_of(params: Mapping[str, object], name: str) -> float:
    value = params.get(name)
    if not isinstance(value, int | float):
        raise ConfigError(f"{_where(name)}: missing")
    return float(value)
