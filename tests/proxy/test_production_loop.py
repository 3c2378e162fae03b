"""The production loop with real parts, end to end: the proxy records answers (``--record``),
``liftguard traces label`` labels them by references, ``liftguard calibrate`` turns them into
a certificate, ``liftguard skeleton put --promote`` publishes it into the store the running
proxy reads (``STORE#chat@production``), and the next request is decided by that version.

Real parts: the proxy app under uvicorn, the openai client, the scripted SSE upstream, the
command line (``adapters.cli.main``) and the local skeleton store; a second test puts the
certificate into an S3 store (moto's server) that two proxy replicas read. Deterministic:
the recorder is drained with its ``flush()`` (a condition, not a timer) and the proxy
re-reads the alias through ``refresh_certificates()``, the hook its refresh loop calls.

The upstream's answers (``UniformSkeleton(50_000)``: lift ``logprob + 10.82``): for
question ``i`` it names ``City{i}`` (the reference, every token at -0.05) unless ``i % 3 ==
0``, when it names ``Town{i}`` with that token at ``-3 - i % 4``. The first certificate
(aggregate ``min``, tau 4) certifies both; calibrated on the labelled recording at risk 0.25
(uniform skeleton, clip ``log(0.8 * 50_000)``, the two lowest lifts), the new one certifies
the right answers only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from proxy_harness import GOOD, ROLE, STOP, Upstream, make_certificate, running_proxy, tokens
from sse_server import Reply
from test_proxy_store import s3_store  # noqa: F401 (a fixture: moto's S3 server)

from adapters.cli import main
from adapters.proxy import Recording, certificate_source
from guardrail import Certificate
from skeleton_store import SkeletonStore

N = 48


def _answer(i: int) -> tuple[list[str], list[float]]:
    if i % 3:
        return ["The", " answer", " is", f" City{i}", "."], [GOOD] * 5
    return ["The", " answer", " is", f" Town{i}", "."], [GOOD, GOOD, GOOD, -3.0 - i % 4, GOOD]


def _responder(body: dict[str, Any]) -> Reply:
    i = int(body["messages"][-1]["content"].split()[-1].rstrip("?"))
    words, logprobs = _answer(i)
    return Reply([ROLE, *tokens(logprobs, words), STOP], delay=0.0)


def _question(i: int) -> str:
    return f"Which city is number {i}?"


def _verdict(client: openai.OpenAI, i: int) -> dict[str, Any]:
    answer = client.chat.completions.create(
        model="test-model", messages=[{"role": "user", "content": _question(i)}]
    )
    return dict((answer.model_extra or {})["liftguard"])


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``liftguard ARGV``; its stdout (a failure shows its one error line)."""
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == 0, err
    return out


def _record_label_calibrate(
    proxy: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[Path, list[dict[str, Any]]]:
    """Send N questions through the proxy (half of them streamed), label the recording by
    references and calibrate a certificate on it; the certificate file and the verdicts."""
    verdicts = []
    with openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0) as client:
        for i in range(N):
            if i % 2:
                stream = client.chat.completions.create(
                    model="test-model", stream=True,
                    messages=[{"role": "user", "content": _question(i)}],
                )  # fmt: skip
                last = list(stream)[-1]
                verdicts.append(dict((last.model_extra or {})["liftguard"]))
            else:
                verdicts.append(_verdict(client, i))
    assert proxy.proxy.recorder.flush(timeout=30)  # every answer written (or counted dropped)
    recorded = sorted(str(p) for p in (tmp_path / "rec").glob("*.jsonl"))
    refs = tmp_path / "refs.jsonl"
    refs.write_text(
        "".join(json.dumps({"question": _question(i), "answer": f"City{i}"}) + "\n"
                for i in range(N)),
        encoding="utf-8",
    )  # fmt: skip
    labelled, cert = tmp_path / "labelled.jsonl", tmp_path / "cert.json"
    _cli(["traces", "label", "--traces", *recorded, "--references", str(refs),
          "--out", str(labelled)], capsys)  # fmt: skip
    out = _cli(["calibrate", "--traces", str(labelled), "--risk", "0.25", "--delta", "0.1",
                "--out", str(cert)], capsys)  # fmt: skip
    assert f"wrote the certificate {cert}" in out
    return cert, verdicts


def test_record_label_calibrate_put_promote_reaches_the_running_proxy(
    upstream: Upstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "store")
    first = tmp_path / "first.json"
    make_certificate(tau=4.0).save(first)
    put = ["skeleton", "--store", store, "put", "chat"]
    assert _cli([*put, "--certificate", str(first), "--promote", "production"], capsys) == "1\n"
    upstream.responder = _responder
    source = certificate_source(f"{store}#chat@production")
    recording = Recording(str(tmp_path / "rec"))
    with running_proxy(
        upstream.base_url, certificate=source, mode="observe", recording=recording
    ) as proxy:
        cert_path, before = _record_label_calibrate(proxy, tmp_path, capsys)
        assert _cli([*put, "--certificate", str(cert_path), "--promote", "production"],
                    capsys) == "2\n"  # fmt: skip
        assert proxy.call(proxy.proxy.refresh_certificates()) == {"*": True}
        with openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0) as client:
            right, wrong = _verdict(client, 1), _verdict(client, 3)
    labelled = [json.loads(x) for x in (tmp_path / "labelled.jsonl").read_text().splitlines()]
    assert len(labelled) == N and sum(t["correct"] for t in labelled) == N - N // 3
    assert all(t["vocab_size"] == 50_000 and t["tokens"][0]["id"] is None for t in labelled)
    assert {(v["certificate"], v["state"]) for v in before} == {("chat@production=v1", "certified")}
    cert = Certificate.load(cert_path)
    assert cert.model.model_id == "test-model" and cert.skeleton.kind == "uniform"
    assert 9.0 < cert.tau <= 10.6  # between the wrong answers' lifts and the right ones'
    assert (right["certificate"], right["state"], right["tau"]) == (
        "chat@production=v2", "certified", pytest.approx(cert.tau)
    )  # fmt: skip
    assert (wrong["certificate"], wrong["state"], wrong["cause"]) == (
        "chat@production=v2", "blocked", "below_threshold"
    )  # fmt: skip
    stored = SkeletonStore(store)
    assert stored.resolve("chat", "production") == 2
    assert stored.certificate("chat", "production").to_dict() == cert.to_dict()


def test_put_into_an_s3_store_reaches_two_replicas(
    upstream: Upstream,
    s3_store: tuple[str, dict[str, Any]],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, options = s3_store
    endpoint = options["client_kwargs"]["endpoint_url"]
    put = ["skeleton", "--store", url, "--storage-option", "key=testing",
           "--storage-option", "secret=testing",
           "--storage-option", f"client_kwargs.endpoint_url={endpoint}",
           "--storage-option", "client_kwargs.region_name=us-east-1", "put", "chat"]  # fmt: skip
    first, strict = tmp_path / "first.json", tmp_path / "strict.json"
    make_certificate(tau=4.0).save(first)
    make_certificate(tau=10.8).save(strict)  # the clean answer's lifts are 10.77
    assert _cli([*put, "--certificate", str(first), "--promote", "production"], capsys) == "1\n"
    upstream.responder = _responder

    def replica() -> Any:
        source = certificate_source(f"{url}#chat@production", storage_options=options)
        return running_proxy(upstream.base_url, certificate=source)

    with replica() as one, replica() as two:
        assert _cli([*put, "--certificate", str(strict), "--promote", "production"],
                    capsys) == "2\n"  # fmt: skip
        for p in (one, two):
            assert p.call(p.proxy.refresh_certificates()) == {"*": True}
        after = []
        for p in (one, two):
            with (
                openai.OpenAI(base_url=p.base_url, api_key="k", max_retries=0) as client,
                pytest.raises(openai.UnprocessableEntityError) as blocked,
            ):
                client.chat.completions.create(
                    model="test-model", messages=[{"role": "user", "content": _question(1)}]
                )
            assert isinstance(blocked.value.body, dict)
            after.append(blocked.value.body["liftguard"])
    assert [(v["certificate"], v["tau"]) for v in after] == [("chat@production=v2", 10.8)] * 2
