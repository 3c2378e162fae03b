"""The guard proxy's docs blocks, run against the scripted upstream with the certificate
shipped for the bundled SmolLM2 as ``cert.json`` (``tests/docs/docs_upstream.py`` says what it
certifies). ``liftguard serve`` runs as written, with ``--port 0`` added (a free port,
not the default 8080) and the upstream's URL filled in; each command is stopped with
Ctrl-C (SIGINT) after one answer went through it. Registered in
``tests/docs/test_docs_blocks.py``."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from markdown_blocks import block, output, script, script_env

pytest.importorskip("starlette")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "proxy"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fleet"))

import openai
import redis
from docs_upstream import BLOCKED_QUESTION, CERT, scripted_upstream
from proxy_harness import running_proxy
from s3_server import moto_s3
from sse_server import SSEServer
from valkey_process import ValkeyProcess

from adapters.proxy import StaticCertificate
from guardrail import Certificate

URL_LINE = re.compile(r"^liftguard serve: (http://127\.0\.0\.1:\d+/v1) -> ")


@pytest.fixture
def upstream() -> Iterator[SSEServer]:
    with scripted_upstream() as srv:
        yield srv


def commands(text: str) -> list[str]:
    """The commands of a script, one per entry (continuation lines joined)."""
    return [line for line in text.replace("\\\n", " ").splitlines() if line.strip()]


def serve_once(command: str, cwd: Path) -> tuple[str, dict[str, object]]:
    """Run ``command`` (a ``liftguard serve`` line) with ``--port 0``, ask it one streamed
    question, stop it with SIGINT; what it printed, and the answer's verdict."""
    command = command.split(" #", 1)[0] + " --port 0"  # before its comment
    env = script_env()
    log = cwd / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=cwd, env=env,
                                stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (found := URL_LINE.match(log.read_text())) and proc.poll() is None:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        assert found is not None, f"exit {proc.returncode}: {log.read_text()}"
        client = openai.OpenAI(base_url=found[1], api_key="unused", max_retries=0, timeout=30)
        chunks = list(client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "Gold?"}], stream=True,
        ))  # fmt: skip
        verdict = next(c.model_extra["liftguard"] for c in chunks if "liftguard" in c.model_extra)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    return log.read_text(), verdict


@pytest.fixture
def here(tmp_path: Path) -> Path:
    shutil.copy(CERT, tmp_path / "cert.json")
    return tmp_path


def test_readme_serve(upstream: SSEServer, here: Path) -> None:
    text = script(block("README.md", 'pip install -e ".[serve]"'),
                  {"http://127.0.0.1:8000/v1": upstream.base_url})  # fmt: skip
    (command,) = commands(text)
    printed, verdict = serve_once(command, here)
    assert verdict["state"] == "certified" and "(buffered; *: cert.json#" in printed
    (recording,) = (here / "traces").glob("*.jsonl")
    assert json.loads(recording.read_text().splitlines()[0])["answer"] == "Au."


def test_proxy_serve_commands(upstream: SSEServer, here: Path) -> None:
    text = script(block("docs/proxy.md", 'pip install -e ".[serve]"'),
                  {"http://127.0.0.1:8000/v1": upstream.base_url})  # fmt: skip
    buffered, observe = commands(text)
    printed, verdict = serve_once(buffered, here)
    assert verdict["state"] == "certified" and "(buffered; " in printed
    printed, verdict = serve_once(observe, here)
    assert verdict["state"] == "certified" and "(observe; " in printed
    (recording,) = (here / "traces").glob("*.jsonl")
    assert len(recording.read_text().splitlines()) == 1  # the observed answer, recorded
    assert upstream.records[-1].body["top_logprobs"] == 20


def test_proxy_config_from_python(
    upstream: SSEServer, here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's ``ProxyConfig`` with its groups, as written but for the upstream's URL:
    its app serves an answer and records it where ``Recording`` says."""
    from proxy_harness import ProxyServer

    monkeypatch.chdir(here)
    text = script(block("docs/proxy.md", "from adapters.proxy import Limits, ProxyConfig, "
                        "Recording, certificate_source, create_app"),
                  {"http://127.0.0.1:8000/v1": upstream.base_url})  # fmt: skip
    names: dict[str, object] = {}
    exec(compile(text, "<docs/proxy.md>", "exec"), names)
    config = names["config"]
    assert config.limits.max_body_bytes == 1024 * 1024  # type: ignore[attr-defined]
    assert config.limits.max_answer_tokens == 16_384  # type: ignore[attr-defined]
    with ProxyServer(config) as proxy:  # type: ignore[arg-type]
        client = openai.OpenAI(base_url=proxy.base_url, api_key="unused", max_retries=0)
        answer = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "Gold?"}]
        )
    assert answer.model_extra["liftguard"]["state"] == "certified"  # type: ignore[index]
    (recording,) = (here / "traces").glob("chat-*.jsonl")
    assert json.loads(recording.read_text().splitlines()[0])["answer"] == "Au."


def test_proxy_feedback_with_curl(upstream: SSEServer, here: Path) -> None:
    """A label of a certified answer, sent with the page's curl command, reaches the
    certificate's live risk monitor; the reply has the fields the page shows."""
    cert = StaticCertificate(Certificate.load(CERT), "chat@production=v2")
    key = ("$ curl -s http://127.0.0.1:8080/v1/liftguard/feedback -H "
           "'content-type: application/json' \\")  # fmt: skip
    shown = block("docs/proxy.md", key)
    with running_proxy(upstream.base_url, certificate=cert) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="unused", max_retries=0)
        answer = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "Gold?"}]
        )
        answer_id = answer.model_extra["liftguard"]["request_id"]
        text = script(shown, {"http://127.0.0.1:8080": proxy.url,
                              "lg-3f9c0a1b2c3d4e5f6a7b": answer_id})  # fmt: skip
        done = subprocess.run(["bash", "-c", text], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    reply, sample = json.loads(done.stdout), json.loads(output(shown)[0])
    assert reply.keys() == sample.keys()
    assert (reply["id"], reply["request_id"], reply["correct"]) == (answer_id, answer_id, False)
    assert (reply["certificate"], reply["labels"], reply["errors"]) == (sample["certificate"], 1, 1)


def test_proxy_ask_py(upstream: SSEServer, here: Path) -> None:
    """The page's ``ask.py`` through a proxy in observe mode (as in the recipe): one answer
    blocked, two certified."""
    (here / "ask.py").write_text(block("docs/proxy.md", "# ask.py BASE_URL QUESTIONS.jsonl").text)
    questions = ["Gold?", BLOCKED_QUESTION, "Silver?"]
    (here / "questions.jsonl").write_text("".join(json.dumps({"question": q}) + "\n"
                                                  for q in questions))  # fmt: skip
    cert = StaticCertificate(Certificate.load(CERT), "chat@production=v1")
    with running_proxy(upstream.base_url, certificate=cert, mode="observe") as proxy:
        done = subprocess.run(
            [sys.executable, "ask.py", proxy.base_url, "questions.jsonl"], cwd=here,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    tally = "{'chat@production=v1 certified': 2, 'chat@production=v1 blocked': 1}\n"
    assert done.stdout == tally


def test_fleet_serve_command(upstream: SSEServer, here: Path) -> None:
    """The fleet page's replica: its certificate from an S3 store (moto's server), its
    answers and labels on a Redis server (Valkey), as written but for the URLs."""
    valkey = ValkeyProcess().start()
    try:
        with moto_s3("certs") as (_, store, _):
            put = f"liftguard skeleton --store {store} put chat --certificate cert.json"
            done = subprocess.run(
                ["bash", "-c", f"{put} --promote production"], cwd=here, env=script_env(),
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            key = ('liftguard serve --upstream http://llm:8000/v1 --certificate '
                   '"s3://certs#chat@production" \\')  # fmt: skip
            text = script(block("docs/fleet.md", key), {
                "http://llm:8000/v1": upstream.base_url, "s3://certs": store,
                "redis://redis:6379/0": valkey.url,
            })  # fmt: skip
            (command,) = commands(text)
            printed, verdict = serve_once(command, here)
        keys = redis.Redis.from_url(valkey.url).keys("*")  # the fleet's state, namespaced
    finally:
        valkey.close()
    assert verdict["state"] == "certified" and verdict["certificate"] == "chat@production=v1"
    assert "(buffered; *: chat@production=v1)" in printed, printed
    assert keys and all(b"chat" in k for k in keys), keys


def test_recording_parquet_to_s3(
    upstream: SSEServer, here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's recording to object storage, on moto's S3 server: the answer is in a
    Parquet object under the prefix once the proxy has stopped, and nothing is left in
    its spool (the default one, under ``$XDG_STATE_HOME``)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(here / "state"))
    with moto_s3("my-bucket") as (endpoint, prefix, options):
        import s3fs  # (moto_s3 skips without it)

        key = '$ pip install "liftguard[serve,s3,columnar]"'
        text = script(block("docs/proxy.md", key), {
            "http://127.0.0.1:8000/v1": upstream.base_url, "s3://my-bucket/recordings": prefix,
            "https://s3.example.com": endpoint,
        })  # fmt: skip
        (command,) = commands(text)
        _, verdict = serve_once(command, here)
        objects = s3fs.S3FileSystem(**options).find(prefix)
    assert verdict["state"] == "certified"
    assert len(objects) == 1 and objects[0].endswith(".parquet"), objects
    (spool,) = (here / "state" / "liftguard" / "record-spool").iterdir()
    assert list(spool.iterdir()) == []
