"""A certificate version's live risk monitor across swaps: a new version starts a fresh
monitor and refuses labels of the old one's answers; a version that comes back (a
rollback) gets its own monitor back, labels included."""

from __future__ import annotations

import logging

import httpx
import pytest
from proxy_harness import Upstream, metric, running_proxy
from test_proxy_feedback import CLEAN, ask, calibrated, error, label, request_id, scrape

from adapters._serving._certs import CertificateSource
from guardrail import Certificate


class Swappable(CertificateSource):
    """A source whose next refresh swaps in another certificate (as a promoted alias does)."""

    def __init__(self, first: Certificate) -> None:
        self.pair = (first, "chat@production=v1")
        self.next: tuple[Certificate, str] | None = None

    def current(self) -> tuple[Certificate, str]:
        return self.pair

    def refresh(self) -> bool:
        if self.next is None:
            return False
        self.pair, self.next = self.next, None
        return True

    def describe(self) -> str:
        return "swappable"


async def test_a_new_certificate_version_starts_a_new_monitor(
    upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    source = Swappable(calibrated())
    caplog.set_level(logging.INFO, logger="adapters._risk._risk_watch")
    with running_proxy(upstream.base_url, certificate=source) as proxy:
        async with httpx.AsyncClient(timeout=30) as client:
            old = request_id(await ask(client, proxy, upstream, CLEAN))
            pending = request_id(await ask(client, proxy, upstream, CLEAN))
            assert (await label(client, proxy, old, False)).status_code == 200
            source.next = (calibrated(risk=0.2), "chat@production=v2")
            assert proxy.call(proxy.proxy.refresh_certificates()) == {"*": True}
            late = await label(client, proxy, pending, True)
            new = request_id(await ask(client, proxy, upstream, CLEAN))
            fresh = await label(client, proxy, new, True)
            text = await scrape(client, proxy)
    assert error(late) == (409, "certificate_changed")
    assert fresh.json()["labels"] == 1 and fresh.json()["certificate"] == "chat@production=v2"
    v1 = {"model": "*", "certificate": "chat@production=v1"}
    v2 = {"model": "*", "certificate": "chat@production=v2"}
    assert metric(text, "liftguard_risk_labels", **v1) is None
    assert metric(text, "liftguard_risk_labels", **v2) == 1.0
    assert metric(text, "liftguard_risk_target", **v2) == 0.2
    lines = [r.getMessage() for r in caplog.records if r.name == "adapters._risk._risk_watch"]
    assert any("v1 -> chat@production=v2: a new risk monitor" in m and "took 1 labels" in m
               for m in lines), lines  # fmt: skip


async def test_a_version_that_comes_back_gets_its_monitor_back(
    upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    source = Swappable(calibrated())
    v1_pair = source.pair
    caplog.set_level(logging.INFO, logger="adapters._risk._risk_watch")
    with running_proxy(upstream.base_url, certificate=source) as proxy:
        async with httpx.AsyncClient(timeout=30) as client:
            answers = [request_id(await ask(client, proxy, upstream, CLEAN)) for _ in range(4)]
            for answer in answers[:3]:
                assert (await label(client, proxy, answer, True)).status_code == 200
            source.next = (calibrated(risk=0.2), "chat@production=v2")
            assert proxy.call(proxy.proxy.refresh_certificates()) == {"*": True}
            on_v2 = await label(client, proxy, answers[3], True)
            source.next = v1_pair  # rolled back: v1 is in force again
            assert proxy.call(proxy.proxy.refresh_certificates()) == {"*": True}
            back = await label(client, proxy, answers[3], False)  # certified by v1: its label
            again = await label(client, proxy, answers[0], True)
            text = await scrape(client, proxy)
    assert error(on_v2) == (409, "certificate_changed")
    assert back.status_code == 200
    assert (back.json()["certificate"], back.json()["labels"]) == ("chat@production=v1", 4)
    assert back.json()["errors"] == 1
    assert error(again) == (409, "duplicate_feedback")
    v1 = {"model": "*", "certificate": "chat@production=v1"}
    assert metric(text, "liftguard_risk_labels", **v1) == 4.0
    lines = [r.getMessage() for r in caplog.records if r.name == "adapters._risk._risk_watch"]
    assert any("v2 -> chat@production=v1: its risk monitor back (3 labels)" in m
               for m in lines), lines  # fmt: skip
