"""``liftguard clear-alarm``: an operator turns off, fleet-wide, an alarm kept on after the
fleet lost its state, with the replicas' own ``serve`` arguments (which name the fleet and
the certificate version as the replicas do); every replica then reports it off."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from markdown_blocks import block, script, script_env
from test_fleet_identity import finished, proxy_watch
from test_fleet_watch import CERT
from valkey_process import ValkeyProcess

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = "http://llm-clear:8000/v1"


def clear_alarm(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "adapters.cli", "clear-alarm", *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.fixture
def cert_path(tmp_path: Path) -> Path:
    path = tmp_path / "cert.json"
    CERT.save(path)
    return path


async def test_an_operator_clears_a_latched_alarm_fleet_wide(
    valkey: ValkeyProcess, cert_path: Path
) -> None:
    """The fleet page's command, as written but for its URLs (the certificate a file)."""
    a, b = (proxy_watch(valkey.url, UPSTREAM, namespace="chat") for _ in range(2))
    key = "liftguard clear-alarm --upstream http://llm:8000/v1 --certificate "
    text = script(block("docs/fleet.md", key + '"s3://certs#chat@production" \\'), {
        "http://llm:8000/v1": UPSTREAM, '"s3://certs#chat@production"': str(cert_path),
        "redis://redis:6379/0": valkey.url,
    })  # fmt: skip

    def clear() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", text], cwd=ROOT, env=script_env(), capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip

    try:
        done = clear()  # nothing to clear yet
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("liftguard clear-alarm: model *, certificate cert.json#")
        assert done.stdout.endswith(": alarm kept from a lost test: none\n")
        ids = [f"c{i}" for i in range(80)]
        for rid in ids:
            a.take("*", finished(rid))
        await a.drain()
        for rid in ids:
            if (await a.alabel(rid, False))["alarm"]:
                break
        await b.refresh()
        assert b.health()["*"]["alarm"]
        record = a.store.key("m", a._watches["*"].version)
        assert valkey.command("DEL", record).startswith(b":1")  # the fleet loses its state
        for watch in (a, b):
            await watch.refresh()
            assert watch.health()["*"]["alarm"] and watch.health()["*"]["losses"] == 1
        done = clear()
        assert done.returncode == 0, done.stderr
        assert "alarm kept from a lost test: cleared" in done.stdout
        for watch in (a, b):
            await watch.refresh()
            assert watch.health()["*"]["alarm"] is False
        again = clear()
        assert again.returncode == 0 and "test: none" in again.stdout
    finally:
        await a.aclose()
        await b.aclose()


def test_clear_alarm_refuses_without_a_fleet_or_an_entry(
    valkey: ValkeyProcess, cert_path: Path
) -> None:
    base = ["--upstream", UPSTREAM, "--certificate", str(cert_path)]
    done = clear_alarm(*base)
    assert done.returncode == 2 and "give --redis URL" in done.stderr
    done = clear_alarm(*base, "--redis", valkey.url, "--model", "other", "--port", "9")
    assert done.returncode == 0, done.stderr  # the default entry serves an unmapped model
    assert done.stdout.startswith("liftguard clear-alarm: model *, ")
    gone = ValkeyProcess()  # a port nothing listens on
    done = clear_alarm(*base, "--redis", gone.url, "--fleet-connect-timeout", "1")
    assert done.returncode == 1 and "fleet store" in done.stderr
