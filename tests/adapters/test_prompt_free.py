"""PromptFreeSkeleton with the real bundled SmolLM2-135M-Instruct through llama.cpp."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import adapters
from adapters import PromptFreeSkeleton
from adapters._local._prompt_free import smollm2_prompt_free_prefix
from guardrail import ConfigError, GuardrailError, Monitor, StreamPolicy, TokenEvent
from guardrail._reads import Reads, Skeleton
from guardrail.traces import read_traces
from guardrail.traces._read import Trace

needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason='needs pip install "liftguard[local]"'
)

FIXTURES = Path(__file__).parents[1] / "fixtures"
# the SmolLM2 prompt-free prefix, verbatim from the trace format README
TRACES_PREFIX = (
    "<|im_start|>system\nAnswer the question with a short answer of a few words only, "
    "with no explanation.<|im_end|>\n<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n"
)
# Tolerance against the recorded prompt_free_logprob values. They come from ONE batch over
# prefix + answer; the skeleton evaluates the answer ONE TOKEN AT A TIME. The trace README
# documents the noise of these quantized models under llama.cpp: batch vs one at a time
# "about 0.02-0.03 nats on average (up to about 0.3 nats in rare tokens)", and a different
# evaluation of the same weights (float32 PyTorch) "about 0.035-0.05 nats on average". Both
# apply here: a machine other than the one that made the traces runs other SIMD kernels (on
# a 2-core AVX2 machine the very same single batch from an empty cache differed from the
# recorded values by 0.064 nats on average, at most 0.49). So each token may differ by
# 0.6 (two such terms of up to 0.3 each) and the mean absolute difference by 0.1 (the two
# documented averages, 0.03 + 0.05, plus margin). Observed on that machine over all 817
# tokens of the 40 sample answers: mean 0.066, max 0.50. A wrong prefix, an off-by-one
# position or a stale KV cache gives errors of nats. Exactness is checked separately,
# against a hand-made one-token-at-a-time evaluation on the same machine.
TOKEN_ATOL = 0.6
MEAN_ATOL = 0.1


def _events(trace: Trace, *, ids: bool = True) -> Iterator[TokenEvent]:
    for i, (tid, text, lp) in enumerate(
        zip(trace.token_ids, trace.token_texts, trace.logprobs, strict=True)
    ):
        yield TokenEvent(text=text, logprob=float(lp), token_id=int(tid) if ids else None, index=i)


def test_exported_and_prefix_is_the_traces_prefix() -> None:
    assert "PromptFreeSkeleton" in adapters.__all__
    assert adapters.__all__ == sorted(adapters.__all__)
    assert smollm2_prompt_free_prefix() == TRACES_PREFIX
    assert PromptFreeSkeleton.reads == Reads()  # the emitted token only: no alternatives


@pytest.fixture(scope="module")
def skeleton() -> PromptFreeSkeleton:
    return PromptFreeSkeleton()


@pytest.fixture(scope="module")
def traces() -> list[Trace]:
    return read_traces(FIXTURES / "traces_smollm2_sample.jsonl")[:8]


@needs_llama
def test_reproduces_the_recorded_prompt_free_logprobs(
    skeleton: PromptFreeSkeleton, traces: list[Trace]
) -> None:
    assert isinstance(skeleton, Skeleton) and skeleton.prefix == TRACES_PREFIX
    diffs, calls, seconds = [], 0, 0.0
    for trace in traces:
        stream = skeleton.for_stream()
        got = []
        for event in _events(trace):
            start = time.perf_counter()
            got.append(stream.log_prob(event))
            seconds += time.perf_counter() - start
            calls += 1
        assert stream.token_ids == tuple(int(t) for t in trace.token_ids)
        diff = np.abs(np.array(got) - trace.prompt_free_logprobs)
        assert diff.max() <= TOKEN_ATOL, (trace.id, diff.max())
        diffs.append(diff)
    all_diffs = np.concatenate(diffs)
    assert all_diffs.mean() <= MEAN_ATOL
    print(  # shown with pytest -s
        f"\n{calls} tokens of {len(traces)} answers: |skeleton - recorded| max "
        f"{all_diffs.max():.4f}, mean {all_diffs.mean():.4f} nats; "
        f"{1e3 * seconds / calls:.2f} ms per log_prob"
    )


@needs_llama
def test_equals_a_hand_made_incremental_evaluation(traces: list[Trace]) -> None:
    """The same computation with llama-cpp-python's own API: the prefix from an empty cache
    in one batch (later answers reuse its cache but its last token, as the skeleton does),
    then one token per step, log-softmax of the last logits row in float64."""
    from adapters._local._model import LocalModel

    skeleton = PromptFreeSkeleton()  # an empty cache, as the reference below
    reference = LocalModel()
    llm = reference._llm
    prefix = reference.tokenize(TRACES_PREFIX)
    for k, trace in enumerate(traces[:3]):
        ids = [int(t) for t in trace.token_ids]
        if k == 0:
            llm.reset()
            llm.eval(prefix)
        else:
            llm.n_tokens = len(prefix) - 1
            llm.eval(prefix[-1:])
        expected = []
        for j, token in enumerate(ids):
            if j:
                llm.eval([ids[j - 1]])
            row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            top = row.max()
            expected.append(float(row[token] - top - np.log(np.exp(row - top).sum())))
        stream = skeleton.for_stream() if k else skeleton
        got = [stream.log_prob(e) for e in _events(trace)]
        np.testing.assert_array_equal(got, expected)  # the same evaluation, the same numbers


@needs_llama
def test_interleaved_streams_and_text_only_events(
    skeleton: PromptFreeSkeleton, traces: list[Trace]
) -> None:
    """Two answers scored alternately share the model (the cache is rebuilt from the
    common prefix on each switch), one of them from token bytes without ids."""
    a, b = traces[0], traces[1]
    sa, sb = skeleton.for_stream(), skeleton.for_stream()
    ea = list(_events(a))
    eb = [
        TokenEvent(text=e.text, logprob=e.logprob, bytes=skeleton.model.token_bytes(int(t)))
        for e, t in zip(_events(b), b.token_ids, strict=True)
    ]
    got_a, got_b = [], []
    for i in range(max(len(ea), len(eb))):
        if i < len(ea):
            got_a.append(sa.log_prob(ea[i]))
        if i < len(eb):
            got_b.append(sb.log_prob(eb[i]))
    assert sb.token_ids == tuple(int(t) for t in b.token_ids)  # bytes -> the same ids
    np.testing.assert_allclose(got_a, a.prompt_free_logprobs, atol=TOKEN_ATOL)
    np.testing.assert_allclose(got_b, b.prompt_free_logprobs, atol=TOKEN_ATOL)


class _Recorder:
    """A skeleton that records what the prompt-free skeleton returned."""

    reads = Reads()

    def __init__(self, inner: PromptFreeSkeleton) -> None:
        self.inner, self.values = inner, []

    def log_prob(self, event: TokenEvent) -> float:
        value = self.inner.log_prob(event)
        self.values.append(value)
        return value


@needs_llama
def test_end_to_end_lifts_are_logprob_minus_skeleton(skeleton: PromptFreeSkeleton) -> None:
    from adapters._local._model import LocalModel, smollm2_chat_prompt

    generator = LocalModel()  # the skeleton has a model of its own
    policy = StreamPolicy(early=False)
    recorder = _Recorder(skeleton.for_stream())
    monitor = Monitor.lift(policy, 1.0, skeleton=recorder)
    prompt = smollm2_chat_prompt("What is the chemical symbol for gold?")
    logprobs, ids, total = [], [], 0.0
    for i, token in enumerate(generator.generate(prompt, max_tokens=24)):
        verdict = monitor.update(token.event(index=i))
        lift = min(max(token.logprob - recorder.values[-1], 0.0), policy.clip)
        assert verdict.t == i + 1
        assert verdict.mean * verdict.t == pytest.approx(total + lift, abs=1e-9)
        total += lift
        logprobs.append(token.logprob)
        ids.append(token.token_id)
    final = monitor.finish()
    assert len(ids) >= 2 and final.t == len(ids) == len(recorder.values)
    lifts = np.clip(np.array(logprobs) - recorder.values, 0.0, policy.clip)
    assert final.mean == pytest.approx(lifts.mean(), abs=1e-12)
    # the skeleton's values are the prompt-free log-probabilities: the same model scoring
    # the answer after the question-free prefix in one batch agrees within llama.cpp noise
    batch = generator.score(smollm2_prompt_free_prefix(), ids)
    np.testing.assert_allclose(recorder.values, batch, atol=TOKEN_ATOL)


@needs_llama
def test_refuses_a_model_that_generates_and_does_not_corrupt_it() -> None:
    from adapters._local._model import LocalModel, smollm2_chat_prompt

    model = LocalModel()
    prompt = smollm2_chat_prompt("What is the capital of France?")
    reference = [t.token_id for t in model.generate(prompt, max_tokens=8)]
    with pytest.raises(ConfigError, match="already evaluated text"):
        PromptFreeSkeleton(model)  # used before: it may be mid-generation

    fresh = LocalModel()
    stream = PromptFreeSkeleton(fresh)
    gen = fresh.generate(prompt, max_tokens=8)
    first = next(gen)
    with pytest.raises(GuardrailError, match="evaluated by other code"):
        stream.log_prob(first.event(index=0))
    rest = [t.token_id for t in gen]
    assert [first.token_id, *rest] == reference  # the generation was not disturbed
    assert stream.token_ids == ()


@needs_llama
def test_bad_tokens_give_clear_errors(skeleton: PromptFreeSkeleton) -> None:
    stream = skeleton.for_stream()
    vocab = skeleton.vocab_size
    bad = {
        "not one token": TokenEvent(text=" chemical symbol for gold", logprob=-1.0),
        "not one token ": TokenEvent(text="", logprob=-1.0),
        "replacement character": TokenEvent(text="\ufffd", logprob=-1.0),
        "outside the skeleton model's vocabulary": TokenEvent(
            text="x", logprob=-1.0, token_id=vocab
        ),
        "outside the skeleton model's vocabulary ": TokenEvent(text="x", logprob=-1.0, token_id=-1),
        "the event's bytes are": TokenEvent(text=" Au", logprob=-1.0, token_id=504, bytes=b" Au"),
        "token index 3": TokenEvent(text="The", logprob=-1.0, token_id=504, index=3),
    }
    for message, event in bad.items():
        with pytest.raises(GuardrailError, match=message.strip()):
            stream.log_prob(event)
    assert stream.token_ids == ()  # failed calls leave the stream as it was
    first = stream.log_prob(TokenEvent(text="The", logprob=-1.0, index=0))
    assert first < 0.0 and stream.token_ids == (504,)
    stream.close()
    with pytest.raises(GuardrailError, match="closed"):
        stream.log_prob(TokenEvent(text=" answer", logprob=-1.0))
    with skeleton.for_stream() as again:  # a fresh stream scores the first token the same
        assert again.log_prob(TokenEvent(text="The", logprob=-1.0)) == pytest.approx(
            first, abs=TOKEN_ATOL
        )
    assert again.closed


@needs_llama
def test_reuse_for_a_second_answer_is_detected(
    skeleton: PromptFreeSkeleton, traces: list[Trace]
) -> None:
    stream = skeleton.for_stream()
    for event in _events(traces[2]):
        stream.log_prob(event)
    with pytest.raises(GuardrailError, match="each answer needs its own stream"):
        stream.log_prob(next(_events(traces[3])))


@needs_llama
def test_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="prefix"):
        PromptFreeSkeleton(prefix="")
    with pytest.raises(ConfigError, match="model must be"):
        PromptFreeSkeleton(42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="not found"):
        PromptFreeSkeleton("/nonexistent/model.gguf", prefix="Answer:")


@needs_llama
def test_answer_longer_than_the_context_is_an_error() -> None:
    small = PromptFreeSkeleton(n_ctx=64)
    n_prefix = len(small.model.tokenize(small.prefix))
    event = TokenEvent(text=" the", logprob=-1.0)
    for _ in range(64 - n_prefix + 1):  # the last scored token itself is never evaluated
        small.log_prob(event)
    with pytest.raises(GuardrailError, match="too long"):
        small.log_prob(event)
