"""A stored skeleton version, and the vector skeleton it serves at runtime."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from guardrail import (
    Calibration,
    Certificate,
    CertificateMonitor,
    ConfigError,
    ModelIdentity,
    SkeletonSpec,
    StreamPolicy,
    TokenEvent,
)

from ._errors import StoreError
from ._names import format_version

__all__ = ["SkeletonVersion", "VectorSkeleton", "VersionInfo"]

FloatArray = npt.NDArray[np.float64]


class VectorSkeleton:
    """``log S(token)`` read from a vector over the vocabulary, indexed by ``event.token_id``.

    Implements :class:`guardrail.Skeleton`. Events without a ``token_id`` (or
    with one outside the vocabulary) raise :class:`guardrail.ConfigError`: a
    vector skeleton cannot score a token it cannot identify.
    """

    needs_top_logprobs = False
    needs_token_ids = True

    __slots__ = ("_lp", "vocab_size")

    def __init__(self, log_probs: npt.ArrayLike) -> None:
        lp = np.asarray(log_probs, dtype=np.float64)
        if lp.ndim != 1 or lp.size == 0:
            raise ConfigError(f"log_probs must be a non-empty 1-d vector, got shape {lp.shape}")
        self._lp = lp
        self.vocab_size = int(lp.size)

    def log_prob(self, event: TokenEvent) -> float:
        i = event.token_id
        if i is None or not (0 <= i < self.vocab_size):
            raise ConfigError(
                f"vector skeleton over {self.vocab_size} tokens needs a token_id in range, "
                f"got {i!r}"
            )
        return float(self._lp[i])


@dataclass(frozen=True, eq=False)
class SkeletonVersion:
    """One immutable, verified version of a named skeleton.

    Arrays are loaded eagerly by :meth:`SkeletonStore.get` and verified
    against the manifest's sha256 before this object exists; they are
    read-only. ``version`` is an integer (shown as ``v3``); ``parent`` is the
    version this one was derived from (``None`` for a root). ``manifest`` is
    the full stored manifest (JSON data).
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

    @classmethod
    def from_manifest(
        cls, manifest: dict[str, Any], arrays: dict[str, npt.NDArray[Any]]
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
        )

    @property
    def tag(self) -> str:
        """``"v3"`` for version 3."""
        return format_version(self.version)

    def to_calibration(self) -> Calibration | None:
        """The embedded calibration as a :class:`guardrail.Calibration` (None if absent)."""
        return None if self.calibration is None else Calibration.from_dict(dict(self.calibration))

    def certificate(self) -> Certificate:
        """The deployed rule this version holds, bound to its vector (if it has one).

        A version published with ``certificate=`` returns that certificate; an
        older version with a calibration gets one built from it (its policy and
        threshold, this version's vector as the skeleton, its model fields).
        """
        vector = self.as_skeleton() if _has_vector(self.arrays) else None
        data = self.manifest.get("certificate")
        try:
            if data is not None:
                return Certificate.from_dict(data).with_skeleton(vector)
            cal = self.to_calibration()
        except ConfigError as exc:
            raise StoreError(
                f"{self.name} {self.tag}: stored certificate is invalid: {exc}"
            ) from exc
        if cal is None:
            raise StoreError(f"{self.name} {self.tag} holds no certificate and no calibration")
        policy = StreamPolicy.from_dict(dict(cal.policy)) if cal.policy else StreamPolicy()
        spec = SkeletonSpec("vector", {"store_name": self.name, "version": self.version})
        model = ModelIdentity(
            self.model_id or "unspecified", tokenizer=self.tokenizer, vocab_size=self.vocab_size
        )
        return Certificate(policy, cal.tau, spec, model, calibration=cal).with_skeleton(vector)

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
        """A :class:`guardrail.Skeleton` that scores tokens with this version's vector."""
        return VectorSkeleton(self.log_probs())

    def monitor(
        self,
        policy: StreamPolicy | None = None,
        tau: float | None = None,
        **kwargs: Any,
    ) -> CertificateMonitor:
        """A :class:`guardrail.CertificateMonitor` pinned to this version.

        ``tau`` and ``policy`` default to the embedded calibration's (its
        threshold and the policy it replayed); ``kwargs`` go to the monitor.
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
        return CertificateMonitor(policy, tau, skeleton=self.as_skeleton(), **kwargs)


def _has_vector(arrays: Mapping[str, Any]) -> bool:
    return "probs" in arrays or "log_probs" in arrays


@dataclass(frozen=True)
class VersionInfo:
    """Summary of one version, as :meth:`SkeletonStore.list` reports it."""

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

    def to_dict(self) -> dict[str, Any]:
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
