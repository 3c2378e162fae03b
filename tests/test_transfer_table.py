"""``benchmarks/transfer/table.py`` reads the committed transfer results and writes
``docs/results/transfer.md``; the committed page is what it writes now."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_docs_transfer_tables_are_what_table_py_writes() -> None:
    path = ROOT / "benchmarks" / "transfer" / "table.py"
    spec = importlib.util.spec_from_file_location("transfer_table", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.OUT == ROOT / "docs" / "results" / "transfer.md"
    written = mod.OUT.read_text(encoding="utf-8")
    assert written == mod.render(), f"stale {mod.OUT.name}: run `{mod.COMMAND}`"
    assert mod.COMMAND in written.splitlines()[0]
    assert written.count("\n| certificate |") == 3  # the three directions
    assert "bootstrap intervals" in written
