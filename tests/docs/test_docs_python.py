"""The docs' Python blocks, run against the scripted OpenAI-compatible upstream with the
certificate shipped for the bundled SmolLM2 as ``cert.json`` (``tests/docs/docs_upstream.py``:
"Au." is certified, the answer to :data:`BLOCKED_QUESTION` blocked at its first token).

A whole program (the README's quick start) runs as a script in its own process; a
fragment (a block that uses names the text around it defines, such as ``client`` or
``llm``, or a top-level ``await``) runs with those names defined as its comments say,
and its top-level ``await`` allowed. Only placeholders (the server's URL, ``...``) are
filled in. The same quick start against the real model: ``tests/docs/test_readme_snippets.py``.
Registered in ``tests/docs/test_docs_blocks.py``."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from markdown_blocks import block

pytest.importorskip("langchain_openai")

from docs_upstream import BLOCKED_QUESTION, CERT, scripted_upstream
from sse_server import SSEServer

pytestmark = pytest.mark.filterwarnings("error::guardrail.ContextMismatchWarning")


@pytest.fixture
def upstream() -> Iterator[SSEServer]:
    with scripted_upstream() as srv:
        yield srv


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory holding ``cert.json``."""
    shutil.copy(CERT, tmp_path / "cert.json")
    monkeypatch.chdir(tmp_path)
    return tmp_path


async def run_fragment(code: str, names: dict[str, Any]) -> dict[str, Any]:
    """Run ``code`` with ``names`` defined and top-level ``await`` allowed; its namespace."""
    compiled = compile(code, "<docs block>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(compiled, names)
    if result is not None:  # a coroutine when the fragment awaits
        await result
    return names


# --- README.md -----------------------------------------------------------------------------------


def _quick_start(srv: SSEServer, cwd: Path, question: str) -> subprocess.CompletedProcess[str]:
    code = block("README.md", "import asyncio").text
    code = code.replace("http://127.0.0.1:8000/v1", srv.base_url)
    if question != "Who wrote Hamlet?":
        code = code.replace('"Who wrote Hamlet?"', repr(question))
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_readme_langchain_quick_start(upstream: SSEServer, here: Path) -> None:
    done = _quick_start(upstream, here, "Who wrote Hamlet?")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "Au."
    assert "Warning" not in done.stderr  # it sends what the certificate promises
    sent = upstream.records[-1].body
    assert (sent["logprobs"], sent["top_logprobs"], sent["stop"]) == (True, 5, ["\n"])


def test_readme_langchain_quick_start_blocked(upstream: SSEServer, here: Path) -> None:
    """A block ends the stream with the reason; langchain-core logs the raised error as a
    warning on stderr before re-raising it (the docs say so: ``docs/uses.md``)."""
    done = _quick_start(upstream, here, BLOCKED_QUESTION)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("\n[stopped] below_threshold ")
    (noise,) = done.stderr.splitlines()
    assert noise.startswith(
        "Error in LiftGuardCallbackHandler.on_llm_new_token callback: GuardrailBlocked("
    )


async def test_readme_guard_tool(upstream: SSEServer, here: Path) -> None:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    from guardrail import Certificate

    certificate = Certificate.load("cert.json")
    ctx = certificate.context  # as examples/agent_tool.py sends it
    llm = ChatOpenAI(
        base_url=upstream.base_url, api_key="unused", model="smollm2", streaming=True,
        temperature=ctx.temperature, max_tokens=ctx.max_tokens, stop=list(ctx.stop),
        logprobs=True, top_logprobs=5,
    )  # fmt: skip

    @tool
    async def lookup(question: str) -> str:
        """Answer a factual question with the chat model."""
        return str((await llm.ainvoke([("system", ctx.system_prompt), ("user", question)])).content)

    fragment = block("README.md", "from adapters import guard_tool").text
    names = {"lookup": lookup, "certificate": certificate, "llm": llm}
    result = (await run_fragment(fragment, names))["result"]
    assert "blocked by liftguard" in result  # the tool's output, not a wrong fact
    assert upstream.records[-1].body["messages"][-1]["content"] == BLOCKED_QUESTION


async def test_readme_guarded_chat_completion(upstream: SSEServer, here: Path) -> None:
    import openai

    from guardrail import Certificate, GuardrailBlocked

    client = openai.AsyncOpenAI(base_url=upstream.base_url, api_key="unused", max_retries=0)
    fragment = block("README.md", "from adapters import guarded_chat_completion").text
    names = {"client": client, "certificate": Certificate.load("cert.json")}
    assert (await run_fragment(fragment, {**names, "question": "Gold?"}))["text"] == "Au."
    with pytest.raises(GuardrailBlocked):
        await run_fragment(fragment, {**names, "question": BLOCKED_QUESTION})
    await client.close()


# --- docs/uses.md, docs/risk-monitor.md ----------------------------------------------------------


async def test_uses_langchain(
    upstream: SSEServer, here: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The page's ``ChatOpenAI`` names no server: the openai client's environment does."""
    monkeypatch.setenv("OPENAI_BASE_URL", upstream.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    fragment = block("docs/uses.md", "from langchain_openai import ChatOpenAI").text
    await run_fragment(fragment, {})
    assert capsys.readouterr().out == "Au."
    await run_fragment(fragment.replace('"Who wrote Hamlet?"', repr(BLOCKED_QUESTION)), {})
    assert capsys.readouterr().out.startswith("\n[stopped] below_threshold ")


async def test_risk_monitor_api(here: Path) -> None:
    fragment = block("docs/risk-monitor.md", "from guardrail import Certificate, RiskMonitor").text
    monitor = (await run_fragment(fragment, {}))["monitor"]
    assert monitor.target == 0.8 and monitor.alpha == 0.05  # the certificate's target
    assert monitor.alarm is False and not monitor.coverage_warning
    lower, upper = monitor.bounds
    assert 0.0 <= lower <= upper <= 1.0
