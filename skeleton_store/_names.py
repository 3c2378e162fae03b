"""Validation of skeleton names, alias names and version references.

Names and aliases become path components (local directories, S3 key parts),
so only a conservative character set is accepted: ``^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$``
and never ``..``. Aliases may not look like version references (``3``, ``v3``),
and ``latest`` is reserved: it always means the newest complete version.
"""

from __future__ import annotations

import re

from ._errors import InvalidName

__all__ = [
    "LATEST",
    "check_alias",
    "check_name",
    "format_version",
    "parse_version",
]

LATEST = "latest"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_VERSION_RE = re.compile(r"[vV]?([0-9]{1,18})")


def _check(kind: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidName(f"{kind} must be a string, got {type(value).__name__}")
    if not _NAME_RE.fullmatch(value) or ".." in value:
        raise InvalidName(
            f"invalid {kind} {value!r}: use 1-128 characters from [A-Za-z0-9._-], starting "
            f"with a letter or digit, without '..' or path separators"
        )
    return value


def check_name(name: object) -> str:
    """Return ``name`` if it is a valid skeleton name, else raise :class:`InvalidName`."""
    return _check("skeleton name", name)


def check_alias(alias: object, *, settable: bool = False) -> str:
    """Return ``alias`` if valid. ``settable=True`` also refuses the reserved ``latest``."""
    a = _check("alias", alias)
    if _VERSION_RE.fullmatch(a):
        raise InvalidName(f"alias {a!r} looks like a version number; choose another name")
    if settable and a == LATEST:
        raise InvalidName("'latest' is maintained by the store (newest version); it cannot be set")
    return a


def parse_version(ref: object) -> int | None:
    """``3``, ``"3"`` or ``"v3"`` -> 3; ``None`` when ``ref`` is not a version reference."""
    if isinstance(ref, bool):
        return None
    if isinstance(ref, int):
        if ref < 1:
            raise InvalidName(f"versions start at 1, got {ref}")
        return ref
    if isinstance(ref, str):
        m = _VERSION_RE.fullmatch(ref)
        if m:
            v = int(m.group(1))
            if v < 1:
                raise InvalidName(f"versions start at 1, got {ref!r}")
            return v
    return None


def format_version(version: int) -> str:
    """3 -> ``"v3"`` (how versions are shown to people)."""
    return f"v{version}"
