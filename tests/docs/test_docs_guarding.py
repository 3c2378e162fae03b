"""docs/guarding-code-and-reasoning.md works from a clone: its commands install from the
clone (liftguard is not on PyPI), read no file from outside it, and the labelled traces
the repository ships are named where a command reads them, at paths that exist; the fit
it shows on them runs as written (in seconds: no model is loaded). Registered in
``tests/docs/test_docs_blocks.py``."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from markdown_blocks import ROOT, block, blocks, script, script_env

from guardrail import Certificate

PAGE = ROOT / "docs" / "guarding-code-and-reasoning.md"
SHIPPED = re.compile(r"benchmarks/traces/[\w./-]+")
MBPP = "benchmarks/traces/mbpp_qwen25coder.jsonl.xz"
FIT = "$ liftguard fit --traces benchmarks/traces/mbpp_qwen25coder.jsonl.xz \\"


def _commands() -> str:
    return "".join(b.text for b in blocks(PAGE) if b.lang in ("console", "bash"))


def test_the_page_installs_from_a_clone() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert 'pip install "liftguard[' not in text  # not on PyPI
    assert '$ pip install -e ".[qwen]"' in _commands()


def test_the_commands_read_no_file_outside_the_clone() -> None:
    outside = [line.strip() for line in _commands().splitlines() if "../" in line]
    assert not outside, outside


def test_the_shipped_traces_are_read_by_a_command() -> None:
    named = set(SHIPPED.findall(_commands()))
    assert "benchmarks/traces/mbpp_qwen25coder.jsonl.xz" in named
    for path in named | set(SHIPPED.findall(PAGE.read_text(encoding="utf-8"))):
        path = path.rstrip(".").removesuffix("/*.xz")
        assert (ROOT / path).exists(), path


def test_the_clone_fit_command(tmp_path: Path) -> None:
    """The page's context file and skeleton spec, written as the page says, and its fit on
    the shipped MBPP traces: a certificate that certifies some answers, for Qwen's
    prompt-free pass."""
    page = "docs/guarding-code-and-reasoning.md"
    context = block(page, '{"system_prompt": "You are an expert Python programmer. Answer with '
                    'one Python code block that solves the task, with no explanation.",')
    spec = block(page, '{"kind": "prompt_free",')
    (tmp_path / "code_context.json").write_text(context.text, encoding="utf-8")
    (tmp_path / "qwen_code_skeleton.json").write_text(spec.text, encoding="utf-8")
    text = script(block(page, FIT), {MBPP: str(ROOT / MBPP)})
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", text],
        cwd=tmp_path, env=script_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    certificate = Certificate.load(tmp_path / "mbpp_cert.json")
    assert certificate.calibration is not None and certificate.calibration.coverage > 0
    assert certificate.calibration.risk == 0.4
    assert certificate.skeleton.params["model"] == json.loads(spec.text)["params"]["model"]
    assert certificate.context.system_prompt == json.loads(context.text)["system_prompt"]
