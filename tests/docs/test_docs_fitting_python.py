"""``docs/fitting-from-python.md``: its Python block runs as written (only the paths of the
committed MBPP traces and the shipped code context made absolute, so it runs in a scratch
folder) and prints what the page shows under it; the certificate it saves is the one it
describes. Registered in ``tests/docs/test_docs_blocks.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from markdown_blocks import ROOT, block, script_env

from guardrail import Certificate

PAGE = "docs/fitting-from-python.md"
CODE = "import json"
OUTPUT = "fitted on 200 answers, tau calibrated on 200 others"
FILES = ("benchmarks/traces/mbpp_qwen25coder.jsonl.xz", "guardrail/data/qwen_code_context.json")


def test_the_page_fits_calibrates_and_evaluates(tmp_path: Path) -> None:
    code = block(PAGE, CODE).text
    for name in FILES:
        assert f'"{name}"' in code, name
        code = code.replace(f'"{name}"', repr(str(ROOT / name)))
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=script_env(),
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == block(PAGE, OUTPUT).text.splitlines()
    assert done.stderr == ""
    cert = Certificate.load(tmp_path / "mbpp_certificate.json")
    assert cert.statistic is not None and cert.statistic.group == "api"
    assert "skeleton" not in cert.statistic.requires  # no second model beside it
    assert cert.context.max_tokens == 512 and cert.calibration is not None
    assert cert.calibration.risk == 0.4 and cert.calibration.risk_upper <= 0.4
    assert cert.calibration.extra["split"]["n_fit"] == 200
