"""A real LiteLLM proxy process (``litellm --config``) in front of the scripted SSE upstream.

:func:`running_litellm` writes a ``config.yaml`` (and the certificate file it names) into a
directory, starts ``litellm --config config.yaml --port P`` as a child process with a random
master key, offline (no model price list fetched, no telemetry), and waits for
``/health/liveliness``. Its models all point at one upstream (the scripted server of
``sse_server.py``, whose replies a test scripts per question):

- ``plain``: no guardrail (LiteLLM alone);
- ``guarded`` / ``passthrough`` / ``refusal``: the liftguard guardrail attached to the model
  (LiteLLM's model-level ``guardrails``), buffered with ``on_block: error``, passthrough with
  ``on_block: error``, buffered with ``on_block: refusal``.

The certificate is the proxy tests' (``tests/proxy_harness.py``): a token at ``GOOD``
passes, one at ``BAD`` blocks at once, and a clean answer is certified only at its end; its
generation context sets ``temperature=0`` (filled in where a client leaves it unset).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
from proxy_harness import make_certificate
from sse_server import Record, Reply, SSEServer

from guardrail import Certificate, GenerationContext

__all__ = [
    "GUARDRAILS",
    "OFFLINE_ENV",
    "LiteLLM",
    "ScriptedUpstream",
    "blocked_verdict",
    "running_litellm",
    "start_outcome",
    "write_config",
]

OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # the bundled price list, not a download
    "LITELLM_OFFLINE_MODE": "true",
    "LITELLM_TELEMETRY_DISABLED": "true",
    "LITELLM_DONT_SHOW_FEEDBACK_BOX": "true",
}
"""What keeps a LiteLLM process (and ``import litellm``) off the network."""

GUARDRAILS = {
    "guarded": {"guard_mode": "buffered", "on_block": "error"},
    "passthrough": {"guard_mode": "passthrough", "on_block": "error"},
    "refusal": {"guard_mode": "buffered", "on_block": "refusal"},
}
"""Model name -> the liftguard guardrail settings attached to it."""
CONTEXT = GenerationContext(temperature=0.0)
START_TIMEOUT_S = 600.0
"""Only a hung start reaches it: LiteLLM imports for 10-20 s on an idle 2-core machine and
far longer on a starved one; a process that exits is reported at once."""


class ScriptedUpstream(SSEServer):
    """The scripted SSE server answering each request by its last user message
    (``script[question]``; a stream of ``default`` otherwise)."""

    def __init__(self) -> None:
        super().__init__()
        self.script: dict[str, Reply] = {}
        self.default: Reply | None = None
        self.responder = self._answer

    def _answer(self, body: dict[str, Any]) -> Reply:
        question = body["messages"][-1]["content"]
        reply = self.script.get(question, self.default)
        assert reply is not None, f"no scripted reply for {question!r}"
        return reply

    def request(self, question: str, timeout: float = 10.0) -> Record:
        """The last request that asked ``question``, once the server stopped serving it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                found = [r for r in self.records if r.body["messages"][-1]["content"] == question]
            if found:
                assert found[-1].done.wait(max(deadline - time.monotonic(), 0.1))
                return found[-1]
            time.sleep(0.02)
        raise AssertionError(f"the upstream never got {question!r}")


@dataclass
class LiteLLM:
    process: subprocess.Popen[bytes]
    base_url: str
    key: str
    log: Path


def write_config(
    directory: Path,
    upstream: str,
    certificate: Certificate,
    guardrails: Mapping[str, Mapping[str, Any]],
    *,
    timeout_s: float = 3.0,
    default_on: Mapping[str, Mapping[str, Any]] | None = None,
    callbacks: Sequence[str] = (),
) -> Path:
    """``config.yaml`` (and ``cert.json``, ``certificate``) in ``directory``: a ``plain``
    model, and one model per entry of ``guardrails`` with the liftguard guardrail attached
    (``guardrails[name]``: its settings; ``certificate`` defaults to ``cert.json``), all of
    them in front of ``upstream``. ``default_on``: guardrails attached to no model but
    ``default_on: true`` (they guard every request, ``plain`` included); ``callbacks``:
    LiteLLM's ``litellm_settings.callbacks`` (``prometheus`` serves ``/metrics``)."""
    certificate.save(directory / "cert.json")
    lines = ["model_list:"]
    for name in ("plain", *guardrails):
        lines += [
            f"  - model_name: {name}",
            "    litellm_params:",
            "      model: openai/gpt-test",
            f"      api_base: {upstream}",
            "      api_key: upstream-key",
            f"      timeout: {timeout_s}",
            f"      stream_timeout: {timeout_s}",
        ]
        if name != "plain":
            lines.append(f"      guardrails: [lg-{name}]")
    lines.append("guardrails:")
    every = [(name, settings, False) for name, settings in guardrails.items()]
    every += [(name, settings, True) for name, settings in (default_on or {}).items()]
    for name, settings, on in every:
        settings = {"certificate": "cert.json", **settings}
        lines += [
            f"  - guardrail_name: lg-{name}",
            "    litellm_params:",
            "      guardrail: adapters.litellm.LiftGuardGuardrail",
            "      mode: [pre_call, post_call]",
            f"      default_on: {'true' if on else 'false'}",
            *(f"      {key}: {value}" for key, value in settings.items()),
        ]
    lines += [
        "litellm_settings:",
        "  num_retries: 0",
        *([f"  callbacks: [{', '.join(callbacks)}]"] if callbacks else []),
        "router_settings:",
        "  num_retries: 0",
        "general_settings:",
        "  master_key: os.environ/LITELLM_MASTER_KEY",
    ]
    path = directory / "config.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def blocked_verdict(exc: openai.APIError) -> dict[str, Any]:
    """The verdict of a block: ``error.provider_specific_fields.error.liftguard``, in a JSON
    body, or in the server-sent event LiteLLM sends as the body of an HTTP error."""
    body: Any = exc.body
    if isinstance(body, str):  # HTTP 422 whose body is LiteLLM's error event
        body = json.loads(body.split("data: ", 1)[1].split("\n", 1)[0])["error"]
    assert isinstance(body, dict), body
    assert body["type"] == "liftguard_blocked"
    error = body["provider_specific_fields"]["error"]
    assert error["type"] == "liftguard_blocked" and error["code"] == error["liftguard"]["cause"]
    verdict: dict[str, Any] = error["liftguard"]
    return verdict


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _alive(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health/liveliness", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def _started(
    config: Path,
    timeout_s: float = START_TIMEOUT_S,
    args: Sequence[str] = (),
    env_extra: Mapping[str, str] | None = None,
) -> Iterator[LiteLLM | int]:
    """``litellm --config config [args]`` (offline, a random master key, a free port, with
    ``env_extra`` in its environment), once it serves (a :class:`LiteLLM`) or exits (its
    exit code); stopped when the block ends."""
    executable = shutil.which("litellm", path=str(Path(sys.executable).parent))
    assert executable is not None, "the litellm command is not installed next to python"
    key = f"sk-{secrets.token_hex(24)}"
    env = {**os.environ, **OFFLINE_ENV, "LITELLM_MASTER_KEY": key, "NO_PROXY": "127.0.0.1",
           **(env_extra or {})}  # fmt: skip
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = config.parent / "litellm.log"
    command = [executable, "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
               *args]  # fmt: skip
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command, cwd=config.parent, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + timeout_s
        while process.poll() is None and not _alive(url):
            assert time.monotonic() < deadline, "LiteLLM neither served nor exited"
            time.sleep(0.2)
        code = process.poll()
        yield LiteLLM(process, f"{url}/v1", key, log) if code is None else code
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def start_outcome(config: Path, timeout_s: float = START_TIMEOUT_S) -> tuple[int | None, str]:
    """Start ``litellm --config config`` and wait until it serves or exits: ``(None, log)``
    if it serves (then it is stopped), else ``(exit code, log)``."""
    with _started(config, timeout_s) as started:
        code = None if isinstance(started, LiteLLM) else started
    return code, (config.parent / "litellm.log").read_text(errors="replace")


@contextlib.contextmanager
def running_litellm(
    directory: Path,
    upstream: str,
    *,
    certificate: Certificate | None = None,
    guardrails: Mapping[str, Mapping[str, Any]] = GUARDRAILS,
    timeout_s: float = 3.0,
    default_on: Mapping[str, Mapping[str, Any]] | None = None,
    callbacks: Sequence[str] = (),
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> Iterator[LiteLLM]:
    """``litellm --config`` (:func:`write_config`; by default the test certificate and
    :data:`GUARDRAILS`) in ``directory`` until the block ends (then terminated); ``args``:
    more of its command line (``--num_workers 2``), ``env``: more of its environment."""
    certificate = make_certificate(context=CONTEXT) if certificate is None else certificate
    config = write_config(
        directory, upstream, certificate, guardrails, timeout_s=timeout_s,
        default_on=default_on, callbacks=callbacks,
    )  # fmt: skip
    with _started(config, args=args, env_extra=env) as started:
        if not isinstance(started, LiteLLM):
            tail = (directory / "litellm.log").read_text(errors="replace")[-3000:]
            raise AssertionError(f"LiteLLM did not start (exit {started}):\n{tail}")
        yield started
