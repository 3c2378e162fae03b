"""``docs/results/longform_monitor.md`` is what ``benchmarks/bench_longform_monitor.py``
writes of its committed results (the benchmark itself fits three certificates and times
them for a minute or more: not in the suite; ``--docs-only`` rewrites the page)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from bench_scripts import ROOT, load_bench


def _script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_bench("bench_longform_monitor", monkeypatch)


def test_the_longform_monitor_page_is_what_its_json_renders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mod = _script(monkeypatch)
    page = load_bench("_longform_monitor_page", monkeypatch)
    saved = json.loads(mod.SAVED.read_text(encoding="utf-8"))
    assert saved["generated_by"] == mod.COMMAND
    written = mod.PAGE.read_text(encoding="utf-8")
    assert mod.COMMAND in written.splitlines()[0]
    assert written == mod.render(saved), f"stale: run `{mod.COMMAND} --docs-only`"
    assert mod.PAGE.parent == ROOT / "docs" / "results"
    assert "a live prompt-free skeleton adds one evaluation" in written
    # every rule timed in both modes, on the committed traces as the page names them
    mbpp = next(f for f in saved["files"] if f["path"] == mod.DEFAULT_TRACES)
    assert (ROOT / mbpp["path"]).is_file()
    assert set(mbpp["rules"]) == set(mod.RULES)
    for rule in mbpp["rules"].values():
        assert rule["command"].startswith("liftguard ")
        assert f"--traces {mod.DEFAULT_TRACES}" in rule["command"]
        assert set(rule["modes"]) == set(mod.MODES)
        assert rule["modes"]["all"]["tokens"] == mbpp["tokens"]
        assert rule["chained"]["tokens"] == rule["chained"]["streams"] * page.CHAIN > 0


def test_docs_only_runs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _script(monkeypatch)
    written: list[Path] = []

    def no_run(*args: object) -> None:
        raise AssertionError("--docs-only ran the benchmark")

    monkeypatch.setattr(mod, "run", no_run)
    monkeypatch.setattr(mod, "save", no_run)
    monkeypatch.setattr(mod, "write_page", lambda path, text: written.append(path))
    mod.main(["--docs-only"])
    assert written == [mod.PAGE]
