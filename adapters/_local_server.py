"""An OpenAI-compatible streaming endpoint in front of a :class:`LocalModel`.

``POST /v1/chat/completions`` with ``stream: true`` answers in the Chat
Completions server-sent-events format, with ``logprobs.content`` (token,
logprob, bytes, top_logprobs) for every token, so any OpenAI client -- and
liftguard's own OpenAI and LangChain adapters -- can be pointed at a local
model with ``base_url``. Loopback use (demos, tests); one request at a time.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ._local import LocalModel, smollm2_chat_prompt

__all__ = ["LocalChatServer"]

log = logging.getLogger(__name__)


def _prompt_from_messages(messages: list[dict[str, Any]]) -> str:
    """ChatML prompt (SmolLM2's template) from OpenAI-style messages."""
    system = next((m["content"] for m in messages if m.get("role") == "system"), None)
    user = [m["content"] for m in messages if m.get("role") == "user"]
    if not user:
        raise ValueError("no user message")
    return smollm2_chat_prompt(user[-1], system) if system else smollm2_chat_prompt(user[-1])


class _QuietServer(ThreadingHTTPServer):
    """A client that stops reading a stream early (a block closes it) is not an error."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            log.debug("client %s closed the connection", client_address)
            return
        super().handle_error(request, client_address)


class LocalChatServer:
    """``with LocalChatServer(model) as srv: ... srv.base_url`` (port 0 = a free port)."""

    def __init__(self, model: LocalModel, host: str = "127.0.0.1", port: int = 0) -> None:
        self.model = model
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                log.debug(format, *args)

            def do_POST(self) -> None:
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._error(404, "not found")
                    return
                try:
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                    prompt = _prompt_from_messages(body["messages"])
                except (ValueError, KeyError, TypeError) as exc:
                    self._error(400, f"bad request: {exc}")
                    return
                server._stream(self, body, prompt)

            def _error(self, code: int, message: str) -> None:
                data = json.dumps({"error": {"message": message, "type": "invalid_request_error"}})
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data.encode())

        self._httpd = _QuietServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> LocalChatServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _alt(self, token_id: int, logprob: float) -> dict[str, Any]:
        raw = self.model.token_bytes(token_id)
        return {
            "token": raw.decode("utf-8", errors="replace"),
            "logprob": logprob,
            "bytes": list(raw),
        }

    def _stream(self, h: BaseHTTPRequestHandler, body: dict[str, Any], prompt: str) -> None:
        want_lp = bool(body.get("logprobs"))
        top_n = int(body.get("top_logprobs") or 0)
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 24)
        created, model_name = int(time.time()), str(body.get("model", "local"))
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def send(obj: dict[str, Any] | str) -> None:
            data = obj if isinstance(obj, str) else json.dumps(obj)
            payload = f"data: {data}\n\n".encode()
            h.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            h.wfile.flush()

        def chunk(delta: dict[str, Any], logprobs: Any, finish: str | None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
            return {
                "id": "chatcmpl-local",
                "object": "chat.completion.chunk",
                "created": created,
                "model": model_name,
                "choices": [choice],
            }

        try:
            with self._lock:
                send(chunk({"role": "assistant", "content": ""}, None, None))
                n = 0
                for tok in self.model.generate(prompt, max_tokens=max_tokens):
                    n += 1
                    lp = None
                    if want_lp:
                        entry = self._alt(tok.token_id, tok.logprob)
                        entry["top_logprobs"] = [self._alt(i, v) for i, v in tok.top[:top_n]]
                        lp = {"content": [entry], "refusal": None}
                    send(chunk({"content": tok.text}, lp, None))
                # as OpenAI: "length" when the answer was cut at max_tokens
                send(chunk({}, None, "length" if n >= max_tokens else "stop"))
                send("[DONE]")
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            log.info("client closed the stream early")
