"""Fixtures of the fleet tests: a real Valkey server of their own (``valkey_process.py``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from proxy_harness import Upstream, calibrated_certificate, scripted_upstream
from valkey_process import ValkeyProcess

_PROXY_TESTS = str(Path(__file__).resolve().parents[1] / "proxy")
if _PROXY_TESTS not in sys.path:  # (the fleet tests run test_proxy_cli's ServeProcess)
    sys.path.insert(0, _PROXY_TESTS)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    """The proxy tests' scripted SSE upstream."""
    with scripted_upstream() as srv:
        yield srv


@pytest.fixture
def valkey() -> Iterator[ValkeyProcess]:
    """A Valkey server on a free port, started for the test and removed after it."""
    server = ValkeyProcess().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def cert_file(tmp_path: Path) -> Path:
    """A calibrated certificate (risk 0.1) in a file, for ``liftguard serve``."""
    path = tmp_path / "cert.json"
    calibrated_certificate(0.1).save(path)
    return path
