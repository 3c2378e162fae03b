"""The conformance suite's front ends, started once for all its modules, and the scripted
upstream behind them (``scripted.py``); it imports the adapters' and the proxy's test
harnesses."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from frontends import SDK, FrontEnd, HTTPFrontEnd, LangChain
from litellm_harness import running_litellm
from proxy_harness import calibrated_certificate, make_certificate, running_proxy
from scripted import CONTEXT, FRONT_ENDS, HAS_LITELLM, TIMEOUT_S, Upstream
from sse_server import serving

from adapters.proxy import Limits, StaticCertificate


@pytest.fixture(scope="session")
def upstream() -> Iterator[Upstream]:
    with serving(Upstream()) as srv:
        yield srv


@pytest.fixture(scope="session")
def front_ends(
    upstream: Upstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, FrontEnd]]:
    certificate = make_certificate(context=CONTEXT)
    source = StaticCertificate(certificate, "conformance")
    out: dict[str, FrontEnd] = {
        f"sdk-{mode}": SDK(upstream.base_url, certificate, mode, TIMEOUT_S)
        for mode in ("buffered", "passthrough")
    }
    out["langchain-handler"] = LangChain(upstream.base_url, certificate, None, TIMEOUT_S)
    for mode in ("buffered", "passthrough"):
        out[f"langchain-runnable-{mode}"] = LangChain(
            upstream.base_url, certificate, mode, TIMEOUT_S
        )
    with contextlib.ExitStack() as stack:
        for mode in ("buffered", "passthrough"):
            proxy = stack.enter_context(
                running_proxy(
                    upstream.base_url,
                    certificate=source,
                    mode=mode,
                    limits=Limits(upstream_timeout_s=TIMEOUT_S),
                )
            )
            for stream in (True, False):
                name = f"proxy-{mode}-{'stream' if stream else 'whole'}"
                out[name] = HTTPFrontEnd(name, proxy.base_url, "k", "test-model", stream)
        if HAS_LITELLM:
            directory = tmp_path_factory.mktemp("litellm")
            calibrated_certificate(0.3, context=CONTEXT).save(directory / "calibrated.json")
            litellm = stack.enter_context(
                running_litellm(
                    directory,
                    upstream.base_url,
                    certificate=certificate,
                    timeout_s=TIMEOUT_S,
                    guardrails={
                        "buffered": {"guard_mode": "buffered", "on_block": "error"},
                        "passthrough": {"guard_mode": "passthrough", "on_block": "error"},
                        "refusal": {"guard_mode": "buffered", "on_block": "refusal"},
                        # (test_conformance_litellm.py: a request forgotten past the bound)
                        "bounded": {"guard_mode": "buffered", "max_pending_requests": 1},
                        # (test_conformance_litellm.py: labels, which need a risk monitor)
                        "labelled": {"guard_mode": "buffered", "certificate": "calibrated.json"},
                    },
                )
            )
            modes = ("buffered", "passthrough", "refusal", "bounded", "labelled")
            for mode in modes:  # (not in FRONT_ENDS)
                for stream in (True, False):
                    name = f"litellm-{mode}-{'stream' if stream else 'whole'}"
                    out[name] = HTTPFrontEnd(name, litellm.base_url, litellm.key, mode, stream)
        yield out


@pytest.fixture(params=FRONT_ENDS)
def front_end(request: pytest.FixtureRequest, front_ends: dict[str, FrontEnd]) -> FrontEnd:
    if request.param not in front_ends:
        pytest.skip('litellm is not installed (pip install "liftguard[litellm]")')
    return front_ends[request.param]
