"""``docs/results/proxy_memory.md`` is what ``benchmarks/bench_proxy_memory.py`` writes of
its committed results (the benchmark itself runs three processes: not in the suite)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_the_proxy_memory_page_is_what_its_benchmark_writes() -> None:
    path = ROOT / "benchmarks" / "bench_proxy_memory.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = json.loads(module.RESULTS.read_text(encoding="utf-8"))
    assert module.PAGE.read_text(encoding="utf-8") == module.page(result)
    assert result["endless"]["causes"] == ["over_token_limit"]  # cut, not held whole
