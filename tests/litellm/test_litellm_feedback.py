"""The LiteLLM guardrail's live risk monitor in a real LiteLLM proxy process: a guardrail that
is ``default_on`` (attached to no model) with a calibrated certificate from a store alias,
LiteLLM's ``prometheus`` callback on. Labels go to ``POST /v1/liftguard/feedback`` on
LiteLLM's own server (behind its key check), a run of wrong labels fires the alarm in
``/metrics`` and ``GET /v1/liftguard/risk``, and a promoted version reaches new requests after
``POST /v1/liftguard/refresh`` with a fresh monitor. Nothing here waits on a timer: the
guardrail takes an answer's verdict before LiteLLM sends its last bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from importlib.util import find_spec
from typing import Any

import pytest

if find_spec("litellm") is None or find_spec("fastapi") is None:
    pytest.skip(
        'litellm is not installed (pip install "liftguard[litellm]")', allow_module_level=True
    )

import httpx
import openai
from litellm_harness import LiteLLM, ScriptedUpstream, blocked_verdict, running_litellm
from proxy_harness import BAD, GOOD, ROLE, STOP, calibrated_certificate, metric, tokens
from sse_server import Reply, serving

from guardrail import Certificate
from skeleton_store import SkeletonStore

CLEAN = [ROLE, *tokens([GOOD] * 5), STOP]
BLOCKED = [ROLE, *tokens([GOOD, GOOD, GOOD, BAD, GOOD, GOOD, GOOD]), STOP]
RISK, ALPHA = 0.1, 0.05
GUARDRAIL = "lg-live"


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with serving(ScriptedUpstream()) as srv:
        srv.default = Reply(list(CLEAN), delay=0.0)
        yield srv


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> SkeletonStore:
    store = SkeletonStore(tmp_path_factory.mktemp("store"))
    publish(store, calibrated_certificate(RISK))
    return store


@pytest.fixture(scope="module")
def litellm(
    upstream: ScriptedUpstream, store: SkeletonStore, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiteLLM]:
    settings = {
        "certificate": f"{store.url}#chat@production", "risk_alpha": ALPHA, "refresh_s": 0,
    }  # fmt: skip
    with running_litellm(
        tmp_path_factory.mktemp("litellm"), upstream.base_url, guardrails={},
        default_on={"live": settings}, callbacks=["prometheus"],
    ) as proc:  # fmt: skip
        yield proc


def publish(store: SkeletonStore, cert: Certificate) -> int:
    version = store.put("chat", {}, kind="certificate", certificate=cert)
    store.promote("chat", version.version)
    return version.version


def server(proc: LiteLLM) -> str:
    return proc.base_url.removesuffix("/v1")


def answer(proc: LiteLLM, question: str, upstream: ScriptedUpstream, events: list[Any]) -> Any:
    """The verdict of one streamed answer of the ``plain`` model (no guardrail of its own),
    certified or blocked."""
    upstream.script[question] = Reply(list(events), delay=0.0)
    client = openai.OpenAI(base_url=proc.base_url, api_key=proc.key, max_retries=0, timeout=30)
    try:
        with client:
            stream = client.chat.completions.create(
                model="plain", stream=True, messages=[{"role": "user", "content": question}]
            )
            chunks = list(stream)
    except openai.APIError as exc:  # a buffered block: HTTP 422
        return blocked_verdict(exc)
    found = [c.model_extra["liftguard"] for c in chunks if "liftguard" in (c.model_extra or {})]
    assert len(found) == 1, chunks
    return found[0]


def label(proc: LiteLLM, answer_id: str, correct: bool, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {proc.key if key is None else key}"}
    body = {"id": answer_id, "correct": correct}
    return httpx.post(f"{server(proc)}/v1/liftguard/feedback", json=body, headers=headers)


def risk(proc: LiteLLM) -> dict[str, Any]:
    resp = httpx.get(f"{server(proc)}/v1/liftguard/risk", headers=_auth(proc))
    assert resp.status_code == 200, resp.text
    out: dict[str, Any] = resp.json()[GUARDRAIL]
    return out


def scrape(proc: LiteLLM) -> str:
    resp = httpx.get(f"{server(proc)}/metrics", headers=_auth(proc), follow_redirects=True)
    assert resp.status_code == 200, resp.text
    return resp.text


def _auth(proc: LiteLLM) -> dict[str, str]:
    return {"Authorization": f"Bearer {proc.key}"}


def error(resp: httpx.Response) -> tuple[int, str]:
    body = resp.json()["error"]
    assert body["message"]
    return resp.status_code, body["code"]


# --- tests ---------------------------------------------------------------------------------------


def test_a_default_on_guardrail_guards_a_model_without_one(
    litellm: LiteLLM, upstream: ScriptedUpstream
) -> None:
    certified = answer(litellm, "default on, clean", upstream, CLEAN)
    blocked = answer(litellm, "default on, blocked", upstream, BLOCKED)
    assert certified["state"] == "certified" and certified["covered"] is True
    assert certified["certificate"].startswith("chat@production=")
    assert blocked["state"] == "blocked"


def test_a_label_of_a_certified_answer_reaches_the_monitor(
    litellm: LiteLLM, upstream: ScriptedUpstream
) -> None:
    before = risk(litellm)["labels"]
    verdict = answer(litellm, "label me", upstream, CLEAN)
    resp = label(litellm, verdict["request_id"], True)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["labels"] == before + 1 and out["request_id"] == verdict["request_id"]
    assert out["model"] == GUARDRAIL and out["certificate"] == verdict["certificate"]
    again = label(litellm, verdict["request_id"], True)
    assert error(again) == (409, "duplicate_feedback")
    assert risk(litellm)["labels"] == before + 1


def test_refused_labels_change_nothing(litellm: LiteLLM, upstream: ScriptedUpstream) -> None:
    before = risk(litellm)
    blocked = answer(litellm, "refused label", upstream, BLOCKED)
    assert error(label(litellm, blocked["request_id"], True)) == (409, "answer_not_certified")
    assert error(label(litellm, "no-such-answer", True)) == (404, "unknown_answer")
    bad = httpx.post(
        f"{server(litellm)}/v1/liftguard/feedback", content=b"{not json", headers=_auth(litellm)
    )
    assert bad.status_code == 400
    after = risk(litellm)
    assert (after["labels"], after["errors"]) == (before["labels"], before["errors"])
    assert after["answers"] == before["answers"] + 1  # the block counts for coverage only


def test_feedback_needs_a_key_litellm_accepts(litellm: LiteLLM, upstream: ScriptedUpstream) -> None:
    verdict = answer(litellm, "a stranger's label", upstream, CLEAN)
    before = risk(litellm)["labels"]
    wrong = {"Authorization": "Bearer sk-wrong"}
    # what LiteLLM's key check answers a wrong key on its own routes (no database: 400)
    expected = httpx.get(f"{litellm.base_url}/models", headers=wrong).status_code
    assert expected >= 400
    assert label(litellm, verdict["request_id"], True, key="sk-wrong").status_code == expected
    assert httpx.get(f"{server(litellm)}/v1/liftguard/risk").status_code >= 400
    assert httpx.post(f"{server(litellm)}/v1/liftguard/refresh").status_code >= 400
    assert risk(litellm)["labels"] == before
    assert label(litellm, verdict["request_id"], True).status_code == 200


def test_a_run_of_wrong_labels_fires_the_alarm_in_the_metrics(
    litellm: LiteLLM, upstream: ScriptedUpstream
) -> None:
    state = risk(litellm)
    assert state["alarm"] is False
    outs = []
    for i in range(60):
        verdict = answer(litellm, f"wrong {i}", upstream, CLEAN)
        outs.append(label(litellm, verdict["request_id"], False).json())
        if outs[-1]["alarm"]:
            break
    assert outs[-1]["alarm"] is True and all(o["alarm"] is False for o in outs[:-1])
    text = scrape(litellm)
    series = {"model": GUARDRAIL, "certificate": state["certificate"]}
    assert metric(text, "liftguard_risk_alarm", **series) == 1.0
    assert metric(text, "liftguard_risk_labels", **series) == outs[-1]["labels"]
    assert metric(text, "liftguard_risk_target", **series) == RISK
    assert (metric(text, "liftguard_risk_log_evalue", **series) or 0.0) >= math.log(1 / ALPHA)
    assert (metric(text, "liftguard_feedback_total", result="accepted") or 0) >= len(outs)
    assert risk(litellm)["alarm"] is True


def test_a_promoted_version_gets_a_fresh_monitor(
    litellm: LiteLLM, upstream: ScriptedUpstream, store: SkeletonStore
) -> None:
    old = answer(litellm, "before the promotion", upstream, CLEAN)
    refresh = f"{server(litellm)}/v1/liftguard/refresh"
    assert httpx.post(refresh, headers=_auth(litellm)).json() == {GUARDRAIL: False}
    version = publish(store, calibrated_certificate(0.2))
    assert httpx.post(refresh, headers=_auth(litellm)).json() == {GUARDRAIL: True}
    new = answer(litellm, "after the promotion", upstream, CLEAN)
    assert new["certificate"] == f"chat@production=v{version}" != old["certificate"]
    assert error(label(litellm, old["request_id"], True)) == (409, "certificate_changed")
    assert label(litellm, new["request_id"], True).json()["labels"] == 1
    state = risk(litellm)
    assert state["certificate"] == new["certificate"] and state["alarm"] is False
    assert state["target"] == 0.2
    text = scrape(litellm)
    assert metric(text, "liftguard_risk_labels", certificate=old["certificate"]) is None
    assert metric(text, "liftguard_risk_labels", certificate=new["certificate"]) == 1.0
