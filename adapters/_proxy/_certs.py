"""Where the proxy's certificates come from: a file, a store alias (hot refresh), a value.

A :class:`CertificateSource` gives the certificate in force now together with a
label naming its version (:meth:`~CertificateSource.current`, one atomic read:
a request takes it once and keeps it to its end, so a refresh never changes a
rule mid-answer). :meth:`~CertificateSource.refresh` re-reads the origin; only
a store alias can change (``promote`` / ``rollback``).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from guardrail import Certificate, ConfigError

__all__ = [
    "CertificateSource",
    "FileCertificate",
    "StaticCertificate",
    "StoreCertificate",
    "certificate_source",
    "parse_store_spec",
]


class CertificateSource:
    """A certificate and the label of its version; :meth:`refresh` re-reads the origin."""

    def current(self) -> tuple[Certificate, str]:
        """``(certificate, label)`` in force now (one consistent pair)."""
        raise NotImplementedError

    def refresh(self) -> bool:
        """Re-read the origin; True if the certificate changed."""
        return False

    def describe(self) -> str:
        """Where the certificate comes from (for logs and ``/healthz``)."""
        raise NotImplementedError


def _digest(cert: Certificate) -> str:
    return hashlib.sha256(cert.to_json().encode("utf-8")).hexdigest()[:12]


class StaticCertificate(CertificateSource):
    """A certificate given as a value (label: ``label`` or ``inline#<sha256 prefix>``)."""

    def __init__(self, certificate: Certificate, label: str | None = None) -> None:
        if not isinstance(certificate, Certificate):
            raise ConfigError(f"expected a guardrail.Certificate, got {type(certificate).__name__}")
        self._pair = (certificate, label or f"inline#{_digest(certificate)}")

    def current(self) -> tuple[Certificate, str]:
        return self._pair

    def describe(self) -> str:
        return self._pair[1]


class FileCertificate(CertificateSource):
    """A certificate file (``liftguard calibrate --out``), read once; label
    ``<file name>#<sha256 prefix of its content>``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        cert = Certificate.load(self.path)  # errors name the file
        self._pair = (cert, f"{self.path.name}#{_digest(cert)}")

    def current(self) -> tuple[Certificate, str]:
        return self._pair

    def describe(self) -> str:
        return str(self.path)


class StoreCertificate(CertificateSource):
    """The certificate an alias of a skeleton store pins (``skeleton_store.open_certificate``).

    Label ``<name>@<alias>=<version>`` (e.g. ``chat@production=v3``). :meth:`refresh`
    re-reads the alias and swaps in a promoted version; a version that fails to
    load leaves the current one in force and the error propagates.
    """

    def __init__(
        self,
        url: str,
        name: str,
        alias: str = "production",
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        from skeleton_store import open_certificate

        self.url, self.name, self.alias = url, name, alias
        self._handle = open_certificate(url, name, alias, storage_options=storage_options)
        self._lock = threading.Lock()
        self._pair = self._read()

    def _read(self) -> tuple[Certificate, str]:
        version = self._handle.current
        return self._handle.certificate, f"{self.name}@{self.alias}={version.tag}"

    def current(self) -> tuple[Certificate, str]:
        return self._pair

    def refresh(self) -> bool:
        with self._lock:  # one refresh at a time, so that the pair is read consistently
            if not self._handle.refresh():
                return False
            self._pair = self._read()
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
    :class:`~guardrail.Certificate` or a source (returned as is). Loads it now."""
    if isinstance(spec, CertificateSource):
        return spec
    if isinstance(spec, Certificate):
        return StaticCertificate(spec)
    text = os.fspath(spec)
    store = None if os.path.isfile(text) else parse_store_spec(text)
    if store is not None:
        url, name, alias = store
        return StoreCertificate(url, name, alias, storage_options=storage_options)
    return FileCertificate(text)
