"""Manifests and array blobs: encoding, hashing and verification.

A version's arrays are one safetensors file (``safetensors.numpy`` bytes API;
never pickle). Its manifest is a JSON object that records, for every array,
dtype, shape and the sha256 of its little-endian C-order bytes, plus the
sha256 and size of the whole safetensors file, and carries its own checksum:
``manifest_sha256`` is the sha256 of the canonical JSON of every other field
(``sort_keys``, no whitespace, UTF-8).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
from safetensors import SafetensorError
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from ._errors import IntegrityError, InvalidRequest

__all__ = [
    "FORMAT",
    "decode_arrays",
    "encode_arrays",
    "json_value",
    "seal",
    "sha256_hex",
    "unseal",
]

FORMAT = "liftguard.skeleton/1"
_DTYPES = frozenset(
    {
        "bool",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "float16",
        "float32",
        "float64",
    }
)
_RESERVED_KEYS = frozenset({"__metadata__"})

Array = npt.NDArray[Any]


def sha256_hex(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def array_sha256(a: Array) -> str:
    """sha256 of a C-contiguous little-endian array's bytes (hashed in place, no copy)."""
    return sha256_hex(a.reshape(-1).view(np.uint8).data)


def _json_default(obj: object) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def json_value(field: str, value: object) -> Any:
    """``value`` as plain JSON data (numpy scalars/arrays converted), or InvalidRequest."""
    try:
        return json.loads(json.dumps(value, default=_json_default))
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"{field} must be JSON-serialisable: {exc}") from exc


def _canonical(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def seal(manifest: Mapping[str, Any]) -> bytes:
    """Serialise ``manifest`` with its ``manifest_sha256`` (readable, indented JSON)."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    sealed = {**body, "manifest_sha256": sha256_hex(_canonical(body))}
    return (json.dumps(sealed, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def unseal(data: bytes, path: str) -> dict[str, Any]:
    """Parse and verify a sealed JSON object; :class:`IntegrityError` if it does not verify."""
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise IntegrityError(f"{path}: not valid JSON ({exc})", path=path) from exc
    if not isinstance(obj, dict) or not isinstance(obj.get("manifest_sha256"), str):
        raise IntegrityError(f"{path}: not a sealed manifest (no manifest_sha256)", path=path)
    body = {k: v for k, v in obj.items() if k != "manifest_sha256"}
    if sha256_hex(_canonical(body)) != obj["manifest_sha256"]:
        raise IntegrityError(f"{path}: manifest_sha256 does not match its content", path=path)
    return body


def _little_endian(a: Array) -> Array:
    return np.asarray(a, dtype=a.dtype.newbyteorder("<"), order="C")  # keeps 0-d arrays 0-d


def _normalise(arrays: Mapping[str, npt.ArrayLike]) -> dict[str, Array]:
    if not isinstance(arrays, Mapping):
        raise InvalidRequest(f"arrays must be a mapping of name -> array, got {type(arrays)}")
    out: dict[str, Array] = {}
    for key, value in arrays.items():
        if not isinstance(key, str) or not key or key in _RESERVED_KEYS:
            raise InvalidRequest(f"invalid array name {key!r}")
        try:
            a = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise InvalidRequest(f"array {key!r} is not array-like: {exc}") from exc
        if a.dtype.name not in _DTYPES:
            raise InvalidRequest(
                f"array {key!r} has dtype {a.dtype}; supported: {', '.join(sorted(_DTYPES))}"
            )
        # a private copy: the caller's array is neither aliased nor frozen
        out[key] = np.array(a, dtype=a.dtype.newbyteorder("<"), order="C", copy=True)
    return out


def encode_arrays(
    arrays: Mapping[str, npt.ArrayLike],
) -> tuple[bytes, dict[str, Any], dict[str, Array]]:
    """safetensors bytes, the per-array records (dtype, shape, sha256) for the manifest,
    and the arrays as stored (little-endian, C order, read-only)."""
    norm = _normalise(arrays)
    records = {
        k: {"dtype": a.dtype.name, "shape": list(a.shape), "sha256": array_sha256(a)}
        for k, a in sorted(norm.items())
    }
    blob = st_save(norm, metadata={"format": FORMAT})
    for a in norm.values():
        a.setflags(write=False)
    return blob, records, norm


def decode_arrays(blob: bytes, manifest: Mapping[str, Any], path: str) -> dict[str, Array]:
    """Load and verify a version's arrays; IntegrityError names the array that fails.

    When the file's sha256 matches, the bytes are exactly those ``put`` wrote
    and hashed array by array, so only dtypes and shapes are re-checked; when
    it does not, every array is hashed to name the damaged one(s).
    """
    records: Mapping[str, Any] = manifest["arrays"]
    blob_rec = manifest["blob"]
    file_ok = len(blob) == blob_rec["size"] and sha256_hex(blob) == blob_rec["sha256"]
    try:
        loaded = st_load(blob)
    except SafetensorError as exc:
        raise IntegrityError(f"{path}: not a readable safetensors file ({exc})", path=path) from exc
    if set(loaded) != set(records):
        raise IntegrityError(
            f"{path}: holds arrays {sorted(loaded)}, the manifest lists {sorted(records)}",
            path=path,
        )
    out: dict[str, Array] = {}
    for key in sorted(records):
        rec, a = records[key], _little_endian(loaded[key])
        if (
            a.dtype.name != rec["dtype"]
            or list(a.shape) != list(rec["shape"])
            or (not file_ok and array_sha256(a) != rec["sha256"])
        ):
            raise IntegrityError(
                f"{path}: array {key!r} does not match its sha256/dtype/shape in the manifest",
                path=path,
                array=key,
            )
        a.setflags(write=False)
        out[key] = a
    if not file_ok:
        raise IntegrityError(f"{path}: file sha256/size does not match the manifest", path=path)
    return out
