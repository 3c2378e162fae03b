"""``docs/results/litellm_overhead.md`` is what ``benchmarks/bench_litellm.py`` writes of its
committed results (the benchmark itself runs a LiteLLM process for minutes: not in the suite)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest


def test_the_litellm_page_is_what_its_benchmark_writes() -> None:
    module = importlib.import_module("benchmarks.bench_litellm")
    result = json.loads(module.RESULTS.read_text(encoding="utf-8"))
    assert module.PAGE.read_text(encoding="utf-8") == module.page(result), (
        f"stale page: run `{module.COMMAND} --docs-only`"
    )
    assert set(result["scenarios"]["paced"]) >= set(module.PATHS)


def test_a_plain_run_leaves_the_committed_results_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # run as its docstring says, the benchmark writes under the ignored out/; only
    # --write-docs (or --docs-only, the page alone) touches the committed files
    module = importlib.import_module("benchmarks.bench_litellm")
    monkeypatch.setattr(module, "measure", lambda args: {"stub": True})
    monkeypatch.setattr(module, "page", lambda result: "page\n")
    written: list[Path] = []
    monkeypatch.setattr(Path, "write_text", lambda self, text, encoding=None: written.append(self))
    monkeypatch.setattr(Path, "mkdir", lambda self, parents=False, exist_ok=False: None)
    module.main(["--quick"])
    assert written == [module.SCRATCH / module.RESULTS.name, module.SCRATCH / module.PAGE.name]
    written.clear()
    module.main(["--quick", "--write-docs"])
    assert written == [module.RESULTS, module.PAGE]
    written.clear()
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None: "{}")
    module.main(["--docs-only"])
    assert written == [module.PAGE]
