"""What a client sends, through every front end: the request fields forwarded upstream are an
allowlist, and an upstream's error reaches no client with a key in it.

- a field that is not on the allowlist (a chat template, ``echo``, beam search, a server's
  samplers or LoRA, a grammar in SGLang's names, a reasoning effort, ...) is a change of the
  generation context: reported (``covered: false``, or a ``ContextMismatchWarning``), and
  refused with HTTP 400 naming it where the front end rejects changes; a ``name`` on the
  system message too;
- an ``extra_body`` inside ``extra_body`` (which a client library would send on as a literal
  field, unchecked) is refused before anything reaches the upstream;
- an upstream error event that echoes LiteLLM's upstream key ends the answer with the
  guardrail's upstream error (HTTP 502 or an error event), never a 500, and without the key,
  in every ``guard_mode`` and ``on_block`` (a refusal too).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from frontends import FrontEnd, HTTPFrontEnd, LangChain
from litellm_harness import running_litellm
from proxy_harness import GOOD, ROLE, STOP, make_certificate, running_proxy, tokens
from scripted import CONTEXT, HAS_LITELLM, SYSTEM, TIMEOUT_S, WORDS, Upstream, ask, question_for

from adapters.proxy import Limits, StaticCertificate

CLEAN = [ROLE, *tokens([GOOD] * 3, WORDS), STOP]

UNLISTED: dict[str, Any] = {
    "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}",
    "chat_template_kwargs": {"enable_thinking": True},
    "add_generation_prompt": False,
    "continue_final_message": True,
    "echo": True,
    "best_of": 2,
    "use_beam_search": True,
    "truncate_prompt_tokens": 8,
    "vllm_xargs": {"bias": 1},
    "samplers": ["top_k", "temperature"],  # llama.cpp's sampler chain
    "lora": [{"id": 0, "scale": 1.0}],  # llama.cpp
    "regex": "w[0-9]+",  # SGLang
    "ebnf": 'root ::= "w1"',  # SGLang
    "reasoning_effort": "high",
    "verbosity": "high",
    "do_sample": True,  # TGI
}
"""Fields no certificate records and no list of known settings named: each moves the answer
(or what is shown of it), so each is a change until an operator allows it."""


def test_every_field_off_the_allowlist_is_reported(upstream: Upstream, front_end: FrontEnd) -> None:
    out = ask(upstream, front_end, "unlisted", CLEAN, extra_body=UNLISTED)
    assert set(UNLISTED) <= set(out.mismatches), (set(UNLISTED) - set(out.mismatches), out)


def test_a_name_on_the_system_message_is_reported(upstream: Upstream, front_end: FrontEnd) -> None:
    if isinstance(front_end, LangChain):
        pytest.skip("a LangChain message pair carries no name")
    question = question_for(front_end, "named system")
    upstream.events[question] = CLEAN
    messages = [
        {"role": "system", "content": SYSTEM, "name": "root"},
        {"role": "user", "content": question},
    ]
    out = front_end.ask(question, messages=messages)
    assert "messages.name" in out.mismatches, out


def test_an_extra_body_inside_extra_body_is_refused(
    upstream: Upstream, front_end: FrontEnd
) -> None:
    question = question_for(front_end, "nested extra_body")
    out = ask(upstream, front_end, "nested extra_body", CLEAN, extra_body={"extra_body": {"n": 3}})
    assert out.status == 400 and not out.certified and out.text == "", out
    if isinstance(front_end, HTTPFrontEnd):
        assert out.param == "extra_body", out
    assert not _reached(upstream, question), out


def _reached(upstream: Upstream, question: str) -> bool:
    """A request with ``question`` reached the upstream."""
    return any(question in str(r.body.get("messages")) for r in list(upstream.records))


# --- the front ends that refuse a change ------------------------------------------------------

REJECTING = ["proxy-stream", "proxy-whole", "litellm-stream", "litellm-whole"]


@pytest.fixture(scope="module")
def rejecting(
    upstream: Upstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, HTTPFrontEnd]]:
    """The proxy (``on_context_mismatch="reject"``) and LiteLLM's guardrail
    (``on_context_mismatch: reject``), each allowing one more field (``seed_id``)."""
    certificate = make_certificate(context=CONTEXT)
    out: dict[str, HTTPFrontEnd] = {}
    with contextlib.ExitStack() as stack:
        proxy = stack.enter_context(
            running_proxy(
                upstream.base_url, certificate=StaticCertificate(certificate, "conformance"),
                on_context_mismatch="reject", allow_request_fields=("seed_id",),
                limits=Limits(upstream_timeout_s=TIMEOUT_S),
            )
        )  # fmt: skip
        for stream in (True, False):
            name = f"proxy-{'stream' if stream else 'whole'}"
            out[name] = HTTPFrontEnd(name, proxy.base_url, "k", "test-model", stream)
        if HAS_LITELLM:
            settings = {"guard_mode": "buffered", "on_context_mismatch": "reject",
                        "allow_request_fields": "[seed_id]"}  # fmt: skip
            litellm = stack.enter_context(
                running_litellm(
                    tmp_path_factory.mktemp("litellm-reject"), upstream.base_url,
                    certificate=certificate, timeout_s=TIMEOUT_S, guardrails={"reject": settings},
                )
            )  # fmt: skip
            for stream in (True, False):
                name = f"litellm-{'stream' if stream else 'whole'}"
                out[name] = HTTPFrontEnd(name, litellm.base_url, litellm.key, "reject", stream)
        yield out


@pytest.fixture(params=REJECTING)
def rejecting_front_end(
    request: pytest.FixtureRequest, rejecting: dict[str, HTTPFrontEnd]
) -> HTTPFrontEnd:
    if request.param not in rejecting:
        pytest.skip('litellm is not installed (pip install "liftguard[litellm]")')
    return rejecting[request.param]


@pytest.mark.parametrize("field", list(UNLISTED))
def test_a_field_off_the_allowlist_is_refused_naming_it(
    upstream: Upstream, rejecting_front_end: FrontEnd, field: str
) -> None:
    front_end = rejecting_front_end
    question = question_for(front_end, f"reject {field}")
    out = ask(upstream, front_end, f"reject {field}", CLEAN, extra_body={field: UNLISTED[field]})
    assert (out.status, out.param) == (400, field), out
    assert not out.certified and out.text == "", out
    assert not _reached(upstream, question), out


def test_a_request_of_allowlisted_fields_is_certified_and_covered(
    upstream: Upstream, rejecting_front_end: FrontEnd
) -> None:
    out = ask(
        upstream, rejecting_front_end, "allowlisted", CLEAN,
        seed=7, user="u1", extra_body={"seed_id": "operator-allowed"},
    )  # fmt: skip
    assert out.certified and out.mismatches == [] and out.status is None, out
    assert out.text == "".join(WORDS[:3]), out


# --- an upstream error that echoes the key ----------------------------------------------------

LITELLM_KEY = "upstream-key"
"""The key LiteLLM sends its upstream (``litellm_harness.write_config``)."""


def _echoes_no_key(upstream: Upstream, front_end: FrontEnd) -> None:
    event = {"error": {"message": f"Incorrect API key provided: {LITELLM_KEY}", "code": 401}}
    out = ask(upstream, front_end, "echoed key", [ROLE, *tokens([GOOD] * 2, WORDS), event])
    assert LITELLM_KEY not in repr(out), out
    assert not out.certified and out.status != 500, out


def test_an_error_event_that_echoes_the_upstream_key_reaches_no_client(
    upstream: Upstream, front_end: FrontEnd
) -> None:
    if not front_end.name.startswith("litellm"):
        pytest.skip("LiteLLM's key: the proxy's own case is tests/proxy/test_proxy_leaks.py")
    _echoes_no_key(upstream, front_end)


@pytest.mark.skipif(not HAS_LITELLM, reason="litellm is not installed")
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_an_error_event_that_echoes_the_key_reaches_no_client_of_a_refusal(
    upstream: Upstream, front_ends: dict[str, FrontEnd], stream: bool
) -> None:
    # on_block: refusal ends a blocked answer with a refusal, never an upstream's failure
    _echoes_no_key(upstream, front_ends[f"litellm-refusal-{'stream' if stream else 'whole'}"])
