"""The examples run end to end against the local model (offline)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')

EXAMPLES = Path(__file__).parents[1] / "examples"


def _run(name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )


def test_chat_app_certifies_one_answer_and_stops_another() -> None:
    out = _run("chat_app.py").stdout
    assert "The chemical symbol for gold is Au." in out and "[certified:" in out
    assert "[stopped: blocked:" in out


def test_agent_gets_a_tool_error_for_the_blocked_answer() -> None:
    out = _run("agent_tool.py").stdout
    assert "-> The chemical symbol for gold is Au." in out
    assert "I could not verify an answer" in out and "blocked by liftguard" in out


def test_service_logs_one_json_line_per_verdict() -> None:
    import json

    proc = _run("high_stakes_service.py")
    lines = [json.loads(x) for x in proc.stderr.splitlines() if x.startswith("{")]
    assert [x["state"] for x in lines] == ["certified", "blocked"]
    assert "I can't give a reliable answer" in proc.stdout
