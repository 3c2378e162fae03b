"""Where the proxy's certificates come from: a file, a store alias (hot refresh), a value.

A :class:`CertificateSource` gives the certificate in force now together with a
label naming its version (:meth:`~CertificateSource.current`, one atomic read:
a request takes it once and keeps it to its end, so a refresh never changes a
rule mid-answer). :meth:`~CertificateSource.refresh` re-reads the origin; only
a store alias can change (``promote`` / ``rollback``).

A file or a store version gives the certificate ready to deploy
(:func:`deployable`): a skeleton its spec references but does not hold is built
when the certificate is read -- a stored vector or n-gram (``vector``, ``vsd``,
``unigram``, ``ngram``: :func:`skeleton_store.resolve_skeleton`, from a store
version or a safetensors file, checked against the spec's hash) or the prompt-free
model (``prompt_free``: :meth:`adapters.PromptFreeSkeleton.resolve`). A skeleton
that scores tokens by id gets the resolver the certificate's ``model.tokenizer``
names (upstream streams carry token text and bytes, never ids). What cannot be
built is a :class:`~guardrail.ConfigError` when the source is read (at start, or
at a refresh, which then keeps the certificate in force), never in an answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from guardrail import Certificate, ConfigError
from guardrail._reads import skeleton_reads
from guardrail._skeleton_spec import SkeletonResolver
from guardrail._skeletons import WithTokenIds

from ._metrics import ProxyMetrics

__all__ = [
    "CertificateSource",
    "CertificateTable",
    "FileCertificate",
    "StaticCertificate",
    "StoreCertificate",
    "certificate_source",
    "deployable",
    "log_swap",
    "parse_store_spec",
    "skeleton_resolvers",
]

logger = logging.getLogger(__name__)


def skeleton_resolvers(
    storage_options: Mapping[str, Any] | None = None,
) -> list[SkeletonResolver]:
    """The resolvers of the skeletons a certificate may reference: stored data (a store
    version or a safetensors file; ``storage_options`` for an fsspec store) and the
    prompt-free model."""
    from skeleton_store import resolve_skeleton

    from .._local._prompt_free import PromptFreeSkeleton

    data: SkeletonResolver = (
        resolve_skeleton
        if storage_options is None
        else partial(resolve_skeleton, storage_options=dict(storage_options))
    )
    return [data, PromptFreeSkeleton.resolve]


def deployable(
    certificate: Certificate, storage_options: Mapping[str, Any] | None = None
) -> Certificate:
    """``certificate`` with its skeleton bound (:meth:`~guardrail.Certificate.resolve`
    with :func:`skeleton_resolvers`, unless one is bound already or the kind builds from
    its spec), and a skeleton that scores tokens by id given the token-id resolver of
    ``model.tokenizer``. A ConfigError says what is missing."""
    cert = certificate.resolve(skeleton_resolvers(storage_options))
    skeleton = cert.bound_skeleton
    if skeleton is None or not skeleton_reads(skeleton).token_ids:
        return cert
    from .._guard._token_ids import token_ids_for

    tokenizer = cert.model.tokenizer
    ids = token_ids_for(tokenizer) if tokenizer else None
    if ids is None:
        raise ConfigError(
            f"the certificate's {cert.skeleton.kind!r} skeleton scores tokens by id, and "
            "upstream streams carry no token ids: record the model's tokenizer in the "
            "certificate (model.tokenizer = 'tiktoken:cl100k_base' or 'gguf:...')"
        )
    return cert.with_skeleton(WithTokenIds(skeleton, ids))


class CertificateSource:
    """A certificate and the label of its version; :meth:`refresh` re-reads the origin.

    Examples
    --------
        >>> from guardrail import Certificate, ModelIdentity, SkeletonSpec, StreamPolicy
        >>> cert = Certificate(StreamPolicy(), tau=2.0, model=ModelIdentity("my-model"),
        ...                    skeleton=SkeletonSpec("uniform", {"vocab_size": 1000}))
        >>> source: CertificateSource = StaticCertificate(cert, label="demo")
        >>> source.current()[1], source.refresh()
        ('demo', False)
    """

    def current(self) -> tuple[Certificate, str]:
        """``(certificate, label)`` in force now (one consistent pair)."""
        raise NotImplementedError

    def refresh(self) -> bool:
        """Re-read the origin; True if the certificate changed."""
        return False

    def describe(self) -> str:
        """Where the certificate comes from (for logs and ``/healthz``)."""
        raise NotImplementedError


class CertificateTable:
    """The certificates a proxy serves, by model entry (``"*"``: any other model), with
    their refresh and the ``certificate_info`` gauge naming the version each serves."""

    def __init__(self, entries: Mapping[str, CertificateSource], metrics: ProxyMetrics) -> None:
        self.sources = dict(entries)
        self._metrics = metrics
        self._shown: dict[str, str] = {}

    @property
    def refreshable(self) -> bool:
        """Some source can change (a store alias): worth a refresh loop."""
        return any(type(s).refresh is not CertificateSource.refresh for s in self.sources.values())

    def labels(self) -> dict[str, str]:
        """``{model entry: label of the version in force}``."""
        return {name: source.current()[1] for name, source in self.sources.items()}

    async def refresh(self) -> dict[str, bool]:
        """Re-read every source now (each once, in a worker thread); ``{model entry:
        changed}``. A failing source keeps its current certificate (logged, counted)."""
        out: dict[str, bool] = {}
        seen: dict[int, bool] = {}
        for name, source in self.sources.items():
            if id(source) not in seen:
                try:
                    seen[id(source)] = await asyncio.to_thread(source.refresh)
                    result = "changed" if seen[id(source)] else "unchanged"
                except Exception as exc:
                    seen[id(source)] = False
                    result = "failed"
                    logger.warning("refreshing %s failed: %s", source.describe(), exc)
                self._metrics.refreshes.labels(result=result).inc()
            out[name] = seen[id(source)]
        self.publish()
        return out

    def publish(self) -> None:
        """Set ``certificate_info`` to the versions in force (an old label is removed)."""
        gauge = self._metrics.certificate_info
        for name, label in self.labels().items():
            old = self._shown.get(name)
            if old is not None and old != label:
                gauge.remove(name, old)
                log_swap(f"model {name}", old, label)
            gauge.labels(model=name, certificate=label).set(1)
            self._shown[name] = label


def log_swap(entry: str, old: str, new: str) -> None:
    """Log that ``entry`` now serves the certificate version ``new`` instead of ``old``:
    at WARNING, the level ``liftguard serve`` (and Python's default) shows, since a swap
    changes the rule every answer is judged by."""
    logger.warning("%s: certificate swapped, %s -> %s", entry, old, new)


def _digest(cert: Certificate) -> str:
    return hashlib.sha256(cert.to_json().encode("utf-8")).hexdigest()[:12]


class StaticCertificate(CertificateSource):
    """A certificate given as a value (label: ``label`` or ``inline#<sha256 prefix>``).

    Examples
    --------
        >>> from guardrail import Certificate, ModelIdentity, SkeletonSpec, StreamPolicy
        >>> cert = Certificate(StreamPolicy(), tau=2.0, model=ModelIdentity("my-model"),
        ...                    skeleton=SkeletonSpec("uniform", {"vocab_size": 1000}))
        >>> source = StaticCertificate(cert)
        >>> source.current()[0] is cert, source.describe()
        (True, 'inline#...')
    """

    def __init__(self, certificate: Certificate, label: str | None = None) -> None:
        if not isinstance(certificate, Certificate):
            raise ConfigError(f"expected a guardrail.Certificate, got {type(certificate).__name__}")
        self._pair = (certificate, label or f"inline#{_digest(certificate)}")

    def current(self) -> tuple[Certificate, str]:
        return self._pair

    def describe(self) -> str:
        return self._pair[1]


class FileCertificate(CertificateSource):
    """A certificate file (``liftguard calibrate --out``), read once, with its skeleton
    built (:func:`deployable`; a relative safetensors ``source`` is read from the
    current directory, a store source with ``storage_options``); label
    ``<file name>#<sha256 prefix of its content>``.

    Examples
    --------
        >>> import pathlib, tempfile
        >>> from guardrail import Certificate, ModelIdentity, SkeletonSpec, StreamPolicy
        >>> cert = Certificate(StreamPolicy(), tau=2.0, model=ModelIdentity("my-model"),
        ...                    skeleton=SkeletonSpec("uniform", {"vocab_size": 1000}))
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "cert.json"
        >>> cert.save(path)
        >>> source = FileCertificate(path)
        >>> source.current()[0].tau, source.current()[1]
        (2.0, 'cert.json#...')
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.path = Path(path)
        cert = Certificate.load(self.path)  # errors name the file
        try:
            cert = deployable(cert, storage_options)
        except ConfigError as exc:
            raise ConfigError(f"{self.path}: {exc}") from exc
        self._pair = (cert, f"{self.path.name}#{_digest(cert)}")

    def current(self) -> tuple[Certificate, str]:
        return self._pair

    def describe(self) -> str:
        return str(self.path)


class StoreCertificate(CertificateSource):
    """The certificate an alias of a skeleton store pins
    (``skeleton_store._handle.open_certificate``).

    Label ``<name>@<alias>=<version>`` (e.g. ``chat@production=v3``). The version's
    certificate is made :func:`deployable`: a skeleton it references but does not bind
    (another version's vector, a safetensors file, the prompt-free model) is built
    when the version is read, with ``storage_options`` for the store's sources.
    :meth:`refresh` re-reads the alias and swaps in a promoted version; a version that
    fails to load (or whose skeleton cannot be built) leaves the current one in force,
    the error propagates, and the next refresh tries it again.

    Examples
    --------
        >>> import tempfile
        >>> from guardrail import Certificate, ModelIdentity, StreamPolicy, VectorSkeleton
        >>> from skeleton_store import SkeletonStore
        >>> store, skeleton = SkeletonStore(tempfile.mkdtemp()), VectorSkeleton([-1.0, -1.5, -2.0])
        >>> model = ModelIdentity("my-model", tokenizer="tiktoken:cl100k_base")
        >>> cert = Certificate(StreamPolicy(), tau=2.0, model=model, skeleton=skeleton.to_spec())
        >>> v = store.put_skeleton("chat", skeleton, certificate=cert)
        >>> _ = store.promote("chat", v.version)
        >>> StoreCertificate(store.url, "chat").current()[1]
        'chat@production=v1'
    """

    def __init__(
        self,
        url: str,
        name: str,
        alias: str = "production",
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        from skeleton_store._handle import open_certificate

        self.url, self.name, self.alias = url, name, alias
        self._options = None if storage_options is None else dict(storage_options)
        self._handle = open_certificate(url, name, alias, storage_options=storage_options)
        self._lock = threading.Lock()
        self._pair, self._version = self._read()

    def _read(self) -> tuple[tuple[Certificate, str], int]:
        version = self._handle.current
        label = f"{self.name}@{self.alias}={version.tag}"
        try:
            cert = deployable(self._handle.certificate, self._options)
        except ConfigError as exc:
            raise ConfigError(f"{label}: {exc}") from exc
        return (cert, label), version.version

    def current(self) -> tuple[Certificate, str]:
        return self._pair

    def refresh(self) -> bool:
        with self._lock:  # one refresh at a time, so that the pair is read consistently
            self._handle.refresh()
            if self._handle.current.version == self._version:
                return False
            self._pair, self._version = self._read()  # only once the version is deployable
            return True

    def describe(self) -> str:
        return f"{self.url}#{self.name}@{self.alias}"


def parse_store_spec(spec: str) -> tuple[str, str, str] | None:
    """``STORE_URL#NAME@ALIAS`` -> ``(url, name, alias)`` (alias defaults to
    ``production``); None if ``spec`` names no store (no ``#``)."""
    url, sep, rest = spec.rpartition("#")
    if not sep:
        return None
    name, at, alias = rest.partition("@")
    if not url or not name or (at and not alias):
        raise ConfigError(f"expected STORE_URL#NAME[@ALIAS], got {spec!r}")
    return url, name, alias or "production"


def certificate_source(
    spec: str | os.PathLike[str] | Certificate | CertificateSource,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> CertificateSource:
    """A source from a certificate file path, ``STORE_URL#NAME[@ALIAS]``, a
    :class:`~guardrail.Certificate` or a source (returned as is). Loads it now, with
    the skeleton of a file or a store version built (:func:`deployable`;
    ``storage_options`` also reach the skeleton data's store)."""
    if isinstance(spec, CertificateSource):
        return spec
    if isinstance(spec, Certificate):
        return StaticCertificate(spec)
    text = os.fspath(spec)
    store = None if os.path.isfile(text) else parse_store_spec(text)
    if store is not None:
        url, name, alias = store
        return StoreCertificate(url, name, alias, storage_options=storage_options)
    return FileCertificate(text, storage_options=storage_options)
