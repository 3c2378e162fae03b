"""The examples run end to end against the local model (offline), with the shipped
fitted certificate (its prompt-free skeleton loads a second copy of SmolLM2).

They load llama.cpp: run under ``flock /tmp/llama.lock``. Greedy decoding gives the same
answers every run: "Au" for gold, certified with the fitted score well above tau
(0.75 vs -2.20), and a wrong answer to "atomic number 8" ("iron"), which the
certificate's early-block margin rules out after 14 of its 24 tokens, before the
wrong word.

Each runs with warnings as errors (``-W error``, deprecations aside): an example sets its
model up the way the certificate's answers were generated, so the adapters have no
``ContextMismatchWarning`` to give. Each says in its docstring which extras it needs, and
so does the docs page that lists the examples."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
CERTIFIED = "certified: final fitted score"
BLOCKED = "blocked: the fitted score"
MARGIN = "(the statistic's early-block margin)"
WRONG = '"iron"'  # the wrong element, from token 15 of the blocked answer


def _shipped_tau() -> float:
    path = Path(__file__).parents[2] / "guardrail" / "data" / "smollm2_fitted_certificate.json"
    return float(json.loads(path.read_text(encoding="utf-8"))["tau"])


WARNINGS_AS_ERRORS = ("-W", "error", "-W", "ignore::DeprecationWarning",
                      "-W", "ignore::PendingDeprecationWarning")  # fmt: skip
"""Every warning a user would see is an error (a library's own deprecations are not the
example's to fix: they are hidden by default outside ``__main__``)."""


def _run(name: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')
    return subprocess.run(
        [sys.executable, *WARNINGS_AS_ERRORS, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )


EXTRA_OF = {"langchain_core": "langchain", "langchain_openai": "langchain", "openai": "openai"}
"""The optional extra each third-party import of an example comes with (``local``: always)."""
INSTALL = re.compile(r'pip install -e "\.\[([a-z,]+)\]"')


def _extras_needed(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    return {"local"} | {EXTRA_OF[m.split(".")[0]] for m in names if m.split(".")[0] in EXTRA_OF}


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.py")), ids=lambda p: p.name)
def test_an_example_names_the_extras_it_needs(path: Path) -> None:
    """The docstring's install line, and the docs page that lists the examples, name
    every extra the example imports from."""
    needed = _extras_needed(path)
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    said = [set(m.split(",")) for m in INSTALL.findall(doc)]
    assert said and needed <= said[0], f"{path.name}: its docstring should say {needed}"
    page = (ROOT / "docs" / "uses.md").read_text(encoding="utf-8")
    listed = set().union(*(set(m.split(",")) for m in INSTALL.findall(page)))
    assert f"examples/{path.name}" in page and needed <= listed


def test_chat_app_certifies_one_answer_and_stops_another_mid_stream() -> None:
    out = _run("chat_app.py").stdout
    assert f"The chemical symbol for gold is Au.\n      [certified: {CERTIFIED}" in out
    # passthrough: the text up to the blocking token was shown, then the stop and its reason
    shown, stop = out.split("user: Which element has the atomic number 8?\nbot:  ")[1].split(
        " ...\n      [stopped: "
    )
    assert WRONG not in shown and shown.endswith("is typically referred to as")
    assert stop.startswith(BLOCKED) and "after 14 tokens" in stop and f"{MARGIN}]" in stop


def test_agent_gets_a_tool_error_for_the_blocked_answer() -> None:
    out = _run("agent_tool.py").stdout
    assert "-> The chemical symbol for gold is Au." in out
    assert "I could not verify an answer to 'Which element has the atomic number 8?'" in out
    assert f"blocked by liftguard: {BLOCKED}" in out
    assert WRONG not in out  # the agent never sees the blocked answer


def test_service_shows_nothing_uncertified_and_logs_one_json_line_per_verdict() -> None:
    proc = _run("high_stakes_service.py")
    lines = [json.loads(x) for x in proc.stderr.splitlines() if x.startswith("{")]
    assert [(x["state"], x["tokens"]) for x in lines] == [("certified", 8), ("blocked", 14)]
    assert lines[0]["reason"].startswith(CERTIFIED) and lines[1]["reason"].startswith(BLOCKED)
    assert [x["tau"] for x in lines] == [_shipped_tau()] * 2
    assert "A: The chemical symbol for gold is Au." in proc.stdout
    assert "A: I can't give a reliable answer to that." in proc.stdout
    assert WRONG not in proc.stdout  # buffered: none of the blocked answer was shown
