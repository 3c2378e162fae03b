"""The generated result pages under ``docs/results`` are what their benchmark scripts
write now (``benchmarks/transfer/table.py`` has its own test)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parents[1]
SHARED_TRACES = ROOT.parent / "shared" / "data" / "traces"


def _script(relative: str) -> ModuleType:
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
@pytest.mark.skipif(
    not (SHARED_TRACES / "triviaqa_gemma3.jsonl").exists(), reason="shared trace data not available"
)
def test_topk_decisions_page_is_what_the_script_writes() -> None:
    mod = _script("benchmarks/topk_decisions.py")
    assert mod.OUT == ROOT / "docs" / "results" / "topk_decisions.md"
    written = mod.OUT.read_text(encoding="utf-8")
    assert mod.COMMAND in written.splitlines()[0]
    assert written == mod.render(SHARED_TRACES), f"stale {mod.OUT.name}: run `{mod.COMMAND}`"


def test_warm_start_page_is_the_saved_report(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page is the default run's report as saved in its JSON (regenerating the run
    takes minutes of llama.cpp; ``--docs-only`` rewrites the page from the JSON)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    mod = _script("benchmarks/_warm_start_report.py")
    assert mod.DOCS_PAGE == ROOT / "docs" / "results" / "warm_start_real.md"
    saved = json.loads((ROOT / "benchmarks/results/warm_start_real.json").read_text("utf-8"))
    written = mod.DOCS_PAGE.read_text(encoding="utf-8")
    assert mod.COMMAND in written.splitlines()[0]
    assert written == mod.docs_page(saved["markdown"]), f"stale: run `{mod.COMMAND} --docs-only`"
    assert "\n| scaled | warm |" in written
