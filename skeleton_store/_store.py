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
Reads (and ``latest``, the newest version that verifies) are in
:mod:`skeleton_store._reader`; backend failures are :class:`StoreUnavailable`
(see :mod:`skeleton_store._backends`).
"""

from __future__ import annotations

import builtins
import logging
import uuid
from collections.abc import Mapping
from typing import Any

import numpy.typing as npt

from guardrail import Calibration, Certificate, SkeletonSpec

from . import _aliases
from ._aliases import AliasEvent, utc_now
from ._errors import ConcurrentWriteError, InvalidRequest, StoreError
from ._fields import manifest_fields, version_path
from ._maintenance import collect_garbage, repair_store, verify_store
from ._manifest import FORMAT, encode_arrays, json_value, seal, sha256_hex
from ._names import check_alias, check_name, format_version
from ._reader import StoreReader
from ._resolve import SavableSkeleton
from ._version import SkeletonVersion

__all__ = ["SkeletonStore"]

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 1000


class SkeletonStore(StoreReader):
    """Named skeletons with immutable, integer-numbered versions and movable aliases.

    ``url``: a local directory (default :func:`default_store_url`) or any
    fsspec URL such as ``s3://bucket/prefix``; ``storage_options`` go to
    fsspec (e.g. ``{"client_kwargs": {"endpoint_url": ...}}`` for s3fs).
    Version references are ``3``, ``"3"``, ``"v3"``, ``"latest"`` or an alias name.
    Reading (:meth:`get`, :meth:`resolve`, :meth:`list`, :meth:`show`, ...) is
    documented in :class:`skeleton_store._reader.StoreReader`.

    Examples
    --------
        >>> import tempfile
        >>> from guardrail import VectorSkeleton
        >>> store = SkeletonStore(tempfile.mkdtemp())
        >>> v1 = store.put_skeleton("chat", VectorSkeleton([-1.0, -1.5, -2.0]))
        >>> store.promote("chat", v1.version).version, store.aliases("chat")
        (1, {'latest': 1, 'production': 1})
    """

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
        params: Mapping[str, object] | None = None,
        vsd_trace: object = None,
        calibration: Calibration | Mapping[str, object] | None = None,
        extra: Mapping[str, object] | None = None,
        certificate: Certificate | None = None,
    ) -> SkeletonVersion:
        """Publish a new version of ``name`` (create-only; never overwrites) and return it.

        ``parent`` (a version reference) is resolved to a number now and must exist.
        ``certificate``: the whole deployed rule this version holds (an alias then
        pins and rolls back the rule, not only a vector); its calibration and model
        identity fill ``calibration``, ``model_id``, ``tokenizer``, ``vocab_size`` and
        ``logprob_mode`` where those are not given. ``params``, ``vsd_trace``,
        ``calibration`` and ``extra`` are JSON data (numpy scalars and arrays converted).
        """
        check_name(name)
        if certificate is not None:
            if not isinstance(certificate, Certificate):
                raise InvalidRequest(f"certificate must be a Certificate, got {type(certificate)}")
            ident = certificate.model
            calibration = calibration if calibration is not None else certificate.calibration
            model_id = model_id if model_id is not None else ident.model_id
            tokenizer = tokenizer if tokenizer is not None else ident.tokenizer
            vocab_size = vocab_size if vocab_size is not None else ident.vocab_size
            logprob_mode = logprob_mode if logprob_mode is not None else ident.logprob_mode
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
        if certificate is not None:
            fields["certificate"] = json_value("certificate", certificate.to_dict())
        if fields["parent"] is not None:
            self._manifest(name, fields["parent"])  # the parent must exist and verify
        rel_blob = f"blobs/{uuid.uuid4().hex}.safetensors"
        fields["blob"] = {"path": rel_blob, "sha256": sha256_hex(blob), "size": len(blob)}
        self._backend.write(f"{name}/{rel_blob}", blob)
        version = max(self._version_numbers(name), default=0) + 1
        for _ in range(MAX_ATTEMPTS):
            manifest = {**fields, "version": version, "created_at": utc_now()}
            if self._backend.create(version_path(name, version), seal(manifest)):
                logger.info("published %s %s in %s", name, format_version(version), self.url)
                return SkeletonVersion.from_manifest(manifest, loaded, self.url)
            logger.debug("%s %s taken by a concurrent writer", name, format_version(version))
            version += 1
        raise ConcurrentWriteError(f"could not publish {name!r}: lost {MAX_ATTEMPTS} races")

    def put_skeleton(
        self,
        name: str,
        skeleton: SavableSkeleton,
        *,
        parent: int | str | None = None,
        model_id: str | None = None,
        model_revision: str | None = None,
        tokenizer: str | None = None,
        logprob_mode: str | None = None,
        extra: Mapping[str, object] | None = None,
        certificate: Certificate | None = None,
    ) -> SkeletonVersion:
        """Publish a skeleton's data (a :class:`guardrail.VectorSkeleton` or
        :class:`guardrail.NGramSkeleton`: its ``to_arrays()``) as a new version of
        ``name``, kind and parameters from its spec. ``version.skeleton().to_spec()`` is
        then the spec that references it (``STORE_URL#NAME@vN`` and the data's hash),
        for a certificate; :func:`skeleton_store.resolve_skeleton` builds it back."""
        spec = SkeletonSpec.of(skeleton)
        if not spec.data_backed:
            raise InvalidRequest(
                f"put_skeleton stores the data of a vector or n-gram skeleton; "
                f"{type(skeleton).__name__} has kind {spec.kind!r}"
            )
        arrays = skeleton.to_arrays()
        params = {k: v for k, v in spec.params.items() if k not in ("sha256", "source")}
        vocab = params.get("vocab_size")
        return self.put(
            name,
            arrays,
            kind=spec.kind,
            parent=parent,
            model_id=model_id,
            model_revision=model_revision,
            tokenizer=tokenizer,
            vocab_size=vocab if isinstance(vocab, int) else None,
            logprob_mode=logprob_mode,
            params=params,
            extra=extra,
            certificate=certificate,
        )

    def set_alias(self, name: str, alias: str, ref: int | str) -> AliasEvent:
        """Point ``alias`` at the version ``ref``; atomic, recorded in the alias history.

        The version's manifest must exist and verify; :meth:`promote` also loads
        and verifies its arrays first. Setting the current target again is a no-op.
        If the alias's newest event does not verify, the new event is written over
        it, continuing from the newest event that does; the damaged one is kept and
        marked (see :mod:`skeleton_store._aliases`) and a warning says so.
        """
        check_name(name)
        check_alias(alias, settable=True)
        version = self.resolve(name, ref)
        self._manifest(name, version)

        def step(cur: AliasEvent | None, damaged: bool) -> tuple[int, str, tuple[int, ...]] | None:
            if cur is None:
                return version, "set", ()
            if cur.version == version:
                return (version, "set", cur.previous) if damaged else None
            return version, "set", (*cur.previous, cur.version)

        ev = _aliases.move(self._backend, name, alias, step)
        logger.info("%s: alias %s -> %s", name, alias, format_version(ev.version))
        return ev

    def promote(self, name: str, ref: int | str, alias: str = "production") -> AliasEvent:
        """Point ``alias`` at ``ref`` after loading it and verifying every array."""
        version = self.get(name, ref).version
        return self.set_alias(name, alias, version)

    def rollback(self, name: str, alias: str = "production") -> AliasEvent:
        """Move ``alias`` back to its previous target (repeatable down its history).

        If the alias's newest event does not verify (its target is unknown), the
        rollback restores the newest event that does verify, as a new event; the
        damaged one is kept and marked, and a warning says so.
        """
        check_name(name)
        check_alias(alias, settable=True)

        def step(cur: AliasEvent | None, damaged: bool) -> tuple[int, str, tuple[int, ...]] | None:
            if damaged and cur is not None:
                return cur.version, "rollback", cur.previous
            if cur is None or not cur.previous:
                if cur is None and not damaged:
                    self._require_store()
                what = "no event that verifies" if damaged else "no earlier target"
                raise StoreError(
                    f"alias {alias!r} of {name!r} has {what} to go back to"
                    + ("; promote a version to give it a new head" if damaged else "")
                )
            return cur.previous[-1], "rollback", cur.previous[:-1]

        ev = _aliases.move(self._backend, name, alias, step)
        logger.info("%s: alias %s rolled back to %s", name, alias, format_version(ev.version))
        return ev

    # ---- maintenance ---------------------------------------------------------------------

    def verify(self, name: str | None = None) -> builtins.list[str]:
        """Load every version (manifest and arrays) and alias event (of ``name`` or of
        all skeletons) and return the problems found, one line each naming the file;
        an empty list means the store is healthy. Nothing is changed."""
        names = [check_name(name)] if name is not None else self.names()
        if name is not None:
            self.versions(name)  # StoreNotFound for a missing store
        return verify_store(self, names)

    def repair(self, name: str | None = None) -> builtins.list[str]:
        """Fix what can be fixed safely and return what was done, one line each.

        Only aliases are repaired: an alias whose newest event does not verify
        gets a new ``repair`` event restoring the newest event that does, and
        every damaged event that a newer one supersedes is kept in place and
        marked, so history reads skip it. Nothing is deleted or overwritten and
        every write is create-only, so concurrent writers stay safe. Damaged
        versions cannot be repaired (``latest`` skips them); :meth:`verify` still
        reports them, and an alias with no event that verifies needs a promote.
        """
        names = [check_name(name)] if name is not None else self.names()
        if name is not None:
            self.versions(name)  # StoreNotFound for a missing store
        return repair_store(self, names)

    def gc(self, older_than_s: float = 3600.0) -> int:
        """Delete leftovers of writers that died: temp files and unreferenced blobs older
        than ``older_than_s``. Returns how many objects were removed.

        A ``put`` must publish its manifest within ``older_than_s`` of writing its
        blob (its lease), or gc may delete the blob and the version will not verify.
        A name with an unreadable manifest is skipped (its blobs cannot be attributed).
        """
        return collect_garbage(self, older_than_s)
