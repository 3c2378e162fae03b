"""The reading side of :class:`SkeletonStore`: resolve, load, list and show.

``latest`` is not stored: it is the newest version that verifies (manifest and
arrays); a newer version that does not is skipped with a warning naming it and
why. Reads never create the store: a read that finds nothing checks that the
store exists and raises :class:`StoreNotFound` if it does not. An alias whose
newest event does not verify is never resolved; reads that do not need it
(other aliases, versions by number, listings) go on, with a warning.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import re
from collections.abc import Mapping
from typing import Any

from guardrail import Certificate
from guardrail._lift import DEFAULT_CLIP

from . import _aliases
from ._aliases import AliasEvent
from ._backends import FsspecBackend, LocalBackend, default_store_url, open_backend
from ._diff import VersionDiff, diff_versions
from ._errors import IntegrityError, InvalidRequest, StoreNotFound, VersionNotFound
from ._fields import check_manifest, version_path
from ._manifest import decode_arrays, unseal
from ._names import LATEST, check_alias, check_name, format_version, parse_version
from ._version import SkeletonVersion, VersionInfo

__all__ = ["StoreReader"]

logger = logging.getLogger(__name__)

_VERSION_FILE_RE = re.compile(r"v([0-9]{8,})\.json")


class StoreReader:
    """Read access to a store; :class:`SkeletonStore` adds writing and maintenance."""

    def __init__(
        self,
        url: str | os.PathLike[str] | None = None,
        *,
        storage_options: Mapping[str, object] | None = None,
    ) -> None:
        self._backend: LocalBackend | FsspecBackend = open_backend(
            default_store_url() if url is None else url, storage_options
        )
        self.url = self._backend.url
        self._exists = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    def _require_store(self) -> None:
        """:class:`StoreNotFound` unless the store exists (a read found nothing)."""
        if self._exists:
            return
        if not self._backend.exists():
            raise StoreNotFound(
                f"store {self.url} does not exist: nothing was ever published there "
                f"(reads never create a store; check the URL)",
                url=self.url,
            )
        self._exists = True

    def names(self) -> builtins.list[str]:
        """Skeleton names that have at least one published version."""
        out = []
        entries = self._backend.listdir("")
        if not entries:
            self._require_store()
        for entry in entries:
            try:
                check_name(entry)
            except InvalidRequest:
                continue
            if self._version_numbers(entry):
                out.append(entry)
        return out

    def _version_numbers(self, name: str) -> builtins.list[int]:
        found = []
        for entry in self._backend.listdir(f"{name}/versions"):
            m = _VERSION_FILE_RE.fullmatch(entry)
            if m:
                found.append(int(m.group(1)))
        return sorted(found)

    def versions(self, name: str) -> builtins.list[int]:
        """Published version numbers of ``name``, ascending (manifests not verified)."""
        found = self._version_numbers(check_name(name))
        if not found:
            self._require_store()
        return found

    def _manifest_body(self, name: str, version: int, data: bytes) -> dict[str, Any]:
        path = f"{self.url}/{version_path(name, version)}"
        return check_manifest(unseal(data, path), name, version, path)

    def _manifest(self, name: str, version: int) -> dict[str, Any]:
        try:
            data = self._backend.read(version_path(name, version))
        except FileNotFoundError:
            self._require_store()
            raise VersionNotFound(f"{name} {format_version(version)} does not exist") from None
        return self._manifest_body(name, version, data)

    def _newest(self, name: str) -> SkeletonVersion:
        """``latest``: the newest version whose manifest and arrays verify, loaded.

        A newer version that does not verify (or vanished) is skipped with a warning.
        """
        skipped = []
        for v in reversed(self.versions(name)):
            try:
                return self._load(name, v)
            except (IntegrityError, VersionNotFound) as exc:
                logger.warning("latest of %r skips %s: %s", name, format_version(v), exc)
                skipped.append(format_version(v))
        if skipped:
            raise VersionNotFound(
                f"skeleton {name!r} has no version that verifies in {self.url} "
                f"(skipped {', '.join(skipped)})"
            )
        raise VersionNotFound(f"skeleton {name!r} has no versions in {self.url}")

    @staticmethod
    def _is_latest(ref: int | str) -> bool:
        return parse_version(ref) is None and check_alias(ref) == LATEST

    def resolve(self, name: str, ref: int | str = LATEST) -> int:
        """The version number ``ref`` (a version, ``latest`` or an alias) points to now.

        ``latest`` loads and verifies versions newest first (see :meth:`get`); an
        alias whose newest event does not verify raises :class:`IntegrityError`.
        """
        check_name(name)
        v = parse_version(ref)
        if v is not None:
            return v
        alias = check_alias(ref)
        if alias == LATEST:
            return self._newest(name).version
        ev = _aliases.current(self._backend, name, alias)
        if ev is None:
            self._require_store()
            raise VersionNotFound(f"alias {alias!r} of skeleton {name!r} is not set")
        return ev.version

    def get(self, name: str, ref: int | str = LATEST) -> SkeletonVersion:
        """Load a version and verify the manifest and every array's sha256.

        ``latest`` is the newest version that verifies: a newer one whose manifest
        or arrays are damaged or missing is skipped with a warning. An explicit
        version number that does not verify raises :class:`IntegrityError`.
        """
        check_name(name)
        if self._is_latest(ref):
            return self._newest(name)
        return self._load(name, self.resolve(name, ref))

    def _load(self, name: str, version: int) -> SkeletonVersion:
        manifest = self._manifest(name, version)
        blob_path = f"{name}/{manifest['blob']['path']}"
        full = f"{self.url}/{blob_path}"
        try:
            blob = self._backend.read(blob_path)
        except FileNotFoundError:
            raise IntegrityError(
                f"{full}: arrays of {name} {format_version(version)} are missing", path=full
            ) from None
        arrays = decode_arrays(blob, manifest, full)
        return SkeletonVersion.from_manifest(manifest, arrays, self.url)

    def certificate(self, name: str, ref: int | str = "production") -> Certificate:
        """The deployed rule that version ``ref`` (an alias, ``latest`` or a number) holds,
        bound to its vector; see :meth:`SkeletonVersion.certificate`."""
        return self.get(name, ref).certificate()

    def aliases(self, name: str) -> dict[str, int]:
        """Every alias of ``name`` and its target, ``latest`` included (if any version).

        An alias whose newest event does not verify is left out with a warning
        naming the file (:meth:`resolve` of it raises :class:`IntegrityError`).
        """
        has_versions = bool(self.versions(name))
        out = {}
        for alias in _aliases.alias_names(self._backend, name):
            try:
                ev = _aliases.current(self._backend, name, alias)
            except IntegrityError as exc:
                logger.warning("%s", exc)
                continue
            if ev is not None:
                out[alias] = ev.version
        if has_versions:
            with contextlib.suppress(VersionNotFound):
                out[LATEST] = self._newest(name).version
        return dict(sorted(out.items()))

    def alias_history(self, name: str, alias: str) -> builtins.list[AliasEvent]:
        """Every move of ``alias``, oldest first (damaged events that a later move
        superseded and marked are left out; an unmarked one raises IntegrityError)."""
        out = _aliases.history(self._backend, check_name(name), check_alias(alias))
        if not out:
            self._require_store()
        return out

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
                    logger.warning("list of %r skips %s: %s", n, format_version(v), exc)
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
        """The manifest of a version (verified) with its aliases. Arrays are not
        loaded, except that ``latest`` is the newest version whose arrays verify."""
        check_name(name)
        latest = self._is_latest(ref)
        version = None if latest else self.resolve(name, ref)
        targets = self.aliases(name)
        if version is None:
            version = targets[LATEST] if LATEST in targets else self.resolve(name, ref)
        out = dict(self._manifest(name, version))
        out["tag"] = format_version(version)
        out["aliases"] = sorted(a for a, t in targets.items() if t == version)
        return out

    def diff(
        self, name: str, a: int | str, b: int | str = LATEST, *, clip: float = DEFAULT_CLIP
    ) -> VersionDiff:
        """Changes from ``a`` to ``b``: arrays, fields, TV distance and budget shift bound."""
        return diff_versions(self.get(name, a), self.get(name, b), clip=clip)
