"""Data-backed skeleton specs resolved from a real store (local and S3) or a file.

A certificate references a vector or n-gram skeleton by content hash and source
(``STORE_URL#NAME@vN`` or a safetensors path); ``resolve_skeleton`` reads the data
back and the core checks the hash. A certificate saved with such a skeleton and
loaded with the resolver monitors exactly like the original object, verdict by
verdict, without the caller passing a skeleton.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _store_support import Target

from guardrail import (
    Certificate,
    ConfigError,
    ModelIdentity,
    NGramSkeleton,
    SkeletonSpec,
    StreamPolicy,
    TokenEvent,
    UniformSkeleton,
    VectorSkeleton,
)
from skeleton_store import (
    IntegrityError,
    SkeletonStore,
    open_skeleton,
    resolve_skeleton,
    save_skeleton,
)
from skeleton_store._errors import InvalidRequest

VOCAB = 16
RNG = np.random.default_rng(11)
CORPUS = [list(RNG.integers(0, VOCAB, size=60)) for _ in range(4)]


def skeletons() -> dict[str, Any]:
    probs = RNG.dirichlet(np.ones(VOCAB)).astype(np.float32)
    return {
        "vector": VectorSkeleton(np.log(RNG.dirichlet(np.ones(VOCAB)))),
        "vsd": VectorSkeleton.from_arrays({"probs": probs}, kind="vsd"),
        "unigram": VectorSkeleton.unigram(np.concatenate(CORPUS), VOCAB),
        "ngram": NGramSkeleton(VOCAB, n=3).fit(CORPUS),
    }


def events(seed: int, n: int = 40) -> list[TokenEvent]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        tid = int(rng.integers(0, VOCAB))
        lp = float(np.log(rng.uniform(0.05, 0.95)))
        out.append(TokenEvent(f"t{tid}", lp, token_id=tid, index=i))
    return out


def verdicts(cert: Certificate, stream: list[TokenEvent], **kw: Any) -> list[Any]:
    mon = cert.monitor(**kw)
    return [mon.update(e) for e in stream] + [mon.finish("stop")]


def certificate(spec: SkeletonSpec) -> Certificate:
    return Certificate(
        StreamPolicy(min_tokens=4), 1.0, spec, ModelIdentity("toy", vocab_size=VOCAB)
    )


def check_monitors_like(cert: Certificate, original: Any) -> None:
    for seed in (1, 2, 3):
        stream = events(seed)
        expected = verdicts(cert, stream, skeleton=original)
        assert verdicts(cert, stream) == expected
        assert verdicts(cert, stream, skeleton=UniformSkeleton(VOCAB)) != expected


@pytest.mark.parametrize("kind", ["vector", "vsd", "unigram", "ngram"])
def test_a_store_version_is_a_source_and_a_certificate_round_trips(
    kind: str, target: Target, tmp_path: Path
) -> None:
    original = skeletons()[kind]
    store = target.store()
    version = store.put_skeleton("domain", original, model_id="toy")
    assert version.kind == kind and version.vocab_size == VOCAB
    spec = version.skeleton().to_spec()
    assert spec.source == f"{store.url}#domain@v1" and spec.sha256 == original.to_spec().sha256
    resolver = functools.partial(resolve_skeleton, storage_options=target.storage_options)
    built = spec.build(resolver)
    assert SkeletonSpec.of(built) == spec
    stream = events(5)
    fresh = built.for_stream() if kind == "ngram" else built  # type: ignore[attr-defined]
    ref = original.for_stream() if kind == "ngram" else original
    assert [fresh.log_prob(e) for e in stream] == [ref.log_prob(e) for e in stream]

    path = tmp_path / "cert.json"
    certificate(spec).save(path)
    loaded = Certificate.load(path, resolver=resolver)
    assert loaded == certificate(spec) and loaded.bound_skeleton is not None
    check_monitors_like(loaded, original)
    # the version holding its own certificate binds its own skeleton
    v2 = store.put_skeleton("domain", original, certificate=certificate(spec))
    assert v2.certificate().bound_skeleton is not None
    check_monitors_like(v2.certificate(), original)
    # a version a VSD build published (a float32 'probs' array) is a source as well
    if kind == "vsd":
        v3 = store.put("vsd-built", version.arrays, kind="vsd", vocab_size=VOCAB)
        built = v3.skeleton().to_spec().build(resolver)
        assert SkeletonSpec.of(built).sha256 == spec.sha256


def test_a_file_is_a_source(tmp_path: Path) -> None:
    for kind, original in skeletons().items():
        data = tmp_path / f"{kind}.safetensors"
        spec = save_skeleton(original, data)
        assert spec.source == str(data) and spec == original.to_spec().with_source(str(data))
        cert_path = tmp_path / f"{kind}.json"
        certificate(spec).save(cert_path)
        check_monitors_like(Certificate.load(cert_path, resolver=resolve_skeleton), original)
        # a relative source resolves against root
        rel = spec.with_source(data.name)
        built = rel.build(functools.partial(resolve_skeleton, root=tmp_path))
        assert SkeletonSpec.of(built) == rel
    assert not list(tmp_path.glob(".*.tmp"))


def test_tampered_specs_and_changed_data_are_config_errors_naming_the_field(
    tmp_path: Path,
) -> None:
    original, other = skeletons()["ngram"], skeletons()["vector"]
    store = SkeletonStore(tmp_path / "store")
    spec = store.put_skeleton("domain", original).skeleton().to_spec()
    cert_path = tmp_path / "cert.json"
    certificate(spec).save(cert_path)

    def load_with(change: dict[str, object]) -> Certificate:
        data = json.loads(cert_path.read_text())
        data["skeleton"]["params"].update(change)
        cert_path.write_text(json.dumps(data))
        return Certificate.load(cert_path, resolver=resolve_skeleton)

    with pytest.raises(ConfigError, match=r"cert\.json: skeleton\.params\.sha256: the data"):
        load_with({"sha256": other.to_spec().sha256})
    with pytest.raises(ConfigError, match=r"skeleton\.params\.sha256: expected 64"):
        load_with({"sha256": "beef"})
    with pytest.raises(ConfigError, match=r"skeleton\.params\.source: .* must pin a version"):
        load_with({"sha256": spec.sha256, "source": f"{store.url}#domain@production"})
    with pytest.raises(ConfigError, match=r"skeleton\.params\.source: .*v7 does not exist"):
        load_with({"source": f"{store.url}#domain@v7"})
    with pytest.raises(ConfigError, match=r"skeleton\.params\.source: no such file"):
        load_with({"source": str(tmp_path / "gone.safetensors")})
    with pytest.raises(ConfigError, match=r"skeleton\.params\.source: .*not a safetensors"):
        load_with({"source": str(cert_path)})
    with pytest.raises(ConfigError, match=r"skeleton\.params: unknown field\(s\) 'counts'"):
        load_with({"source": spec.source, "counts": [[1, 2]]})

    # the data at a file source replaced by other data: the hash catches it
    data = tmp_path / "domain.safetensors"
    file_spec = save_skeleton(original, data)
    save_skeleton(NGramSkeleton(VOCAB, n=3).fit(CORPUS[:2]), data)
    with pytest.raises(ConfigError, match=r"skeleton\.params\.sha256: the data at"):
        file_spec.build(resolve_skeleton)
    # a damaged store version is the store's integrity error, not a silent skeleton
    blob = next((tmp_path / "store" / "domain" / "blobs").iterdir())
    raw = bytearray(blob.read_bytes())
    raw[-3] ^= 1
    blob.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError):
        spec.build(resolve_skeleton)


def test_what_resolve_and_save_refuse(tmp_path: Path) -> None:
    assert resolve_skeleton(UniformSkeleton(VOCAB).to_spec()) is None  # not a data kind
    assert resolve_skeleton(SkeletonSpec("prompt_free")) is None
    with pytest.raises(ConfigError, match=r"skeleton\.params\.sha256: missing"):
        resolve_skeleton(SkeletonSpec("vector", {"store_name": "x", "version": 1}))
    with pytest.raises(ConfigError, match=r"skeleton\.params\.source: missing"):
        resolve_skeleton(skeletons()["vector"].to_spec())
    with pytest.raises(InvalidRequest, match="kind 'uniform'"):
        save_skeleton(UniformSkeleton(VOCAB), tmp_path / "u.safetensors")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="kind 'uniform'"):
        SkeletonStore(tmp_path).put_skeleton("u", UniformSkeleton(VOCAB))  # type: ignore[arg-type]


def test_a_version_binds_its_own_skeleton_only_when_the_spec_names_it(tmp_path: Path) -> None:
    store = SkeletonStore(tmp_path)
    vec, other = skeletons()["vector"], skeletons()["unigram"]
    own = store.put_skeleton("chat", vec).skeleton().to_spec()
    uniform = UniformSkeleton(VOCAB).to_spec()
    for spec, bound in ((own, True), (other.to_spec(), False), (uniform, False)):
        v = store.put("chat", vec.to_arrays(), kind="vector", certificate=certificate(spec))
        assert (v.certificate().bound_skeleton is not None) is bound
    # a handle is a skeleton too: its spec pins the version it serves now
    handle = open_skeleton(tmp_path, "chat", "latest")
    assert handle.to_spec() == SkeletonSpec.of(handle.current.skeleton())
    assert handle.to_spec().source == f"{store.url}#chat@v4"
