"""Fixtures of the fleet tests: a real Valkey server of their own (``valkey_process.py``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parents[1]
for _part in ("", "adapters", "proxy", "fleet"):  # ("": markdown_blocks, of the docs tests)
    if str(_TESTS / _part) not in sys.path:
        sys.path.insert(0, str(_TESTS / _part))

from proxy_harness import Upstream, calibrated_certificate, scripted_upstream  # noqa: E402
from valkey_process import ValkeyProcess  # noqa: E402


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
