"""What the proxy does to requests and replies: non-streamed answers, logprobs asked
and stripped, the certificate's generation context, authentication, the model map,
``/v1/models``, ``/healthz``, ``/metrics`` and the JSON verdict lines."""

from __future__ import annotations

import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI
from proxy_harness import (
    BAD,
    GOOD,
    ROLE,
    STOP,
    Upstream,
    VerdictLines,
    make_certificate,
    running_proxy,
    tokens,
)
from sse_server import Reply

from adapters.proxy import Limits, StaticCertificate
from guardrail import GenerationContext

FULL = [GOOD, GOOD, GOOD, BAD, GOOD, GOOD, GOOD]
CLEAN = [ROLE, *tokens([GOOD] * 5), STOP]
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def _client(base_url: str, key: str = "sk-client") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)


# --- non-streamed requests -------------------------------------------------------------------


async def test_a_non_streamed_answer_is_decided_on_the_whole_answer(upstream: Upstream) -> None:
    upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    with running_proxy(upstream.base_url) as proxy:
        client = _client(proxy.base_url)
        raw = await client.chat.completions.with_raw_response.create(
            model="test-model", messages=MESSAGES
        )
        completion = raw.parse()
        await client.close()
    assert completion.choices[0].message.content == "The capital of France is"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.choices[0].logprobs is None  # not asked for
    verdict = (completion.model_extra or {})["liftguard"]
    assert (verdict["state"], verdict["cause"], verdict["tokens"]) == ("certified", "certified", 5)
    assert raw.headers["x-liftguard-verdict"] == "certified"
    assert raw.headers["x-liftguard-cause"] == "certified"
    assert raw.headers["x-liftguard-tokens"] == "5"
    assert raw.headers["x-liftguard-certificate"] == "test-cert"
    assert upstream.records[-1].body["stream"] is True  # the upstream is always streamed


async def test_a_blocked_non_streamed_answer_is_http_422(upstream: Upstream) -> None:
    upstream.replies.put(Reply([ROLE, *tokens(FULL), STOP], delay=0.0, hold_after=5))
    with running_proxy(upstream.base_url) as proxy:
        client = _client(proxy.base_url)
        with pytest.raises(openai.UnprocessableEntityError) as caught:
            await client.chat.completions.create(model="test-model", messages=MESSAGES)
        await client.close()
    assert (caught.value.type, caught.value.code) == ("liftguard_blocked", "below_threshold")
    assert isinstance(caught.value.body, dict) and caught.value.body["liftguard"]["tokens"] == 4
    assert caught.value.response.headers["x-liftguard-verdict"] == "blocked"
    assert (await upstream.records[-1].finished()).client_closed


async def test_a_stalled_non_streamed_answer_is_http_504(upstream: Upstream) -> None:
    upstream.replies.put(Reply(list(CLEAN), delay=0.0, hold_after=3, stall=True))
    with running_proxy(upstream.base_url, limits=Limits(upstream_timeout_s=0.5)) as proxy:
        client = _client(proxy.base_url)
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="test-model", messages=MESSAGES)
        await client.close()
    assert caught.value.status_code == 504
    assert caught.value.code == "upstream_timeout"
    assert (await upstream.records[-1].finished()).client_closed


async def test_langchain_invoke_and_ainvoke(upstream: Upstream) -> None:
    upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    upstream.replies.put(Reply([ROLE, *tokens(FULL), STOP], delay=0.0))
    with running_proxy(upstream.base_url) as proxy:
        llm = ChatOpenAI(base_url=proxy.base_url, api_key="k", model="test-model", max_retries=0)
        message = await llm.ainvoke("What is the capital of France?")
        with pytest.raises(openai.UnprocessableEntityError) as caught:
            llm.invoke("What is the capital of France?")
    assert message.content == "The capital of France is"
    assert caught.value.code == "below_threshold"


async def test_refusal_mode_for_a_non_streamed_answer(upstream: Upstream) -> None:
    upstream.replies.put(Reply([ROLE, *tokens(FULL), STOP], delay=0.0))
    with running_proxy(upstream.base_url, on_block="refusal", refusal_message="No.") as proxy:
        client = _client(proxy.base_url)
        completion = await client.chat.completions.create(model="test-model", messages=MESSAGES)
        await client.close()
    assert completion.choices[0].message.content == "No."
    assert completion.choices[0].finish_reason == "content_filter"
    assert (completion.model_extra or {})["liftguard"]["cause"] == "below_threshold"


# --- what is asked of the upstream, and what the client gets -----------------------------------


async def test_logprobs_are_asked_for_and_stripped_unless_the_client_asked(
    upstream: Upstream,
) -> None:
    upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    with running_proxy(upstream.base_url, mode="passthrough") as proxy:
        client = _client(proxy.base_url)
        plain = await client.chat.completions.create(
            model="test-model", messages=MESSAGES, stream=True
        )
        plain_chunks = [c async for c in plain]
        asked = await client.chat.completions.create(
            model="test-model", messages=MESSAGES, stream=True, logprobs=True, top_logprobs=2
        )
        asked_chunks = [c async for c in asked]
        await client.close()
    first, second = (r.body for r in upstream.records)
    # one alternative even for a rule that reads none: llama.cpp's server sends no logprobs for 0
    assert (first["logprobs"], first["top_logprobs"], first["stream"]) == (True, 1, True)
    assert second["top_logprobs"] == 2
    assert all(c.choices[0].logprobs is None for c in plain_chunks if c.choices)
    entries = [
        e for c in asked_chunks if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content or ()
    ]  # fmt: skip
    assert [e.token for e in entries] == ["The", " capital", " of", " France", " is"]
    assert all(len(e.top_logprobs) == 2 for e in entries)  # the upstream sent 5


async def test_the_certificate_context_fills_unset_settings(
    upstream: Upstream, lines: VerdictLines
) -> None:
    context = GenerationContext(
        system_prompt="Be brief.", temperature=0.0, max_tokens=24, stop=("\n",), repeat_penalty=1.0
    )
    cert = StaticCertificate(make_certificate(context=context), "ctx-cert")
    upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    with running_proxy(upstream.base_url, certificate=cert) as proxy:
        client = _client(proxy.base_url)
        await client.chat.completions.create(model="test-model", messages=MESSAGES)
        first_line = await lines.next()
        changed = await client.chat.completions.create(
            model="test-model", messages=MESSAGES, temperature=0.7
        )
        second_line = await lines.next()
        metrics = httpx.get(f"{proxy.url}/metrics").text
        await client.close()
    body = upstream.records[0].body
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, *MESSAGES]
    assert (body["temperature"], body["max_tokens"], body["stop"]) == (0.0, 24, ["\n"])
    assert body["repeat_penalty"] == 1.0  # llama.cpp's setting, at the top level
    assert first_line["context_mismatches"] == []
    assert upstream.records[1].body["temperature"] == 0.7  # sent as asked, but counted
    verdict = (changed.model_extra or {})["liftguard"]
    assert verdict["context_mismatches"] == ["temperature"] and verdict["covered"] is False
    assert second_line["context_mismatches"] == ["temperature"]
    assert 'liftguard_context_mismatches_total{field="temperature"} 1.0' in metrics


async def test_reject_mode_refuses_a_changed_context(upstream: Upstream) -> None:
    cert = StaticCertificate(make_certificate(context=GenerationContext(temperature=0.0)))
    with running_proxy(upstream.base_url, certificate=cert, on_context_mismatch="reject") as proxy:
        client = _client(proxy.base_url)
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="test-model", messages=MESSAGES, temperature=1.0
            )
        await client.close()
    assert caught.value.code == "context_mismatch"
    assert upstream.records == []  # nothing was sent upstream


async def test_bad_requests_are_refused_before_the_upstream(upstream: Upstream) -> None:
    with running_proxy(upstream.base_url) as proxy:
        client = _client(proxy.base_url)
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="test-model", messages=MESSAGES, n=2)
        raw = httpx.post(
            f"{proxy.base_url}/chat/completions",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        await client.close()
    assert caught.value.param == "n"
    assert raw.status_code == 400 and raw.json()["error"]["code"] == "invalid_json"
    assert upstream.records == []


async def test_a_map_from_model_name_to_certificate(upstream: Upstream) -> None:
    strict = StaticCertificate(make_certificate(tau=10.8), "strict-cert")
    lenient = StaticCertificate(make_certificate(tau=4.0), "lenient-cert")
    upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    with running_proxy(
        upstream.base_url, certificate=None, model_certificates={"s": strict, "l": lenient}
    ) as proxy:
        client = _client(proxy.base_url)
        with pytest.raises(openai.UnprocessableEntityError) as blocked:
            await client.chat.completions.create(model="s", messages=MESSAGES)
        answer = await client.chat.completions.create(model="l", messages=MESSAGES)
        with pytest.raises(openai.NotFoundError) as unknown:
            await client.chat.completions.create(model="other", messages=MESSAGES)
        health = httpx.get(f"{proxy.url}/healthz").json()
        await client.close()
    assert isinstance(blocked.value.body, dict)
    assert blocked.value.body["liftguard"]["certificate"] == "strict-cert"
    assert (answer.model_extra or {})["liftguard"]["certificate"] == "lenient-cert"
    assert unknown.value.code == "model_not_found"
    assert health["certificates"] == {"s": "strict-cert", "l": "lenient-cert"}
    assert [r.body["model"] for r in upstream.records] == ["s", "l"]


# --- authentication --------------------------------------------------------------------------


async def test_keys_client_key_required_and_upstream_key_sent(upstream: Upstream) -> None:
    upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    with running_proxy(upstream.base_url, client_key="proxy-key", upstream_key="up-key") as proxy:
        wrong = _client(proxy.base_url, key="sk-other")
        with pytest.raises(openai.AuthenticationError):
            await wrong.chat.completions.create(model="test-model", messages=MESSAGES)
        await wrong.close()
        right = _client(proxy.base_url, key="proxy-key")
        await right.chat.completions.create(model="test-model", messages=MESSAGES)
        await right.close()
    assert len(upstream.headers_seen) == 1
    assert upstream.headers_seen[0]["authorization"] == "Bearer up-key"


async def test_without_keys_the_client_key_is_passed_through(upstream: Upstream) -> None:
    upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    with running_proxy(upstream.base_url) as proxy:
        client = openai.AsyncOpenAI(
            base_url=proxy.base_url, api_key="sk-client", organization="org-1", max_retries=0
        )
        await client.chat.completions.create(model="test-model", messages=MESSAGES)
        models = await client.models.list()
        await client.close()
    assert [m.id for m in models.data] == ["test-model"]
    for seen in upstream.headers_seen:  # the chat request and GET /v1/models
        assert seen["authorization"] == "Bearer sk-client"
        assert seen["openai-organization"] == "org-1"


async def test_a_client_key_is_never_forwarded(upstream: Upstream) -> None:
    upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    with running_proxy(upstream.base_url, client_key="proxy-key") as proxy:
        client = _client(proxy.base_url, key="proxy-key")
        await client.chat.completions.create(model="test-model", messages=MESSAGES)
        await client.close()
    assert "authorization" not in upstream.headers_seen[0]


# --- observability ---------------------------------------------------------------------------


async def test_metrics_healthz_and_one_json_line_per_verdict(
    upstream: Upstream, lines: VerdictLines
) -> None:
    upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    upstream.replies.put(Reply([ROLE, *tokens(FULL), STOP], delay=0.0))
    upstream.replies.put(Reply(list(CLEAN), delay=0.0, hold_after=3, stall=True))
    with running_proxy(upstream.base_url, limits=Limits(upstream_timeout_s=2.0)) as proxy:
        client = _client(proxy.base_url)
        ids = []
        for _ in range(3):
            stream = await client.chat.completions.with_raw_response.create(
                model="test-model", messages=MESSAGES, stream=True
            )
            ids.append(stream.headers["x-liftguard-request-id"])
            try:
                async for _chunk in stream.parse():
                    pass
            except openai.APIError:
                pass
        logged = [await lines.next() for _ in range(3)]
        await client.close()
        metrics = httpx.get(f"{proxy.url}/metrics").text
        health = httpx.get(f"{proxy.url}/healthz").json()
    assert [line["request_id"] for line in logged] == ids
    assert [(line["state"], line["cause"]) for line in logged] == [
        ("certified", "certified"),
        ("blocked", "below_threshold"),
        ("blocked", "truncated"),
    ]
    assert [line["error"] for line in logged] == [None, None, "upstream_timeout"]
    assert all(line["certificate"] == "test-cert" and line["tau"] == 4.0 for line in logged)
    for expected in (
        'liftguard_verdicts_total{cause="certified",state="certified"} 1.0',
        'liftguard_verdicts_total{cause="below_threshold",state="blocked"} 1.0',
        'liftguard_verdicts_total{cause="truncated",state="blocked"} 1.0',
        'liftguard_upstream_errors_total{kind="upstream_timeout"} 1.0',
        "liftguard_tokens_read_total 11.0",  # 5 + 4 + 2
        "liftguard_verdict_tokens_count 3.0",
        "liftguard_added_latency_seconds_per_token_count 3.0",
        "liftguard_active_streams 0.0",
        'liftguard_certificate_info{certificate="test-cert",model="*"} 1.0',
    ):
        assert expected in metrics, expected
    assert health["status"] == "ok" and health["certificates"] == {"*": "test-cert"}


async def test_a_client_that_hangs_up_closes_the_upstream(
    upstream: Upstream, lines: VerdictLines
) -> None:
    upstream.replies.put(Reply(list(CLEAN), delay=0.0, hold_after=3))
    with running_proxy(upstream.base_url, mode="passthrough") as proxy:
        client = _client(proxy.base_url)
        stream = await client.chat.completions.create(
            model="test-model", messages=MESSAGES, stream=True
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                break  # the first token arrived: hang up
        await stream.close()
        line = await lines.next()
        record = await upstream.records[-1].finished()
        metrics = httpx.get(f"{proxy.url}/metrics").text
        await client.close()
    assert record.client_closed
    assert (line["state"], line["error"]) == ("blocked", "client_closed")
    assert "liftguard_client_disconnects_total 1.0" in metrics
