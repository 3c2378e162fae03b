"""Saving and resolving the data of data-backed skeleton specs.

A vector or n-gram skeleton's spec (:class:`guardrail.SkeletonSpec`, kinds
``vector``, ``vsd``, ``unigram``, ``ngram``) never holds its arrays: it holds their
content hash (``sha256``) and where they are (``source``):

- ``STORE_URL#NAME@vN``: version ``N`` of ``NAME`` in a skeleton store (a local
  directory or any fsspec URL): :meth:`SkeletonStore.put_skeleton` publishes one,
  and the version's ``skeleton().to_spec()`` names it. A source must pin a
  version number: an alias moves.
- a path to a safetensors file: :func:`save_skeleton` writes one (atomically) and
  returns the spec. A relative path is read relative to ``root`` (default: the
  current directory).

:func:`resolve_skeleton` is the resolver that reads them
(``spec.build(resolve_skeleton)``, ``Certificate.load(path,
resolver=resolve_skeleton)``); the core checks the arrays against the spec's hash
(:meth:`guardrail.SkeletonSpec.from_arrays`). Errors are
:class:`guardrail.ConfigError` naming the field (``skeleton.params.source``,
``skeleton.params.sha256``); a damaged store version is an
:class:`~skeleton_store.IntegrityError`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from safetensors import SafetensorError
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from guardrail import ConfigError, SkeletonSpec
from guardrail._reads import Skeleton

from ._errors import InvalidRequest, VersionNotFound
from ._names import check_name, parse_version
from ._reader import StoreReader

__all__ = ["SavableSkeleton", "parse_source", "resolve_skeleton", "save_skeleton"]

DATA_FORMAT = "liftguard.skeleton-data/1"
_WHERE = "skeleton.params.source"


class SavableSkeleton(Protocol):
    """A skeleton whose data can be saved: a vector or an n-gram model.

    Examples
    --------
        >>> from guardrail import VectorSkeleton
        >>> skeleton: SavableSkeleton = VectorSkeleton([-1.0, -1.5])
        >>> skeleton.to_spec().kind, sorted(skeleton.to_arrays())
        ('vector', ['log_probs'])
    """

    def to_spec(self) -> SkeletonSpec: ...

    def to_arrays(self) -> Mapping[str, npt.NDArray[Any]]: ...


def parse_source(source: str) -> tuple[str, str, int] | None:
    """``STORE_URL#NAME@vN`` -> ``(url, name, N)``; None when ``source`` is a file path
    (no ``#NAME@...`` part). A store source that names an alias, not a version, is a
    ConfigError."""
    url, sep, rest = source.rpartition("#")
    name, at, ref = rest.partition("@")
    if not (sep and url and at):
        return None
    try:
        check_name(name)
        version = parse_version(ref)
    except InvalidRequest:
        return None
    if version is None:
        raise ConfigError(
            f"{_WHERE}: {source!r} names {name}@{ref}: a source must pin a version "
            f"number ({name}@v3), not an alias"
        )
    return url, name, version


def _local(path: str, root: str | os.PathLike[str] | None) -> Path:
    p = Path(path)
    return p if root is None or p.is_absolute() else Path(root) / p


def _read_arrays(
    source: str, root: str | os.PathLike[str] | None, storage_options: Mapping[str, object] | None
) -> Mapping[str, npt.NDArray[Any]]:
    ref = parse_source(source)
    if ref is not None:
        url, name, number = ref
        where: str | Path = url if "://" in url else _local(url, root)
        try:
            return StoreReader(where, storage_options=storage_options).get(name, number).arrays
        except VersionNotFound as exc:
            raise ConfigError(f"{_WHERE}: {source}: {exc}") from exc
    path = _local(source, root)
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{_WHERE}: no such file: {path}") from None
    except OSError as exc:
        raise ConfigError(f"{_WHERE}: cannot read {path}: {exc}") from exc
    try:
        return st_load(blob)
    except SafetensorError as exc:
        raise ConfigError(f"{_WHERE}: {path} is not a safetensors file ({exc})") from exc


def resolve_skeleton(
    spec: SkeletonSpec,
    *,
    root: str | os.PathLike[str] | None = None,
    storage_options: Mapping[str, object] | None = None,
) -> Skeleton | None:
    """The skeleton of a data-backed spec, read from its ``source`` (a store version or
    a safetensors file) and checked against its ``sha256``; None for the other kinds
    (a resolver in the sense of :class:`guardrail._skeleton_spec.SkeletonResolver`; bind ``root`` or
    ``storage_options`` with :func:`functools.partial`)."""
    if not isinstance(spec, SkeletonSpec):
        raise ConfigError(f"expected a guardrail.SkeletonSpec, got {type(spec).__name__}")
    if not spec.data_backed:
        return None
    if spec.sha256 is None:
        raise ConfigError(
            "skeleton.params.sha256: missing: the spec does not say which data it needs "
            "(save the skeleton with save_skeleton or SkeletonStore.put_skeleton)"
        )
    if spec.source is None:
        raise ConfigError(
            f"{_WHERE}: missing: the data was never saved (save_skeleton or "
            "SkeletonStore.put_skeleton gives a spec with its source)"
        )
    return spec.from_arrays(_read_arrays(spec.source, root, storage_options))


def save_skeleton(skeleton: SavableSkeleton, path: str | os.PathLike[str]) -> SkeletonSpec:
    """Write a vector or n-gram skeleton's arrays to the safetensors file ``path``
    (a temporary file, then a rename: never half-written) and return its spec, with
    ``source`` the path as given."""
    spec = SkeletonSpec.of(skeleton)
    if not spec.data_backed:
        raise InvalidRequest(
            f"save_skeleton saves the data of a vector or n-gram skeleton; "
            f"{type(skeleton).__name__} has kind {spec.kind!r}"
        )
    arrays = {
        k: np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
        for k, a in ((k, np.asarray(v)) for k, v in skeleton.to_arrays().items())
    }
    meta = {"format": DATA_FORMAT, "kind": spec.kind, "sha256": spec.sha256 or ""}
    blob = st_save(arrays, metadata=meta)
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_bytes(blob)
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    return spec.with_source(os.fspath(path))
