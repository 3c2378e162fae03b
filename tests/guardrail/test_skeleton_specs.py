"""Every skeleton kind has a spec and a way back: ``to_spec()``, ``spec.build(...)``.

Parametric kinds build from the spec alone; data kinds (vector, vsd, unigram, n-gram)
reference their arrays by content hash and are built from arrays a resolver reads
(``spec.from_arrays``), the hash checked. The resolvers here hold the arrays in a
dict: the core does no I/O (the store and file resolvers are tested in
``tests/skeleton_store/test_store_specs.py``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from guardrail import (
    Certificate,
    ConfigError,
    ModelIdentity,
    NGramSkeleton,
    SkeletonSpec,
    StreamPolicy,
    TemperatureSkeleton,
    TokenEvent,
    UniformSkeleton,
    VectorSkeleton,
)
from guardrail._reads import Skeleton
from guardrail._skeleton_spec import arrays_sha256
from guardrail._skeletons import WithTokenIds

VOCAB = 12
RNG = np.random.default_rng(7)
PROBS = RNG.dirichlet(np.ones(VOCAB))
CORPUS = [list(RNG.integers(0, VOCAB, size=40)) for _ in range(5)]


def events(n: int = 30, seed: int = 3) -> list[TokenEvent]:
    """Token events with ids, logprobs and top-5 alternatives (one answer)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        lp = np.sort(np.log(rng.dirichlet(np.ones(VOCAB))))[::-1]
        ids = rng.permutation(VOCAB)
        top = tuple((f"t{ids[j]}", float(lp[j])) for j in range(5))
        pick = int(rng.integers(0, 5))
        out.append(TokenEvent(f"t{ids[pick]}", float(lp[pick]), token_id=int(ids[pick]),
                              top_logprobs=top, index=i))  # fmt: skip
    return out


def scores(skeleton: Any, stream: list[TokenEvent]) -> list[float]:
    for_stream = getattr(skeleton, "for_stream", None)
    skel = for_stream() if callable(for_stream) else skeleton
    return [skel.log_prob(e) for e in stream]


def ngram() -> NGramSkeleton:
    return NGramSkeleton(VOCAB, n=3, discount=0.6, floor=0.05).fit(CORPUS)


def data_skeletons() -> dict[str, Any]:
    return {
        "vector": VectorSkeleton(np.log(PROBS)),
        "vsd": VectorSkeleton.from_arrays({"probs": PROBS.astype(np.float32)}, kind="vsd"),
        "unigram": VectorSkeleton.unigram(np.concatenate(CORPUS), VOCAB, smoothing=0.5),
        "ngram": ngram(),
    }


def dict_resolver(
    saved: Mapping[str, Mapping[str, npt.NDArray[Any]]],
) -> Callable[[SkeletonSpec], Skeleton | None]:
    """Resolves data specs whose ``source`` is a key of ``saved``."""

    def resolve(spec: SkeletonSpec) -> Skeleton | None:
        if not spec.data_backed or spec.source not in saved:
            return None
        return spec.from_arrays(saved[spec.source])

    return resolve


@pytest.mark.parametrize(
    "skeleton", [UniformSkeleton(VOCAB), TemperatureSkeleton(VOCAB), TemperatureSkeleton(
        VOCAB, 2.0, "paper")], ids=["uniform", "temperature", "temperature-2.0-paper"],
)  # fmt: skip
def test_parametric_kinds_round_trip_through_json(skeleton: Any) -> None:
    spec = skeleton.to_spec()
    assert SkeletonSpec.of(skeleton) == spec and spec.builds_alone and not spec.data_backed
    again = SkeletonSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec
    built = again.build()
    assert type(built) is type(skeleton)
    assert scores(built, events()) == scores(skeleton, events())
    cert = Certificate(StreamPolicy(min_tokens=3), 1.2, spec, ModelIdentity("toy"))
    loaded = Certificate.from_json(cert.to_json())
    assert loaded.resolve() is loaded  # built for every answer, nothing to bind
    for seed in (3, 4):
        expected = verdicts(cert, events(40, seed), skeleton=skeleton)
        assert verdicts(loaded, events(40, seed)) == expected


@pytest.mark.parametrize("kind", ["vector", "vsd", "unigram", "ngram"])
def test_data_kinds_reference_their_arrays_by_hash_and_round_trip(kind: str) -> None:
    skeleton = data_skeletons()[kind]
    spec = skeleton.to_spec()
    assert spec.kind == kind and spec.data_backed and spec.source is None
    assert spec.sha256 == arrays_sha256(skeleton.to_arrays())
    assert spec.params["vocab_size"] == VOCAB
    assert len(json.dumps(spec.to_dict())) < 400  # the data stays out of the spec
    arrays = {k: np.array(v) for k, v in skeleton.to_arrays().items()}  # a copy
    spec = spec.with_source("mem://a")
    built = spec.build(dict_resolver({"mem://a": arrays}))
    assert SkeletonSpec.of(built) == spec  # it knows its source: the spec round-trips
    assert scores(built, events()) == scores(skeleton, events())
    assert scores(built, events(seed=4)) == scores(skeleton, events(seed=4))


def test_ngram_counts_round_trip_exactly() -> None:
    model = ngram()
    arrays = model.to_arrays()
    assert sorted(arrays) == ["order0", "order1", "order2"]
    assert arrays["order2"].shape[1] == 4 and arrays["order0"][:, 1].sum() == 200
    back = NGramSkeleton.from_arrays(arrays, vocab_size=VOCAB, n=3, discount=0.6, floor=0.05)
    for ctx in ([], [1], [1, 2], [int(CORPUS[0][0]), int(CORPUS[0][1])], [11, 11]):
        for tok in range(VOCAB):
            assert back.prob(ctx, tok) == model.prob(ctx, tok)
    assert arrays_sha256(back.to_arrays()) == arrays_sha256(arrays)
    stream = model.for_stream()  # the built form is a stream; for_stream() gives fresh ones
    assert stream.to_spec() == model.to_spec() and stream.model is model
    assert scores(stream.for_stream(), events()) == scores(model, events())
    model.source = "somewhere"
    model.fit([[1, 2]])  # new counts: the saved ones are no longer these
    assert model.source is None and model.to_spec().sha256 != back.to_spec().sha256


def test_a_wrapped_skeleton_has_the_spec_of_what_it_wraps() -> None:
    class Ids:
        name = "toy"

        def token_id(self, event: TokenEvent) -> int | None:
            return int(event.text[1:])

    model = ngram()
    assert WithTokenIds(model, Ids()).to_spec() == model.to_spec()
    assert WithTokenIds(model, Ids()).for_stream().to_spec() == model.to_spec()


@pytest.mark.parametrize("kind", ["vector", "ngram"])
def test_tampered_data_or_spec_is_a_config_error_naming_the_field(kind: str) -> None:
    skeleton = data_skeletons()[kind]
    spec = skeleton.to_spec().with_source("mem://a")
    arrays = {k: np.array(v) for k, v in skeleton.to_arrays().items()}
    name = next(iter(arrays))
    arrays[name].reshape(-1)[-1] += 1  # one value changed
    with pytest.raises(ConfigError, match=r"skeleton\.params\.sha256: the data at 'mem://a'"):
        spec.build(dict_resolver({"mem://a": arrays}))
    params = {**spec.params, "sha256": "0" * 64}  # a well-formed hash of other data
    forged = SkeletonSpec(kind, params)
    with pytest.raises(ConfigError, match=r"skeleton\.params\.sha256"):
        forged.build(dict_resolver({"mem://a": skeleton.to_arrays()}))
    if kind == "vector":  # the vector's length is its vocabulary
        wrong = SkeletonSpec(kind, {**spec.params, "vocab_size": VOCAB + 1})
        with pytest.raises(ConfigError, match=r"skeleton\.params\.vocab_size"):
            wrong.build(dict_resolver({"mem://a": skeleton.to_arrays()}))
    else:  # fewer orders: other data; more: data that is not there
        fewer = SkeletonSpec(kind, {**spec.params, "n": 2})
        with pytest.raises(ConfigError, match=r"skeleton\.params\.sha256"):
            fewer.build(dict_resolver({"mem://a": skeleton.to_arrays()}))
        more = SkeletonSpec(kind, {**spec.params, "n": 4})
        with pytest.raises(ConfigError, match=r"skeleton\.params\.source: .* 'order3'"):
            more.build(dict_resolver({"mem://a": skeleton.to_arrays()}))
    with pytest.raises(ConfigError, match=r"skeleton\.params\.source: .* does not fit"):
        spec.build(dict_resolver({"mem://a": {"other": np.zeros(3)}}))


@pytest.mark.parametrize(
    ("kind", "params", "field"),
    [
        ("vector", {"vocab_size": 3, "sha256": "abc"}, "skeleton.params.sha256"),
        ("vector", {"sha256": "a" * 64}, "skeleton.params.vocab_size: missing"),
        ("vector", {"vocab_size": 3, "sha256": "a" * 64, "source": ""}, "skeleton.params.source"),
        ("vsd", {"vocab_size": 3, "bytes": [1, 2]}, "unknown field(s) 'bytes' for kind 'vsd'"),
        ("ngram", {"n": 0}, "skeleton.params.n"),
        ("ngram", {"n": 2, "discount": 1.5}, "skeleton.params.discount"),
        ("ngram", {"floor": True}, "skeleton.params.floor"),
        ("prompt_free", {"model": 3}, "skeleton.params.model"),
        ("prompt_free", {"n_ctx": -1}, "skeleton.params.n_ctx"),
        ("prompt_free", {"model_sha256": "XYZ"}, "skeleton.params.model_sha256"),
        ("prompt_free", {"prompt": "Q:"}, "unknown field(s) 'prompt'"),
        ("uniform", {"vocab_size": 3, "sha256": "a" * 64}, "unknown field(s) 'sha256'"),
        ("temperature", {"vocab_size": 9, "temperature": 0.5}, "skeleton.params: temperature"),
    ],
)  # fmt: skip
def test_bad_specs_are_config_errors_naming_the_field(
    kind: str, params: dict[str, object], field: str
) -> None:
    with pytest.raises(ConfigError) as info:
        SkeletonSpec.from_dict({"kind": kind, "params": params})
    assert field in str(info.value)


def test_what_a_spec_cannot_build_says_what_to_pass() -> None:
    spec = ngram().to_spec()  # never saved: no source
    with pytest.raises(ConfigError, match=r"records no data .* pass skeleton="):
        spec.build()
    saved = spec.with_source("/data/ngram.safetensors")
    with pytest.raises(ConfigError, match=r"resolve_skeleton"):
        saved.build()
    with pytest.raises(ConfigError, match=r"no resolver given builds it"):
        saved.build([dict_resolver({}), lambda s: None])
    with pytest.raises(ConfigError, match=r"PromptFreeSkeleton\.resolve"):
        SkeletonSpec("prompt_free").build()
    with pytest.raises(ConfigError, match=r"not a skeleton"):
        saved.build(lambda s: "no")  # type: ignore[arg-type,return-value]
    with pytest.raises(ConfigError, match=r"is not built from its spec: pass skeleton="):
        SkeletonSpec("MySkeleton").build()
    # resolvers are tried in order: the first that builds the kind wins
    arrays = ngram().to_arrays()
    built = saved.build([lambda s: None, dict_resolver({saved.source or "": arrays})])
    assert SkeletonSpec.of(built) == saved


def test_specs_written_before_data_kinds_recorded_their_data_still_load() -> None:
    for data in (
        {"kind": "vector", "params": {}},
        {"kind": "vector", "params": {"store_name": "chat", "version": 3}},
        {"kind": "ngram", "params": {"n": 2}},
        {"kind": "prompt_free", "params": {}},
        {"kind": "NGramSkeleton", "params": {}},
    ):
        spec = SkeletonSpec.from_dict(data)
        assert spec.to_dict() == data
        with pytest.raises(ConfigError, match="pass skeleton="):
            spec.build()
    files = [f for f in (resources.files("guardrail") / "data").iterdir()
             if f.name.endswith("certificate.json")]  # fmt: skip
    assert "smollm2_certificate.json" in {f.name for f in files}
    for f in files:  # the shipped certificates read as before and write back the same
        text = f.read_text(encoding="utf-8")
        shipped = Certificate.from_json(text)
        assert shipped.to_dict() == json.loads(text), f.name
        if shipped.skeleton.builds_alone:
            assert shipped.resolve() is shipped  # built for every answer: nothing to bind


def test_the_content_hash_covers_names_dtypes_and_shapes() -> None:
    a = np.arange(6, dtype=np.int64)
    base = arrays_sha256({"x": a})
    assert base == arrays_sha256({"x": a.copy()}) == arrays_sha256({"x": a.astype(">i8")})
    assert base != arrays_sha256({"y": a})
    assert base != arrays_sha256({"x": a.reshape(2, 3)})
    assert base != arrays_sha256({"x": a.astype(np.int32)})
    assert base != arrays_sha256({"x": a, "z": a[:0]})


def verdicts(cert: Certificate, stream: list[TokenEvent], **kw: Any) -> list[Any]:
    mon = cert.monitor(**kw)
    return [mon.update(e) for e in stream] + [mon.finish("stop")]


@pytest.mark.parametrize("kind", ["vector", "unigram", "ngram"])
def test_a_resolved_certificate_monitors_like_the_original_skeleton(kind: str) -> None:
    skeleton = data_skeletons()[kind]
    spec = skeleton.to_spec().with_source("mem://a")
    policy = StreamPolicy(min_tokens=3)
    cert = Certificate(policy, 1.2, spec, ModelIdentity("toy", vocab_size=VOCAB))
    loaded = Certificate.from_json(cert.to_json())
    resolver = dict_resolver({"mem://a": skeleton.to_arrays()})
    bound = loaded.resolve(resolver)
    assert bound.bound_skeleton is not None and bound.resolve(resolver) is bound
    assert bound == cert  # the bound object is not part of the value
    for seed in (3, 4, 5):
        stream = events(40, seed)
        expected = verdicts(cert, stream, skeleton=skeleton)
        assert verdicts(bound, stream) == expected  # without passing a skeleton
        assert verdicts(bound, stream) == expected  # a fresh stream per answer
        assert len({v.mean for v in expected}) > 20 and math.isfinite(expected[-1].mean)
        # the comparison can fail: another skeleton gives other verdicts
        assert verdicts(cert, stream, skeleton=UniformSkeleton(VOCAB)) != expected
    with pytest.raises(ConfigError, match="resolve_skeleton"):
        loaded.monitor()  # not resolved: says how
