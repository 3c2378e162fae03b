"""Certificates from a skeleton store: ``promote`` reaches new requests without a restart,
requests in flight keep the certificate they started with; replicas share one S3 store.

Deterministic: the upstream's responder holds request A (already past the point
where the proxy took its certificate) on a ``threading.Event`` until the test
has promoted v2, refreshed the proxy and served request B.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from proxy_harness import GOOD, ROLE, STOP, Upstream, make_certificate, running_proxy, tokens
from s3_server import moto_s3
from sse_server import Reply

from adapters._serving._certs import StoreCertificate
from adapters.proxy import certificate_source
from skeleton_store import SkeletonStore

CLEAN = [ROLE, *tokens([GOOD] * 5), STOP]
LENIENT, STRICT = 4.0, 10.8  # the clean answer's lifts are 10.77: certified at 4, not at 10.8


def _publish(store: SkeletonStore, tau: float) -> int:
    version = store.put("chat", {}, kind="certificate", certificate=make_certificate(tau))
    store.promote("chat", version.version)
    return version.version


async def _ask(base_url: str, question: str) -> dict[str, Any]:
    """The ``liftguard`` verdict of a non-streamed answer, certified or not."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0)
    try:
        answer = await client.chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": question}]
        )
        return dict((answer.model_extra or {})["liftguard"])
    except openai.UnprocessableEntityError as exc:
        assert isinstance(exc.body, dict)
        return dict(exc.body["liftguard"])
    finally:
        await client.close()


async def test_promote_reaches_new_requests_and_in_flight_ones_keep_theirs(
    upstream: Upstream, tmp_path: Path
) -> None:
    store = SkeletonStore(tmp_path / "store")
    _publish(store, LENIENT)
    arrived, release = threading.Event(), threading.Event()

    def responder(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["content"] == "A":
            arrived.set()
            assert release.wait(30)
        return Reply(list(CLEAN), delay=0.0)

    upstream.responder = responder
    source = certificate_source(f"{tmp_path / 'store'}#chat@production")
    assert isinstance(source, StoreCertificate)
    with running_proxy(upstream.base_url, certificate=source) as proxy:
        in_flight = asyncio.create_task(_ask(proxy.base_url, "A"))
        assert await asyncio.to_thread(arrived.wait, 30)  # A holds v1 and waits upstream
        _publish(store, STRICT)
        assert proxy.call(proxy.proxy.refresh_certificates()) == {"*": True}
        new = await _ask(proxy.base_url, "B")
        release.set()
        old = await in_flight
        assert proxy.call(proxy.proxy.refresh_certificates()) == {"*": False}
    assert (old["certificate"], old["state"], old["tau"]) == ("chat@production=v1", "certified", 4)
    assert (new["certificate"], new["state"], new["tau"]) == ("chat@production=v2", "blocked", 10.8)


async def test_a_rollback_reaches_new_requests(
    upstream: Upstream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SkeletonStore(tmp_path / "store")
    _publish(store, LENIENT)
    _publish(store, STRICT)
    upstream.responder = lambda body: Reply(list(CLEAN), delay=0.0)
    caplog.set_level(logging.WARNING)  # what `liftguard serve` shows by default
    with running_proxy(
        upstream.base_url, certificate=certificate_source(f"{tmp_path / 'store'}#chat")
    ) as proxy:
        before = await _ask(proxy.base_url, "q")
        assert not _swaps(caplog)
        store.rollback("chat")
        proxy.call(proxy.proxy.refresh_certificates())
        after = await _ask(proxy.base_url, "q")
        proxy.call(proxy.proxy.refresh_certificates())  # nothing moved: nothing logged
    assert (before["certificate"], before["state"]) == ("chat@production=v2", "blocked")
    assert (after["certificate"], after["state"]) == ("chat@production=v1", "certified")
    assert _swaps(caplog) == [
        "model *: certificate swapped, chat@production=v2 -> chat@production=v1"
    ]


def _swaps(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The certificate swaps logged at WARNING or above."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and "certificate swapped" in r.getMessage()
    ]


# --- several replicas on one S3 store --------------------------------------------------------

@pytest.fixture
def s3_store() -> Iterator[tuple[str, dict[str, Any]]]:
    """A fresh bucket prefix on moto's S3 server (127.0.0.1) and its storage options."""
    with moto_s3("liftguard-proxy") as (_, url, options):
        yield url, options


async def test_replicas_on_one_s3_store_pick_up_a_promotion(
    upstream: Upstream, s3_store: tuple[str, dict[str, Any]]
) -> None:
    url, options = s3_store
    store = SkeletonStore(url, storage_options=options)
    _publish(store, LENIENT)
    upstream.responder = lambda body: Reply(list(CLEAN), delay=0.0)

    def replica() -> Any:
        source = certificate_source(f"{url}#chat@production", storage_options=options)
        return running_proxy(upstream.base_url, certificate=source)

    with replica() as one, replica() as two:
        before = [await _ask(p.base_url, "q") for p in (one, two)]
        _publish(store, STRICT)  # e.g. from a CI job: `liftguard skeleton --store s3://... promote`
        for p in (one, two):
            assert p.call(p.proxy.refresh_certificates()) == {"*": True}
        after = [await _ask(p.base_url, "q") for p in (one, two)]
    assert [v["certificate"] for v in before] == ["chat@production=v1"] * 2
    assert [v["certificate"] for v in after] == ["chat@production=v2"] * 2
    assert [v["state"] for v in after] == ["blocked"] * 2
