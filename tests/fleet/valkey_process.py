"""The real Valkey (or Redis) server the fleet tests start, kill and restart themselves:
the benchmarks' helper (``benchmarks/_valkey.py``), a test skipped where no server binary
is installed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_BENCHMARKS = str(Path(__file__).resolve().parents[2] / "benchmarks")
if _BENCHMARKS not in sys.path:
    sys.path.insert(0, _BENCHMARKS)

from _valkey import NoServerBinary, ValkeyServer, free_port, server_binary  # noqa: E402

__all__ = ["ValkeyProcess", "free_port", "server_binary"]


class ValkeyProcess(ValkeyServer):
    """:class:`ValkeyServer`; the test is skipped where there is no server binary."""

    def __init__(self, port: int | None = None) -> None:
        try:
            super().__init__(port)
        except NoServerBinary as exc:
            pytest.skip(str(exc))
