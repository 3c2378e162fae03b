"""Store maintenance: full verification, safe repair, and removal of dead writers' leftovers."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from . import _aliases
from ._aliases import AliasEvent, BadEvent
from ._errors import IntegrityError, StoreError, VersionNotFound
from ._fields import version_path
from ._names import format_version

if TYPE_CHECKING:
    from ._store import SkeletonStore

__all__ = ["collect_garbage", "repair_store", "verify_store"]

logger = logging.getLogger(__name__)


def _alias_problems(store: SkeletonStore, name: str, versions: list[int]) -> list[str]:
    backend, problems = store._backend, []
    for alias in _aliases.alias_names(backend, name):
        evs = _aliases.events(backend, name, alias)
        newest = evs[-1]
        for ev in evs:
            if not isinstance(ev, BadEvent):
                continue
            if ev is newest:
                fix = (
                    "`verify --repair` restores the newest event that verifies"
                    if any(isinstance(e, AliasEvent) for e in evs)
                    else "promote a version to give it a new head"
                )
                problems.append(
                    f"{ev.error} (the newest event of alias {alias!r} of {name!r}: the alias "
                    f"cannot be resolved; {fix})"
                )
            elif not _aliases.is_marked(backend, ev):
                problems.append(
                    f"{ev.error} (an earlier event of alias {alias!r} of {name!r}; "
                    f"`verify --repair` marks it as superseded)"
                )
        if isinstance(newest, AliasEvent) and newest.version not in versions:
            problems.append(
                f"alias {alias!r} of {name!r} points at {format_version(newest.version)}, "
                f"which does not exist"
            )
    return problems


def verify_store(store: SkeletonStore, names: list[str]) -> list[str]:
    """Load every version and alias event of ``names``; the problems found, as text."""
    problems: list[str] = []
    for n in names:
        versions = store._version_numbers(n)
        for v in versions:
            try:
                store.get(n, v)
            except (IntegrityError, VersionNotFound) as exc:
                problems.append(str(exc))
        problems += _alias_problems(store, n, versions)
    return problems


def _restore_step(name: str, alias: str) -> _aliases.Step:
    def step(cur: AliasEvent | None, damaged: bool) -> tuple[int, str, tuple[int, ...]] | None:
        if not damaged:
            return None  # a concurrent move already wrote a good head
        if cur is None:  # pragma: no cover - events are never deleted; checked before
            raise StoreError(f"alias {alias!r} of {name!r} has no event that verifies")
        return cur.version, "repair", cur.previous

    return step


def repair_store(store: SkeletonStore, names: list[str]) -> list[str]:
    """Repair the aliases of ``names`` (see :meth:`SkeletonStore.repair`); what was done."""
    backend, done = store._backend, []
    for n in names:
        for alias in _aliases.alias_names(backend, n):
            evs = _aliases.events(backend, n, alias)
            if isinstance(evs[-1], BadEvent) and any(isinstance(e, AliasEvent) for e in evs):
                notes: list[str] = []
                ev = _aliases.move(backend, n, alias, _restore_step(n, alias), notes)
                if notes:
                    done.append(
                        f"alias {alias!r} of {n!r}: restored {format_version(ev.version)} "
                        f"as new event e{ev.seq:08d}.json"
                    )
                    done += notes
                evs = _aliases.events(backend, n, alias)
            newest = evs[-1]
            for bad in evs[:-1]:
                if isinstance(bad, BadEvent) and not _aliases.is_marked(backend, bad):
                    note = _aliases.mark(backend, bad, newest.seq)
                    logger.warning("%s", note)
                    done.append(note)
    return done


def collect_garbage(store: SkeletonStore, older_than_s: float) -> int:
    """Delete temp files and unreferenced blobs older than ``older_than_s``; how many."""
    backend = store._backend
    removed = backend.clean_temp(older_than_s)
    for n in store.names():
        versions = {version_path(n, v): v for v in store.versions(n)}
        referenced = set()
        try:
            for path, data in backend.read_many(list(versions)).items():
                if data is not None:
                    body = store._manifest_body(n, versions[path], data)
                    referenced.add(body["blob"]["path"])
        except IntegrityError as exc:
            logger.warning("gc skips %s (its blobs cannot be attributed): %s", n, exc)
            continue
        for entry in backend.listdir(f"{n}/blobs"):
            rel = f"blobs/{entry}"
            age = backend.age_s(f"{n}/{rel}")
            if rel not in referenced and age is not None and age >= older_than_s:
                backend.delete(f"{n}/{rel}")
                logger.info("gc removed %s/%s/%s", store.url, n, rel)
                removed += 1
    return removed
