"""500 concurrent streams through one proxy: no cross-talk, memory flat across batches,
and recording under load loses no answer.

The upstream (``echo_upstream``, asyncio) answers each request with words of its
own question, so an answer that reached the wrong client, or a trace line that
mixed two answers, shows. After a first batch has warmed every cache and pool, and
once the proxy is back to its idle tasks and open connections, two further batches
must not grow (1) the number of memory blocks the project's own code keeps allocated
(``tracemalloc``; the proxy runs in this process) by half a block per stream and batch,
nor their bytes by more than 256 per stream and batch, nor (2) the number of live objects
of the project's and Starlette's classes by more than 5. A leak of anything per stream
adds a block per stream and batch; without one, what the project's code holds after a
batch is 420 to 700 small blocks (what Python's free lists and the upstream client's
kept-alive connections hold, set by the machine's timing), -8 to +34 KB apart. What the whole
process keeps is only bounded coarsely, at 16 KB per stream: the event loop, uvicorn, h11
and the upstream client's pool keep
buffers whose amount after a batch varies with the timing of the machine (measured:
up to +2.4 MB over a batch), and asyncio's weak set of all tasks keeps a hash table
sized by the batch's peak of concurrent tasks (+256 or +512 KiB in one allocation),
left out of the count. ``pytest -s`` prints the numbers.
"""

from __future__ import annotations

import asyncio
import gc
import json
import tracemalloc
from pathlib import Path

import openai
import pytest
from proxy_harness import ProxyServer, echo_answer, echo_upstream, running_proxy

from adapters.proxy import Recording

STREAMS = 500
BATCHES = 4


async def _one(client: openai.AsyncOpenAI, question: str) -> tuple[str, str, str]:
    stream = await client.chat.completions.create(
        model="test-model", messages=[{"role": "user", "content": question}], stream=True
    )
    text, state = [], ""
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
        extra = chunk.model_extra or {}
        if "liftguard" in extra:
            state = extra["liftguard"]["state"]
    return question, "".join(text), state


async def _batch(client: openai.AsyncOpenAI, batch: int) -> None:
    questions = [f"b{batch} q{i} {i * 7919 % 1000}" for i in range(STREAMS)]
    results = await asyncio.gather(*(_one(client, q) for q in questions))
    for question, text, state in results:
        assert text == "".join(echo_answer(question)), (question, text)
        assert state == "certified", question


async def _idle_tasks(proxy: ProxyServer) -> int:
    """The proxy's own tasks once it has started, before any request."""
    while not proxy.server.started:
        await asyncio.sleep(0.01)
    return len(asyncio.all_tasks())


async def _settle(proxy: ProxyServer, idle: int, deadline_s: float = 60.0) -> None:
    """On the proxy's loop: wait until every request cycle has ended and every client
    connection is closed. The client reads the last chunk before the proxy has closed
    its side, and idle keep-alive connections hold buffers whose number varies from
    batch to batch; measured before this, both count as noise, not as growth."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    state = proxy.server.server_state
    while len(asyncio.all_tasks()) > idle or state.connections:
        assert loop.time() < end, "the proxy did not settle after the batch"
        await asyncio.sleep(0.01)


_WEAKSET = tracemalloc.Filter(False, "*/_weakrefset.py")
_OURS = [tracemalloc.Filter(True, f"*/{p}/*") for p in ("adapters", "guardrail", "skeleton_store")]


def _traced() -> tuple[int, int, int, int]:
    """What stays allocated in all (less the hash tables of weak sets), what stays allocated
    by the project's own code (in a frame of its packages: bytes and blocks), and the number
    of live objects of the project's and Starlette's classes (requests, responses, guarded
    streams)."""
    gc.collect()
    snapshot = tracemalloc.take_snapshot()
    rest = snapshot.filter_traces([_WEAKSET]).statistics("filename")
    ours = snapshot.filter_traces(_OURS).statistics("filename")
    live = sum(1 for o in gc.get_objects() if _counted(str(type(o).__module__)))
    return (sum(s.size for s in rest), sum(s.size for s in ours), sum(s.count for s in ours),
            live)  # fmt: skip


_LIVE = ("adapters", "guardrail", "skeleton_store", "starlette")


def _counted(module: str) -> bool:
    return module.startswith(_LIVE)


@pytest.mark.slow
async def test_500_concurrent_streams(tmp_path: Path) -> None:
    recording = Recording(str(tmp_path))
    with echo_upstream() as upstream, running_proxy(upstream, recording=recording) as proxy:
        idle = proxy.call(_idle_tasks(proxy))
        sizes = []
        for batch in range(BATCHES):  # batch 0 warms pools, caches, lazily built objects
            async with openai.AsyncOpenAI(
                base_url=proxy.base_url, api_key="k", max_retries=0, timeout=120
            ) as client:
                await _batch(client, batch)
            assert proxy.proxy.recorder.flush(60)
            proxy.call(_settle(proxy, idle), timeout=90)
            if batch == 0:
                tracemalloc.start()
            else:
                sizes.append(_traced())
        tracemalloc.stop()
        recorder = proxy.proxy.recorder
    growth, own, blocks, live = (b - a for a, b in zip(sizes[0], sizes[-1], strict=True))
    print("after each batch (bytes in all, bytes and blocks of the project's code, live "
          "objects):", sizes)  # fmt: skip
    batches = len(sizes) - 1
    assert blocks < batches * STREAMS // 2, f"the project's code kept {blocks} more blocks"
    assert own < batches * 256 * STREAMS, f"the project's code kept {own} more bytes"
    assert live <= 5, f"{live} more live objects of the project and Starlette after one batch"
    assert growth < 16 * 1024 * STREAMS, f"memory grew by {growth} bytes over one batch"
    lines = [
        json.loads(line)
        for path in sorted(tmp_path.glob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    assert len(lines) == STREAMS * BATCHES and recorder.dropped == 0
    assert len({line["id"] for line in lines}) == len(lines)
    for line in lines:  # each trace holds its own question's answer, nothing mixed
        assert line["answer"] == "".join(echo_answer(line["question"])).strip()
        assert [t["text"] for t in line["tokens"]] == echo_answer(line["question"])
    asked = {f"b{b} q{i} {i * 7919 % 1000}" for b in range(BATCHES) for i in range(STREAMS)}
    assert {line["question"] for line in lines} == asked
