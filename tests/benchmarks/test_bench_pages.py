"""The pages of the timing scripts under ``docs/results`` are what the scripts write of
their saved runs (``--docs-only`` rewrites them); the studies' pages have their tests in
``tests/studies/``."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from bench_scripts import assert_page_current

from adapters._serving._request import MAX_CONTAINERS, MAX_VALUES, parse_json, validate_chat

ROOT = Path(__file__).parents[2]


def test_risk_monitor_page_is_the_saved_run() -> None:
    """The MAPIE comparison page is what its saved run gives (a rerun needs mapie, which
    is not in the lock, and minutes; ``--docs-only`` rewrites the page from the JSON)."""
    mod = importlib.import_module("benchmarks.bench_risk_monitor")
    saved = json.loads(mod.SAVED.read_text("utf-8"))
    written = mod.OUT.read_text(encoding="utf-8")
    assert mod.COMMAND in written.splitlines()[0]
    assert written == mod.page(saved), f"stale: run `{mod.COMMAND} --docs-only`"


def test_a_plain_risk_monitor_run_leaves_the_committed_results_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run as its docstring and the docs say, the benchmark writes under the ignored
    ``out/``; only ``--write-docs`` (or ``--docs-only``) touches the committed files."""
    mod = importlib.import_module("benchmarks.bench_risk_monitor")
    written: list[Path] = []
    monkeypatch.setattr(mod, "run", lambda runs: {"runs": runs})
    monkeypatch.setattr(mod, "load", lambda path: {"runs": 0})
    monkeypatch.setattr(mod, "page", lambda saved: "")
    monkeypatch.setattr(mod, "save", lambda path, data: written.append(path))
    monkeypatch.setattr(mod, "write_page", lambda path, text: written.append(path))
    mod.main(["--runs", "1"])
    scratch = ROOT / "out" / "bench_risk_monitor"
    assert len(written) == 2 and all(p.parent == scratch for p in written)
    assert "/out/" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    written.clear()
    mod.main(["--runs", "1", "--write-docs"])
    assert written == [mod.SAVED, mod.OUT]
    written.clear()
    mod.main(["--docs-only"])
    assert written == [mod.OUT]


def test_proxy_overhead_page_is_the_saved_run() -> None:
    """The proxy overhead table is what ``bench_proxy.py`` writes of its saved run
    (``--docs-only`` rewrites it)."""
    mod = importlib.import_module("benchmarks.bench_proxy")
    saved = json.loads(mod.RESULTS.read_text("utf-8"))
    written = mod.PAGE.read_text(encoding="utf-8")
    assert saved["command"] in written.splitlines()[0]
    assert written == mod.render(saved), "stale: run `python -m benchmarks.bench_proxy --docs-only`"


def test_proxy_bodies_page_is_the_saved_run() -> None:
    """The page of ``bench_proxy_bodies.py`` is what it writes of its saved run (the run
    itself takes three processes and 32 MiB of bodies: not in the suite), and the bodies it
    sends are the largest the proxy takes: ``max_body_bytes`` each, decoded and checked
    without a refusal (the tiny values just under the proxy's counts)."""
    mod = importlib.import_module("benchmarks.bench_proxy_bodies")
    assert (mod.MAX_VALUES, mod.MAX_CONTAINERS) == (MAX_VALUES, MAX_CONTAINERS)  # as documented
    saved = assert_page_current(mod, "results/index.md")
    for shape in ("text", "values"):
        raw = mod.body(shape, saved["body_bytes"])
        assert len(raw) == saved["body_bytes"]
        validate_chat(parse_json(raw))
    raw = mod.body("values", saved["body_bytes"])
    assert raw.count(b",") + raw.count(b":") > MAX_VALUES * 0.7
    assert raw.count(b"{") + raw.count(b"[") > MAX_CONTAINERS * 0.9
