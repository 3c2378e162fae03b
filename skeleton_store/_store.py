"""The versioned skeleton store.

Layout under the store root (a local directory or an fsspec URL)::

    <name>/versions/v00000003.json      manifest of version 3 (the publish step)
    <name>/blobs/<uuid>.safetensors     arrays of one version, written before its manifest
    <name>/aliases/<alias>/e00000002.json   alias event log (see _aliases)
    .tmp/                               local only: temp files of writers in flight

A version exists exactly when its manifest exists. ``put`` writes the arrays
blob under a fresh random name first, then publishes the manifest with an
atomic create-only write at ``max(existing) + 1``; when a concurrent writer
took that number the create fails and the next number is tried, so every
writer gets its own version and none is lost or overwritten. A writer killed
before the manifest leaves only an unreferenced blob (and, locally, a temp
file): invisible to readers, removed by :meth:`SkeletonStore.gc`.
``latest`` is not stored: it is the newest version whose manifest verifies.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import re
import uuid
from collections.abc import Mapping
from typing import Any

import numpy.typing as npt

from guardrail import DEFAULT_CLIP, Calibration

from . import _aliases
from ._aliases import AliasEvent, utc_now
from ._backends import FsspecBackend, LocalBackend, default_store_url, open_backend
from ._diff import diff_versions
from ._errors import (
    ConcurrentWriteError,
    IntegrityError,
    InvalidRequest,
    StoreError,
    VersionNotFound,
)
from ._fields import check_manifest, manifest_fields, version_path
from ._maintenance import collect_garbage, verify_store
from ._manifest import (
    FORMAT,
    decode_arrays,
    encode_arrays,
    seal,
    sha256_hex,
    unseal,
)
from ._names import LATEST, check_alias, check_name, format_version, parse_version
from ._version import SkeletonVersion, VersionInfo

__all__ = ["SkeletonStore"]

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 1000
_VERSION_FILE_RE = re.compile(r"v([0-9]{8,})\.json")


class SkeletonStore:
    """Named skeletons with immutable, integer-numbered versions and movable aliases.

    ``url``: a local directory (default :func:`default_store_url`) or any
    fsspec URL such as ``s3://bucket/prefix``; ``storage_options`` go to
    fsspec (e.g. ``{"client_kwargs": {"endpoint_url": ...}}`` for s3fs).
    Version references are ``3``, ``"3"``, ``"v3"``, ``"latest"`` or an alias name.
    """

    def __init__(
        self,
        url: str | os.PathLike[str] | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._backend: LocalBackend | FsspecBackend = open_backend(
            default_store_url() if url is None else url, storage_options
        )
        self.url = self._backend.url

    def __repr__(self) -> str:
        return f"SkeletonStore({self.url!r})"

    # ---- reading -------------------------------------------------------------------------

    def names(self) -> builtins.list[str]:
        """Skeleton names that have at least one published version."""
        out = []
        for entry in self._backend.listdir(""):
            try:
                check_name(entry)
            except InvalidRequest:
                continue
            if self.versions(entry):
                out.append(entry)
        return out

    def versions(self, name: str) -> builtins.list[int]:
        """Published version numbers of ``name``, ascending (manifests not verified)."""
        check_name(name)
        found = []
        for entry in self._backend.listdir(f"{name}/versions"):
            m = _VERSION_FILE_RE.fullmatch(entry)
            if m:
                found.append(int(m.group(1)))
        return sorted(found)

    def _manifest_body(self, name: str, version: int, data: bytes) -> dict[str, Any]:
        path = f"{self.url}/{version_path(name, version)}"
        return check_manifest(unseal(data, path), name, version, path)

    def _manifest(self, name: str, version: int) -> dict[str, Any]:
        try:
            data = self._backend.read(version_path(name, version))
        except FileNotFoundError:
            raise VersionNotFound(f"{name} {format_version(version)} does not exist") from None
        return self._manifest_body(name, version, data)

    def _latest(self, name: str) -> int:
        for v in reversed(self.versions(name)):
            try:
                self._manifest(name, v)
            except IntegrityError as exc:
                logger.warning("skipping unverifiable version: %s", exc)
                continue
            return v
        raise VersionNotFound(f"skeleton {name!r} has no versions in {self.url}")

    def resolve(self, name: str, ref: int | str = LATEST) -> int:
        """The version number ``ref`` (a version, ``latest`` or an alias) points to now."""
        check_name(name)
        v = parse_version(ref)
        if v is not None:
            return v
        alias = check_alias(ref)
        if alias == LATEST:
            return self._latest(name)
        ev = _aliases.current(self._backend, name, alias)
        if ev is None:
            raise VersionNotFound(f"alias {alias!r} of skeleton {name!r} is not set")
        return ev.version

    def get(self, name: str, ref: int | str = LATEST) -> SkeletonVersion:
        """Load a version and verify the manifest and every array's sha256."""
        version = self.resolve(name, ref)
        manifest = self._manifest(name, version)
        blob_path = f"{name}/{manifest['blob']['path']}"
        try:
            blob = self._backend.read(blob_path)
        except FileNotFoundError:
            raise IntegrityError(
                f"{self.url}/{blob_path}: arrays of {name} {format_version(version)} are missing",
                path=blob_path,
            ) from None
        arrays = decode_arrays(blob, manifest, f"{self.url}/{blob_path}")
        return SkeletonVersion.from_manifest(manifest, arrays)

    def aliases(self, name: str) -> dict[str, int]:
        """Every alias of ``name`` and its target, ``latest`` included (if any version)."""
        check_name(name)
        out = {}
        for alias in _aliases.alias_names(self._backend, name):
            ev = _aliases.current(self._backend, name, alias)
            if ev is not None:
                out[alias] = ev.version
        with contextlib.suppress(VersionNotFound):
            out[LATEST] = self._latest(name)
        return dict(sorted(out.items()))

    def alias_history(self, name: str, alias: str) -> builtins.list[AliasEvent]:
        """Every move of ``alias``, oldest first."""
        return _aliases.history(self._backend, check_name(name), check_alias(alias))

    def list(self, name: str | None = None) -> builtins.list[VersionInfo]:
        """Summaries of every verifiable version (of ``name``, or of every skeleton)."""
        out: builtins.list[VersionInfo] = []
        for n in [check_name(name)] if name is not None else self.names():
            by_version: dict[int, builtins.list[str]] = {}
            for alias, target in self.aliases(n).items():
                by_version.setdefault(target, []).append(alias)
            paths = {version_path(n, v): v for v in self.versions(n)}
            for path, data in self._backend.read_many(builtins.list(paths)).items():
                v = paths[path]
                if data is None:
                    continue
                try:
                    m = self._manifest_body(n, v, data)
                except IntegrityError as exc:
                    logger.warning("skipping unverifiable version: %s", exc)
                    continue
                out.append(
                    VersionInfo(
                        name=n,
                        version=v,
                        parent=m["parent"],
                        created_at=m["created_at"],
                        kind=m["kind"],
                        model_id=m["model_id"],
                        aliases=tuple(sorted(by_version.get(v, ()))),
                    )
                )
        return sorted(out, key=lambda i: (i.name, i.version))

    def show(self, name: str, ref: int | str = LATEST) -> dict[str, Any]:
        """The manifest of a version (verified; arrays not loaded) with its aliases."""
        version = self.resolve(name, ref)
        out = dict(self._manifest(name, version))
        out["tag"] = format_version(version)
        out["aliases"] = sorted(a for a, t in self.aliases(name).items() if t == version)
        return out

    def diff(
        self, name: str, a: int | str, b: int | str = LATEST, *, clip: float = DEFAULT_CLIP
    ) -> dict[str, Any]:
        """Changes from ``a`` to ``b``: arrays, fields, TV distance and budget shift bound."""
        return diff_versions(self.get(name, a), self.get(name, b), clip=clip)

    # ---- writing -------------------------------------------------------------------------

    def put(
        self,
        name: str,
        arrays: Mapping[str, npt.ArrayLike],
        *,
        kind: str,
        parent: int | str | None = None,
        model_id: str | None = None,
        model_revision: str | None = None,
        tokenizer: str | None = None,
        vocab_size: int | None = None,
        logprob_mode: str | None = None,
        params: Mapping[str, Any] | None = None,
        vsd_trace: Any = None,
        calibration: Calibration | Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> SkeletonVersion:
        """Publish a new version of ``name`` (create-only; never overwrites) and return it.

        ``parent`` (a version reference) is resolved to a number now and must exist.
        """
        check_name(name)
        blob, records, loaded = encode_arrays(arrays)
        fields: dict[str, Any] = {
            "format": FORMAT,
            "name": name,
            "parent": None if parent is None else self.resolve(name, parent),
            **manifest_fields(
                kind=kind,
                model_id=model_id,
                model_revision=model_revision,
                tokenizer=tokenizer,
                vocab_size=vocab_size,
                logprob_mode=logprob_mode,
                params=params,
                vsd_trace=vsd_trace,
                calibration=calibration,
                extra=extra,
                records=records,
            ),
            "arrays": records,
        }
        if fields["parent"] is not None:
            self._manifest(name, fields["parent"])  # the parent must exist and verify
        rel_blob = f"blobs/{uuid.uuid4().hex}.safetensors"
        fields["blob"] = {"path": rel_blob, "sha256": sha256_hex(blob), "size": len(blob)}
        self._backend.write(f"{name}/{rel_blob}", blob)
        version = max(self.versions(name), default=0) + 1
        for _ in range(MAX_ATTEMPTS):
            manifest = {**fields, "version": version, "created_at": utc_now()}
            if self._backend.create(version_path(name, version), seal(manifest)):
                logger.info("published %s %s in %s", name, format_version(version), self.url)
                return SkeletonVersion.from_manifest(manifest, loaded)
            logger.debug("%s %s taken by a concurrent writer", name, format_version(version))
            version += 1
        raise ConcurrentWriteError(f"could not publish {name!r}: lost {MAX_ATTEMPTS} races")

    def set_alias(self, name: str, alias: str, ref: int | str) -> AliasEvent:
        """Point ``alias`` at the version ``ref``; atomic, recorded in the alias history.

        The version's manifest must exist and verify; :meth:`promote` also loads
        and verifies its arrays first. Setting the current target again is a no-op.
        """
        check_name(name)
        check_alias(alias, settable=True)
        version = self.resolve(name, ref)
        self._manifest(name, version)

        def step(cur: AliasEvent | None) -> tuple[int, str, tuple[int, ...]] | None:
            if cur is None:
                return version, "set", ()
            if cur.version == version:
                return None
            return version, "set", (*cur.previous, cur.version)

        ev = _aliases.move(self._backend, name, alias, step)
        logger.info("%s: alias %s -> %s", name, alias, format_version(ev.version))
        return ev

    def promote(self, name: str, ref: int | str, alias: str = "production") -> AliasEvent:
        """Point ``alias`` at ``ref`` after loading it and verifying every array."""
        version = self.get(name, ref).version
        return self.set_alias(name, alias, version)

    def rollback(self, name: str, alias: str = "production") -> AliasEvent:
        """Move ``alias`` back to its previous target (repeatable down its history)."""
        check_name(name)
        check_alias(alias, settable=True)

        def step(cur: AliasEvent | None) -> tuple[int, str, tuple[int, ...]] | None:
            if cur is None or not cur.previous:
                raise StoreError(f"alias {alias!r} of {name!r} has no earlier target to go back to")
            return cur.previous[-1], "rollback", cur.previous[:-1]

        ev = _aliases.move(self._backend, name, alias, step)
        logger.info("%s: alias %s rolled back to %s", name, alias, format_version(ev.version))
        return ev

    # ---- maintenance ---------------------------------------------------------------------

    def verify(self, name: str | None = None) -> builtins.list[str]:
        """Load every version and alias event (of ``name`` or of all skeletons) and
        return the problems found; an empty list means the store is healthy."""
        return verify_store(self, [check_name(name)] if name is not None else self.names())

    def gc(self, older_than_s: float = 3600.0) -> int:
        """Delete leftovers of writers that died: temp files and unreferenced blobs older
        than ``older_than_s``. Returns how many objects were removed.

        A ``put`` must publish its manifest within ``older_than_s`` of writing its
        blob (its lease), or gc may delete the blob and the version will not verify.
        A name with an unreadable manifest is skipped (its blobs cannot be attributed).
        """
        return collect_garbage(self, older_than_s)
