"""Guarded Anthropic streams: the real SDK against a loopback server, scored by SmolLM2.

The server (a ``ThreadingHTTPServer`` on 127.0.0.1, free port) answers
``POST /v1/messages`` with a scripted answer in Anthropic's SSE wire format
(``event: <type>`` + ``data: {json}``: message_start, content_block_start,
ping, content_block_delta/text_delta..., content_block_stop, message_delta,
message_stop; or an ``event: error`` mid-stream), one event per ``delay``
seconds. Before each write it checks whether the client closed the connection,
so a test can tell that a BLOCK stopped the request before the answer ended.
The text arrives in deltas of 1-4 characters, split mid-word.

Numbers (demo calibration: aggregate "min", tau 9.43, UniformSkeleton(49152),
so a token blocks when its lift ``logprob + 10.80`` is below 9.43): the greedy
answer "The chemical symbol for gold is Au." has lifts 10.56-10.80 (certified
at the end); in the wrong answer " Z" of "Zq" has lift about 1.7 (blocked at
token 7, margin about 7.7 nats, about 20 deltas before the end).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import numpy as np
import pytest
from sse_server import peer_closed, serving

from adapters._local._model import SMOLLM2_SYSTEM, LocalModel, smollm2_chat_prompt
from adapters._providers._anthropic import (
    anthropic_scorer_prompt,
    guard_anthropic_stream,
    guard_anthropic_stream_sync,
    guarded_message,
)
from adapters._providers._scorer import LocalTextScorer, stable_prefix_length
from adapters.local import smollm2_certificate
from guardrail import (
    Cause,
    ConfigError,
    GuardrailBlocked,
    Monitor,
    State,
    StreamPolicy,
    StreamTruncated,
    UniformSkeleton,
)

pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')

QUESTION = "What is the chemical symbol for gold?"
WRONG = "The chemical symbol for gold is Zq, as every chemist knows from the periodic table."
MESSAGES: Any = [{"role": "user", "content": QUESTION}]
HOLD = "hold"  # pseudo event: the server pauses until the client closes (or 60 s pass)
SIZES = (3, 1, 4, 2)  # delta lengths, cycled: " c", "hemi", ... (splits words)


# --- the scripted Anthropic SSE server --------------------------------------------------------


@dataclass
class Record:
    body: dict[str, Any]
    total: int
    sent: int = 0
    client_closed: bool = False
    done: threading.Event = field(default_factory=threading.Event)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: list[tuple[str, dict[str, Any]]] = []
        self.delay = 0.01
        self.records: list[Record] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def last(self) -> Record:
        rec = self.records[-1]
        assert rec.done.wait(5), "server still streaming"
        return rec


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        assert self.path == "/v1/messages", self.path
        rec = Record(body, sum(name != HOLD for name, _ in self.server.script))
        self.server.records.append(rec)
        try:
            self._serve(rec)
        except (BrokenPipeError, ConnectionResetError):
            rec.client_closed = True
        finally:
            self.close_connection = True
            rec.done.set()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _serve(self, rec: Record) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for name, data in self.server.script:
            if name == HOLD:  # wait (up to 60 s) for the client to hang up
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and not peer_closed(self.connection):
                    time.sleep(0.01)
            if peer_closed(self.connection):
                rec.client_closed = True
                return
            if name == HOLD:
                continue
            self._chunk(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            rec.sent += 1
            time.sleep(self.server.delay)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def deltas(text: str) -> list[str]:
    out, i, k = [], 0, 0
    while i < len(text):
        n = SIZES[k % len(SIZES)]
        out.append(text[i : i + n])
        i, k = i + n, k + 1
    return out


def script(
    text: str, *, error_after: int | None = None, thinking: bool = False, hold: str | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """Anthropic SSE events streaming ``text`` (an ``error`` event after ``error_after`` deltas;
    a thinking block first if ``thinking``; a HOLD before the delta that completes ``hold``,
    so that a slow scorer cannot fall behind a server that already sent everything)."""
    usage = {"input_tokens": 12, "output_tokens": 1}
    message: dict[str, Any] = {
        "id": "msg_test", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage,
    }  # fmt: skip
    ev: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": message})
    ]
    block = 0
    if thinking:
        start = {"type": "thinking", "thinking": "", "signature": ""}
        ev.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": start},
            )
        )
        for d in (
            {"type": "thinking_delta", "thinking": "Gold is Au. Zq Zq"},
            {"type": "signature_delta", "signature": "sig"},
        ):
            ev.append(
                ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": d})
            )
        ev.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
        block = 1
    start = {"type": "text", "text": ""}
    ev.append(
        (
            "content_block_start",
            {"type": "content_block_start", "index": block, "content_block": start},
        )
    )
    ev.append(("ping", {"type": "ping"}))
    sent_chars, hold_at = 0, None if hold is None else text.index(hold) + len(hold)
    for i, piece in enumerate(deltas(text)):
        if hold_at is not None and sent_chars < hold_at <= sent_chars + len(piece):
            ev.append((HOLD, {}))
        sent_chars += len(piece)
        if i == error_after:
            err = {"type": "overloaded_error", "message": "Overloaded"}
            ev.append(("error", {"type": "error", "error": err}))
            return ev
        d = {"type": "text_delta", "text": piece}
        ev.append(
            ("content_block_delta", {"type": "content_block_delta", "index": block, "delta": d})
        )
    ev.append(("content_block_stop", {"type": "content_block_stop", "index": block}))
    stop = {"stop_reason": "end_turn", "stop_sequence": None}
    ev.append(
        ("message_delta", {"type": "message_delta", "delta": stop, "usage": {"output_tokens": 20}})
    )
    ev.append(("message_stop", {"type": "message_stop"}))
    return ev  # fmt: skip


@pytest.fixture
def server() -> Iterator[Server]:
    with serving(Server()) as srv:
        yield srv


@pytest.fixture
async def client(server: Server) -> AsyncIterator[anthropic.AsyncAnthropic]:
    c = anthropic.AsyncAnthropic(base_url=server.base_url, api_key="test", max_retries=0)
    yield c
    await c.close()


# --- the scorer model -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model() -> LocalModel:
    return LocalModel()


@pytest.fixture(scope="module")
def prompt() -> str:
    return smollm2_chat_prompt(QUESTION)


@pytest.fixture(scope="module")
def greedy(model: LocalModel, prompt: str) -> str:
    """SmolLM2's own answer ("The chemical symbol for gold is Au.")."""
    return "".join(t.text for t in model.generate(prompt))


def new_monitor(model: LocalModel) -> Monitor:
    cal = smollm2_certificate().calibration
    assert cal is not None and cal.policy is not None
    policy = StreamPolicy.from_dict(cal.policy)
    return Monitor.lift(policy, cal.tau, skeleton=UniformSkeleton(model.vocab_size))


async def collect(gen: Any, out: list[str]) -> None:
    async with contextlib.aclosing(gen) as texts:
        async for text in texts:
            out.append(text)


# --- incremental scoring ----------------------------------------------------------------------


def test_stable_prefix_holds_the_last_word_and_line_breaks() -> None:
    assert stable_prefix_length("The chem") == 3
    assert stable_prefix_length("The chemical ") == 12
    assert stable_prefix_length("The") == stable_prefix_length(" chem") == 0
    assert stable_prefix_length("a  b") == 1
    assert stable_prefix_length("Au.\nIt is") == 6  # not before "\n" (".\n" may be one token)
    assert stable_prefix_length("Au.\nIt") == 0
    assert stable_prefix_length("x y\u00a0z") == 1  # a run with other whitespace is skipped


def test_tokens_become_final_at_the_next_whitespace(model: LocalModel, prompt: str) -> None:
    scorer = LocalTextScorer(model, prompt)
    assert [e.text for e in scorer.feed("The chem")] == ["The"]
    assert scorer.feed("ical") == [] and scorer.pending == " chemical"
    assert [e.text for e in scorer.feed(" sy")] == [" chemical"]
    assert [e.text for e in scorer.finish()] == [" sy"]
    assert scorer.finish() == [] and scorer.token_ids == tuple(model.tokenize("The chemical sy"))


def test_incremental_scoring_equals_whole_text_scoring(model: LocalModel, prompt: str) -> None:
    text = WRONG
    scorer = LocalTextScorer(model, prompt)
    events = [e for d in deltas(text) for e in scorer.feed(d)] + scorer.finish()
    ids = model.tokenize(text)
    assert [e.token_id for e in events] == ids
    assert [e.index for e in events] == list(range(len(ids)))
    assert b"".join(e.bytes or b"" for e in events) == text.encode()
    whole = model.score(prompt, ids)  # llama.cpp batch-size noise: well under 0.3 nats
    np.testing.assert_allclose(np.array([e.logprob for e in events], float), whole, atol=0.3)


def test_token_boundaries_survive_any_split(model: LocalModel, prompt: str) -> None:
    """Fed one character at a time (every split point), the tokens are those of the whole text:
    double spaces, a contraction, digits, punctuation before a line break, multi-byte text."""
    text = "It's  Au (79).\nGold \u91d1, café\n\n ok"
    scorer = LocalTextScorer(model, prompt)
    events = [e for ch in text for e in scorer.feed(ch)] + scorer.finish()
    assert [e.token_id for e in events] == model.tokenize(text)
    assert scorer.text == text and scorer.pending == ""


def test_scorer_checks_its_inputs(model: LocalModel, prompt: str) -> None:
    with pytest.raises(ConfigError):
        LocalTextScorer(model, "")
    with pytest.raises(ConfigError):
        LocalTextScorer(object(), prompt)  # type: ignore[arg-type]
    scorer = LocalTextScorer(model, prompt)
    scorer.finish()
    with pytest.raises(Exception, match="finish"):
        scorer.feed("x")


# --- guarded streams against the real SDK -----------------------------------------------------


async def test_certified_answer_is_released_in_buffered_mode(
    server: Server, client: anthropic.AsyncAnthropic, model: LocalModel, greedy: str
) -> None:
    server.script = script(greedy, thinking=True)
    mon, out = new_monitor(model), list[str]()
    gen = guarded_message(
        client, monitor=mon, scorer_model=model, model="claude-test", max_tokens=64,
        messages=MESSAGES,
    )  # fmt: skip
    await collect(gen, out)
    assert out == [greedy]  # "min" policy: certified by the final rule, released at the end
    assert mon.verdict.state is State.CERTIFIED and mon.verdict.t == len(model.tokenize(greedy))
    assert mon.verdict.mean > mon.tau + 1.0
    rec = server.last()
    assert rec.body["stream"] is True and rec.body["messages"] == MESSAGES
    assert rec.sent == rec.total and not rec.client_closed


async def test_blocked_answer_yields_nothing_and_stops_upstream(
    server: Server, client: anthropic.AsyncAnthropic, model: LocalModel, prompt: str
) -> None:
    server.script = script(WRONG, hold="Zq, as every")  # " Z" is scored once " as" arrives
    mon, out = new_monitor(model), list[str]()
    stream = await client.messages.create(
        model="claude-test", max_tokens=64, messages=MESSAGES, stream=True
    )
    with pytest.raises(GuardrailBlocked) as info:
        await collect(guard_anthropic_stream(stream, mon, LocalTextScorer(model, prompt)), out)
    assert out == []
    verdict = info.value.verdict
    assert verdict is mon.verdict and verdict.state is State.BLOCKED and verdict.final
    assert verdict.t == 7  # The chemical symbol for gold is | Z
    assert "blocked" in verdict.reason and verdict.reason in str(info.value)
    rec = server.last()
    assert rec.client_closed and rec.sent < rec.total - 10  # stopped well before the end


class _ThreadNoting(LocalTextScorer):
    """A scorer that notes the thread each text delta is scored on."""

    threads: set[int]

    def feed(self, text: str) -> list[Any]:
        self.threads = {*getattr(self, "threads", set()), threading.get_ident()}
        return super().feed(text)


async def test_the_scorer_runs_off_the_event_loop(
    server: Server, client: anthropic.AsyncAnthropic, model: LocalModel, prompt: str, greedy: str
) -> None:
    server.script = script(greedy)
    scorer = _ThreadNoting(model, prompt)
    stream = await client.messages.create(
        model="claude-test", max_tokens=64, messages=MESSAGES, stream=True
    )
    out: list[str] = []
    await collect(guard_anthropic_stream(stream, new_monitor(model), scorer), out)
    assert out == [greedy]
    assert scorer.threads and threading.get_ident() not in scorer.threads


async def test_passthrough_shows_scored_words_until_the_block(
    server: Server, client: anthropic.AsyncAnthropic, model: LocalModel
) -> None:
    server.script = script(WRONG, hold="Zq, as every")
    mon, out = new_monitor(model), list[str]()
    gen = guarded_message(
        client, monitor=mon, scorer_model=model, mode="passthrough", on_block="stop",
        model="claude-test", max_tokens=64, messages=MESSAGES,
    )  # fmt: skip
    await collect(gen, out)  # on_block="stop": ends quietly
    assert "".join(out) == "The chemical symbol for gold is"
    assert mon.verdict.state is State.BLOCKED
    assert server.last().client_closed


async def test_error_event_mid_stream_raises_the_sdk_error(
    server: Server, client: anthropic.AsyncAnthropic, model: LocalModel, greedy: str
) -> None:
    server.script = script(greedy, error_after=6)
    mon, out = new_monitor(model), list[str]()
    gen = guarded_message(
        client, monitor=mon, scorer_model=model, model="claude-test", max_tokens=64,
        messages=MESSAGES,
    )  # fmt: skip
    with pytest.raises(anthropic.APIStatusError) as info:
        await collect(gen, out)
    assert out == [] and mon.verdict.state is State.CONTINUE
    assert isinstance(info.value.body, dict) and info.value.body["error"]["type"] == (
        "overloaded_error"
    )


async def test_missing_scorer_is_a_config_error(
    server: Server, client: anthropic.AsyncAnthropic, model: LocalModel
) -> None:
    with pytest.raises(ConfigError, match="no token log-probabilities; pass scorer_model="):
        guarded_message(client, monitor=new_monitor(model), model="claude-test", messages=MESSAGES)
    with pytest.raises(ConfigError, match="stream=True"):
        guarded_message(
            client, monitor=new_monitor(model), scorer_model=model, stream=False,
            model="claude-test", messages=MESSAGES,
        )  # fmt: skip
    assert server.records == []  # nothing was sent


def test_text_after_an_early_verdict_flows_unscored(
    model: LocalModel, prompt: str, greedy: str
) -> None:
    """Betting policy at tau 4: certified mid-answer; the held word and the rest still flow
    (no server needed: the parser also takes event dicts)."""
    text = greedy + " It comes from the Latin word aurum."
    events = [data for name, data in script(text) if name != HOLD]
    mon = Monitor.lift(StreamPolicy(), 4.0, skeleton=UniformSkeleton(model.vocab_size))
    scorer = LocalTextScorer(model, prompt)
    out = list(guard_anthropic_stream_sync(events, mon, scorer))
    assert "".join(out) == text and out[0].startswith(greedy)
    assert mon.verdict.state is State.CERTIFIED and mon.verdict.t <= len(model.tokenize(greedy))
    assert len(scorer.token_ids) < len(model.tokenize(text))  # scoring stopped


def test_sync_stream_is_guarded_too(server: Server, model: LocalModel, prompt: str) -> None:
    server.script = script("Zq is the chemical symbol for gold.", hold="Zq is the")  # blocks at Z
    mon, out = new_monitor(model), list[str]()
    with anthropic.Anthropic(base_url=server.base_url, api_key="test", max_retries=0) as c:
        stream = c.messages.create(
            model="claude-test", max_tokens=64, messages=MESSAGES, stream=True
        )
        with pytest.raises(GuardrailBlocked):
            out.extend(guard_anthropic_stream_sync(stream, mon, LocalTextScorer(model, prompt)))
    assert out == [] and mon.verdict.t == 1
    assert server.last().client_closed


def test_scorer_prompt_from_a_request() -> None:
    system = [{"type": "text", "text": "Be brief."}]
    content = [{"type": "image", "source": {}}, {"type": "text", "text": QUESTION}]
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": content},
        {"role": "assistant", "content": "The symbol is"},
    ]
    got = anthropic_scorer_prompt(messages, system)
    assert got == smollm2_chat_prompt(QUESTION, "Be brief.") + "The symbol is"
    assert anthropic_scorer_prompt(MESSAGES) == smollm2_chat_prompt(QUESTION, SMOLLM2_SYSTEM)
    with pytest.raises(ConfigError, match="scorer_prompt"):
        anthropic_scorer_prompt([{"role": "assistant", "content": "x"}])


# --- how the stream ended ---------------------------------------------------------------------


async def test_a_stream_cut_off_before_its_stop_reason_is_never_certified(
    server: Server, client: anthropic.AsyncAnthropic, model: LocalModel, greedy: str
) -> None:
    """The connection closes cleanly after the text, without message_delta/message_stop:
    the text alone would be certified, the cut-off stream is not."""
    server.script = [
        (n, d) for n, d in script(greedy) if n not in ("message_delta", "message_stop")
    ]
    mon, out = new_monitor(model), list[str]()
    gen = guarded_message(
        client, certificate=smollm2_certificate(), monitor=mon, scorer_model=model,
        model="claude-test", max_tokens=64, messages=MESSAGES,
    )  # fmt: skip
    with pytest.raises(StreamTruncated) as info:
        await collect(gen, out)
    assert out == [] and info.value.verdict.cause is Cause.TRUNCATED
    assert mon.verdict.state is State.BLOCKED and mon.verdict.t == len(model.tokenize(greedy))


@pytest.mark.parametrize(("stop_reason", "on_length", "cause"), [
    ("end_turn", "block", Cause.CERTIFIED),
    ("stop_sequence", "block", Cause.CERTIFIED),
    ("max_tokens", "answer", Cause.CERTIFIED),
    ("max_tokens", "block", Cause.LENGTH),
    ("refusal", "answer", Cause.REFUSAL),
    ("tool_use", "answer", Cause.OTHER_FINISH),
])  # fmt: skip
def test_the_stop_reason_decides_whether_the_answer_can_be_certified(
    model: LocalModel, prompt: str, greedy: str, stop_reason: str, on_length: str, cause: Cause
) -> None:
    events = [data for name, data in script(greedy) if name != HOLD]
    for data in events:
        if data["type"] == "message_delta":
            data["delta"] = {**data["delta"], "stop_reason": stop_reason}
    cal = smollm2_certificate().calibration
    assert cal is not None and cal.policy is not None
    policy = StreamPolicy.from_dict({**cal.policy, "on_length": on_length})
    mon = Monitor.lift(policy, cal.tau, skeleton=UniformSkeleton(model.vocab_size))
    out = list(
        guard_anthropic_stream_sync(events, mon, LocalTextScorer(model, prompt), on_block="stop")
    )
    assert mon.verdict.cause is cause
    assert out == ([greedy] if cause is Cause.CERTIFIED else [])
