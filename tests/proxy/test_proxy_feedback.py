"""``POST /v1/liftguard/feedback`` and the live risk monitor of each model entry: labels of
certified answers reach the monitor, every other label is refused and changes nothing,
a run of wrong labels fires the alarm in ``/metrics`` and ``/healthz``, and the store of
answer ids stays bounded. A real proxy in front of the scripted upstream; nothing here
waits on a timer (a non-streamed answer is counted before its reply is sent, a streamed
one before its body ends)."""

from __future__ import annotations

import logging
import math
from typing import Any

import httpx
import pytest
from proxy_harness import (
    BAD,
    GOOD,
    ROLE,
    STOP,
    ProxyServer,
    Upstream,
    calibrated_certificate,
    make_certificate,
    metric,
    running_proxy,
    tokens,
)
from sse_server import Reply

from adapters.proxy import ProxyConfig, StaticCertificate
from guardrail import Certificate, ConfigError, RiskMonitor

CLEAN = [ROLE, *tokens([GOOD] * 5), STOP]
BLOCKED = [ROLE, *tokens([GOOD, GOOD, GOOD, BAD, GOOD, GOOD, GOOD]), STOP]
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
RISK, ALPHA = 0.1, 0.05
FEEDBACK = "/v1/liftguard/feedback"


def calibrated(risk: float = RISK) -> Certificate:
    return calibrated_certificate(risk)


def serving(upstream: Upstream, cert: Certificate | None = None, **options: Any) -> Any:
    source = StaticCertificate(cert or calibrated(), "cal-cert")
    return running_proxy(upstream.base_url, certificate=source, risk_alpha=ALPHA, **options)


async def ask(
    client: httpx.AsyncClient, proxy: ProxyServer, upstream: Upstream, events: list[Any],
    **body: Any,
) -> httpx.Response:  # fmt: skip
    """One answer through the proxy (the upstream sends ``events``), read whole."""
    upstream.replies.put(Reply(list(events), delay=0.0))
    request = {"model": "test-model", "messages": MESSAGES, **body}
    return await client.post(f"{proxy.base_url}/chat/completions", json=request)


def request_id(resp: httpx.Response) -> str:
    return str(resp.headers["x-liftguard-request-id"])


async def label(
    client: httpx.AsyncClient, proxy: ProxyServer, answer_id: str, correct: bool, **kw: Any
) -> httpx.Response:
    return await client.post(proxy.url + FEEDBACK, json={"id": answer_id, "correct": correct},
                             **kw)  # fmt: skip


async def scrape(client: httpx.AsyncClient, proxy: ProxyServer, **kw: Any) -> str:
    resp = await client.get(f"{proxy.url}/metrics", **kw)
    assert resp.status_code == 200
    return resp.text


def error(resp: httpx.Response) -> tuple[int, str]:
    body = resp.json()["error"]
    assert body["type"] == "invalid_request_error" and body["message"]
    return resp.status_code, body["code"]


MONITOR = {"model": "*", "certificate": "cal-cert"}


async def test_a_label_of_a_certified_answer_reaches_the_monitor(upstream: Upstream) -> None:
    with serving(upstream) as proxy:
        async with httpx.AsyncClient(timeout=30) as client:
            before = await scrape(client, proxy)
            plain = await ask(client, proxy, upstream, CLEAN)
            streamed = await ask(client, proxy, upstream, CLEAN, stream=True)
            assert plain.json()["liftguard"]["state"] == "certified"
            assert plain.json()["liftguard"]["request_id"] == request_id(plain)
            assert b"data: [DONE]" in streamed.content
            right = await label(client, proxy, request_id(plain), True)
            wrong = await label(client, proxy, request_id(streamed), False)
            after = await scrape(client, proxy)
            health = (await client.get(f"{proxy.url}/healthz")).json()
    assert metric(before, "liftguard_risk_labels", **MONITOR) == 0.0
    assert metric(before, "liftguard_risk_target", **MONITOR) == RISK
    assert right.status_code == 200 and wrong.status_code == 200
    assert right.json()["labels"] == 1 and right.json()["errors"] == 0
    out = wrong.json()
    assert (out["labels"], out["errors"], out["alarm"], out["certificate"]) == (
        2, 1, False, "cal-cert",
    )  # fmt: skip
    assert 0.0 <= out["bounds"][0] <= 0.5 <= out["bounds"][1] <= 1.0
    assert metric(after, "liftguard_risk_labels", **MONITOR) == 2.0
    assert metric(after, "liftguard_risk_errors", **MONITOR) == 1.0
    assert metric(after, "liftguard_risk_answers", **MONITOR) == 2.0
    assert metric(after, "liftguard_risk_shown_ratio", **MONITOR) == 1.0
    assert metric(after, "liftguard_risk_lower_bound", **MONITOR) == out["bounds"][0]
    assert metric(after, "liftguard_risk_upper_bound", **MONITOR) == out["bounds"][1]
    assert metric(after, "liftguard_risk_alarm", **MONITOR) == 0.0
    assert metric(after, "liftguard_risk_coverage_warning", **MONITOR) == 0.0
    assert metric(after, "liftguard_feedback_total", result="accepted") == 2.0
    assert health["risk"] == {
        "*": {"certificate": "cal-cert", "monitored": True, "alarm": False,
              "coverage_warning": False},
    }  # fmt: skip


async def test_the_answers_own_id_works_while_no_other_answer_carries_it(
    upstream: Upstream,
) -> None:
    with serving(upstream) as proxy:
        async with httpx.AsyncClient(timeout=30) as client:
            first = await ask(client, proxy, upstream, CLEAN)
            completion_id = first.json()["id"]
            by_completion = await label(client, proxy, completion_id, True)
            second = await ask(client, proxy, upstream, CLEAN)  # the scripted upstream's ids repeat
            assert second.json()["id"] == completion_id
            ambiguous = await label(client, proxy, completion_id, True)
            by_request = await label(client, proxy, request_id(second), True)
    assert by_completion.status_code == 200 and by_completion.json()["request_id"] == (
        request_id(first)
    )
    assert error(ambiguous) == (409, "ambiguous_id")
    assert "x-liftguard-request-id" in ambiguous.json()["error"]["message"]
    assert by_request.json()["labels"] == 2


async def test_refused_labels_are_explained_and_change_nothing(upstream: Upstream) -> None:
    with serving(upstream) as proxy:
        async with httpx.AsyncClient(timeout=30) as client:
            shown = await ask(client, proxy, upstream, CLEAN)
            blocked = await ask(client, proxy, upstream, BLOCKED)
            assert blocked.status_code == 422
            blocked_id = blocked.json()["error"]["liftguard"]["request_id"]
            # a setting the certificate was not calibrated for: certified, not covered
            uncovered = await ask(client, proxy, upstream, CLEAN, frequency_penalty=0.5)
            assert uncovered.json()["liftguard"]["covered"] is False
            accepted = await label(client, proxy, request_id(shown), False)
            before = await scrape(client, proxy)
            refused = {
                "blocked": await label(client, proxy, blocked_id, True),
                "uncovered": await label(client, proxy, request_id(uncovered), True),
                "unknown": await label(client, proxy, "lg-00000000000000000000", True),
                "duplicate": await label(client, proxy, request_id(shown), True),
            }
            after = await scrape(client, proxy)
    assert accepted.status_code == 200
    assert {k: error(r) for k, r in refused.items()} == {
        "blocked": (409, "answer_not_certified"),
        "uncovered": (409, "answer_not_covered"),
        "unknown": (404, "unknown_answer"),
        "duplicate": (409, "duplicate_feedback"),
    }
    assert "below_threshold" in refused["blocked"].json()["error"]["message"]
    for name in ("labels", "errors", "answers", "lower_bound", "upper_bound", "log_evalue"):
        key = f"liftguard_risk_{name}"
        assert metric(after, key, **MONITOR) == metric(before, key, **MONITOR), name
    assert metric(after, "liftguard_risk_labels", **MONITOR) == 1.0
    # the blocked answer counted for coverage; the uncovered one did not
    assert metric(after, "liftguard_risk_answers", **MONITOR) == 2.0
    assert metric(after, "liftguard_risk_shown_ratio", **MONITOR) == 0.5
    for code in ("answer_not_certified", "answer_not_covered", "unknown_answer",
                 "duplicate_feedback"):  # fmt: skip
        assert metric(after, "liftguard_feedback_total", result=code) == 1.0


def wrong_labels_to_alarm(cert: Certificate) -> int:
    """How many wrong labels in a row make the certificate's own monitor alarm (the first
    test of its version: at the first level of the restarts' alpha spending)."""
    monitor = cert.risk_monitor(RiskMonitor.restart_level(ALPHA, 0))
    while not monitor.update(correct=False):
        assert monitor.n < 1000
    return monitor.n


async def test_a_run_of_wrong_labels_fires_the_alarm(
    upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    cert = calibrated()
    needed = wrong_labels_to_alarm(cert)
    assert needed > 1
    caplog.set_level(logging.WARNING, logger="adapters._risk._risk_watch")
    with serving(upstream, cert) as proxy:
        async with httpx.AsyncClient(timeout=30) as client:
            ids = [request_id(await ask(client, proxy, upstream, CLEAN)) for _ in range(needed + 1)]
            fresh = await scrape(client, proxy)
            for answer_id in ids[: needed - 1]:
                calm_label = (await label(client, proxy, answer_id, False)).json()
                assert calm_label["alarm"] is False and calm_label["bounds"][0] < RISK
            quiet = await scrape(client, proxy)
            calm = (await client.get(f"{proxy.url}/healthz")).json()["risk"]["*"]["alarm"]
            fired = await label(client, proxy, ids[needed - 1], False)
            again = await label(client, proxy, ids[needed], False)  # no second alarm line
            loud = await scrape(client, proxy)
            health = (await client.get(f"{proxy.url}/healthz")).json()
    assert metric(quiet, "liftguard_risk_alarm", **MONITOR) == 0.0 and calm is False
    assert fired.json()["alarm"] is True and again.json()["alarm"] is True
    # what is reported agrees with the alarm: its lower bound is past the target
    assert fired.json()["bounds"][0] >= RISK and again.json()["bounds"][0] >= RISK
    assert (metric(quiet, "liftguard_risk_lower_bound", **MONITOR) or 0.0) < RISK
    assert (metric(loud, "liftguard_risk_lower_bound", **MONITOR) or 0.0) >= RISK
    assert metric(fresh, "liftguard_risk_log_evalue", **MONITOR) == 0.0  # no evidence yet
    assert metric(fresh, "liftguard_risk_lower_bound", **MONITOR) == 0.0
    assert metric(loud, "liftguard_risk_alarm", **MONITOR) == 1.0
    assert metric(loud, "liftguard_risk_labels", **MONITOR) == needed + 1
    assert (metric(loud, "liftguard_risk_log_evalue", **MONITOR) or 0.0) >= math.log(1 / ALPHA)
    assert health["status"] == "ok" and health["risk"]["*"]["alarm"] is True
    alarms = [r for r in caplog.records if r.name == "adapters._risk._risk_watch"]
    assert len(alarms) == 1 and alarms[0].levelno == logging.WARNING
    line = alarms[0].getMessage()
    assert "model *" in line and "cal-cert" in line and f"after {needed} labelled" in line


async def test_feedback_needs_the_client_key(upstream: Upstream) -> None:
    with serving(upstream, client_key="proxy-key") as proxy:
        async with httpx.AsyncClient(timeout=30) as client:
            key = {"authorization": "Bearer proxy-key"}
            keyless = await client.post(f"{proxy.base_url}/chat/completions", json={})
            anonymous = await label(client, proxy, "lg-x", True)
            wrong = await label(client, proxy, "lg-x", True,
                                headers={"authorization": "Bearer other"})  # fmt: skip
            allowed = await label(client, proxy, "lg-x", True, headers=key)
            labels = metric(await scrape(client, proxy, headers=key), "liftguard_risk_labels")
    assert keyless.status_code == 401
    assert anonymous.status_code == 401 and wrong.status_code == 401
    assert anonymous.json()["error"]["type"] == "authentication_error"
    assert error(allowed) == (404, "unknown_answer")
    assert labels == 0.0


async def test_a_malformed_feedback_body_is_refused(upstream: Upstream) -> None:
    url, json_type = FEEDBACK, {"content-type": "application/json"}
    with serving(upstream) as proxy:
        async with httpx.AsyncClient(base_url=proxy.url, timeout=30) as client:
            out = {
                "not json": await client.post(url, content=b"{id", headers=json_type),
                "a list": await client.post(url, json=[1]),
                "no correct": await client.post(url, json={"id": "lg-1"}),
                "correct 'yes'": await client.post(url, json={"id": "lg-1", "correct": "yes"}),
                "id a number": await client.post(url, json={"id": 1, "correct": True}),
                "NaN": await client.post(url, content=b'{"id": NaN}', headers=json_type),
                "text/plain": await client.post(url, content=b"{}"),
                "too large": await client.post(url, json={"id": "x" * 20_000, "correct": True}),
            }
    status = {name: (resp.status_code, resp.json()["error"]["code"]) for name, resp in out.items()}
    assert status == {
        "not json": (400, "invalid_json"),
        "a list": (400, "invalid_request"),
        "no correct": (400, "invalid_request"),
        "correct 'yes'": (400, "invalid_request"),
        "id a number": (400, "invalid_request"),
        "NaN": (400, "invalid_json"),
        "text/plain": (415, "unsupported_media_type"),
        "too large": (413, "request_too_large"),
    }
    assert out["no correct"].json()["error"]["param"] == "correct"
    assert out["id a number"].json()["error"]["param"] == "id"


async def test_the_id_store_keeps_only_the_latest_answers(upstream: Upstream) -> None:
    with serving(upstream, feedback_ids=2) as proxy:
        async with httpx.AsyncClient(timeout=30) as client:
            ids = [request_id(await ask(client, proxy, upstream, CLEAN)) for _ in range(3)]
            completion = await label(client, proxy, "chatcmpl-test", True)  # two kept carry it
            oldest = await label(client, proxy, ids[0], True)
            kept = [await label(client, proxy, i, True) for i in ids[1:]]
            labels = metric(await scrape(client, proxy), "liftguard_risk_labels", **MONITOR)
    assert error(completion) == (409, "ambiguous_id")
    assert error(oldest) == (404, "unknown_answer")
    assert "among the last 2" in oldest.json()["error"]["message"]
    assert [r.status_code for r in kept] == [200, 200]
    assert labels == 2.0


async def test_the_bounded_store_forgets_the_ids_of_dropped_answers(upstream: Upstream) -> None:
    with serving(upstream, feedback_ids=1) as proxy:
        async with httpx.AsyncClient(timeout=30) as client:
            first = request_id(await ask(client, proxy, upstream, CLEAN))
            second = request_id(await ask(client, proxy, upstream, CLEAN))
            # only the second is kept, so the id both answers carry names it alone
            by_completion_id = await label(client, proxy, "chatcmpl-test", True)
            oldest = await label(client, proxy, first, True)
    assert by_completion_id.status_code == 200
    assert by_completion_id.json()["request_id"] == second
    assert error(oldest) == (404, "unknown_answer")


async def test_an_uncalibrated_certificate_has_no_monitor(upstream: Upstream) -> None:
    with serving(upstream, make_certificate()) as proxy:
        async with httpx.AsyncClient(timeout=30) as client:
            shown = await ask(client, proxy, upstream, CLEAN)
            refused = await label(client, proxy, request_id(shown), True)
            text = await scrape(client, proxy)
            health = (await client.get(f"{proxy.url}/healthz")).json()
    assert error(refused) == (409, "no_risk_monitor")
    assert "not calibrated" in refused.json()["error"]["message"]
    assert metric(text, "liftguard_risk_labels") is None
    assert health["risk"] == {
        "*": {"certificate": "cal-cert", "monitored": False, "alarm": None,
              "coverage_warning": None},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("flag", "value", "expected"),
    [("--risk-alpha", "1.5", "in (0, 1)"), ("--feedback-ids", "0", "integer >= 1")],
)
def test_bad_serve_flags_are_one_line_errors(
    flag: str, value: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from adapters.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--upstream", "http://127.0.0.1:9/v1", "--certificate", "c.json",
              flag, value])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2
    assert len(err.splitlines()) == 1 and err.startswith("liftguard serve: error:")
    assert flag in err and expected in err


@pytest.mark.parametrize(
    ("field", "value"),
    [("risk_alpha", 0.0), ("risk_alpha", 1.0), ("risk_alpha", True), ("feedback_ids", 0)],
)
def test_bad_risk_settings_name_the_field(field: str, value: Any) -> None:
    source = StaticCertificate(calibrated(), "cal-cert")
    with pytest.raises(ConfigError, match=field):
        ProxyConfig(upstream="http://127.0.0.1:9/v1", certificate=source, **{field: value})
