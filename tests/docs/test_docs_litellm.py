"""The LiteLLM page's blocks in a real LiteLLM process: its ``config.yaml`` as written (the
upstream's URL filled in: the scripted upstream of ``tests/docs/docs_upstream.py``, with the
certificate shipped for the bundled SmolLM2 as ``cert.json`` beside it), started by the
page's own shell commands (``--port 4000`` replaced by a free port; the environment of
``tests/litellm_harness.py`` keeps LiteLLM off the network), then the page's two
client blocks, with ``KEY`` (the master key the shell made) and ``messages`` defined.
Registered in ``tests/docs/test_docs_blocks.py``."""

from __future__ import annotations

import ast
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
from markdown_blocks import block, free_port, script, script_env, stop_group

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "adapters"))

if find_spec("litellm") is None or find_spec("fastapi") is None:
    pytest.skip('litellm is not installed (pip install "liftguard[litellm]")',
                allow_module_level=True)  # fmt: skip

from docs_upstream import CERT, scripted_upstream
from litellm_harness import OFFLINE_ENV

PAGE = "docs/litellm.md"
START_TIMEOUT_S = 600.0  # only a hung start reaches it (see litellm_harness.START_TIMEOUT_S)


@dataclass
class Served:
    port: int
    key: str


def _alive(port: int) -> bool:
    try:
        url = f"http://127.0.0.1:{port}/health/liveliness"
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _environ(pid: int) -> dict[str, str]:
    """The environment of process ``pid`` or, when the shell forked it, of its child."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    raw = Path(f"/proc/{children[0] if children else pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


@pytest.fixture(scope="module")
def litellm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    here = tmp_path_factory.mktemp("litellm")
    with scripted_upstream() as upstream:
        config = block(PAGE, "model_list:").text
        config = config.replace("http://127.0.0.1:8000/v1", upstream.base_url)
        (here / "config.yaml").write_text(config, encoding="utf-8")
        shutil.copy(CERT, here / "cert.json")
        port = free_port()
        shell = script(block(PAGE, 'export LITELLM_MASTER_KEY="sk-$(openssl rand -hex 32)"   '
                                   "# LiteLLM refuses to start without one"),
                       {"--port 4000": f"--port {port}"})  # fmt: skip
        env = script_env(**OFFLINE_ENV, OPENAI_API_KEY="upstream-key", NO_PROXY="127.0.0.1")
        with open(here / "litellm.log", "wb") as log:
            proc = subprocess.Popen(["bash", "-e", "-c", shell], cwd=here, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while proc.poll() is None and not _alive(port):
                assert time.monotonic() < deadline, "LiteLLM neither served nor exited"
                time.sleep(0.2)
            assert proc.poll() is None, (here / "litellm.log").read_text()[-3000:]
            yield Served(port, _environ(proc.pid)["LITELLM_MASTER_KEY"])
        finally:
            stop_group(proc, signal.SIGTERM, 15)


def _run(code: str, served: Served, **names: Any) -> dict[str, Any]:
    """``code`` with the port filled in and ``KEY``, ``messages`` and ``names`` defined."""
    code = code.replace("http://127.0.0.1:4000", f"http://127.0.0.1:{served.port}")
    namespace = {"KEY": served.key, "messages": [{"role": "user", "content": "Gold?"}], **names}
    exec(compile(code, "<docs block>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), namespace)
    return namespace


def test_litellm_serves_the_page_config(litellm: Served) -> None:
    assert litellm.key.startswith("sk-") and len(litellm.key) == 3 + 64


def test_litellm_client_reads_the_verdict(litellm: Served) -> None:
    names = _run(block(PAGE, "import openai").text, litellm)
    assert names["verdict"]["state"] == "certified"  # the last chunk's
    assert names["verdict"]["certificate"].startswith("cert.json")


def test_litellm_feedback(litellm: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    sent: list[httpx.Response] = []
    post = httpx.post
    monkeypatch.setattr(httpx, "post", lambda *a, **k: sent.append(post(*a, **k)) or sent[-1])
    names = _run(block(PAGE, "import httpx, openai").text, litellm)
    assert names["verdict"]["state"] == "certified"
    (reply,) = sent
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert (body["id"], body["correct"]) == (names["verdict"]["request_id"], False)
    assert (body["labels"], body["errors"]) == (1, 1)
