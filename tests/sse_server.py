"""A loopback server that speaks the OpenAI Chat Completions SSE format (shared by adapter tests).

The server (a ``ThreadingHTTPServer`` on 127.0.0.1, free port) replays a scripted
answer as ``data: {json}\\n\\n`` events in a chunked HTTP/1.1 body, ending with
``data: [DONE]``, one event per ``Reply.delay`` seconds. Before each write it
checks whether the client has closed the connection (the socket reads EOF) and
records it, so a test can tell that a BLOCK stopped the upstream request before
the answer was finished.

Tests that check the upstream close do not depend on timing: with
``Reply.hold_after=k`` the server sends ``k`` events and then waits (up to
``hold_timeout``) until the client closes the connection, so a client that
blocks at or before event ``k`` is always seen closing before the answer ends,
however loaded the machine is. ``done=False`` ends the body cleanly without
``[DONE]`` (a stream cut off mid-answer: the SDK ends its iteration silently);
``stall=True`` holds the connection open without sending more (a whole reply's: before
its body).

Replies come from ``server.replies`` (a queue, in request order), or, when
``server.responder`` is set, from ``responder(request_body)`` (for concurrent
requests whose answers depend on what they ask).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

__all__ = ["Record", "Reply", "SSEServer", "running_server"]


@dataclass
class Reply:
    events: list[Any] = field(default_factory=list)  # dict -> JSON; str -> raw data payload
    status: int = 200
    body: Any = None  # JSON body of a non-200 or non-streamed reply (then ``events`` is unused)
    delay: float = 0.005
    abort_after: int | None = None  # drop the connection after this many events
    hold_after: int | None = None  # after this many events, wait for the client to close
    hold_timeout: float = 30.0  # ... at most this long, then go on (the test then fails)
    done: bool = True  # end with ``data: [DONE]``; False: a clean close without it
    stall: bool = False  # with ``hold_after`` or ``body``: never go on (a stalled upstream)
    headers: dict[str, str] = field(default_factory=dict)  # sent with a non-200 reply
    raw: bytes | None = None  # a non-200 reply's body as it is (instead of ``body``)
    tail: bytes = b""  # raw bytes after the events (half an event); abort_after=len(events):
    # the connection then drops


@dataclass
class Record:
    path: str
    body: dict[str, Any]
    total: int
    sent: int = 0
    client_closed: bool = False
    done: threading.Event = field(default_factory=threading.Event)

    async def finished(self, timeout: float = 5.0) -> Record:
        """Wait (without blocking the event loop) until the server stopped serving it."""
        assert await asyncio.to_thread(self.done.wait, timeout), "server still streaming"
        return self


def peer_closed(sock: socket.socket) -> bool:
    """The client closed its side (EOF or reset); it sends nothing else mid-response."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def wait_closed(sock: socket.socket, reply: Reply) -> bool:
    """Wait until the client closes (True), or ``hold_timeout`` passes (False; a stalled
    reply waits the same way and then ends without a terminating chunk)."""
    deadline = time.monotonic() + reply.hold_timeout
    while time.monotonic() < deadline:
        select.select([sock], [], [], 0.05)
        if peer_closed(sock):
            return True
    if reply.stall:
        raise ConnectionResetError("stalled reply timed out")
    return False


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: SSEServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.loads(raw or b"{}")
        responder = self.server.responder
        reply = responder(body) if responder is not None else self.server.replies.get_nowait()
        rec = Record(self.path, body, len(reply.events))
        with self.server.lock:
            self.server.records.append(rec)
        try:
            self._serve(reply, rec)
        except (BrokenPipeError, ConnectionResetError):
            rec.client_closed = True
            self.close_connection = True
        finally:
            rec.done.set()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _serve(self, reply: Reply, rec: Record) -> None:
        if reply.status != 200 or reply.body is not None:
            if reply.stall and wait_closed(self.connection, reply):  # an answer never sent
                rec.client_closed = True
                self.close_connection = True
                return
            payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for i, event in enumerate(reply.events):
            if reply.hold_after == i and wait_closed(self.connection, reply):
                rec.client_closed = True
                self.close_connection = True
                return
            if reply.abort_after == i:  # abrupt disconnect: no terminating chunk
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if peer_closed(self.connection):
                rec.client_closed = True
                self.close_connection = True
                return
            data = event if isinstance(event, str) else json.dumps(event)
            self._chunk(f"data: {data}\n\n".encode())
            rec.sent += 1
            time.sleep(reply.delay)
        held = reply.hold_after is not None and reply.hold_after >= len(reply.events)
        if held and wait_closed(self.connection, reply):
            rec.client_closed = True
            self.close_connection = True
            return
        if reply.tail:
            self._chunk(reply.tail)
        if reply.abort_after == len(reply.events):
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if reply.done:
            self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class SSEServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # many concurrent clients connect at once

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.replies: queue.Queue[Reply] = queue.Queue()
        self.responder: Callable[[dict[str, Any]], Reply] | None = None
        self.records: list[Record] = []
        self.lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that hung up on a kept-alive connection is not a server failure
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def last(self, timeout: float = 5.0) -> Record:
        """The last request, once the server has stopped serving it (blocks the caller)."""
        rec = self.records[-1]
        assert rec.done.wait(timeout), "server still streaming"
        return rec


def chat_chunk(delta: dict[str, Any], logprobs: Any, finish: str | None = None) -> dict[str, Any]:
    """One ``chat.completion.chunk`` object of a streamed answer (choice 0)."""
    choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "gpt-test",
        "system_fingerprint": "fp_test",
        "choices": [choice],
    }


def token_entry(text: str, logprob: float, k: int = 5) -> dict[str, Any]:
    """A ``logprobs.content`` entry: the token and ``k`` top alternatives (itself first)."""
    raw = list(text.encode())
    top = [{"token": text, "logprob": logprob, "bytes": raw}]
    top += [{"token": f"alt{j}", "logprob": -5.0 - j, "bytes": None} for j in range(k - 1)]
    return {"token": text, "logprob": logprob, "bytes": raw, "top_logprobs": top}


def clean_answer(words: list[str], lp: float = -0.05, k: int = 5) -> Reply:
    """A complete answer: a role chunk, one chunk per word (logprob ``lp``, ``k``
    alternatives), then ``finish_reason="stop"``; sent at once."""
    events: list[Any] = [chat_chunk({"role": "assistant", "content": ""}, {"content": []})]
    events += [chat_chunk({"content": w}, {"content": [token_entry(w, lp, k)]}) for w in words]
    events.append(chat_chunk({}, None, "stop"))
    return Reply(events, delay=0.0)


ServerT = TypeVar("ServerT", bound=ThreadingHTTPServer)


@contextlib.contextmanager
def serving(srv: ServerT) -> Iterator[ServerT]:
    """``srv`` serving in a background thread until the block ends, then closed."""
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)


def running_server() -> contextlib.AbstractContextManager[SSEServer]:
    """An :class:`SSEServer` serving in a background thread until the block ends."""
    return serving(SSEServer())
