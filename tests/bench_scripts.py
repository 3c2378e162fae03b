"""Load a script of ``benchmarks/`` as a module, for the tests that check its pages."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = ROOT.parent / "shared" / "data" / "traces"


def load_bench(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks/<name>.py`` as a module, ``benchmarks/`` on ``sys.path`` for its own
    imports (``_tables``, its sibling scripts) while the test runs."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    path = ROOT / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def assert_page_current(script: ModuleType, included_by: str) -> dict[str, Any]:
    """The script's page (``script.OUT``) is what it renders from its saved results
    (``script.SAVED``), which it wrote, and ``docs/<included_by>`` includes the page; the
    saved results."""
    saved: dict[str, Any] = json.loads(script.SAVED.read_text(encoding="utf-8"))
    assert saved["generated_by"] == script.COMMAND
    written = script.OUT.read_text(encoding="utf-8")
    assert script.COMMAND in written.splitlines()[0]
    assert written == script.render(saved), f"stale: run `{script.COMMAND} --docs-only`"
    include = f'--8<-- "results/{script.OUT.name}"'
    assert include in (ROOT / "docs" / included_by).read_text(encoding="utf-8")
    return saved
