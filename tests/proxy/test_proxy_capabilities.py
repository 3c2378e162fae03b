"""The proxy asks the upstream for what its certificate reads, and refuses a certificate
no Chat Completions upstream can feed before anything is sent.

Fitted certificates come from ``tests/fitted_certs.py`` (fitted on the
committed NQ-Open sample; they read 5 alternatives per token, and group ``local``
exact entropies). A refused certificate is the proxy's misconfiguration, not the
client's: HTTP 500 with ``liftguard_config_error``, and the upstream sees no request.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import httpx
import openai
import pytest
from fitted_certs import certificate
from proxy_harness import ROLE, STOP, Upstream, running_proxy, tokens
from sse_server import Reply

from adapters._proxy._app import Proxy
from adapters._proxy._config import ProxyConfig
from adapters._serving._prepare import check_upstream
from adapters.proxy import StaticCertificate, certificate_source
from guardrail import ConfigError, GenerationContext
from skeleton_store import SkeletonStore

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
CLEAN = [ROLE, *tokens([-0.05] * 5), STOP]  # 5 alternatives per token


def _source(group: str) -> StaticCertificate:
    return StaticCertificate(certificate(group, model_id="test-model"), f"fitted-{group}")


def test_check_upstream_states_what_the_upstream_must_carry() -> None:
    api = certificate("api")
    assert check_upstream(api, None).alternatives == 5
    assert check_upstream(api, 5).alternatives == 5
    with pytest.raises(
        ConfigError,
        match=r"asks for top_logprobs=4\) carries at most 4: start "
        r"the proxy with top_logprobs=5 or more",
    ):
        check_upstream(api, 4)
    with pytest.raises(ConfigError, match=r"group 'local'.*exact entropy.*never carries"):
        check_upstream(certificate("local"), None)


@pytest.mark.parametrize(
    ("group", "top_logprobs", "match"),
    [
        ("local", None, r"group 'local'\) reads the exact entropy .* the upstream's Chat "
                        r"Completions stream .* never carries"),
        ("api", 2, r"reads 5 alternatives .* carries at most 2: start the proxy with "
                   r"top_logprobs=5"),
    ],
)  # fmt: skip
def test_a_certificate_the_upstream_cannot_feed_is_refused_at_start(
    upstream: Upstream, group: str, top_logprobs: int | None, match: str
) -> None:
    config = ProxyConfig(
        upstream=upstream.base_url, certificate=_source(group), top_logprobs=top_logprobs
    )
    with pytest.raises(ConfigError, match=match):
        Proxy(config)
    assert upstream.records == []


async def test_a_promoted_certificate_the_upstream_cannot_feed_is_refused_per_request(
    upstream: Upstream, tmp_path: Path
) -> None:
    """A store alias can move to such a certificate while the proxy runs: each request
    is then refused before anything is sent upstream (HTTP 500), until it moves back."""
    store = SkeletonStore(tmp_path / "store")
    for group in ("api", "local"):
        cert = certificate(group, model_id="test-model")
        store.put("chat", {}, kind="certificate", certificate=cert)
    store.promote("chat", 1)
    upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    source = certificate_source(f"{tmp_path / 'store'}#chat@production")
    with running_proxy(upstream.base_url, certificate=source) as proxy:
        async with httpx.AsyncClient() as client:
            body = {"model": "test-model", "messages": MESSAGES, "stream": True}
            ok = await client.post(f"{proxy.base_url}/chat/completions", json=body)
            store.promote("chat", 2)
            assert proxy.call(proxy.proxy.refresh_certificates()) == {"*": True}
            resp = await client.post(f"{proxy.base_url}/chat/completions", json=body)
    assert ok.status_code == 200 and len(upstream.records) == 1
    assert resp.status_code == 500
    error = resp.json()["error"]
    assert (error["type"], error["code"]) == ("liftguard_config_error", "certificate_unsupported")
    assert error["message"].startswith("the proxy's certificate chat@production=v2 cannot guard")
    assert re.search(r"group 'local'\) reads the exact entropy", error["message"])
    assert len(upstream.records) == 1  # the refused request never reached the upstream


@pytest.mark.parametrize(("top_logprobs", "asked"), [(None, 20), (5, 5)])
async def test_a_fitted_certificate_gets_its_alternatives_and_certifies(
    upstream: Upstream, top_logprobs: int | None, asked: int
) -> None:
    upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    with running_proxy(
        upstream.base_url, certificate=_source("api"), top_logprobs=top_logprobs
    ) as proxy:
        client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
        completion = await client.chat.completions.create(model="test-model", messages=MESSAGES)
        await client.close()
    assert upstream.records[-1].body["top_logprobs"] == asked
    assert completion.choices[0].message.content == "The capital of France is"
    assert (completion.model_extra or {})["liftguard"]["state"] == "certified"


def _six_tokens() -> Reply:
    return Reply([ROLE, *tokens([-0.05] * 6), STOP], delay=0.0)


@pytest.mark.parametrize(("max_tokens", "certified"), [(None, False), (10, True)])
async def test_the_monitor_assumes_the_requests_own_token_limit(
    upstream: Upstream, max_tokens: int | None, certified: bool
) -> None:
    """The certificate's context holds answers to 4 tokens and the proxy fills that in;
    an upstream that sends more anyway gets the answer blocked at the 5th token
    (``over_token_limit``), while a request that asks for 10 gets a monitor that
    assumes 10 and judges the whole answer."""
    cert = replace(
        certificate("api", model_id="test-model"), context=GenerationContext(max_tokens=4)
    )
    upstream.replies.put(_six_tokens())
    body: dict[str, object] = {"model": "test-model", "messages": MESSAGES, "stream": False}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    with running_proxy(upstream.base_url, certificate=StaticCertificate(cert, "limit-4")) as proxy:
        async with httpx.AsyncClient() as client:
            resp = await client.post(f"{proxy.base_url}/chat/completions", json=body)
    assert upstream.records[-1].body["max_tokens"] == (max_tokens or 4)
    data = resp.json()
    if certified:
        assert resp.status_code == 200 and data["liftguard"]["state"] == "certified"
        assert data["choices"][0]["message"]["content"] == "The capital of France is Paris"
    else:
        assert data["error"]["code"] == "over_token_limit", data
