"""LiteLLM's whole (non-streamed) answers and an upstream that never ends one.

LiteLLM 1.110.2 reads a non-streamed answer's body to its end before any hook of the guardrail
sees it, so the guardrail's token cap (``max_answer_tokens``) cannot stop an upstream whose
body never ends: unguarded, LiteLLM keeps reading, holding what it read, until its ``timeout``
between two reads. The guardrail sends each attempt of a guarded whole answer with a client
that reads at most ``max_answer_bytes`` of the body (``adapters/_litellm/_capped.py``), as
``liftguard serve`` cuts an answer at its own ``max_answer_bytes``.

The upstream here answers a chat completion with a ``chat.completion`` whose ``content`` never
ends, written as fast as it is read, up to :data:`WRITTEN` bytes, then waits for the client to
leave (any other request, such as LiteLLM's ``GET /v1/models`` at start, gets a 404): the
guard must have closed the connection long before :data:`CUT` bytes, and the client gets the
blocked answer's error, never a completion.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from litellm_harness import running_litellm
from proxy_harness import make_certificate
from scripted import CONTEXT, HAS_LITELLM

if not HAS_LITELLM:
    pytest.skip(
        'litellm is not installed (pip install "liftguard[litellm]")', allow_module_level=True
    )

PIECE = b"w " * 32_768
"""64 KiB of the answer's text (32,768 tokens of one word each)."""
WRITTEN = 32 * 1024 * 1024
"""The most the upstream writes of one answer; then it waits for the client to leave."""
CAP = 1024 * 1024
"""The guardrail's ``max_answer_bytes`` here."""
CUT = 12 * 1024 * 1024
"""Past :data:`CAP`, with room for the sockets' buffers (a few MiB on loopback)."""
HEAD = (
    b'{"id": "chatcmpl-endless", "object": "chat.completion", "created": 1, "model": "gpt-test",'
    b' "choices": [{"index": 0, "finish_reason": "stop", "logprobs": null,'
    b' "message": {"role": "assistant", "content": "'
)


class Endless:
    """A loopback upstream that answers every chat completion with a body that never ends
    (HTTP chunked): what it wrote of each answer once the client left is in :attr:`written`.
    Any other request gets a 404."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.base_url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.written: list[int] = []
        self.left = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        sent = 0
        with conn:
            try:
                if not _read_request(conn).endswith(b"/chat/completions"):
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    return
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n" + _chunk(HEAD)
                )
                while sent < WRITTEN:
                    conn.sendall(_chunk(PIECE))
                    sent += len(PIECE)
                while conn.recv(65_536):  # the client's side, until it leaves
                    pass
            except OSError:
                pass
        self.written.append(sent)
        self.left.set()

    def close(self) -> None:
        self.sock.close()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _read_request(conn: socket.socket) -> bytes:
    """Read one HTTP request (its head and its ``Content-Length`` body): its path."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65_536)
        if not more:
            raise OSError("the client left")
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        more = conn.recv(65_536)
        if not more:
            raise OSError("the client left")
        body += more
    return head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""


@contextlib.contextmanager
def endless() -> Iterator[Endless]:
    server = Endless()
    try:
        yield server
    finally:
        server.close()


def test_a_whole_answer_that_never_ends_is_cut_at_the_byte_cap(tmp_path: Path) -> None:
    with endless() as upstream, running_litellm(
        tmp_path, upstream.base_url, certificate=make_certificate(context=CONTEXT),
        guardrails={"guarded": {"guard_mode": "buffered", "max_answer_tokens": 64,
                                "max_answer_bytes": CAP}},
    ) as litellm:  # fmt: skip
        client = openai.OpenAI(base_url=litellm.base_url, api_key=litellm.key, max_retries=0)
        with client, pytest.raises(openai.APIStatusError) as raised:
            client.chat.completions.create(
                model="guarded", messages=[{"role": "user", "content": "Go on forever."}],
                timeout=120,
            )  # fmt: skip
        assert upstream.left.wait(120), "LiteLLM never left the upstream"
    assert upstream.written and max(upstream.written) < CUT, upstream.written
    assert len(upstream.written) == 1, upstream.written  # asked once: no retry read it again
    error = raised.value
    assert error.status_code == 502
    assert "upstream-key" not in str(error.body) and "Traceback" not in str(error.body)
    body = error.body
    assert isinstance(body, dict), body
    detail = body["provider_specific_fields"]["error"]
    assert detail["code"] == "upstream_too_large"
    assert detail["liftguard"]["state"] == "blocked"
    assert detail["liftguard"]["cause"] == "over_token_limit"
    assert str(CAP) in detail["message"]
