"""The judge of ``liftguard traces label --judge``: ``--judge-timeout`` is the deadline of a
whole call, not of each read.

The judge here is a real HTTP/1.1 server on 127.0.0.1 that answers every request by
trickling one byte every 0.2 s, forever (until the test ends): either a ``200`` whose
JSON body never ends, or a header block that never ends. Each read gets its byte well
within any per-read timeout, so only a deadline on the whole call ends it. A call runs in
a thread of its own: the test fails, rather than hangs, when it outlives its deadline
(1 s) by far (10 s).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("httpx")

from sse_server import serving, token_entry

from adapters._labels._judge import Judge, JudgeFailure
from adapters._proxy._recording import AnswerRecord, record_line
from adapters.cli import main

DEADLINE = 1.0
DID_NOT_HANG = 10.0  # seconds: far past the deadline, however loaded the machine


class _Trickle(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: TrickleJudge

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.requests += 1
        if self.server.part == "headers":
            head = b"HTTP/1.1 200 OK\r\nX-Slow: "
        else:
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            head += b"Content-Length: 1000000\r\n\r\n"
        self.close_connection = True
        try:
            self.wfile.write(head)
            while not self.server.stop.wait(0.2):
                self.wfile.write(b" " if self.server.part == "body" else b"a")
        except OSError:  # the client hung up
            pass


class TrickleJudge(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, part: str) -> None:
        super().__init__(("127.0.0.1", 0), _Trickle)
        self.part = part
        self.requests = 0
        self.stop = threading.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


@pytest.fixture(params=["body", "headers"])
def trickle(request: pytest.FixtureRequest) -> Iterator[TrickleJudge]:
    with serving(TrickleJudge(request.param)) as srv:
        try:
            yield srv
        finally:
            srv.stop.set()  # ends the trickle, and so a call that did not stop by itself


def _in_thread(call: Any) -> list[Any]:
    """Run ``call()``; its result or exception, once it returned (the test fails if it
    has not within ``DID_NOT_HANG`` seconds)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(DID_NOT_HANG)
    assert not worker.is_alive(), "the judge call outlived its deadline"
    return outcome


def test_a_trickling_judge_is_cut_off_at_the_deadline(trickle: TrickleJudge) -> None:
    with Judge(trickle.base_url, "judge-1", timeout=DEADLINE) as judge:
        (failure,) = _in_thread(lambda: judge.judge("Q?", "A"))
    assert isinstance(failure, JudgeFailure), failure
    assert failure.reason == "timeout"
    assert trickle.requests == 1


def _trace(i: int) -> str:
    record = AnswerRecord(
        request_id=f"r{i}", model_id="test-model", vocab_size=50_000, top_k=5,
        messages=[{"role": "user", "content": f"Question {i}?"}], settings={},
        text=["Paris"], entries=[token_entry("Paris", -0.05)], finish_reason="stop",
        complete=True, verdict={"state": "certified"},
    )  # fmt: skip
    return record_line(record, "proxy") + "\n"


def test_label_leaves_the_answers_of_a_trickling_judge_unlabelled(
    trickle: TrickleJudge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces, out, left = tmp_path / "rec.jsonl", tmp_path / "out.jsonl", tmp_path / "left.jsonl"
    traces.write_text(_trace(0) + _trace(1), encoding="utf-8")
    argv = ["traces", "label", "--traces", str(traces), "--judge", trickle.base_url,
            "--judge-model", "judge-1", "--judge-timeout", str(DEADLINE),
            "--out", str(out), "--unlabelled", str(left)]  # fmt: skip
    (status,) = _in_thread(lambda: main(argv))
    err = capsys.readouterr().err
    assert status == 1, (status, err)  # nothing labelled
    assert out.read_text(encoding="utf-8") == ""
    left_ids = [json.loads(line)["id"] for line in left.read_text(encoding="utf-8").splitlines()]
    assert left_ids == ["r0", "r1"]
    assert "labelled 0 of 2 traces" in err and "unlabelled: judge_timeout 2" in err


SERVER_STACK = ("starlette", "uvicorn", "pydantic", "prometheus_client")


def test_the_judge_imports_without_the_server_stack() -> None:
    code = (
        "import sys\n"
        "from adapters import Judge, JudgeFailure\n"
        "Judge('http://127.0.0.1:9/v1', 'judge-1').close()\n"
        f"print(','.join(m for m in {SERVER_STACK!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


class _Correct(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.dumps({"choices": [{"message": {"content": "CORRECT"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_label_by_a_judge_needs_no_server_stack(tmp_path: Path) -> None:
    # the server stack made unimportable, as without the [serve] extra
    traces, out = tmp_path / "rec.jsonl", tmp_path / "out.jsonl"
    traces.write_text(_trace(0) + _trace(1), encoding="utf-8")
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), _Correct)) as srv:
        url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
        code = (
            "import sys\n"
            f"sys.modules.update(dict.fromkeys({SERVER_STACK!r}))\n"
            "from adapters.cli import main\n"
            f"sys.exit(main(['traces', 'label', '--traces', {str(traces)!r}, '--judge', {url!r},"
            f" '--judge-model', 'judge-1', '--out', {str(out)!r}]))\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "labelled 2 of 2 traces" in done.stderr + done.stdout
    labels = [json.loads(line)["correct"] for line in out.read_text(encoding="utf-8").splitlines()]
    assert labels == [True, True]
