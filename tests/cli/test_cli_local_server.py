"""``liftguard local-server``: the bundled model behind a real OpenAI-compatible endpoint,
as a separate process, talked to by the real openai client."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import openai
import pytest

pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')


@pytest.mark.parametrize(("stop", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_local_server_answers_with_logprobs_and_stops_on_a_signal(stop: int, status: int) -> None:
    # Ctrl-C in a terminal: a shell that starts the suite as a background job hands its
    # children SIGINT ignored, and a child with SIGINT ignored never sees the interrupt
    main = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from adapters.cli import main; sys.exit(main(sys.argv[1:]))")  # fmt: skip
    cmd = [sys.executable, "-c", main, "local-server", "--port", "0"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed once the port is bound
        assert line.startswith("liftguard local-server: http://127.0.0.1:"), line
        base_url = line.split()[2]
        client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
        assert [m.id for m in client.models.list()] == ["SmolLM2-135M-Instruct.Q4_1.gguf"]
        stream = client.chat.completions.create(
            model="smollm2", stream=True, logprobs=True, top_logprobs=5, max_tokens=8,
            messages=[{"role": "user", "content": "What is the capital of France?"}],
        )  # fmt: skip
        chunks = list(stream)
        tokens = [t for c in chunks if c.choices and c.choices[0].logprobs
                  for t in c.choices[0].logprobs.content or []]  # fmt: skip
        finish = [c.choices[0].finish_reason for c in chunks if c.choices]
        assert tokens and all(len(t.top_logprobs) == 5 for t in tokens)
        assert all(t.logprob <= 0.0 for t in tokens)
        assert finish[-1] in ("stop", "length")
    finally:
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == status
    if stop == signal.SIGINT:
        assert err.strip().splitlines()[-1] == "liftguard local-server: error: interrupted"
