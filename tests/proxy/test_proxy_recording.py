"""``--record DIR``: every guarded answer as one trace line, off the request path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
from proxy_harness import BAD, GOOD, ROLE, STOP, Upstream, VerdictLines, running_proxy, tokens
from sse_server import Reply

from adapters._proxy._recording import AnswerRecord, Recorder
from adapters._serving._metrics import ProxyMetrics
from adapters.proxy import Recording

FULL = [GOOD, GOOD, GOOD, BAD, GOOD, GOOD, GOOD]
CLEAN = [ROLE, *tokens([GOOD] * 5), STOP]


def _read(directory: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(directory.glob("*.jsonl")):
        out += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return out


async def _ask(base_url: str, question: str) -> str | None:
    """The answer's request id (from the verdict), whether it was certified or not."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0)
    try:
        answer = await client.chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": question}]
        )
        return str((answer.model_extra or {})["liftguard"]["request_id"])
    except openai.APIStatusError as exc:
        assert isinstance(exc.body, dict)
        return str(exc.body["liftguard"]["request_id"])
    finally:
        await client.close()


async def test_every_answer_is_recorded_as_an_unlabelled_trace_line(
    upstream: Upstream, tmp_path: Path
) -> None:
    upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    upstream.replies.put(Reply([ROLE, *tokens(FULL), STOP], delay=0.0))
    upstream.replies.put(Reply([ROLE, *tokens([GOOD] * 3)], delay=0.0, done=False))
    with running_proxy(upstream.base_url, recording=Recording(str(tmp_path), dataset="demo")) as p:
        ids = [await _ask(p.base_url, f"question {i}?") for i in range(3)]
    lines = _read(tmp_path)
    assert [line["id"] for line in lines] == ids
    clean, blocked, cut = lines
    assert all("correct" not in line for line in lines)  # no label: `traces label` adds it
    assert clean["dataset"] == "demo" and clean["model"] == "test-model"
    assert clean["question"] == "question 0?"
    assert clean["messages"] == [{"role": "user", "content": "question 0?"}]
    assert clean["answer"] == "The capital of France is"
    assert clean["vocab_size"] == 50_000
    assert [t["text"] for t in clean["tokens"]] == ["The", " capital", " of", " France", " is"]
    assert [t["logprob"] for t in clean["tokens"]] == [GOOD] * 5
    first = clean["tokens"][0]
    assert first["top"] == [[None, GOOD], [None, -5.0], [None, -6.0], [None, -7.0], [None, -8.0]]
    assert first["top_text"] == ["The", "alt0", "alt1", "alt2", "alt3"]
    assert (first["id"], first["entropy"], first["logz"]) == (None, None, {})
    assert first["bytes"] == list(b"The")
    assert (clean["finish_reason"], clean["complete"]) == ("stop", True)
    assert clean["verdict"]["state"] == "certified"
    assert clean["request"] == {"model": "test-model"}
    # blocked at its 4th token: the upstream was closed, so the trace is a prefix
    assert blocked["verdict"]["cause"] == "below_threshold"
    assert len(blocked["tokens"]) == 4 and blocked["complete"] is False
    assert (cut["verdict"]["cause"], cut["complete"], cut["finish_reason"]) == (
        "truncated",
        False,
        None,
    )


async def test_recording_rotates_files_by_size(upstream: Upstream, tmp_path: Path) -> None:
    for _ in range(6):
        upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    with running_proxy(upstream.base_url, recording=Recording(str(tmp_path), max_bytes=4096)) as p:
        ids = [await _ask(p.base_url, f"question {i}?") for i in range(6)]
    files = sorted(tmp_path.glob("*.jsonl"))
    assert len(files) > 1
    assert all(f.stat().st_size <= 4096 for f in files)
    assert [line["id"] for line in _read(tmp_path)] == ids


async def test_a_failing_disk_never_fails_a_request(
    upstream: Upstream, tmp_path: Path, lines: VerdictLines
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    for _ in range(3):
        upstream.replies.put(Reply(list(CLEAN), delay=0.0))
    with running_proxy(upstream.base_url, recording=Recording(str(blocker / "traces"))) as p:
        ids = [await _ask(p.base_url, f"question {i}?") for i in range(3)]
        for _ in range(3):
            await lines.next()
        recorder = p.proxy.recorder
        assert recorder is not None and recorder.flush(10)
        metrics = httpx.get(f"{p.url}/metrics").text
        health = httpx.get(f"{p.url}/healthz").json()
    assert all(ids)  # every answer was served
    assert 'liftguard_records_dropped_total{reason="disk"} 3.0' in metrics
    assert health["recording"]["dropped"] == 3 and health["recording"]["written"] == 0


def _record(i: int) -> AnswerRecord:
    return AnswerRecord(
        request_id=f"r{i}", model_id="m", vocab_size=10, top_k=0, messages=[], settings={},
        text=["x"], entries=[], finish_reason="stop", complete=True, verdict={},
    )  # fmt: skip


def test_a_full_queue_drops_and_counts_without_blocking(tmp_path: Path) -> None:
    metrics = ProxyMetrics()
    recorder = Recorder(tmp_path, metrics=metrics, queue_size=2)  # writer not started yet
    assert [recorder.submit(_record(i)) for i in range(4)] == [True, True, False, False]
    assert metrics.records_dropped.labels(reason="queue_full")._value.get() == 2
    recorder.start()
    assert recorder.flush(10)
    recorder.close()
    assert [line["id"] for line in _read(tmp_path)] == ["r0", "r1"]
    assert recorder.written == 2 and recorder.dropped == 2
