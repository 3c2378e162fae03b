"""The streams a local model feeds: everything for :meth:`LocalModel.guarded_generate`
(exact entropies included), only each token's logprob for the Anthropic path's scorer.

Loads llama.cpp (the bundled SmolLM2-135M-Instruct): run one at a time
(``flock /tmp/llama.lock python -m pytest ...``). One short greedy answer is
generated and guarded; the other checks refuse before anything is generated.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import pytest
from fitted_certs import certificate, fitted

from adapters import LocalTextScorer, guarded_message
from adapters._providers._anthropic import guard_anthropic_stream_sync
from adapters.local import LocalModel, smollm2_chat_prompt
from guardrail import Certificate, ConfigError, FittedRule, State
from guardrail.fitting import Feature, FittedStatistic

pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')

PROMPT = smollm2_chat_prompt("What is the capital of France?")
MAX_TOKENS = 8
LOCAL = certificate("local")


@pytest.fixture(scope="module")
def model() -> Iterator[LocalModel]:
    yield LocalModel()


def test_a_local_certificate_is_fed_exact_entropies_end_to_end(model: LocalModel) -> None:
    list(model.generate(PROMPT, max_tokens=MAX_TOKENS))  # later runs reuse the same cache
    tokens = list(model.generate(PROMPT, max_tokens=MAX_TOKENS))  # as the guarded run will
    reference = LOCAL.monitor(exact_entropy=True)
    assert isinstance(reference.rule, FittedRule)
    for i, tok in enumerate(tokens):
        assert tok.event(i).entropy == tok.entropy
        reference.update(tok.event(i))
    monitor = LOCAL.monitor(exact_entropy=True)
    assert isinstance(monitor.rule, FittedRule)
    shown = "".join(
        model.guarded_generate(PROMPT, certificate=LOCAL, monitor=monitor, max_tokens=MAX_TOKENS)
    )
    assert shown == "".join(t.text for t in tokens)
    assert monitor.verdict.state is State.CERTIFIED and monitor.t == len(tokens)
    assert monitor.value == reference.value  # the same exact entropies, token by token


def test_a_local_stream_with_fewer_alternatives_is_refused_at_once(model: LocalModel) -> None:
    model.guarded_generate(PROMPT, certificate=LOCAL).close()  # accepted: top_k=20
    narrow = LocalModel(top_k=3)
    with pytest.raises(
        ConfigError,
        match=r"reads 5 alternatives .*top_k=3\) carries at most 3: "
        r"load the model with LocalModel\(\.\.\., top_k=5\)",
    ):
        narrow.guarded_generate(PROMPT, certificate=LOCAL)


def _logprob_only() -> Certificate:
    """A fitted certificate that reads the logprob alone (what the scorer supplies)."""
    feats = (Feature.parse("logprob.min"), Feature.parse("length.count"))
    stat = FittedStatistic(feats, (1.0, 0.0), 0.0, (0.0, 0.0), (1.0, 1.0), fitted("api").vocab_size)
    return Certificate(LOCAL.policy, -50.0, LOCAL.skeleton, LOCAL.model, statistic=stat)


def test_the_anthropic_scorer_supplies_only_logprobs(model: LocalModel) -> None:
    request = {"model": "claude-test", "max_tokens": 24, "messages": [
        {"role": "user", "content": "What is the capital of France?"}]}  # fmt: skip
    with pytest.raises(
        ConfigError,
        match=r"group 'api'\) reads 5 alternatives .*local scorer's "
        r"stream .* carries none: use a certificate",
    ):
        guarded_message(object(), certificate=certificate("api"), scorer_model=model, **request)  # type: ignore[arg-type]  # fmt: skip
    with pytest.raises(
        ConfigError,
        match=r"group 'local'\) reads the exact entropy .*local "
        r"scorer's stream",
    ):
        guarded_message(object(), certificate=LOCAL, scorer_model=model, **request)  # type: ignore[arg-type]  # fmt: skip
    with pytest.raises(ConfigError, match="reads 5 alternatives"):
        guard_anthropic_stream_sync(
            iter(()), None, LocalTextScorer(model, PROMPT), certificate=certificate("api")
        )
    accepted = guarded_message(object(), certificate=_logprob_only(), scorer_model=model, **request)  # type: ignore[arg-type]  # fmt: skip
    assert inspect.isasyncgen(accepted)  # checked at the call; nothing is sent before iterating
