"""Store maintenance: full verification and removal of dead writers' leftovers."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from . import _aliases
from ._errors import IntegrityError, StoreError
from ._fields import version_path

if TYPE_CHECKING:
    from ._store import SkeletonStore

__all__ = ["collect_garbage", "verify_store"]

logger = logging.getLogger(__name__)


def verify_store(store: SkeletonStore, names: list[str]) -> list[str]:
    """Load every version and alias event of ``names``; the problems found, as text."""
    problems: list[str] = []
    for n in names:
        for v in store.versions(n):
            try:
                store.get(n, v)
            except StoreError as exc:
                problems.append(str(exc))
        for alias in _aliases.alias_names(store._backend, n):
            try:
                _aliases.history(store._backend, n, alias)
            except StoreError as exc:
                problems.append(str(exc))
    return problems


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
