"""A stored skeleton version, and the skeleton it serves at runtime.

A version whose arrays are a vector (``probs`` or ``log_probs``) serves a
:class:`guardrail.VectorSkeleton`; one of kind ``ngram`` (published by
:meth:`~skeleton_store.SkeletonStore.put_skeleton` from an n-gram model) serves
that model. Either knows its source, ``STORE_URL#NAME@vN``, so its ``to_spec()``
references the version (see :func:`skeleton_store.resolve_skeleton`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

import numpy as np
import numpy.typing as npt

from guardrail import (
    Calibration,
    Certificate,
    ConfigError,
    ModelIdentity,
    Monitor,
    NGramSkeleton,
    SkeletonSpec,
    StreamPolicy,
    VectorSkeleton,
)
from guardrail._reads import Skeleton

from ._errors import StoreError
from ._names import format_version

__all__ = ["SkeletonVersion", "VectorSkeleton", "VersionInfo", "VersionInfoDict"]

FloatArray = npt.NDArray[np.float64]
OnMissing = Literal["block", "pass", "error"]
_VECTOR_KINDS = ("vector", "vsd", "unigram")
_NGRAM_PARAMS = ("vocab_size", "n", "discount", "floor")


@dataclass(frozen=True, eq=False)
class SkeletonVersion:
    """One immutable, verified version of a named skeleton.

    Arrays are loaded eagerly by :meth:`SkeletonStore.get` and verified
    against the manifest's sha256 before this object exists; they are
    read-only. ``version`` is an integer (shown as ``v3``); ``parent`` is the
    version this one was derived from (``None`` for a root). ``manifest`` is
    the full stored manifest (JSON data). ``store_url``: the store it was read
    from (None for a version made by hand).

    Examples
    --------
        >>> import tempfile
        >>> from guardrail import VectorSkeleton
        >>> store = SkeletonStore(tempfile.mkdtemp())
        >>> version = store.put_skeleton("chat", VectorSkeleton([-1.0, -1.5, -2.0]))
        >>> version.tag, version.kind, version.log_probs().tolist()
        ('v1', 'vector', [-1.0, -1.5, -2.0])
    """

    name: str
    version: int
    parent: int | None
    created_at: str
    kind: str
    model_id: str | None
    model_revision: str | None
    tokenizer: str | None
    vocab_size: int | None
    logprob_mode: str | None
    params: dict[str, Any]
    vsd_trace: Any
    calibration: dict[str, Any] | None
    array_sha256: dict[str, str]
    extra: dict[str, Any]
    arrays: dict[str, npt.NDArray[Any]] = field(repr=False)
    manifest: dict[str, Any] = field(repr=False)
    store_url: str | None = None

    @classmethod
    def from_manifest(
        cls,
        manifest: dict[str, Any],
        arrays: dict[str, npt.NDArray[Any]],
        store_url: str | None = None,
    ) -> SkeletonVersion:
        return cls(
            name=manifest["name"],
            version=manifest["version"],
            parent=manifest["parent"],
            created_at=manifest["created_at"],
            kind=manifest["kind"],
            model_id=manifest["model_id"],
            model_revision=manifest["model_revision"],
            tokenizer=manifest["tokenizer"],
            vocab_size=manifest["vocab_size"],
            logprob_mode=manifest["logprob_mode"],
            params=manifest["params"],
            vsd_trace=manifest["vsd_trace"],
            calibration=manifest["calibration"],
            array_sha256={k: r["sha256"] for k, r in manifest["arrays"].items()},
            extra=manifest["extra"],
            arrays=arrays,
            manifest=manifest,
            store_url=store_url,
        )

    @property
    def tag(self) -> str:
        """``"v3"`` for version 3."""
        return format_version(self.version)

    @property
    def source(self) -> str | None:
        """``STORE_URL#NAME@vN``: where this version's data is (None without a store URL)."""
        return None if self.store_url is None else f"{self.store_url}#{self.name}@{self.tag}"

    def to_calibration(self) -> Calibration | None:
        """The embedded calibration as a :class:`guardrail.Calibration` (None if absent)."""
        return None if self.calibration is None else Calibration.from_dict(dict(self.calibration))

    def holds_skeleton(self) -> bool:
        """True if the arrays are a skeleton: a vector, or the counts of an ``ngram``."""
        return self.kind == "ngram" or _has_vector(self.arrays)

    def skeleton(self) -> Skeleton:
        """The skeleton these arrays hold, knowing its :attr:`source`: an n-gram model (kind
        ``ngram``; one answer's stream, ``for_stream()`` gives the next) or a
        :class:`guardrail.VectorSkeleton` (:meth:`as_skeleton`)."""
        if self.kind != "ngram":
            return self.as_skeleton()
        missing = [k for k in _NGRAM_PARAMS if k not in self.params]
        if missing:
            raise StoreError(f"{self.name} {self.tag}: ngram params lack {', '.join(missing)}")
        p = self.params
        try:
            model = NGramSkeleton.from_arrays(
                self.arrays,
                vocab_size=p["vocab_size"],
                n=p["n"],
                discount=p["discount"],
                floor=p["floor"],
                source=self.source,
            )
        except ConfigError as exc:
            raise StoreError(f"{self.name} {self.tag}: {exc}") from exc
        return model.for_stream()

    def certificate(self) -> Certificate:
        """The deployed rule this version holds, bound to this version's skeleton when its
        spec names it.

        A version published with ``certificate=`` returns that certificate; it is bound
        to this version's vector or n-gram when its spec is of that kind and records no
        data hash, or this version's (a spec of another kind, or of other data, is left
        to :meth:`guardrail.Certificate.resolve`). An older version with a calibration
        gets a certificate built from it (its policy and threshold, this version's
        vector as the skeleton, its model fields).
        """
        data = self.manifest.get("certificate")
        try:
            if data is not None:
                cert = Certificate.from_dict(data)
                own = self._own_skeleton_for(cert.skeleton)
                return cert if own is None else cert.with_skeleton(own)
            cal = self.to_calibration()
        except ConfigError as exc:
            raise StoreError(
                f"{self.name} {self.tag}: stored certificate is invalid: {exc}"
            ) from exc
        if cal is None:
            raise StoreError(f"{self.name} {self.tag} holds no certificate and no calibration")
        vector = self.as_skeleton() if _has_vector(self.arrays) else None
        policy = StreamPolicy.from_dict(dict(cal.policy)) if cal.policy else StreamPolicy()
        spec = SkeletonSpec("vector", {"store_name": self.name, "version": self.version})
        model = ModelIdentity(
            self.model_id or "unspecified", tokenizer=self.tokenizer, vocab_size=self.vocab_size
        )
        return Certificate(policy, cal.tau, spec, model, calibration=cal).with_skeleton(vector)

    def _own_skeleton_for(self, spec: SkeletonSpec) -> Skeleton | None:
        if not self.holds_skeleton():
            return None
        ngram = self.kind == "ngram"
        if (spec.kind == "ngram") != ngram or (not ngram and spec.kind not in _VECTOR_KINDS):
            return None
        own = self.skeleton()
        if spec.sha256 is not None and SkeletonSpec.of(own).sha256 != spec.sha256:
            return None
        return own

    def probs(self) -> FloatArray:
        """The skeleton distribution (float64) from the ``probs`` or ``log_probs`` array."""
        if "probs" in self.arrays:
            return np.asarray(self.arrays["probs"], dtype=np.float64)
        if "log_probs" in self.arrays:
            return np.exp(np.asarray(self.arrays["log_probs"], dtype=np.float64))
        raise StoreError(f"{self.name} {self.tag} has no 'probs' or 'log_probs' array")

    def log_probs(self) -> FloatArray:
        """``log`` of :meth:`probs` (float64; ``-inf`` where a probability is 0)."""
        if "log_probs" in self.arrays:
            return np.asarray(self.arrays["log_probs"], dtype=np.float64)
        with np.errstate(divide="ignore"):
            return np.log(self.probs())

    def as_skeleton(self) -> VectorSkeleton:
        """A :class:`guardrail.VectorSkeleton` that scores tokens with this version's
        vector (its ``log_probs``, else the log of its ``probs``)."""
        if not _has_vector(self.arrays):
            raise StoreError(f"{self.name} {self.tag} has no 'probs' or 'log_probs' array")
        kind = self.kind if self.kind in _VECTOR_KINDS else "vector"
        return VectorSkeleton.from_arrays(self.arrays, kind=kind, source=self.source)

    def monitor(
        self,
        policy: StreamPolicy | None = None,
        tau: float | None = None,
        *,
        on_missing_logprobs: OnMissing | None = None,
        track_bounds: bool = False,
    ) -> Monitor:
        """A lift-rule :class:`guardrail.Monitor` pinned to this version's vector.

        ``tau`` and ``policy`` default to the embedded calibration's (its
        threshold and the policy it replayed); the keywords go to the monitor.
        """
        cal = self.calibration
        if tau is None:
            if cal is None:
                raise StoreError(f"{self.name} {self.tag} has no calibration: pass tau=")
            tau = float(cal["tau"])
        if policy is None:
            pol = cal.get("policy") if cal is not None else None
            try:
                policy = StreamPolicy.from_dict(dict(pol)) if pol else StreamPolicy()
            except TypeError as exc:
                raise StoreError(f"{self.tag}: calibration has a bad policy: {exc}") from exc
        return Monitor.lift(
            policy,
            tau,
            skeleton=self.as_skeleton(),
            on_missing_logprobs=on_missing_logprobs,
            track_bounds=track_bounds,
        )


def _has_vector(arrays: Mapping[str, object]) -> bool:
    return "probs" in arrays or "log_probs" in arrays


class VersionInfoDict(TypedDict):
    """The JSON form of a :class:`VersionInfo`."""

    name: str
    version: int
    tag: str
    parent: int | None
    created_at: str
    kind: str
    model_id: str | None
    aliases: list[str]


@dataclass(frozen=True)
class VersionInfo:
    """Summary of one version, as :meth:`SkeletonStore.list` reports it.

    Examples
    --------
        >>> import tempfile
        >>> from guardrail import VectorSkeleton
        >>> store = SkeletonStore(tempfile.mkdtemp())
        >>> _ = store.put_skeleton("chat", VectorSkeleton([-1.0, -1.5, -2.0]))
        >>> [(info.tag, info.kind) for info in store.list("chat")]
        [('v1', 'vector')]
    """

    name: str
    version: int
    parent: int | None
    created_at: str
    kind: str
    model_id: str | None
    aliases: tuple[str, ...]

    @property
    def tag(self) -> str:
        return format_version(self.version)

    def to_dict(self) -> VersionInfoDict:
        return {
            "name": self.name,
            "version": self.version,
            "tag": self.tag,
            "parent": self.parent,
            "created_at": self.created_at,
            "kind": self.kind,
            "model_id": self.model_id,
            "aliases": list(self.aliases),
        }
