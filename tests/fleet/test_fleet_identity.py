"""Which replicas are one fleet: the namespace derives from the deployment (by default the
proxy's upstream URL), so two deployments with the same certificate on one Redis never
share an alarm unless told to; the record is keyed by the certificate's content, so the
same certificate under two file names is one test."""

from __future__ import annotations

import uuid
from importlib.util import find_spec
from typing import Any

import pytest
from proxy_harness import calibrated_certificate
from test_fleet_watch import ALPHA, CERT
from valkey_process import ValkeyProcess

from adapters._proxy._config import ProxyConfig
from adapters._proxy._feedback import ProxyRiskWatch
from adapters._risk._fleet import FleetStore, deployment_namespace, fleet_client
from adapters._risk._fleet_watch import FleetRiskWatch, FleetSettings
from adapters._risk._risk_watch import FinishedAnswer
from adapters._serving._certs import StaticCertificate
from adapters._serving._metrics import ProxyMetrics


def finished(rid: str, label: str = "cert.json") -> FinishedAnswer:
    """A certified answer of the certificate the replica knows as ``label``."""
    return FinishedAnswer(rid, f"chatcmpl-{rid}", label, True, True, True, False, "certified")


def proxy_watch(url: str, upstream: str, **fleet: Any) -> FleetRiskWatch:
    """The risk watch of a replica in front of ``upstream`` whose fleet is at ``url``
    (``fleet``: the other :class:`FleetSettings`)."""
    source = StaticCertificate(CERT, "cert.json")
    config = ProxyConfig(
        upstream=upstream, certificate=source, risk_alpha=ALPHA, fleet=FleetSettings(url, **fleet)
    )
    watch = ProxyRiskWatch(config, {"*": source}, ProxyMetrics()).watch
    assert isinstance(watch, FleetRiskWatch)
    return watch


async def test_two_deployments_with_one_certificate_never_share_an_alarm_by_default(
    valkey: ValkeyProcess,
) -> None:
    a = proxy_watch(valkey.url, "http://llm-a:8000/v1")
    a2 = proxy_watch(valkey.url, "http://llm-a:8000/v1")  # a replica of the same deployment
    b = proxy_watch(valkey.url, "http://llm-b:8000/v1")
    named = [
        proxy_watch(valkey.url, f"http://llm-{x}:8000/v1", deployment="chat") for x in "ab"
    ]
    try:
        assert a.store.prefix == a2.store.prefix != b.store.prefix
        assert named[0].store.prefix == named[1].store.prefix  # told to: one fleet
        a.take("*", finished("r1"))
        await a.drain()
        assert (await a2.alabel("r1", False))["labels"] == 1
        await b.refresh()
        assert b.states()[0].labels == 0  # b's own test, untouched
    finally:
        for w in (a, a2, b, *named):
            await w.aclose()


async def test_one_certificate_under_two_file_names_is_one_fleet(valkey: ValkeyProcess) -> None:
    namespace = uuid.uuid4().hex

    def replica(name: str) -> FleetRiskWatch:
        return FleetRiskWatch(
            {"*": StaticCertificate(CERT, name)},
            FleetStore(fleet_client(valkey.url), namespace=namespace),
            risk_alpha=ALPHA,
        )

    a, b = replica("/etc/a/cert.json"), replica("/srv/b/certificate.json")
    try:
        a.take("*", finished("r1", "/etc/a/cert.json"))
        await a.drain()
        out = await b.alabel("r1", True)  # not certificate_changed
        assert out["labels"] == 1
        await a.refresh()
        assert a.states()[0].labels == 1
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.parametrize(
    ("field", "value"),
    [("namespace", ""), ("deployment", "a{b}"), ("connect_timeout_s", 0), ("timeout_s", -1)],
)
def test_bad_fleet_settings_name_the_field(field: str, value: object) -> None:
    from guardrail import ConfigError

    with pytest.raises(ConfigError, match=rf"^fleet\.{field} must"):
        FleetSettings("redis://127.0.0.1:6379/0", **{field: value})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^fleet\.url must"):
        FleetSettings("http://127.0.0.1:6379/0")


async def test_a_litellm_fleet_is_named_by_its_deployment_as_the_proxy_is(
    valkey: ValkeyProcess,
) -> None:
    """The LiteLLM guardrail derives its namespace from ``fleet_deployment`` with the
    proxy's own definition, takes ``fleet_connect_timeout_s``, and refuses a fleet it
    could only name ``default``: two LiteLLM deployments never share an alarm unless
    named alike."""
    if find_spec("litellm") is None:
        pytest.skip('needs pip install "liftguard[litellm]"')
    from litellm_harness import CONTEXT

    from adapters.litellm import GuardrailStartupError, LiftGuardGuardrail

    source = StaticCertificate(calibrated_certificate(0.1, CONTEXT), "cert.json")

    def guardrail(**fleet: object) -> FleetRiskWatch:
        guard = LiftGuardGuardrail(
            certificate=source, redis_url=valkey.url, guardrail_name="fleet-id", **fleet
        )
        assert isinstance(guard.risk, FleetRiskWatch)
        return guard.risk

    with pytest.raises(GuardrailStartupError) as info:
        guardrail()
    assert "fleet_deployment" in str(info.value.__cause__)
    a = guardrail(fleet_deployment="chat", fleet_connect_timeout_s=1.5)
    a2 = guardrail(fleet_deployment="chat")  # another worker or pod of it
    b = guardrail(fleet_deployment="code")
    named = guardrail(fleet_namespace="shared")
    proxy = proxy_watch(valkey.url, "http://llm-a:8000/v1", deployment="chat")
    try:
        assert a.store.prefix == a2.store.prefix == proxy.store.prefix != b.store.prefix
        assert a.store.prefix == f"liftguard:{{{deployment_namespace('chat')}}}"
        assert named.store.prefix == "liftguard:{shared}"
        assert (a.connect_timeout_s, b.connect_timeout_s) == (1.5, 5.0)
        a.take("fleet-id", finished("g1"))
        await a.drain()
        assert (await a2.alabel("g1", False))["labels"] == 1
        await b.refresh()
        assert b.states()[0].labels == 0  # the other deployment's test, untouched
    finally:
        for w in (a, a2, b, named, proxy):
            await w.aclose()
