"""The generated result pages under ``docs/results`` are what their benchmark scripts
write now (``benchmarks/transfer/table.py`` has its own test)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).parents[1]
SHARED_TRACES = ROOT.parent / "shared" / "data" / "traces"


def _script(relative: str) -> ModuleType:
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (dataclasses look their module up while it loads)
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[spec.name]
    return mod


@pytest.mark.slow
@pytest.mark.skipif(
    not (SHARED_TRACES / "triviaqa_gemma3.jsonl").exists(), reason="shared trace data not available"
)
def test_topk_decisions_page_is_what_the_script_writes() -> None:
    mod = _script("benchmarks/topk_decisions.py")
    assert mod.OUT == ROOT / "docs" / "results" / "topk_decisions.md"
    written = mod.OUT.read_text(encoding="utf-8")
    assert mod.COMMAND in written.splitlines()[0]
    assert written == mod.render(SHARED_TRACES), f"stale {mod.OUT.name}: run `{mod.COMMAND}`"


def test_warm_start_page_is_the_saved_report(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page is the default run's report as saved in its JSON (regenerating the run
    takes minutes of llama.cpp; ``--docs-only`` rewrites the page from the JSON)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    mod = _script("benchmarks/_warm_start_report.py")
    assert mod.DOCS_PAGE == ROOT / "docs" / "results" / "warm_start_real.md"
    saved = json.loads((ROOT / "benchmarks/results/warm_start_real.json").read_text("utf-8"))
    written = mod.DOCS_PAGE.read_text(encoding="utf-8")
    assert mod.COMMAND in written.splitlines()[0]
    assert written == mod.docs_page(saved["markdown"]), f"stale: run `{mod.COMMAND} --docs-only`"
    assert "\n| scaled | warm |" in written


@pytest.mark.parametrize(
    "script",
    [
        "benchmarks/eval_baselines.py",
        "benchmarks/calibration_size.py",
        "benchmarks/stress_table.py",
    ],
)
def test_pages_are_what_the_saved_runs_give(script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each script's pages are what it writes from the command outputs it saved
    (``--docs-only`` rewrites them; a full run reruns the commands)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    mod = _script(script)
    saved = json.loads(mod.SAVED.read_text("utf-8"))
    assert saved["generated_by"] == mod.COMMAND
    pages = [(mod.OUT, mod.render)]
    if hasattr(mod, "OUT_NEIGHBOURS"):
        pages.append((mod.OUT_NEIGHBOURS, mod.render_neighbours))
    for path, render in pages:
        assert path.parent == ROOT / "docs" / "results"
        written = path.read_text(encoding="utf-8")
        assert mod.COMMAND in written.splitlines()[0]
        assert written == render(saved), f"stale {path.name}: run `{mod.COMMAND} --docs-only`"
    for run in saved["runs"]:  # every number comes from a liftguard command on the shared traces
        assert run["command"].startswith("liftguard ")
        assert "--traces ../shared/data/traces/triviaqa_" in run["command"]


def test_eval_runs_are_the_commands_the_page_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    mod = _script("benchmarks/eval_baselines.py")
    saved = json.loads(mod.SAVED.read_text("utf-8"))
    for run in saved["runs"]:
        expected = (f"liftguard eval --traces ../shared/data/traces/triviaqa_{run['model']}.jsonl"
                    f" --risk {run['risk']:g} --splits 20 {' '.join(run['flags'])}").rstrip()
        assert run["command"] == expected + " --json"
    assert len(saved["runs"]) == len(mod.MODELS) * (len(mod.RISKS) + len(mod.NEIGHBOURS))


def test_risk_monitor_page_is_the_saved_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The MAPIE comparison page is what its saved run gives (a rerun needs mapie, which
    is not in the lock, and minutes; ``--docs-only`` rewrites the page from the JSON)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    mod = _script("benchmarks/bench_risk_monitor.py")
    saved = json.loads(mod.SAVED.read_text("utf-8"))
    written = mod.OUT.read_text(encoding="utf-8")
    assert mod.COMMAND in written.splitlines()[0]
    assert written == mod.page(saved), f"stale: run `{mod.COMMAND} --docs-only`"


def test_a_plain_risk_monitor_run_leaves_the_committed_results_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run as its docstring and the docs say, the benchmark writes under the ignored
    ``out/``; only ``--write-docs`` (or ``--docs-only``) touches the committed files."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    mod = _script("benchmarks/bench_risk_monitor.py")
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


def test_transfer_summary_pages_are_what_summary_py_writes() -> None:
    mod = _script("benchmarks/transfer/summary.py")
    for path, render in ((mod.OUT, mod.render), (mod.OUT_FEATURES, mod.render_features)):
        written = path.read_text(encoding="utf-8")
        assert mod.COMMAND in written.splitlines()[0]
        assert written == render(), f"stale {path.name}: run `{mod.COMMAND}`"


def test_results_page_types_no_table_of_its_own() -> None:
    """Every table of measured results on the page is a generated page it includes, and
    every generated page is included by some page of the docs."""
    docs = ROOT / "docs"
    index = (docs / "results" / "index.md").read_text(encoding="utf-8")
    assert not [line for line in index.splitlines() if line.lstrip().startswith("|")]
    sources = "".join(p.read_text(encoding="utf-8") for p in docs.rglob("*.md"))
    for page in (docs / "results").glob("*.md"):
        if page.name != "index.md":
            assert f'--8<-- "results/{page.name}"' in sources, f"{page.name} is not included"
            assert page.read_text(encoding="utf-8").startswith("<!-- generated by ")


def test_proxy_overhead_page_is_the_saved_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The proxy overhead table is what ``bench_proxy.py`` writes of its saved run
    (``--docs-only`` rewrites it)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    mod = _script("benchmarks/bench_proxy.py")
    saved = json.loads(mod.RESULTS.read_text("utf-8"))
    written = mod.PAGE.read_text(encoding="utf-8")
    assert saved["command"] in written.splitlines()[0]
    assert written == mod.render(saved), "stale: run `python benchmarks/bench_proxy.py --docs-only`"


def _saved_page(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[ModuleType, dict[str, Any], str]:
    """``benchmarks/NAME.py``, its saved run and its page, checked to be what the run gives
    (``--docs-only`` rewrites a stale one)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    mod = _script(f"benchmarks/{name}.py")
    saved = json.loads(mod.SAVED.read_text("utf-8"))
    assert saved["generated_by"] == mod.COMMAND
    written = mod.PAGE.read_text(encoding="utf-8")
    assert mod.COMMAND in written.splitlines()[0]
    assert written == mod.render(saved), f"stale: run `{mod.COMMAND} --docs-only`"
    return mod, saved, written


def test_longform_page_is_the_saved_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The long-answer page is what its saved run gives (a rerun needs the MBPP and GSM8K
    traces, which are not in the repository; ``--docs-only`` rewrites the page)."""
    _saved_page("longform", monkeypatch)


def test_scope_sums_page_is_the_saved_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page on ``fit --scopes auto`` is what its saved run gives, measured on fitting
    halves only, with the scopes ``fit`` itself would add (``--docs-only`` rewrites it)."""
    mod, saved, _ = _saved_page("scope_sums", monkeypatch)
    assert set(saved["files"]) == set(mod.RISKS)
    for key, entry in saved["files"].items():
        assert list(entry["risks"]) == [f"{r:g}" for r in mod.RISKS[key]]
        for row in entry["risks"].values():  # a second statistic exactly where scopes are added
            assert ("with_scopes" in row) == bool(entry["scopes"])


def test_early_block_share_page_is_the_saved_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page ``fit``'s default early-block share was chosen from is what its saved run
    gives, with a row for that default in each file (``--docs-only`` rewrites it)."""
    mod, saved, written = _saved_page("early_block_share", monkeypatch)
    default = f"{mod.DEFAULT_EARLY_BLOCK_SHARE:g}"
    for entry in saved["files"].values():
        assert default in entry["schemes"] and set(entry["schemes"]) == set(mod.SHARES)
    assert written.count("(default)") == len(saved["files"])


def test_longform_refuses_without_traces(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    mod = _script("benchmarks/longform.py")
    missing = ["--mbpp", str(tmp_path / "none.jsonl")]
    for argv, message in (([], "give the traces"), (missing, "no such traces")):
        monkeypatch.setattr("sys.argv", ["longform.py", *argv])
        with pytest.raises(SystemExit):
            mod.main()
        assert message in capsys.readouterr().err


def test_longform_takes_a_folder_of_parts_on_its_command_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The committed GSM8K traces are a folder: the command line must let it through to the
    run (which joins its parts), not refuse it as a missing file."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    mod = _script("benchmarks/longform.py")
    (tmp_path / "gsm8k").mkdir()
    taken: list[dict[str, Path]] = []

    def run(paths: dict[str, Path], bootstrap: int, jobs: int) -> dict[str, object]:
        taken.append(paths)
        raise SystemExit(0)

    monkeypatch.setattr(mod, "run", run)
    monkeypatch.setattr("sys.argv", ["longform.py", "--gsm8k", str(tmp_path / "gsm8k")])
    with pytest.raises(SystemExit):
        mod.main()
    assert taken == [{"gsm8k": (tmp_path / "gsm8k").resolve()}]


def test_longform_risks_at_once_give_the_serial_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--jobs`` runs the risk levels side by side; the results are the serial run's, keyed
    and ordered by risk, each certificate evaluated at its own risk (the fits and evals are
    replaced here by what identifies them)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    mod = _script("benchmarks/longform.py")
    monkeypatch.setattr(mod, "_fit", lambda traces, out, risk: out.write_text(str(risk)))

    def fake_eval(traces: Path, cert: Path, risk: float, bootstrap: int) -> dict[str, object]:
        made_for = cert.read_text()
        assert made_for in ("None", str(risk)), (cert.name, risk)
        cov = risk if made_for == "None" else -risk
        return {"methods": {"certificate": {"coverage_mean": cov}}, "certificate": cert.name}

    monkeypatch.setattr(mod, "_eval", fake_eval)
    monkeypatch.setattr(mod, "early_blocks", lambda cert, traces, risk, cov: {"at": cov})
    runs = {jobs: mod._evaluate(tmp_path / "a", tmp_path / "b", tmp_path, f"t{jobs}", 0, jobs)
            for jobs in (1, 3)}  # fmt: skip
    assert list(runs[3]) == [f"{r:g}" for r in mod.RISKS]
    for risk in mod.RISKS:
        one, three = runs[1][f"{risk:g}"], runs[3][f"{risk:g}"]
        assert one["methods"] == three["methods"]
        assert three["methods"]["certificate"]["coverage_mean"] == risk
        assert three["methods"]["selected"]["coverage_mean"] == -risk
        assert three["early_blocks"] == {"at": risk}


def test_longform_reads_a_file_a_compressed_file_or_a_folder_of_parts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The committed traces come as one ``.xz`` file (MBPP) or a folder of ``.xz`` parts
    (GSM8K, written as it is generated); each is read as the lines it holds, in order."""
    import lzma

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    mod = _script("benchmarks/_tables.py")
    lines = [f'{{"id": "q{i}"}}\n' for i in range(5)]
    parts = tmp_path / "gsm8k_parts"
    parts.mkdir()
    (parts / "part-001.jsonl.xz").write_bytes(lzma.compress("".join(lines[3:]).encode()))
    (parts / "part-000.jsonl.xz").write_bytes(lzma.compress("".join(lines[:3]).encode()))
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(lines))
    out = tmp_path / "out"
    out.mkdir()
    assert mod.plain_traces(plain, out) == plain
    joined = mod.plain_traces(parts, out)
    assert joined == out / "gsm8k_parts.jsonl" and joined.read_text() == "".join(lines)
    one = mod.plain_traces(parts / "part-000.jsonl.xz", out)
    assert one.name == "part-000.jsonl" and one.read_text() == "".join(lines[:3])
