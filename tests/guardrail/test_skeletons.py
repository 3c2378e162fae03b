from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from guardrail import ConfigError, TokenEvent
from guardrail._skeletons import (
    NGramSkeleton,
    TemperatureSkeleton,
    select_skeleton_kind,
    type_token_ratio,
)
from guardrail.traces import read_traces

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_ngram_is_a_distribution_at_every_context() -> None:
    model = NGramSkeleton(vocab_size=6, n=3).fit([[0, 1, 2, 1, 2, 3], [1, 2, 3, 4], [5]])
    for ctx in ([], [1], [1, 2], [4, 5], [0, 0]):
        total = sum(model.prob(ctx, t) for t in range(6))
        assert total == pytest.approx(1.0, abs=1e-12), ctx
    # seen continuations beat unseen ones after the same context
    assert model.prob([1, 2], 3) > model.prob([1, 2], 0)


def test_ngram_by_hand() -> None:
    # bigram, discount 0.5, floor 0.1, vocabulary 2, corpus "0 0 1"
    m = NGramSkeleton(vocab_size=2, n=2, discount=0.5, floor=0.1).fit([[0, 0, 1]])
    uni0 = 0.9 * 2 / 3 + 0.05
    uni1 = 0.9 * 1 / 3 + 0.05
    # after "0": counts {0: 1, 1: 1}, total 2, N1+ = 2
    assert m.prob([0], 0) == pytest.approx(0.5 / 2 + 0.5 * 2 / 2 * uni0)
    assert m.prob([0], 1) == pytest.approx(0.5 / 2 + 0.5 * 2 / 2 * uni1)
    assert m.prob([1], 0) == pytest.approx(uni0)  # unseen context: the unigram


def test_ngram_stream_uses_the_emitted_history() -> None:
    m = NGramSkeleton(vocab_size=4, n=2).fit([[0, 1, 0, 1, 0, 1]])
    stream = m.for_stream()
    first = stream.log_prob(TokenEvent("a", -1.0, token_id=0))
    second = stream.log_prob(TokenEvent("b", -1.0, token_id=1))
    assert first == pytest.approx(math.log(m.prob([], 0)))
    assert second == pytest.approx(math.log(m.prob([0], 1)))
    with pytest.raises(ConfigError):
        stream.log_prob(TokenEvent("c", -1.0))


def test_temperature_skeleton_from_top_k_tracks_the_exact_value() -> None:
    errs = []
    for trace in read_traces(FIXTURES / "traces_smollm2_sample.jsonl", limit=10):
        sk = TemperatureSkeleton(trace.vocab_size, 1.5)
        for t in range(trace.n_tokens):
            ev = TokenEvent(
                "x",
                float(trace.logprobs[t]),
                token_id=int(trace.token_ids[t]),
                top_logprobs=tuple(
                    (int(i), float(v))
                    for i, v in zip(trace.top_ids[t], trace.top_logprobs[t], strict=True)
                ),
            )
            exact = trace.logprobs[t] / 1.5 - trace.logz[1.5][t]
            errs.append(abs(sk.log_prob(ev) - exact))
    assert np.mean(errs) < 0.3  # anchored tail: about 0.14 nats on the full traces


def test_type_token_ratio_and_selection_rule() -> None:
    assert type_token_ratio([]) == 0.0
    assert type_token_ratio(["a", "b", "c", "a"]) == pytest.approx(0.75)
    assert select_skeleton_kind(0.8) == "temperature"
    assert select_skeleton_kind(0.2) == "ngram"
    assert select_skeleton_kind(0.5) == "vsd"
    assert select_skeleton_kind(None) == "vsd"
