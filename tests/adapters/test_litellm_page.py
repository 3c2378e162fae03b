"""``docs/results/litellm_overhead.md`` is what ``benchmarks/bench_litellm.py`` writes of its
committed results (the benchmark itself runs a LiteLLM process for minutes: not in the suite)."""

from __future__ import annotations

import importlib
import json


def test_the_litellm_page_is_what_its_benchmark_writes() -> None:
    module = importlib.import_module("benchmarks.bench_litellm")
    result = json.loads(module.RESULTS.read_text(encoding="utf-8"))
    assert module.PAGE.read_text(encoding="utf-8") == module.page(result), (
        f"stale page: run `{module.COMMAND} --docs-only`"
    )
    assert set(result["scenarios"]["paced"]) >= set(module.PATHS)
