"""The committed requirements.lock agrees with pyproject.toml, and the check notices when not."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _check_lock() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_lock", ROOT / ".ci" / "check_lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_lock = _check_lock()


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    (tmp_path / ".ci").mkdir()
    for name in ("pyproject.toml", "requirements.lock", ".ci/build-requirements.in"):
        shutil.copyfile(ROOT / name, tmp_path / name)
    return tmp_path


def test_the_committed_lock_matches_pyproject() -> None:
    assert check_lock.problems(ROOT) == []


def test_every_locked_line_is_pinned_with_hashes() -> None:
    text = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    pins = check_lock.pins(text)
    assert {"numpy", "pytest", "mypy", "llama-cpp-python", "torch", "mkdocs", "pip"} <= set(pins)
    entries = [line for line in text.splitlines() if check_lock._PIN.match(line)]
    assert all(line.endswith("\\") for line in entries)  # each pin is followed by its hashes


def test_an_edited_range_makes_the_lock_stale(copy: Path) -> None:
    pyproject = copy / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text(encoding="utf-8").replace('"numpy>=1.24"', '"numpy>=99"'),
        encoding="utf-8",
    )
    found = check_lock.problems(copy)
    assert any("changed since the lock was made" in p for p in found)
    assert any("'numpy>=99' is not met" in p for p in found)
    # Stamping without recompiling does not hide a pin the new range excludes.
    check_lock.stamp(copy)
    assert check_lock.problems(copy) == [
        "'numpy>=99' is not met by the locked numpy=="
        + str(check_lock.pins((copy / "requirements.lock").read_text(encoding="utf-8"))["numpy"])
    ]


def test_a_new_dependency_without_a_pin_is_reported(copy: Path) -> None:
    pyproject = copy / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text(encoding="utf-8").replace(
            '"safetensors>=0.4",', '"safetensors>=0.4",\n    "not-a-locked-package>=1",'
        ),
        encoding="utf-8",
    )
    check_lock.stamp(copy)
    assert check_lock.problems(copy) == [
        "'not-a-locked-package>=1' has no pin in requirements.lock"
    ]


def test_the_command_line_names_the_refresh(copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (copy / ".ci" / "build-requirements.in").write_text("setuptools>=68\n", encoding="utf-8")
    assert check_lock.main(["--root", str(copy)]) == 1
    assert "bash .ci/lock" in capsys.readouterr().err
    assert check_lock.main(["--root", str(ROOT)]) == 0


PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
"""Where the CPU builds of PyTorch (versions ``X+cpu``) are published; PyPI has none."""


def test_the_readme_says_where_a_locked_cpu_build_comes_from() -> None:
    """A pin with a ``+cpu`` local version resolves only from PyTorch's index: the README
    says so beside the test command, in one line."""
    text = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    cpu = [name for name, version in check_lock.pins(text).items() if version.local == "cpu"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    said = [line for line in readme if PYTORCH_CPU_INDEX in line]
    assert not cpu or len(said) == 1, f"{cpu} are CPU builds: name {PYTORCH_CPU_INDEX}"


def test_the_license_is_an_spdx_expression_the_locked_setuptools_reads() -> None:
    """``project.license`` as a string (PEP 639; a table is deprecated), which setuptools
    reads from version 77 on: the build requirement says so, and the lock meets it."""
    import tomllib
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["license"] == "Apache-2.0"
    build = [Requirement(r) for r in project["build-system"]["requires"]]
    setuptools = next(r for r in build if r.name == "setuptools")
    assert not setuptools.specifier.contains("76.1")
    locked = check_lock.pins((ROOT / "requirements.lock").read_text(encoding="utf-8"))
    assert setuptools.specifier.contains(locked["setuptools"])
