"""A store version holds a whole Certificate; an alias pins, promotes and rolls back the rule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from guardrail import (
    Calibration,
    Certificate,
    GenerationContext,
    ModelIdentity,
    SkeletonSpec,
    State,
    StreamPolicy,
    TokenEvent,
)
from skeleton_store import SkeletonStore, StoreError
from skeleton_store._handle import open_certificate

VOCAB = 8


def cert(tau: float, kind: str = "vector") -> Certificate:
    cal = Calibration(
        method="ltt", tau=tau, risk=0.5, delta=0.05, score="lift", n=100, n_answered=40,
        n_errors=10, coverage=0.4, empirical_risk=0.25, risk_upper=0.4,
        policy=StreamPolicy(aggregate="min").to_dict(),
    )  # fmt: skip
    params = {"vocab_size": VOCAB} if kind == "uniform" else {}
    return Certificate(
        StreamPolicy(aggregate="min"),
        tau,
        SkeletonSpec(kind, params),
        ModelIdentity("toy", tokenizer="toy-tok", vocab_size=VOCAB),
        GenerationContext(system_prompt="Be brief.", temperature=0.0, max_tokens=16),
        calibration=cal,
    )


def probs() -> np.ndarray:
    p = np.arange(1, VOCAB + 1, dtype=np.float64)
    return p / p.sum()


def test_a_version_holds_the_certificate_and_an_alias_pins_it(tmp_path: Path) -> None:
    store = SkeletonStore(tmp_path)
    v1 = store.put("chat", {"probs": probs()}, kind="unigram", certificate=cert(1.0))
    v2 = store.put("chat", {"probs": probs()}, kind="unigram", certificate=cert(2.0))
    assert v1.model_id == "toy" and v1.vocab_size == VOCAB and v1.tokenizer == "toy-tok"
    assert v1.to_calibration() == cert(1.0).calibration
    store.promote("chat", v1.version)
    got = store.certificate("chat")
    assert got == cert(1.0) and got.context.system_prompt == "Be brief."
    # the certificate is bound to the version's vector: its monitor needs nothing more
    monitor = got.monitor()
    lp = float(np.log(probs()[3]))
    monitor.update(TokenEvent("x", lp, token_id=3))  # lift 0: blocked by the min policy
    assert monitor.verdict.state is State.BLOCKED

    handle = open_certificate(tmp_path, "chat")
    assert handle.certificate.tau == 1.0
    store.promote("chat", v2.version)
    assert handle.certificate.tau == 1.0  # until refreshed: a stream keeps its rule
    assert handle.refresh() and handle.certificate.tau == 2.0
    store.rollback("chat")
    assert handle.refresh() and handle.certificate.tau == 1.0


def test_a_version_without_a_certificate_gets_one_from_its_calibration(tmp_path: Path) -> None:
    store = SkeletonStore(tmp_path)
    old = cert(1.5).calibration
    store.put("legacy", {"probs": probs()}, kind="unigram", calibration=old, vocab_size=VOCAB)
    got = store.certificate("legacy", "latest")
    assert got.tau == 1.5 and got.policy == StreamPolicy(aggregate="min")
    assert got.skeleton == SkeletonSpec("vector", {"store_name": "legacy", "version": 1})
    assert got.monitor().skeleton is not None
    store.put("bare", {"probs": probs()}, kind="unigram")
    with pytest.raises(StoreError, match="holds no certificate and no calibration"):
        store.certificate("bare", "latest")
    with pytest.raises(StoreError, match="holds no certificate"):
        open_certificate(tmp_path, "bare", "latest")
