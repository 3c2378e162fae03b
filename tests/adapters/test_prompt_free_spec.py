"""The prompt-free skeleton's spec, with the real bundled SmolLM2 through llama.cpp.

``PromptFreeSkeleton.to_spec()`` names the model (the bundled one by name), its sha256
and vocabulary, the question-free prefix and ``n_ctx``; ``from_spec`` (and the resolver
``PromptFreeSkeleton.resolve``) loads it back. These tests load llama.cpp: run them
alone, ``flock /tmp/llama.lock python -m pytest tests/adapters/test_prompt_free_spec.py``.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters import PromptFreeSkeleton
from adapters._local._prompt_free import smollm2_prompt_free_prefix
from adapters._local._prompt_free_spec import file_sha256
from adapters.local import bundled_smollm2_path
from guardrail import (
    Certificate,
    ConfigError,
    ModelIdentity,
    SkeletonSpec,
    StreamPolicy,
    TokenEvent,
    UniformSkeleton,
)
from guardrail.traces import read_traces
from skeleton_store import resolve_skeleton

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason='needs pip install "liftguard[local]"'
)

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(scope="module")
def skeleton() -> Iterator[PromptFreeSkeleton]:
    yield PromptFreeSkeleton()


@pytest.fixture(scope="module")
def answers() -> list[list[TokenEvent]]:
    traces = read_traces(FIXTURES / "traces_smollm2_sample.jsonl")[:3]
    out = []
    for t in traces:
        rows = zip(t.token_ids, t.token_texts, t.logprobs, strict=True)
        out.append([TokenEvent(x, float(lp), token_id=int(i), index=k)
                    for k, (i, x, lp) in enumerate(rows)])  # fmt: skip
    return out


def scores(skeleton: PromptFreeSkeleton, answer: list[TokenEvent]) -> list[float]:
    stream = skeleton.for_stream()
    return [stream.log_prob(e) for e in answer]


def test_the_spec_names_the_model_and_round_trips(
    skeleton: PromptFreeSkeleton, answers: list[list[TokenEvent]]
) -> None:
    spec = skeleton.to_spec()
    assert spec.kind == "prompt_free" and spec.params == {
        "model": "smollm2",
        "model_sha256": file_sha256(bundled_smollm2_path()),
        "vocab_size": 49152,
        "prefix": smollm2_prompt_free_prefix(),
        "n_ctx": 1024,
    }
    assert SkeletonSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    again = spec.build(PromptFreeSkeleton.resolve)
    assert isinstance(again, PromptFreeSkeleton) and again.to_spec() == spec
    assert again.model is not skeleton.model  # a model of its own
    for answer in answers:
        assert scores(again, answer) == scores(skeleton, answer)


def test_a_saved_certificate_monitors_identically_when_loaded(
    skeleton: PromptFreeSkeleton, answers: list[list[TokenEvent]], tmp_path: Path
) -> None:
    cert = Certificate(
        StreamPolicy(min_tokens=2), 2.0, skeleton.to_spec(), ModelIdentity("smollm2")
    )
    path = tmp_path / "cert.json"
    cert.save(path)
    # several resolvers: the store's declines the kind, the prompt-free one builds it
    loaded = Certificate.load(path, resolver=[resolve_skeleton, PromptFreeSkeleton.resolve])
    assert loaded == cert and isinstance(loaded.bound_skeleton, PromptFreeSkeleton)

    def verdicts(c: Certificate, answer: list[TokenEvent], **kw: Any) -> list[Any]:
        mon = c.monitor(**kw)
        return [mon.update(e) for e in answer] + [mon.finish("stop")]

    for answer in answers:
        expected = verdicts(cert, answer, skeleton=skeleton)
        assert verdicts(loaded, answer) == expected  # no skeleton passed
        assert verdicts(cert, answer, skeleton=UniformSkeleton(49152)) != expected


def test_a_bad_spec_is_a_config_error_naming_the_field(
    skeleton: PromptFreeSkeleton, tmp_path: Path
) -> None:
    params = dict(skeleton.to_spec().params)
    with pytest.raises(
        ConfigError, match=r"skeleton\.params\.model_sha256: .*\(another model file\)"
    ):
        PromptFreeSkeleton.from_spec(
            SkeletonSpec("prompt_free", {**params, "model_sha256": "0" * 64})
        )
    with pytest.raises(ConfigError, match=r"skeleton\.params\.model: no such file"):
        PromptFreeSkeleton.from_spec(
            SkeletonSpec("prompt_free", {**params, "model": str(tmp_path / "x.gguf")})
        )
    with pytest.raises(ConfigError, match=r"skeleton\.params\.vocab_size: .* 49152 tokens"):
        PromptFreeSkeleton.from_spec(SkeletonSpec("prompt_free", {**params, "vocab_size": 50}))
    with pytest.raises(ConfigError, match=r"skeleton\.kind: expected 'prompt_free'"):
        PromptFreeSkeleton.from_spec(UniformSkeleton(9).to_spec())
    assert PromptFreeSkeleton.resolve(UniformSkeleton(9).to_spec()) is None


def test_a_spec_without_parameters_is_the_bundled_default(
    skeleton: PromptFreeSkeleton, answers: list[list[TokenEvent]]
) -> None:
    legacy = PromptFreeSkeleton.from_spec(SkeletonSpec("prompt_free"))
    assert legacy.to_spec() == skeleton.to_spec()
    assert scores(legacy, answers[0]) == scores(skeleton, answers[0])
