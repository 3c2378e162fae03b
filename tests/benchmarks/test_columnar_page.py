"""The "Recordings at scale" table of ``docs/proxy.md`` is what
``benchmarks/bench_columnar.py`` writes of its committed results (the benchmark itself reads
the shared traces and runs ``fit`` on ten times their size: not in the suite)."""

from __future__ import annotations

import importlib
import json


def test_the_columnar_table_is_what_its_benchmark_writes() -> None:
    module = importlib.import_module("benchmarks.bench_columnar")
    result = json.loads(module.RESULT.read_text(encoding="utf-8"))
    page = module.PAGE.read_text(encoding="utf-8")
    assert f"{module.BEGIN}\n{module.table(result)}\n{module.END}" in page
    assert result["fit"]["traces"] == module.COPIES * 2000
