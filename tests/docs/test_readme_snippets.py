"""The README's LangChain quick start runs as written, against the local server with the
certificate shipped for the bundled SmolLM2: only its placeholders (the server's URL and the
model's name) are filled in. It loads llama.cpp."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')
pytest.importorskip("langchain_openai")

README = Path(__file__).parents[2] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_the_langchain_quick_start_runs(tmp_path: Path) -> None:
    from adapters.local import LocalChatServer, LocalModel, smollm2_certificate

    snippet = next(b for b in _python_blocks() if "LiftGuardCallbackHandler" in b)
    assert 'base_url="http://127.0.0.1:8000/v1"' in snippet and 'model="..."' in snippet
    assert "stop=" in snippet and "asyncio.run(main())" in snippet
    smollm2_certificate().save(tmp_path / "cert.json")
    with LocalChatServer(LocalModel()) as server:
        code = snippet.replace("http://127.0.0.1:8000/v1", server.base_url).replace(
            'model="..."', 'model="smollm2"'
        )
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip(), "the snippet printed nothing"
    assert "ContextMismatchWarning" not in done.stderr  # it sends what the certificate promises
