"""The real Valkey (or Redis) server the fleet tests start, kill, restart, snapshot and
restore themselves: the benchmarks' server class (``benchmarks/valkey_server.py``), a test
skipped where no server binary is installed."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from benchmarks.valkey_server import NoServerBinary, ValkeyServer, free_port, server_binary

__all__ = ["ValkeyProcess", "free_port", "server_binary"]


class ValkeyProcess(ValkeyServer):
    """:class:`ValkeyServer`; the test is skipped where there is no server binary.
    :meth:`snapshot` saves the data now (``SAVE``) and returns it; :meth:`restart_from`
    kills the server and starts it on a snapshot (an older one: a stale restore), or on
    nothing."""

    def __init__(self, port: int | None = None) -> None:
        try:
            super().__init__(port)
        except NoServerBinary as exc:
            pytest.skip(str(exc))

    @property
    def _dump(self) -> Path:
        return Path(self.dir) / "dump.rdb"

    def command(self, *args: str) -> bytes:
        """One command over a socket of its own; the server's reply line."""
        parts = [f"*{len(args)}\r\n".encode()]
        for arg in args:
            parts.append(f"${len(arg.encode())}\r\n{arg}\r\n".encode())
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
            sock.sendall(b"".join(parts))
            return sock.recv(4096)

    def snapshot(self) -> bytes:
        assert self.command("SAVE").startswith(b"+OK")
        return self._dump.read_bytes()

    def restart_from(self, snapshot: bytes | None) -> None:
        self.kill()
        if snapshot is None:
            self._dump.unlink(missing_ok=True)
        else:
            tmp = self._dump.with_suffix(".tmp")
            tmp.write_bytes(snapshot)
            os.replace(tmp, self._dump)
        self.start()
