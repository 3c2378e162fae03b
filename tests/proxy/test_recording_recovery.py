"""Spool files that a run left behind are published by the next start: a ``liftguard serve``
process recording to moto's S3 server is killed (``SIGKILL``) with answers in its spool,
one of them already uploaded (as if the crash came between the upload and the delete),
one cut mid-line; a second process on the same destination publishes them, each answer
in exactly one object, and leaves nothing behind. In-process: a kept file is published
once the store answers again, replicas sharing a spool never take each other's files,
and what recovery does to a torn, a newline-less and an unreadable spool file."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

pytest.importorskip("pyarrow")

from proxy_harness import GOOD, ROLE, STOP, Upstream, make_certificate, tokens
from recording_helpers import ManualClock, answer_record
from s3_server import moto_s3
from sse_server import Reply

from adapters._proxy._publish import Publisher
from adapters._proxy._recording import AnswerRecord, Recorder, record_line
from adapters._proxy._spool import SET_ASIDE
from adapters._serving._metrics import ProxyMetrics
from adapters.tracefiles import TraceFileWriter, open_trace_objects

ROOT = Path(__file__).resolve().parents[2]
CLEAN = [ROLE, *tokens([GOOD] * 5), STOP]
DEADLINE_S = 120.0


def _until(what: str, check: Callable[[], Any]) -> Any:
    """Poll ``check`` until it returns a true value (a generous deadline, no timing
    assumption); a server that does not answer yet is polled again."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            value = check()
        except httpx.TransportError:  # not serving yet: a start that publishes left files
            value = None  # can outlast a request's own timeout on a loaded machine
        if value:
            return value
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.05)


class Serve:
    """``python -m adapters.cli serve ...`` in a child process."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "adapters.cli", "serve", *argv],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stderr is not None
        first = self.proc.stderr.readline().strip()
        assert first.startswith("liftguard serve: http://127.0.0.1:"), first
        self.base_url = first.split()[2]
        self.root = self.base_url.removesuffix("/v1")

    def ask(self, question: str) -> str:
        with openai.OpenAI(base_url=self.base_url, api_key="x", max_retries=0) as client:
            answer = client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": question}]
            )
        return str((answer.model_extra or {})["liftguard"]["request_id"])

    def recording(self) -> dict[str, Any]:
        got: dict[str, Any] = httpx.get(f"{self.root}/healthz").json()["recording"]
        return got

    def metric(self, name: str) -> float:
        for line in httpx.get(f"{self.root}/metrics").text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return 0.0

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(60)

    def stop(self) -> str:
        """Stop it cleanly; everything it wrote on stderr after its first line."""
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=120)
        assert self.proc.returncode == 0, err
        return err


def _objects(url: str, options: dict[str, Any]) -> dict[str, list[str]]:
    """``{object name: its trace ids}`` under ``url``, each object read strictly (a torn
    line would be an error)."""
    import s3fs

    fs = s3fs.S3FileSystem(**options)
    out = {}
    for key in sorted(fs.ls(url.removeprefix("s3://"), refresh=True)):
        objects = open_trace_objects(f"s3://{key}", storage_options=options)
        out[key.rsplit("/", 1)[-1]] = [obj["id"] for _, obj in objects]
    return out


def _upload(spool_file: Path, url: str, fmt: str, options: dict[str, Any]) -> None:
    """Publish ``spool_file`` as the recorder would, leaving it in the spool (a crash
    between the upload and the delete)."""
    with TraceFileWriter(f"{url}/{spool_file.stem}.{fmt}", storage_options=options) as out:
        for _, obj in open_trace_objects(spool_file):
            out.write(obj)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_killed_proxy_s_spool_is_published_by_the_next_start(
    upstream: Upstream, tmp_path: Path, fmt: str
) -> None:
    first, second = 7, 3
    for _ in range(first + second):
        upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    cert = tmp_path / "cert.json"
    make_certificate().save(cert)
    spool = tmp_path / "spool"
    with moto_s3("liftguard-records") as (endpoint, url, options):
        argv = [
            "--upstream", upstream.base_url, "--certificate", str(cert), "--port", "0",
            "--no-verdict-log", "--record", url, "--record-format", fmt,
            "--record-spool", str(spool), "--record-dataset", "chat",
            "--storage-option", f"client_kwargs.endpoint_url={endpoint}",
            "--record-max-mb", "0.008", "--record-max-age", "3600",
        ]  # fmt: skip
        serve = Serve(argv)
        try:
            ids = [serve.ask(f"question {i}?") for i in range(first)]
            _until("the answers written", lambda: serve.recording()["written"] == first)
        finally:
            serve.kill()  # no shutdown: the spool keeps what was not published
        left = sorted(spool.glob("*.jsonl"))
        assert left  # at least the file being written when it died
        _upload(left[0], url, fmt, options)  # uploaded, but the crash came before the delete
        with left[-1].open("ab") as fh:
            fh.write(b'{"id": "torn", "answer": "cut off mid-wri')  # a crash mid-write
        if fmt == "parquet":  # a conversion cut off, and one whose spool file is gone
            (spool / f"tmp-{left[-1].stem}.parquet").write_bytes(b"PAR1 cut off")
            (spool / "tmp-chat-gone.parquet").write_bytes(b"PAR1 cut off")

        serve = Serve(argv)
        try:
            rec = _until(
                "the left files published",
                lambda: (r := serve.recording())["recovered"] == len(left) and r,
            )
            ids += [serve.ask(f"question {i}?") for i in range(first, first + second)]
            recovered = serve.metric('liftguard_record_objects_total{result="recovered"}')
            aside = serve.metric('liftguard_record_objects_total{result="set_aside"}')
        finally:
            err = serve.stop()
        objects = _objects(url, options)
    assert recovered == len(left)
    published = [i for names in objects.values() for i in names]
    assert sorted(published) == sorted(ids)  # every answer in exactly one object, none torn
    assert {f"{p.stem}.{fmt}" for p in left} <= set(objects)
    assert all(name.startswith("chat-") and name.endswith(f".{fmt}") for name in objects)
    lines = [line for line in err.splitlines() if "left in the spool by an earlier run" in line]
    assert len(lines) == len(left)  # one line per recovered file
    assert sum("torn last line" in line for line in lines) == 1
    if fmt == "parquet":  # never published; kept aside and counted
        assert aside == 1 and rec["set_aside"] == [str(spool / SET_ASIDE / "tmp-chat-gone.parquet")]
        assert [p.name for p in spool.iterdir()] == [SET_ASIDE]
        assert [p.name for p in (spool / SET_ASIDE).iterdir()] == ["tmp-chat-gone.parquet"]
    else:
        assert aside == 0 and list(spool.iterdir()) == []


def _rotate(recorder: Recorder, clock: ManualClock, record: AnswerRecord) -> None:
    """Write ``record`` and publish its file (the age limit passed)."""
    assert recorder.publisher is not None
    recorder.submit(record)
    assert recorder.flush(DEADLINE_S)
    clock.now += 61.0
    recorder.tick()
    assert recorder.flush(DEADLINE_S)
    recorder.publisher.flush()


def test_a_kept_file_is_published_once_the_store_answers_again(tmp_path: Path) -> None:
    import boto3

    metrics, clock = ProxyMetrics(), ManualClock()
    with moto_s3("liftguard-records") as (endpoint, _, options):
        url = "s3://later-bucket/records"
        publisher = Publisher(url, metrics=metrics, storage_options=options, attempts=2,
                              sleep=lambda _: None)  # fmt: skip
        recorder = Recorder(tmp_path, metrics=metrics, publisher=publisher, max_age_s=60.0,
                            clock=clock)  # fmt: skip
        recorder.start()
        try:
            _rotate(recorder, clock, answer_record(0))  # no such bucket: kept
            assert len(publisher.kept) == 1 and publisher.published == 0
            boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="later-bucket")
            _rotate(recorder, clock, answer_record(1))  # published, and the kept one after it
            assert publisher.kept == [] and publisher.recovered == 1
        finally:
            recorder.close()
        objects = _objects(url, options)
    assert sorted(i for names in objects.values() for i in names) == ["r0", "r1"]
    assert metrics.record_objects.labels(result="kept_locally")._value.get() == 1
    assert metrics.record_objects.labels(result="recovered")._value.get() == 1
    assert metrics.record_lines_recovered._value.get() == 1
    assert list(tmp_path.iterdir()) == []


def _line(i: int) -> bytes:
    return record_line(answer_record(i), "proxy").encode() + b"\n"


def test_replicas_sharing_a_spool_take_only_what_no_live_process_owns(tmp_path: Path) -> None:
    target, spool = tmp_path / "records", tmp_path / "records" / ".spool"
    spool.mkdir(parents=True)
    (spool / "proxy-dead-00001.jsonl").write_bytes(_line(9))  # left by a run that died

    def replica() -> Recorder:
        publisher = Publisher(str(target), metrics=ProxyMetrics(), fmt="parquet")
        return Recorder(spool, metrics=ProxyMetrics(), publisher=publisher)

    live = replica()
    live.start()  # it recovers the dead run's file first
    assert live.publisher is not None
    live.publisher.flush()
    live.submit(answer_record(0))
    assert live.flush(DEADLINE_S)  # its file is in the spool, being written
    (mine,) = spool.glob("*.jsonl")
    other = replica()
    other.start()
    assert other.publisher is not None
    other.publisher.flush()  # its recovery is done: the live replica's file is not taken
    assert other.publisher.recovered == 0 and mine.exists()
    other.close()
    live.close()
    assert live.publisher.recovered == 1
    published = {p.name: [o["id"] for _, o in open_trace_objects(p)] for p in target.glob("*")
                 if p.is_file()}  # fmt: skip
    assert published == {"proxy-dead-00001.parquet": ["r9"], f"{mine.stem}.parquet": ["r0"]}
    assert list(spool.iterdir()) == []


def test_what_recovery_does_to_torn_unterminated_and_unreadable_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target, spool = tmp_path / "records", tmp_path / "spool"
    target.mkdir()
    spool.mkdir()
    (spool / "a.jsonl").write_bytes(_line(1) + _line(2) + b'{"id": "r3", "ans')  # torn
    (spool / "b.jsonl").write_bytes(_line(4).rstrip(b"\n"))  # whole but its newline
    (spool / "c.jsonl").write_bytes(_line(5) + b"not json\n" + _line(6))  # unreadable
    (spool / "d.jsonl").write_bytes(b'{"id": "r7", "ans')  # nothing whole
    (spool / "e.jsonl").write_bytes(b"")
    metrics = ProxyMetrics()
    publisher = Publisher(str(target), metrics=metrics, fmt="jsonl")
    with caplog.at_level(logging.WARNING, logger="adapters._proxy._publish"):
        publisher.recover(spool)
        publisher.close()  # never started: recovers here
    assert sorted(p.name for p in target.iterdir()) == ["a.jsonl", "b.jsonl"]
    assert (target / "a.jsonl").read_bytes() == _line(1) + _line(2)  # whole lines only
    assert (target / "b.jsonl").read_bytes() == _line(4)
    assert [p.name for p in spool.iterdir()] == [SET_ASIDE]
    assert [p.name for p in (spool / SET_ASIDE).iterdir()] == ["c.jsonl"]
    assert publisher.set_aside == [spool / SET_ASIDE / "c.jsonl"]
    assert metrics.record_objects.labels(result="recovered")._value.get() == 2
    assert metrics.record_lines_recovered._value.get() == 3
    assert metrics.record_objects.labels(result="set_aside")._value.get() == 1
    recovered = [r.getMessage() for r in caplog.records if "earlier run" in r.getMessage()]
    assert len(recovered) == 2 and "torn last line 3 cut off" in recovered[0]
    assert oct(os.stat(spool / SET_ASIDE).st_mode & 0o777) == "0o700"


def test_the_spool_of_a_url_is_one_per_destination(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from adapters._proxy._spool import spool_directory
    from adapters.proxy import Recording
    from guardrail import ConfigError

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    here = {"client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}
    there = {"client_kwargs": {"endpoint_url": "http://10.0.0.1:9000"}}
    a = spool_directory("s3://bucket/records", here)
    assert a == spool_directory("s3://bucket/records/", {**here, "key": "rotated"})  # same
    assert a.parent == tmp_path / "state" / "liftguard" / "record-spool"
    assert a.name.startswith("s3-bucket-records-") and a.is_dir()
    assert oct(a.stat().st_mode & 0o777) == "0o700"
    assert a != spool_directory("s3://bucket/records", there)  # another server
    assert a != spool_directory("s3://bucket/other", here)
    assert spool_directory("s3://bucket/records", here, str(tmp_path / "mine")) == (
        tmp_path / "mine"
    )
    with pytest.raises(ConfigError, match=r"recording\.spool is for a URL recording"):
        Recording(str(tmp_path / "rec"), spool=str(tmp_path / "s"))


_HOLD_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


def test_a_spool_file_locked_by_a_live_process_is_not_claimed(tmp_path: Path) -> None:
    from adapters._proxy._spool import claim, give_up, left_files

    path = tmp_path / "proxy-other-00001.jsonl"
    path.write_bytes(_line(1))
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        assert claim(path) is None and list(left_files(tmp_path)) == []
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(60)
    fd = claim(path)  # the lock ended with the process
    assert fd is not None
    try:
        assert claim(path) is None  # this process's now
    finally:
        os.close(fd)
        give_up(path)


def test_without_locks_files_are_written_and_never_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from adapters._proxy import _spool

    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.EOPNOTSUPP, "locks not supported")

    monkeypatch.setattr(_spool.fcntl, "flock", no_locks)
    target, spool = tmp_path / "records", tmp_path / "records" / ".spool"
    spool.mkdir(parents=True)
    (spool / "proxy-dead-00001.jsonl").write_bytes(_line(9))  # cannot be told from a live one
    publisher = Publisher(str(target), metrics=ProxyMetrics(), fmt="parquet")
    recorder = Recorder(spool, metrics=ProxyMetrics(), publisher=publisher)
    recorder.start()
    recorder.submit(answer_record(0))
    recorder.close()
    assert publisher.published == 1 and publisher.recovered == 0
    assert [p.name for p in spool.iterdir()] == ["proxy-dead-00001.jsonl"]  # left for a person
