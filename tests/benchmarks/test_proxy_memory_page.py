"""``docs/results/proxy_memory.md`` is what ``benchmarks/bench_proxy_memory.py`` writes of
its committed results (the benchmark itself runs three processes: not in the suite)."""

from __future__ import annotations

import importlib
import json


def test_the_proxy_memory_page_is_what_its_benchmark_writes() -> None:
    module = importlib.import_module("benchmarks.bench_proxy_memory")
    result = json.loads(module.RESULTS.read_text(encoding="utf-8"))
    assert module.PAGE.read_text(encoding="utf-8") == module.page(result)
    assert result["endless"]["causes"] == ["over_token_limit"]  # cut, not held whole
