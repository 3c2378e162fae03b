"""What the tests of the scripts that write the results pages (``studies/``, and the
timing scripts of ``benchmarks/``) share; they import the scripts as the modules they are
(``studies.<name>``, ``benchmarks.<name>``), run from the repository root."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = ROOT.parent / "shared" / "data" / "traces"


def assert_page_current(script: ModuleType, included_by: str) -> dict[str, Any]:
    """The script's page (``script.OUT``, or ``script.PAGE``) is what it renders from its
    saved results (``script.SAVED``), which it wrote (``script.COMMAND``, named in the
    page's first line with "do not edit"), and ``docs/<included_by>`` includes the page;
    the saved results."""
    saved: dict[str, Any] = json.loads(script.SAVED.read_text(encoding="utf-8"))
    assert saved["generated_by"] == script.COMMAND
    page = script.OUT if hasattr(script, "OUT") else script.PAGE
    written = page.read_text(encoding="utf-8")
    first = written.splitlines()[0]
    assert script.COMMAND in first and "do not edit" in first
    assert written == script.render(saved), f"stale: run `{script.COMMAND} --docs-only`"
    include = f'--8<-- "results/{page.name}"'
    assert include in (ROOT / "docs" / included_by).read_text(encoding="utf-8")
    return saved
