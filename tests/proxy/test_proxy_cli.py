"""``liftguard serve`` and ``liftguard traces label`` (parsers built here with
``add_serve_parser`` / ``add_label_parser``, as ``adapters.cli`` registers them)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from proxy_harness import BAD, GOOD, ROLE, STOP, Upstream, make_certificate, running_proxy, tokens
from sse_server import Reply

from adapters._labels._judge import JUDGE_PROMPT, Judge, JudgeFailure, parse_verdict
from adapters.cli._common import CommandError
from adapters.cli._label import add_label_parser
from adapters.cli._serve import add_serve_parser
from adapters.proxy import Recording

ROOT = Path(__file__).resolve().parents[2]
CLEAN = [ROLE, *tokens([GOOD] * 5), STOP]
FULL = [GOOD, GOOD, GOOD, BAD, GOOD, GOOD, GOOD]

_RUN_SERVE = textwrap.dedent(
    """
    import argparse, sys
    from adapters.cli._serve import add_serve_parser
    parser = argparse.ArgumentParser(prog="liftguard")
    add_serve_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(sys.argv[1:])
    sys.exit(args.func(args))
    """
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="liftguard")
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(sub)
    traces = sub.add_parser("traces").add_subparsers(dest="traces_command", required=True)
    add_label_parser(traces)
    return parser


# --- serve -----------------------------------------------------------------------------------


class ServeProcess:
    """``liftguard serve ...`` in a child process; its stderr lines on demand."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _RUN_SERVE, "serve", *argv],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        first = self.line()
        assert first.startswith("liftguard serve: http://127.0.0.1:"), first
        self.base_url = first.split()[2]
        self.banner = first

    def line(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.readline().strip()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(60)


@pytest.fixture
def cert_file(tmp_path: Path) -> Path:
    path = tmp_path / "cert.json"
    make_certificate().save(path)
    return path


def test_serve_guards_logs_records_and_stops_cleanly(
    upstream: Upstream, cert_file: Path, tmp_path: Path
) -> None:
    upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    upstream.replies.put(Reply([ROLE, *tokens(FULL), STOP], delay=0.0))
    serve = ServeProcess(
        ["--upstream", upstream.base_url, "--certificate", str(cert_file), "--port", "0",
         "--record", str(tmp_path / "rec")],
        env={"LIFTGUARD_UPSTREAM_KEY": "up-key"},
    )  # fmt: skip
    try:
        assert "buffered" in serve.banner and "cert.json#" in serve.banner
        with openai.OpenAI(base_url=serve.base_url, api_key="x", max_retries=0) as client:
            answer = client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": "Q?"}]
            )
            with pytest.raises(openai.UnprocessableEntityError):
                client.chat.completions.create(
                    model="test-model", messages=[{"role": "user", "content": "Q?"}]
                )
        logged = [json.loads(serve.line()) for _ in range(2)]
        # on a loopback address only loopback Host names are answered (DNS rebinding)
        rebound = httpx.get(serve.base_url.removesuffix("/v1") + "/healthz",
                            headers={"host": "attacker.example"})  # fmt: skip
        local = httpx.get(serve.base_url.removesuffix("/v1") + "/healthz")
    finally:
        status = serve.stop()
    assert (rebound.status_code, local.status_code) == (400, 200)
    assert status == 0
    assert answer.choices[0].message.content == "The capital of France is"
    assert [(line["event"], line["state"]) for line in logged] == [
        ("verdict", "certified"),
        ("verdict", "blocked"),
    ]
    assert upstream.headers_seen[0]["authorization"] == "Bearer up-key"
    recorded = [
        json.loads(line)
        for path in (tmp_path / "rec").glob("*.jsonl")
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    assert [r["id"] for r in recorded] == [line["request_id"] for line in logged]


def test_serve_from_a_store_alias(upstream: Upstream, tmp_path: Path) -> None:
    from skeleton_store import SkeletonStore

    store = SkeletonStore(tmp_path / "store")
    version = store.put("chat", {}, kind="certificate", certificate=make_certificate())
    store.promote("chat", version.version)
    upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    serve = ServeProcess(
        ["--upstream", upstream.base_url, "--certificate", f"{tmp_path / 'store'}#chat@production",
         "--port", "0", "--no-verdict-log", "--mode", "passthrough"]
    )  # fmt: skip
    try:
        with openai.OpenAI(base_url=serve.base_url, api_key="x", max_retries=0) as client:
            answer = client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": "Q?"}]
            )
    finally:
        assert serve.stop() == 0
    assert "chat@production=v1" in serve.banner
    assert (answer.model_extra or {})["liftguard"]["certificate"] == "chat@production=v1"


def test_serve_usage_errors(cert_file: Path) -> None:
    parser = _parser()
    with pytest.raises(SystemExit) as bad_mode:
        parser.parse_args(["serve", "--upstream", "http://x/v1", "--mode", "sometimes"])
    assert bad_mode.value.code == 2
    args = parser.parse_args(["serve", "--upstream", "http://x/v1"])
    with pytest.raises(CommandError) as no_cert:
        args.func(args)
    assert no_cert.value.status == 2
    args = parser.parse_args(["serve", "--upstream", "ftp://x", "--certificate", str(cert_file)])
    with pytest.raises(CommandError, match="upstream must be an http") as bad_value:
        args.func(args)
    assert bad_value.value.status == 2  # a bad argument value
    args = parser.parse_args(["serve", "--upstream", "http://x/v1", "--certificate", "nope.json"])
    with pytest.raises(OSError):
        args.func(args)


def test_serve_beyond_loopback_needs_a_client_key_or_says_it_needs_none(
    cert_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = _parser()
    monkeypatch.delenv("LIFTGUARD_CLIENT_KEY", raising=False)
    wide = ["serve", "--upstream", "http://x/v1", "--certificate", str(cert_file),
            "--host", "0.0.0.0"]  # fmt: skip
    args = parser.parse_args(wide)
    with pytest.raises(CommandError, match="LIFTGUARD_CLIENT_KEY") as refused:
        args.func(args)
    assert refused.value.status == 2 and "--no-client-key" in str(refused.value)
    # the check runs before anything listens: with a key, or said aloud, it passes on to
    # serving, which this port (a name that cannot be bound) then refuses
    for extra, key in (([], "k" * 32), (["--no-client-key"], None)):
        if key:
            monkeypatch.setenv("LIFTGUARD_CLIENT_KEY", key)
        args = parser.parse_args([*wide[:-1], "256.0.0.1", *extra])
        with pytest.raises(OSError):
            args.func(args)
        monkeypatch.delenv("LIFTGUARD_CLIENT_KEY", raising=False)


@pytest.mark.parametrize("name", ["../x", "a/b", "..", "a..b", ".hidden", "a\\b", "/tmp/x", ""])
def test_serve_refuses_a_record_dataset_that_is_not_a_simple_name(
    cert_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
) -> None:
    # the name starts the recording files' names: one with a path would write elsewhere
    import adapters.proxy
    from adapters.cli import main

    def served(*args: object, **kwargs: object) -> None:
        raise AssertionError("serve started with a bad record_dataset")

    monkeypatch.setattr(adapters.proxy, "serve", served)
    record = tmp_path / "rec"
    argv = ["serve", "--upstream", "http://127.0.0.1:9/v1", "--certificate", str(cert_file),
            "--record", str(record), "--record-dataset", name]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("liftguard serve: error: --record-dataset must be a simple name")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cert.json"]  # nothing written


def test_a_recorder_takes_only_a_simple_dataset_name(tmp_path: Path) -> None:
    from adapters._proxy._recording import Recorder
    from adapters._serving._metrics import ProxyMetrics
    from adapters.proxy import ProxyConfig, StaticCertificate

    with pytest.raises(ValueError, match="record_dataset must be a simple name"):
        Recorder(tmp_path, metrics=ProxyMetrics(), dataset="../x")
    source = StaticCertificate(make_certificate(), "cert")
    with pytest.raises(ValueError, match=r"recording\.dataset must be a simple name"):
        Recording(str(tmp_path), dataset="a/b")
    for name in ("proxy", "triviaqa_smollm2", "run-2026.11", "A1"):
        recording = Recording(str(tmp_path), dataset=name)
        assert ProxyConfig(upstream="http://x/v1", certificate=source, recording=recording)


# --- traces label ----------------------------------------------------------------------------


@pytest.fixture
def recorded(upstream: Upstream, tmp_path: Path) -> Iterator[Path]:
    """Three recorded answers: two complete (one says Paris), one blocked early."""
    paris = [ROLE, *tokens([GOOD] * 6), STOP]  # "The capital of France is Paris"
    rome = [ROLE, *tokens([GOOD] * 5, ["Rome", " is", " the", " capital", "."]), STOP]
    upstream.replies.put(Reply(paris, delay=0.0))
    upstream.replies.put(Reply(rome, delay=0.0))
    upstream.replies.put(Reply([ROLE, *tokens(FULL), STOP], delay=0.0))
    recording = Recording(str(tmp_path / "rec"))
    with (
        running_proxy(upstream.base_url, recording=recording, mode="observe") as p,
        openai.OpenAI(base_url=p.base_url, api_key="x", max_retries=0) as client,
    ):
        for question in ("What is the capital of France?", "Capital of France?", "Q3?"):
            client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": question}]
            )
    (path,) = (tmp_path / "rec").glob("*.jsonl")
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    lines[2]["complete"] = False  # as if blocked early in buffered mode
    lines.append({**lines[0], "id": "no-logprobs", "tokens": [{"text": "x", "logprob": None}]})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    yield path


def _label(argv: list[str]) -> int:
    args = _parser().parse_args(["traces", "label", *argv])
    return int(args.func(args))


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_label_by_references(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refs = tmp_path / "refs.jsonl"
    refs.write_text(
        json.dumps({"question": "What is the capital of France?", "answer": ["Paris"]}) + "\n"
        + json.dumps({"question": "Capital of France?", "answer": "Paris"}) + "\n",
        encoding="utf-8",
    )  # fmt: skip
    out = tmp_path / "labelled.jsonl"
    assert _label(["--traces", str(recorded), "--references", str(refs), "--out", str(out)]) == 0
    labelled = _read(out)
    assert [(t["question"], t["correct"]) for t in labelled] == [
        ("What is the capital of France?", True),
        ("Capital of France?", False),
    ]
    assert labelled[0]["references"] == ["Paris"]
    keys = list(labelled[0])
    assert keys[keys.index("answer") + 1] == "correct"  # where the trace format has it
    summary = capsys.readouterr().err
    assert "labelled 2 of 4 traces" in summary and "(1 correct)" in summary
    assert "skipped: incomplete 1" in summary and "skipped: no usable logprobs 1" in summary


def test_label_by_an_llm_judge(
    recorded: Path, upstream: Upstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def judge(body: dict[str, Any]) -> Reply:
        prompt = body["messages"][1]["content"]
        if "Rome" in prompt:
            return Reply(body={"choices": [{"message": {"content": "Maybe."}}]})
        return Reply(body={"choices": [{"message": {"content": " correct.\n"}}]})

    upstream.responder = judge
    out, left = tmp_path / "labelled.jsonl", tmp_path / "left.jsonl"
    status = _label(
        ["--traces", str(recorded), "--judge", upstream.base_url, "--judge-model", "judge-1",
         "--out", str(out), "--unlabelled", str(left)]
    )  # fmt: skip
    assert status == 0
    assert [(t["question"], t["correct"]) for t in _read(out)] == [
        ("What is the capital of France?", True)
    ]
    assert [t["question"] for t in _read(left)] == ["Capital of France?"]
    assert "unlabelled: judge_unparseable 1" in capsys.readouterr().err
    sent = upstream.records[-1].body
    assert (sent["model"], sent["temperature"]) == ("judge-1", 0)


def test_the_judge_is_parsed_strictly(upstream: Upstream) -> None:
    assert parse_verdict("CORRECT") is True and parse_verdict(" incorrect.\n") is False
    for bad in ("Correct, Paris is right", "YES", "", None, "CORRECT!"):
        with pytest.raises(JudgeFailure):
            parse_verdict(bad)
    upstream.replies.put(Reply(status=500, body={"error": {"message": "down"}}))
    with Judge(upstream.base_url, "j") as judge, pytest.raises(JudgeFailure) as failed:
        judge.judge("Q?", "A")
    assert failed.value.reason == "http_500"
    assert "{answer}" in JUDGE_PROMPT and "{references}" in JUDGE_PROMPT


def test_label_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="give --references FILE or --judge URL"):
        _label(["--traces", "x", "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit):  # --references and --judge exclude each other
        _parser().parse_args(["traces", "label", "--traces", "x", "--references", "r",
                              "--judge", "http://j/v1", "--out", str(tmp_path / "o")])
    with pytest.raises(CommandError, match="--judge-model"):
        _label(["--traces", "x", "--judge", "http://j/v1", "--out", str(tmp_path / "o")])
    with pytest.raises(CommandError, match="no such file"):
        _label(["--traces", "missing", "--references", "r", "--out", str(tmp_path / "o")])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q"}\n', encoding="utf-8")
    refs = tmp_path / "refs.jsonl"
    refs.write_text('{"question": "q", "answer": "a"}\n', encoding="utf-8")
    with pytest.raises(CommandError, match=r"bad.jsonl:1: expected 'answer'"):
        _label(["--traces", str(bad), "--references", str(refs), "--out", str(tmp_path / "o")])


def test_a_shutdown_ends_answers_in_flight_with_an_error_event(
    upstream: Upstream, cert_file: Path
) -> None:
    """SIGTERM with an answer still streaming (its upstream stalled): before the graceful
    shutdown runs out, the answer ends with a ``proxy_shutdown`` error event and its upstream
    request is closed, instead of a stream cut off with a traceback."""
    upstream.replies.put(Reply([ROLE, *tokens([GOOD, GOOD])], hold_after=3, stall=True,
                               hold_timeout=60))  # fmt: skip
    serve = ServeProcess(
        ["--upstream", upstream.base_url, "--certificate", str(cert_file), "--port", "0",
         "--mode", "passthrough", "--shutdown-grace", "3", "--no-verdict-log"]
    )  # fmt: skip
    try:
        with httpx.Client(timeout=60) as client, client.stream(
            "POST", f"{serve.base_url}/chat/completions",
            json={"model": "test-model", "messages": [{"role": "user", "content": "Q?"}],
                  "stream": True},
        ) as response:  # fmt: skip
            lines = response.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            assert '"content"' in first  # the answer is streaming
            serve.proc.send_signal(signal.SIGTERM)
            rest = [line for line in lines if line.startswith("data: ")]
        status = serve.proc.wait(60)
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()
    assert status == 0
    error = json.loads(rest[-1].removeprefix("data: "))["error"]
    assert error["code"] == "proxy_shutdown" and "shut down" in error["message"]
    assert upstream.last(timeout=30).client_closed
    assert serve.proc.stderr is not None
    assert "Traceback" not in serve.proc.stderr.read()
