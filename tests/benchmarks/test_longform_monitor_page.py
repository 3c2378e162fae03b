"""``docs/results/longform_monitor.md`` is what ``benchmarks/bench_longform_monitor.py``
writes of its committed results (the benchmark itself fits three certificates and times
them for a minute or more: not in the suite; ``--docs-only`` rewrites the page)."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from types import ModuleType

import pytest
from bench_scripts import ROOT


def _script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return importlib.import_module("benchmarks.bench_longform_monitor")


def test_the_longform_monitor_page_is_what_its_json_renders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mod = _script(monkeypatch)
    page = importlib.import_module("benchmarks.longform_monitor_page")
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


def test_a_folder_of_parts_is_read_joined_in_name_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The GSM8K traces are a folder of xz parts: the benchmark takes the folder and its
    commands read the parts joined in name order (one xz file of several streams)."""
    import lzma

    mod = _script(monkeypatch)
    folder = tmp_path / "gsm8k"
    folder.mkdir()
    for name, text in (("part-001.jsonl.xz", b"b\n"), ("part-000.jsonl.xz", b"a\n")):
        (folder / name).write_bytes(lzma.compress(text))
    (folder / "README.md").write_text("not a part")
    joined = mod.joined_parts(folder, tmp_path)
    assert joined == tmp_path / "gsm8k.jsonl.xz"
    assert lzma.decompress(joined.read_bytes()) == b"a\nb\n"
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match=r"no \*\.jsonl\.xz parts"):
        mod.joined_parts(tmp_path / "empty", tmp_path)
    taken: list[list[str]] = []
    monkeypatch.setattr(mod, "run", lambda paths, repeat: taken.append(list(paths)) or {})
    monkeypatch.setattr(mod, "save", lambda path, saved: None)
    monkeypatch.setattr(mod, "write_page", lambda path, text: None)
    monkeypatch.setattr(mod, "render", lambda saved: "")
    mod.main(["--traces", str(folder)])
    assert taken == [[os.path.relpath(folder.resolve(), ROOT)]]  # taken, not refused


def test_a_command_on_joined_parts_names_the_file_the_readme_joins_them_into(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    mod = _script(monkeypatch)
    ran: list[list[str]] = []
    monkeypatch.setattr(mod, "_liftguard", lambda args: (ran.append(list(args)), (0, ""))[1])
    made = mod.make_certificate("fit", "/tmp/x/gsm8k.jsonl.xz", tmp_path / "c.json",
                                "benchmarks/traces/gsm8k.jsonl.xz")  # fmt: skip
    assert "--traces /tmp/x/gsm8k.jsonl.xz" in " ".join(ran[0])  # what runs reads the join
    assert "--traces benchmarks/traces/gsm8k.jsonl.xz" in made["command"]
    assert "/tmp/" not in made["command"]
