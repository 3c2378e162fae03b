"""The "Recordings at scale" table of ``docs/proxy.md`` is what
``benchmarks/bench_columnar.py`` writes of its committed results (the benchmark itself reads
the shared traces and runs ``fit`` on ten times their size: not in the suite)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_the_columnar_table_is_what_its_benchmark_writes() -> None:
    path = ROOT / "benchmarks" / "bench_columnar.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = json.loads(module.RESULT.read_text(encoding="utf-8"))
    page = module.PAGE.read_text(encoding="utf-8")
    assert f"{module.BEGIN}\n{module.table(result)}\n{module.END}" in page
    assert result["fit"]["traces"] == module.COPIES * 2000
