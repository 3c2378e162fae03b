"""``benchmarks/transfer/select_features.py``: backward elimination by cross-validation
on the given traces only, deterministic, its output ready for ``fit --features``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from guardrail import Certificate
from guardrail.cli import main

ROOT = Path(__file__).parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
SAMPLES = [str(FIXTURES / f"traces_{m}_sample.jsonl") for m in ("smollm2", "gemma3")]


def _module() -> ModuleType:
    path = ROOT / "benchmarks" / "transfer" / "select_features.py"
    spec = importlib.util.spec_from_file_location("select_features", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_selection_keeps_a_subset_deterministically_and_fit_accepts_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mod = _module()
    names, score = mod.select(SAMPLES)
    assert names and set(names) <= set(mod.CANDIDATES) and len(names) < len(mod.CANDIDATES)
    assert 0.5 < score <= 1.0
    assert mod.main(SAMPLES) == 0  # a rerun chooses the same, printed for --features
    printed = capsys.readouterr().out.strip().splitlines()
    line = printed[-1]
    assert line.split(",") == names and f"{score:.4f}" in printed[0]
    out = tmp_path / "c.json"
    args = ["fit", "--traces", SAMPLES[1], "--out", str(out), "--features", line, "--risk",
            "0.95", "--delta", "0.2"]  # fmt: skip
    assert main(args) == 0
    stat = Certificate.load(out).statistic
    assert stat is not None and [f.name for f in stat.features] == names


def test_selection_without_files_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert _module().main([]) == 2
    assert "usage" in capsys.readouterr().err
