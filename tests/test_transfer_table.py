"""``benchmarks/transfer/table.py`` reads the committed transfer results, and the README
shows what it prints (every table whose title the README carries, row for row)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def test_readme_tables_are_what_table_py_prints(capsys: pytest.CaptureFixture[str]) -> None:
    path = ROOT / "benchmarks" / "transfer" / "table.py"
    spec = importlib.util.spec_from_file_location("transfer_table", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main()
    printed = capsys.readouterr().out
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks: list[tuple[str, list[str]]] = []
    for line in printed.splitlines():
        if line.startswith("|"):
            blocks[-1][1].append(line)
        elif line.strip():
            blocks.append((line.strip(), []))
    shown = [(title, rows) for title, rows in blocks if title in readme]
    assert len(shown) >= 3  # both per-method tables and the intervals
    assert any("bootstrap" in title for title, _ in shown)
    for title, rows in shown:
        assert rows, title
        for row in rows:
            assert row in readme, f"{title}: README lacks {row!r}"
