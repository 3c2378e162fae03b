"""``--record s3://...`` and ``--record-format parquet``: finished recording files published
whole (to moto's S3 server, or renamed into the directory), rotated by size and by age (an
injected clock: no sleeping), and an upload that keeps failing leaves the file in the
spool, counted, never dropped."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import openai
import pytest

pytest.importorskip("pyarrow")

from proxy_harness import GOOD, ROLE, STOP, Upstream, running_proxy, tokens
from recording_helpers import ManualClock, answer_record
from s3_server import moto_s3
from sse_server import Reply

from adapters._proxy._publish import Publisher
from adapters._proxy._recording import Recorder
from adapters._serving._metrics import ProxyMetrics
from adapters.proxy import Recording
from adapters.tracefiles import convert_traces, open_trace_objects

CLEAN = [ROLE, *tokens([GOOD] * 5), STOP]


async def _ask(base_url: str, question: str) -> str:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0)
    try:
        answer = await client.chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": question}]
        )
        return str((answer.model_extra or {})["liftguard"]["request_id"])
    finally:
        await client.close()


def _objects_under(url: str, options: dict[str, Any]) -> dict[str, list[Any]]:
    """``{object name: its traces}`` of every object under ``url``."""
    import s3fs

    fs = s3fs.S3FileSystem(**options)
    out = {}
    for key in sorted(fs.ls(url.removeprefix("s3://"), refresh=True)):
        name = key.rsplit("/", 1)[-1]
        out[name] = [obj for _, obj in open_trace_objects(f"s3://{key}", storage_options=options)]
    return out


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
async def test_every_answer_lands_in_exactly_one_uploaded_object(
    upstream: Upstream, fmt: str, tmp_path: Path
) -> None:
    n = 9
    for _ in range(n):
        upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    with moto_s3("liftguard-records") as (_, url, options):
        with running_proxy(
            upstream.base_url,
            recording=Recording(
                url,
                format=fmt,  # type: ignore[arg-type]
                max_bytes=4096,  # a few answers per object: several rotations
                storage_options=options,
                spool=str(tmp_path / "spool"),
                dataset="chat",
            ),
        ) as p:
            ids = [await _ask(p.base_url, f"question {i}?") for i in range(n)]
            recorder = p.proxy.recorder
            assert recorder is not None and recorder.publisher is not None
            spool = recorder.directory
        # the proxy has shut down: the last, unfinished file was uploaded too
        objects = _objects_under(url, options)
    assert len(objects) >= 3
    assert all(name.startswith("chat-") and name.endswith(f".{fmt}") for name in objects)
    recorded = [obj["id"] for traces in objects.values() for obj in traces]
    assert sorted(recorded) == sorted(ids) and len(set(recorded)) == n  # each exactly once
    assert list(spool.iterdir()) == []  # nothing left behind


def test_a_quiet_recorder_publishes_a_file_once_it_is_old(tmp_path: Path) -> None:
    clock, target = ManualClock(), tmp_path / "records"
    target.mkdir()
    publisher = Publisher(str(target), metrics=ProxyMetrics(), fmt="parquet")
    recorder = Recorder(
        tmp_path / "spool", metrics=ProxyMetrics(), publisher=publisher, max_age_s=60.0,
        clock=clock,
    )  # fmt: skip
    recorder.start()
    try:
        recorder.submit(answer_record(0))
        assert recorder.flush(10)  # written at 1000 s: the file's age counts from there
        clock.now += 59.0
        recorder.tick()
        assert recorder.flush(10)
        publisher.flush()
        assert list(target.iterdir()) == []  # not old enough yet
        clock.now += 1.0
        recorder.tick()
        assert recorder.flush(10)
        publisher.flush()
        (published,) = target.iterdir()
        assert published.suffix == ".parquet"
        assert [o["id"] for _, o in open_trace_objects(published)] == ["r0"]
        recorder.submit(answer_record(1))  # a new file, published at close
    finally:
        recorder.close()
    ids = sorted(o["id"] for f in target.iterdir() for _, o in open_trace_objects(f))
    assert ids == ["r0", "r1"]


def test_a_failing_upload_keeps_the_file_and_counts_it(tmp_path: Path) -> None:
    pauses: list[float] = []
    metrics = ProxyMetrics()
    with moto_s3("liftguard-records") as (_, _, options):
        publisher = Publisher(
            "s3://no-such-bucket/records", metrics=metrics, storage_options=options,
            attempts=3, sleep=pauses.append,
        )  # fmt: skip
        recorder = Recorder(tmp_path, metrics=metrics, publisher=publisher, max_age_s=60.0)
        recorder.start()
        for i in range(3):
            recorder.submit(answer_record(i))
        recorder.close()
    assert pauses == [0.5, 1.0]  # 3 tries, doubling pauses
    (kept,) = publisher.kept
    assert [json.loads(line)["id"] for line in kept.read_text().splitlines()] == ["r0", "r1", "r2"]
    assert metrics.record_objects.labels(result="kept_locally")._value.get() == 1
    assert metrics.record_lines_kept._value.get() == 3


_REPLIES = (CLEAN, [ROLE, *tokens([GOOD, GOOD, -12.0, GOOD]), STOP], CLEAN[:-1])


async def _record_three(upstream: Upstream, **options: Any) -> None:
    for reply in _REPLIES:
        upstream.replies.put(Reply(list(reply), delay=0.0, done=reply is not _REPLIES[2]))
    with running_proxy(upstream.base_url, **options) as p:
        for i in range(3):
            with contextlib.suppress(openai.APIError):  # a blocked answer: recorded all the same
                await _ask(p.base_url, f"question {i}?")


async def test_a_recording_by_the_proxy_reads_the_same_from_parquet(
    upstream: Upstream, tmp_path: Path
) -> None:
    jsonl_dir, parquet_dir = tmp_path / "jsonl", tmp_path / "parquet"
    await _record_three(upstream, recording=Recording(str(jsonl_dir)))
    (recording,) = jsonl_dir.glob("*.jsonl")
    converted = tmp_path / "recording.parquet"
    convert_traces(str(recording), str(converted))
    jsonl = [o for _, o in open_trace_objects(recording)]
    assert len(jsonl) == 3 and {o["complete"] for o in jsonl} == {True, False}
    assert [o for _, o in open_trace_objects(converted)] == jsonl
    # recorded straight to Parquet (--record-format parquet): the same lines
    await _record_three(upstream, recording=Recording(str(parquet_dir), format="parquet"))
    (direct,) = parquet_dir.glob("*.parquet")
    assert list((parquet_dir / ".spool").iterdir()) == []

    def same(o: dict[str, Any]) -> list[Any]:
        return [(k, v) for k, v in o.items() if k not in ("id", "created", "verdict")]

    assert [same(o) for _, o in open_trace_objects(direct)] == [same(o) for o in jsonl]
