"""``docs/results/litellm_overhead.md`` is what ``benchmarks/bench_litellm.py`` writes of its
committed results (the benchmark itself runs a LiteLLM process for minutes: not in the suite)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def test_the_litellm_page_is_what_its_benchmark_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    path = ROOT / "benchmarks" / "bench_litellm.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # (its dataclasses look it up)
    spec.loader.exec_module(module)
    result = json.loads(module.RESULTS.read_text(encoding="utf-8"))
    assert module.PAGE.read_text(encoding="utf-8") == module.page(result), (
        f"stale page: run `{module.COMMAND} --docs-only`"
    )
    assert set(result["scenarios"]["paced"]) >= set(module.PATHS)
