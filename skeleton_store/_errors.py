"""Exceptions raised by the skeleton store.

The hierarchy (all below :class:`guardrail.GuardrailError`)::

    StoreError                  root of everything the store raises
    ├── InvalidRequest          an argument is invalid: arrays, manifest fields,
    │   │                       options (also ValueError)
    │   └── InvalidName         a skeleton or alias name is refused (also ValueError)
    ├── VersionNotFound         no such name, version or alias target (also LookupError)
    │   └── StoreNotFound       a read found no store at the URL (no directory, bucket
    │                           or object under the prefix); writes create the store
    ├── IntegrityError          stored bytes do not match their recorded sha256,
    │                           or a manifest or alias event is not valid JSON
    ├── ConcurrentWriteError    a create-only write lost too many races in a row
    └── StoreUnavailable        the backend failed: network, endpoint, credentials,
                                permissions (also OSError); the cause is chained

Every message names the object (full path or URL) it is about, on one line.
"""

from __future__ import annotations

from guardrail import GuardrailError

__all__ = [
    "ConcurrentWriteError",
    "IntegrityError",
    "InvalidName",
    "InvalidRequest",
    "StoreError",
    "StoreNotFound",
    "StoreUnavailable",
    "VersionNotFound",
]


class StoreError(GuardrailError):
    """Root of every exception raised by :mod:`skeleton_store`."""


class InvalidRequest(StoreError, ValueError):
    """An argument is invalid (arrays, manifest fields, store options)."""


class InvalidName(InvalidRequest):
    """A skeleton or alias name is refused (path separators, ``..``, length...)."""


class VersionNotFound(StoreError, LookupError):
    """The name, version or alias does not exist (or the alias is not set)."""


class StoreNotFound(VersionNotFound):
    """A read found no store at ``url``: nothing was ever written there.

    Reads never create a store; ``put`` (and the CLI's ``build``) do.
    """

    def __init__(self, message: str, *, url: str):
        self.url = url
        super().__init__(message)


class IntegrityError(StoreError):
    """Stored data does not verify. ``path`` names the object, ``array`` the array if any."""

    def __init__(self, message: str, *, path: str | None = None, array: str | None = None):
        self.path = path
        self.array = array
        super().__init__(message)


class ConcurrentWriteError(StoreError):
    """A create-only write kept colliding with concurrent writers and gave up."""


class StoreUnavailable(StoreError, OSError):
    """The storage backend failed (unreachable endpoint, credentials, permissions...).

    ``url`` is the store; the backend's own exception is chained as ``__cause__``.
    """

    def __init__(self, message: str, *, url: str):
        self.url = url
        super().__init__(message)
