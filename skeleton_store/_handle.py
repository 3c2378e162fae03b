"""Runtime access to the version an alias points at, refreshed without a restart."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping

from guardrail import Certificate, Monitor, SkeletonSpec, StreamPolicy, TokenEvent

from ._errors import StoreError
from ._names import check_name, format_version
from ._store import SkeletonStore
from ._version import OnMissing, SkeletonVersion, VectorSkeleton

__all__ = ["SkeletonHandle", "open_certificate", "open_skeleton"]

logger = logging.getLogger(__name__)


class SkeletonHandle:
    """The version of ``name`` that ``alias`` points at, for a long-running service.

    The version is loaded (and verified) on construction. :meth:`refresh`
    re-reads the alias and, if it moved (a promotion or a rollback), loads
    and verifies the new version, then swaps it in; a version that fails to
    load leaves the current one in place and the error propagates. Reads of
    :attr:`current` are lock-free and always see a complete version; refreshes
    are serialised by a lock, so the handle can be shared between threads.

    A handle is also a :class:`guardrail._reads.Skeleton` (``log_prob`` scores with
    the current version). A stream should not change skeleton mid-way: use
    :meth:`monitor` (or ``handle.current.as_skeleton()``) to pin one version
    for the length of one answer.

    Examples
    --------
        >>> import tempfile
        >>> from guardrail import TokenEvent, VectorSkeleton
        >>> store = SkeletonStore(tempfile.mkdtemp())
        >>> version = store.put_skeleton("chat", VectorSkeleton([-1.0, -1.5]))
        >>> _ = store.promote("chat", version.version)
        >>> handle = SkeletonHandle(store, "chat")
        >>> handle.current.tag, handle.log_prob(TokenEvent("b", logprob=-0.2, token_id=1))
        ('v1', -1.5)
    """

    def __init__(self, store: SkeletonStore, name: str, alias: int | str = "production") -> None:
        self.store = store
        self.name = check_name(name)
        self.alias = alias
        self._lock = threading.Lock()
        version = store.get(self.name, alias)
        self._state: tuple[SkeletonVersion, VectorSkeleton | None, Certificate | None] = (
            version,
            _vector_or_none(version),
            _certificate_or_none(version),
        )

    def __repr__(self) -> str:
        return (
            f"SkeletonHandle({self.store.url!r}, {self.name!r}, {self.alias!r} -> "
            f"{self.current.tag})"
        )

    @property
    def current(self) -> SkeletonVersion:
        """The version in use (a verified, immutable object)."""
        return self._state[0]

    def refresh(self) -> bool:
        """Re-read the alias; load and swap in its version if it changed. True if it did."""
        with self._lock:
            target = self.store.resolve(self.name, self.alias)
            old = self._state[0]
            if target == old.version:
                return False
            new = self.store.get(self.name, target)
            self._state = (new, _vector_or_none(new), _certificate_or_none(new))
        logger.info("%s@%s: %s -> %s", self.name, self.alias, old.tag, format_version(new.version))
        return True

    @property
    def certificate(self) -> Certificate:
        """The deployed rule of the current version (see :meth:`SkeletonVersion.certificate`):
        read it once per answer, so that a refresh never changes a stream mid-way."""
        version, _, cert = self._state
        if cert is None:
            return version.certificate()  # raises the reason
        return cert

    def log_prob(self, event: TokenEvent) -> float:
        """``log S(token)`` under the current version (needs a probs/log_probs vector)."""
        version, skeleton, _ = self._state
        if skeleton is None:
            raise StoreError(f"{self.name} {version.tag} has no 'probs' or 'log_probs' array")
        return skeleton.log_prob(event)

    def to_spec(self) -> SkeletonSpec:
        """The spec of the current version's skeleton (it pins that version:
        ``STORE_URL#NAME@vN``)."""
        version, vector, _ = self._state
        return SkeletonSpec.of(vector if vector is not None else version.skeleton())

    def monitor(
        self,
        policy: StreamPolicy | None = None,
        tau: float | None = None,
        *,
        on_missing_logprobs: OnMissing | None = None,
        track_bounds: bool = False,
    ) -> Monitor:
        """A monitor pinned to the current version (see :meth:`SkeletonVersion.monitor`)."""
        return self.current.monitor(
            policy, tau, on_missing_logprobs=on_missing_logprobs, track_bounds=track_bounds
        )


def _certificate_or_none(version: SkeletonVersion) -> Certificate | None:
    try:
        return version.certificate()
    except StoreError:
        return None


def _vector_or_none(version: SkeletonVersion) -> VectorSkeleton | None:
    if "probs" in version.arrays or "log_probs" in version.arrays:
        return version.as_skeleton()
    return None


def open_skeleton(
    url: str | os.PathLike[str] | None,
    name: str,
    alias: int | str = "production",
    *,
    storage_options: Mapping[str, object] | None = None,
) -> SkeletonHandle:
    """``SkeletonHandle(SkeletonStore(url, storage_options=...), name, alias)``."""
    return SkeletonHandle(SkeletonStore(url, storage_options=storage_options), name, alias)


def open_certificate(
    url: str | os.PathLike[str] | None,
    name: str,
    alias: int | str = "production",
    *,
    storage_options: Mapping[str, object] | None = None,
) -> SkeletonHandle:
    """The certificate an alias pins, with hot refresh: ``handle.certificate`` is the
    current rule (take it once per answer), ``handle.refresh()`` picks up a promotion
    or rollback. Fails now if the version holds no certificate."""
    handle = open_skeleton(url, name, alias, storage_options=storage_options)
    handle.current.certificate()  # the reason, if there is none
    return handle
