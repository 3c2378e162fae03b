"""A real LiteLLM with two workers (``--num_workers 2``) whose liftguard guardrail shares a
Valkey server through LiteLLM's own Redis setting (``REDIS_URL``, ``redis: true``): every
label, each sent twice at the same moment to whichever worker takes it, is taken exactly
once, and ``GET /v1/liftguard/risk`` reports the same fleet-wide monitor from any worker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

import pytest

if find_spec("litellm") is None or find_spec("fastapi") is None:
    pytest.skip('needs pip install "liftguard[litellm]"', allow_module_level=True)

import httpx
import openai
from fleet_wait import until
from litellm_harness import CONTEXT, LiteLLM, ScriptedUpstream, running_litellm
from proxy_harness import GOOD, ROLE, STOP, calibrated_certificate, tokens
from sse_server import Reply, serving
from valkey_process import ValkeyProcess

CLEAN = [ROLE, *tokens([GOOD] * 5), STOP]


@pytest.fixture
def litellm(valkey: ValkeyProcess, tmp_path: Path) -> Iterator[tuple[LiteLLM, ScriptedUpstream]]:
    settings = {"risk_alpha": 0.05, "redis": "true", "fleet_namespace": uuid.uuid4().hex,
                "fleet_timeout_s": 2, "refresh_s": 0}  # fmt: skip
    with (
        serving(ScriptedUpstream()) as upstream,
        running_litellm(
            tmp_path, upstream.base_url, certificate=calibrated_certificate(0.1, CONTEXT),
            guardrails={}, default_on={"fleet": settings}, args=["--num_workers", "2"],
            env={"REDIS_URL": valkey.url},
        ) as proc,
    ):  # fmt: skip
        upstream.default = Reply(list(CLEAN), delay=0.0)
        yield proc, upstream


async def test_two_workers_take_each_label_once_and_report_one_monitor(
    litellm: tuple[LiteLLM, ScriptedUpstream],
) -> None:
    proc, _ = litellm
    root = proc.base_url.removesuffix("/v1")
    auth = {"Authorization": f"Bearer {proc.key}"}
    n = 60
    async with httpx.AsyncClient(timeout=60, headers=auth) as client:
        ids = []
        async with openai.AsyncOpenAI(
            base_url=proc.base_url, api_key=proc.key, max_retries=0, timeout=60
        ) as sdk:
            for i in range(n):
                stream = await sdk.chat.completions.create(
                    model="plain", stream=True, messages=[{"role": "user", "content": f"q{i}"}]
                )
                chunks = [chunk async for chunk in stream]
                (verdict,) = [c.model_extra["liftguard"] for c in chunks
                              if "liftguard" in (c.model_extra or {})]  # fmt: skip
                assert verdict["state"] == "certified"
                ids.append(verdict["request_id"])

        async def label(rid: str) -> str:
            resp = (  # the answer's record reaches Redis off the request path
                await until(
                    lambda: client.post(
                        f"{root}/v1/liftguard/feedback", json={"id": rid, "correct": True}
                    ),
                    lambda r: r.status_code != 404,
                )
            )[-1]
            return "accepted" if resp.status_code == 200 else resp.json()["error"]["code"]

        got = [c for rid in ids for c in await asyncio.gather(label(rid), label(rid))]
        assert (got.count("accepted"), got.count("duplicate_feedback")) == (n, n)
        reports = [(await client.get(f"{root}/v1/liftguard/risk")).json() for _ in range(6)]
    for report in reports:
        (state,) = report.values()
        assert state["labels"] == n and state["blind"] is None
