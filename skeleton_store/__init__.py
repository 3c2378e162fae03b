"""Versioned storage of skeletons and their calibrations for liftguard.

Named skeletons with immutable, integer-numbered versions (``v1``, ``v2``, ...):
arrays in safetensors (never pickle), a sealed JSON manifest per version
(model, tokenizer, skeleton kind and parameters, VSD trace, calibration,
sha256 of every array), aliases such as ``production`` moved atomically with
a history for rollback, and ``latest`` (always the newest version that
verifies). Backends: a local directory (default) or any fsspec URL
(``s3://bucket/prefix``). :meth:`SkeletonStore.verify` checks every manifest,
array and alias event; :meth:`SkeletonStore.repair` fixes damaged alias heads.

>>> store = SkeletonStore("/tmp/skeletons")                       # doctest: +SKIP
>>> v = store.put("chat", {"probs": p}, kind="vsd", vocab_size=len(p))  # doctest: +SKIP
>>> store.promote("chat", v.version)                              # doctest: +SKIP
>>> handle = open_skeleton("/tmp/skeletons", "chat")              # doctest: +SKIP
>>> handle.refresh()  # picks up a later promotion                # doctest: +SKIP

Certificates reference data-backed skeletons (a vector, n-gram counts) by content
hash and source, ``STORE_URL#NAME@vN`` or a safetensors file:
:meth:`SkeletonStore.put_skeleton` and :func:`save_skeleton` save one,
:func:`resolve_skeleton` builds it back (``Certificate.load(path,
resolver=resolve_skeleton)``).
"""

from __future__ import annotations

from ._errors import IntegrityError, StoreError, StoreNotFound, StoreUnavailable
from ._handle import open_skeleton
from ._resolve import resolve_skeleton, save_skeleton
from ._store import SkeletonStore
from ._version import SkeletonVersion
from ._warmstart import DEFAULT_MAX_CONTEXTS, build_vsd_version, warm_start

__all__ = [
    "DEFAULT_MAX_CONTEXTS",
    "IntegrityError",
    "SkeletonStore",
    "SkeletonVersion",
    "StoreError",
    "StoreNotFound",
    "StoreUnavailable",
    "build_vsd_version",
    "open_skeleton",
    "resolve_skeleton",
    "save_skeleton",
    "warm_start",
]
