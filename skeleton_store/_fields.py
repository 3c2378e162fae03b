"""Manifest fields: validation of what ``put`` receives, and of what is read back."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from guardrail import Calibration, ConfigError

from ._errors import IntegrityError, InvalidRequest
from ._manifest import FORMAT, json_value

__all__ = ["check_manifest", "manifest_fields", "version_path"]

_BLOB_RE = re.compile(r"blobs/[0-9a-f]{32}\.safetensors")
MANIFEST_KEYS = frozenset(
    {
        "format",
        "name",
        "version",
        "parent",
        "created_at",
        "kind",
        "model_id",
        "model_revision",
        "tokenizer",
        "vocab_size",
        "logprob_mode",
        "params",
        "vsd_trace",
        "calibration",
        "extra",
        "blob",
        "arrays",
    }
)


def version_path(name: str, version: int) -> str:
    """Path of a version's manifest, relative to the store root."""
    return f"{name}/versions/v{version:08d}.json"


def _opt_str(field: str, value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidRequest(f"{field} must be a string or None, got {value!r}")
    return value


def _calibration_dict(cal: object) -> dict[str, Any] | None:
    if cal is None:
        return None
    if isinstance(cal, Calibration):
        return dict(json_value("calibration", cal.to_dict()))
    if not isinstance(cal, Mapping):
        raise InvalidRequest(f"calibration must be a Calibration or a dict, got {type(cal)}")
    try:
        Calibration.from_dict(dict(cal))
    except ConfigError as exc:
        raise InvalidRequest(f"calibration is not a Calibration record: {exc}") from exc
    return dict(json_value("calibration", dict(cal)))


def _mapping(field: str, value: object) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidRequest(f"{field} must be a mapping, got {type(value).__name__}")
    return dict(json_value(field, dict(value)))


def manifest_fields(
    *,
    kind: object,
    model_id: object,
    model_revision: object,
    tokenizer: object,
    vocab_size: object,
    logprob_mode: object,
    params: object,
    vsd_trace: object,
    calibration: object,
    extra: object,
    records: Mapping[str, Any],
) -> dict[str, Any]:
    """The user-given manifest fields, validated and converted to JSON data."""
    if not isinstance(kind, str) or not kind:
        raise InvalidRequest(f"kind must be a non-empty string, got {kind!r}")
    if vocab_size is not None and (
        isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1
    ):
        raise InvalidRequest(f"vocab_size must be a positive integer, got {vocab_size!r}")
    for key in ("probs", "log_probs"):
        shape = records.get(key, {}).get("shape")
        if vocab_size is not None and shape is not None and shape[-1:] != [vocab_size]:
            raise InvalidRequest(f"array {key!r} has shape {shape}, vocab_size={vocab_size}")
    return {
        "kind": kind,
        "model_id": _opt_str("model_id", model_id),
        "model_revision": _opt_str("model_revision", model_revision),
        "tokenizer": _opt_str("tokenizer", tokenizer),
        "vocab_size": vocab_size,
        "logprob_mode": _opt_str("logprob_mode", logprob_mode),
        "params": _mapping("params", params),
        "vsd_trace": json_value("vsd_trace", vsd_trace),
        "calibration": _calibration_dict(calibration),
        "extra": _mapping("extra", extra),
    }


def check_manifest(body: dict[str, Any], name: str, version: int, path: str) -> dict[str, Any]:
    """Structural checks of an unsealed manifest read from ``path`` (IntegrityError)."""
    missing = MANIFEST_KEYS - set(body)
    if missing:
        raise IntegrityError(f"{path}: manifest lacks {sorted(missing)}", path=path)
    if body["format"] != FORMAT or body["name"] != name or body["version"] != version:
        raise IntegrityError(
            f"{path}: manifest is for {body['name']!r} v{body['version']} "
            f"({body['format']}), not {name!r} v{version}",
            path=path,
        )
    blob = body["blob"]
    if not isinstance(blob, dict) or not _BLOB_RE.fullmatch(str(blob.get("path"))):
        raise IntegrityError(f"{path}: manifest names an invalid blob path", path=path)
    if not isinstance(body["arrays"], dict):
        raise IntegrityError(f"{path}: manifest arrays must be an object", path=path)
    return body
