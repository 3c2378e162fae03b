"""``studies/transfer/table.py`` reads the committed transfer results and writes
``docs/results/transfer.md``; the committed page is what it writes now, for every model
of ``studies/transfer/models.py``."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from adapters.cli._fit_args import TRAFFIC_EARLY_BLOCK

ROOT = Path(__file__).parents[2]


def _script(name: str) -> Any:
    """``studies/transfer/NAME.py``, loaded as a module."""
    return importlib.import_module(f"studies.transfer.{name}")


def test_docs_transfer_tables_are_what_table_py_writes() -> None:
    mod = _script("table")
    assert mod.OUT == ROOT / "docs" / "results" / "transfer.md"
    written = mod.OUT.read_text(encoding="utf-8")
    assert written == mod.render(), f"stale {mod.OUT.name}: run `{mod.COMMAND}`"
    assert mod.COMMAND in written.splitlines()[0]
    assert written.count("\n| certificate |") == 3  # the three directions
    for m in mod.MODELS:  # a coverage column per model, at its risk, in each direction
        for tag in ("nq2tq", "tq2nq"):
            assert f"| {m.name} coverage @{m.table[tag]} |" in written
    assert "bootstrap intervals" in written
    rows = sum(len(risks) for m in mod.MODELS for risks in m.intervals.values())
    assert sum(line.startswith(f"| {m.name}, ") for m in mod.MODELS
               for line in written.splitlines()) == rows  # fmt: skip


def test_summary_auroc_bar_falls_back_to_the_in_domain_ceiling_only_below_the_bar() -> None:
    mod = _script("summary")
    bar, slack = mod.BAR, mod.CEILING_SLACK
    assert mod.auroc_bar(0.80 + bar, 0.80, 0.79)  # clears the bar outright
    assert not mod.auroc_bar(0.805, 0.80, 0.80 + bar)  # the ceiling reaches the bar: no fallback
    assert mod.auroc_bar(0.805 - slack, 0.80, 0.805)  # ceiling below the bar, within the slack
    assert not mod.auroc_bar(0.804 - slack, 0.80, 0.805)  # more than the slack under it


def test_docs_early_block_pages_are_what_the_scripts_write() -> None:
    mod = _script("early_block")
    written = mod.OUT.read_text(encoding="utf-8")
    assert written == mod.render(mod.HERE / "results"), f"stale {mod.OUT.name}: run `{mod.COMMAND}`"
    for q in mod.QUANTILES:
        assert f"| {mod.LABELS[q]} |" in written.splitlines()[2]
    # the in-domain page of studies/early_block.py, from its committed JSON
    page = importlib.import_module("studies.early_block")
    data = json.loads(page.RESULTS.read_text(encoding="utf-8"))
    assert page.PAGE.read_text(encoding="utf-8").endswith(page.render(data))
    assert {f"early block {q}" for q in page.MARGINS} <= set(data["rules"])


def test_docs_in_domain_page_is_what_in_domain_py_writes() -> None:
    mod = _script("in_domain")
    written = mod.OUT.read_text(encoding="utf-8")
    assert written == mod.render(mod.HERE / "results"), f"stale {mod.OUT.name}: run `{mod.COMMAND}`"
    rows = [line for line in written.splitlines() if line.startswith("| ") and "%" in line]
    # every model, on both datasets: an in-domain and a transferred figure in each row
    for m in mod.MODELS:
        for name in mod.NAMES.values():
            assert any(row.startswith(f"| {m.name}, {name} (") for row in rows), (m.name, name)
    assert all(row.count("%") == 4 for row in rows)


def test_docs_margin_quantile_page_is_what_margin_quantile_py_writes() -> None:
    mod = _script("margin_quantile")
    written = mod.OUT.read_text(encoding="utf-8")
    assert written == mod.render(mod.HERE / "results"), f"stale {mod.OUT.name}: run `{mod.COMMAND}`"
    picked = mod.chosen(mod.HERE / "results")
    assert picked in mod.QUANTILES and f"picks `--early-block {picked}`" in written
    # the rule: no quantile has a mean coverage more than TIE above the one it picks
    means = mod.mean_coverage(mod.certificate_rows(mod.HERE / "results", mod.MODELS))
    assert all(cov <= means[picked][0] + mod.TIE for cov, _ in means.values())


def test_docs_selected_page_is_what_selected_py_writes() -> None:
    mod = _script("selected")
    written = mod.OUT.read_text(encoding="utf-8")
    assert written == mod.render(mod.HERE / "results"), f"stale {mod.OUT.name}: run `{mod.COMMAND}`"
    rows = [line for line in written.splitlines() if line.startswith("| ") and "%" in line]
    assert rows and all(row.count(" | ") == 5 for row in rows)  # every column filled
    # each selected certificate was fitted at the risk of its row, and says what it chose
    for m in mod.MODELS:
        for tag, fit_on in mod.FIT_ON.items():
            for r in m.risks[tag]:
                data = json.loads((mod.HERE / "results" / f"{m.key}_{fit_on}_sel_r{r}.json")
                                  .read_text(encoding="utf-8"))  # fmt: skip
                assert data["calibration"]["risk"] == float(r)
                assert sum(row["chosen"] for row in data["statistic"]["info"]["selection"]) == 1


def test_docs_traffic_margins_page_is_what_traffic_margins_py_writes() -> None:
    mod = _script("traffic_margins")
    results = mod.HERE / "results"
    written = mod.OUT.read_text(encoding="utf-8")
    assert written == mod.render(results), f"stale {mod.OUT.name}: run `{mod.COMMAND}`"
    # calibrate --margins-from's default quantile is the one the in-domain rule picks
    picked = mod.chosen(results, mod.MODELS, "in_tq_all", mod.QUANTILES)
    assert float(picked) == mod.TRAFFIC_EARLY_BLOCK and f"picks **{picked}**" in written
    assert mod.TRAFFIC_EARLY_BLOCK == TRAFFIC_EARLY_BLOCK  # the command's default is that pick
    # each held-out certificate's margins came from every answer of the other half
    for m in mod.MODELS:
        for tag in mod.FIT_ON:
            for traffic in mod.HALVES:
                cert = json.loads((results / f"{m.key}_{tag}_traffic{traffic}.json")
                                  .read_text(encoding="utf-8"))  # fmt: skip
                record = cert["statistic"]["info"]["early_block"]
                assert record["answers"] == "all" and record["traces"].startswith(f"{traffic}_")
                assert record["quantile"] == mod.TRAFFIC_EARLY_BLOCK
                assert len(cert["statistic"]["block_margins"]) == record["positions"] > 0
