"""Building VSD skeleton versions and warm-starting them after a (simulated) model change."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from guardrail import Calibration, StreamPolicy
from guardrail.traces import Trace, read_traces
from skeleton_store import SkeletonStore
from skeleton_store._errors import InvalidRequest
from skeleton_store._warmstart import build_vsd_version, warm_start

pytest.importorskip("torch")

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "traces_smollm2_sample.jsonl"
TARGET = (StreamPolicy(), 0.2, 0.1)
CONTEXTS = 64


@pytest.fixture(scope="module")
def traces() -> list[Trace]:
    """The fixture's 40 answers, all labelled correct: the real labels (4 of 40 correct)
    certify no useful target whatever the skeleton, and these tests exercise the
    plumbing, not the guarantee (LTT passes at risk 0.2, delta 0.1 from 11 answers)."""
    return [dataclasses.replace(t, correct=True) for t in read_traces(FIXTURE)]


def model_change(trace: Trace, sigma: float, seed: int) -> Trace:
    """The same answer under a slightly different model: top-k log-probabilities get
    Gaussian noise (the tail keeps its mass before renormalising), then re-sorted."""
    rng = np.random.default_rng(seed)
    lp = trace.top_logprobs
    tail = np.maximum(1.0 - np.exp(lp).sum(axis=1), 1e-12)
    noisy = lp + sigma * rng.standard_normal(lp.shape)
    new = noisy - np.log(np.exp(noisy).sum(axis=1) + tail)[:, None]
    order = np.argsort(-new, axis=1, kind="stable")
    ids = np.take_along_axis(trace.top_ids, order, axis=1)
    new = np.take_along_axis(new, order, axis=1)
    hit = ids == trace.token_ids[:, None]
    assert hit.any(axis=1).all()  # greedy traces: the emitted token is in the top k
    return dataclasses.replace(
        trace, top_ids=ids, top_logprobs=new, logprobs=new[hit], model=trace.model + "-ft"
    )


@pytest.fixture(scope="module")
def new_traces(traces: list[Trace]) -> list[Trace]:
    return [model_change(t, 0.3, seed=i) for i, t in enumerate(traces)]


def test_build_publishes_the_skeleton_its_vsd_record_and_calibration(
    tmp_path: Path, traces: list[Trace]
) -> None:
    store = SkeletonStore(tmp_path / "store")
    v = build_vsd_version(store, "chat", traces, max_contexts=CONTEXTS, calibrate_with=TARGET)
    got = store.get("chat")
    assert (got.version, got.parent, got.kind) == (v.version, None, "vsd")
    assert got.model_id == traces[0].model and got.vocab_size == 49152
    probs = got.probs()
    assert probs.shape == (49152,) and probs.sum() == pytest.approx(1.0, abs=1e-9)
    assert probs.min() >= 1e-8 * (1 - 1e-9)
    rec = got.vsd_trace
    assert rec["converged"] and rec["iterations"] == len(rec["objective"]) - 1 >= 1
    assert rec["n_contexts"] == CONTEXTS and rec["seconds"] > 0 and not rec["warm_start"]
    assert np.all(np.diff(rec["objective"]) <= 1e-9)
    assert got.params["lambda"] == 0.5 and got.params["init"] == "uniform"
    cal = got.to_calibration()
    assert isinstance(cal, Calibration) and cal.score == "lift" and cal.n == len(traces)
    assert (cal.risk, cal.delta) == (0.2, 0.1) and cal.policy == StreamPolicy().to_dict()
    assert got.extra["calibration_data"] == {"traces": "vsd traces", "n": len(traces)}
    # the calibrated version drives a monitor scoring tokens with the fitted vector
    assert got.monitor().tau == cal.tau


def test_warm_start_writes_a_child_and_beats_a_cold_start(
    tmp_path: Path, traces: list[Trace], new_traces: list[Trace]
) -> None:
    store = SkeletonStore(tmp_path / "store")
    v1 = build_vsd_version(store, "chat", traces, max_contexts=CONTEXTS, calibrate_with=TARGET)
    store.promote("chat", v1.version)
    child = warm_start(store, "chat", new_traces, alias="production")
    assert child.parent == v1.version and child.version == v1.version + 1
    assert store.resolve("chat", "latest") == child.version
    assert store.resolve("chat", "production") == v1.version  # promotion stays a decision
    assert child.extra["warm_start"] == {"from": v1.version, "ref": "production"}
    assert child.model_id == traces[0].model + "-ft"
    warm = child.vsd_trace
    assert warm["warm_start"] and warm["converged"] and warm["iterations"] >= 1
    assert child.params["init"] == "warm" and child.params["max_contexts"] == CONTEXTS
    # recalibrated against the new skeleton with the stored target
    cal = child.to_calibration()
    assert cal is not None and (cal.risk, cal.delta) == (0.2, 0.1) and cal.n == len(traces)

    cold = build_vsd_version(
        store, "chat-cold", new_traces, max_contexts=CONTEXTS, calibrate_with=TARGET
    ).vsd_trace
    assert warm["iterations"] < cold["iterations"]
    assert warm["objective"][0] < cold["objective"][0]
    assert warm["objective"][-1] == pytest.approx(cold["objective"][-1], abs=0.01)
    # the change from parent to child is visible to the store's diff
    assert store.diff("chat", v1.version, child.version)["tv_distance"] > 0


def test_warm_start_without_calibration_and_with_overrides(
    tmp_path: Path, traces: list[Trace], new_traces: list[Trace]
) -> None:
    store = SkeletonStore(tmp_path / "store")
    v1 = build_vsd_version(store, "chat", traces[:20], max_contexts=32, lam=0.3)
    assert v1.calibration is None and "calibration_data" not in v1.extra
    child = warm_start(store, "chat", new_traces[:20], alias=v1.version, max_contexts=16)
    assert child.calibration is None and child.params["lambda"] == 0.3
    assert child.vsd_trace["n_contexts"] == 16
    held_out = new_traces[20:]
    grand = warm_start(
        store,
        "chat",
        new_traces[:20],
        calibrate_with=TARGET,
        calibration_traces=held_out,
        calibration_method="paper",
        lam=0.7,
    )
    assert grand.parent == child.version and grand.params["lambda"] == 0.7
    assert grand.calibration is not None and grand.calibration["method"] == "paper"
    assert grand.extra["calibration_data"] == {"traces": "separate traces", "n": len(held_out)}


def test_bad_requests(tmp_path: Path, traces: list[Trace]) -> None:
    store = SkeletonStore(tmp_path / "store")
    store.put("tiny", {"probs": np.full(10, 0.1)}, kind="unigram", vocab_size=10)
    with pytest.raises(InvalidRequest, match="10 tokens"):
        warm_start(store, "tiny", traces[:2])
    unlabeled = [dataclasses.replace(t, correct=None) for t in traces[:3]]
    with pytest.raises(InvalidRequest, match="label"):
        build_vsd_version(store, "chat", unlabeled, max_contexts=8, calibrate_with=TARGET)
    with pytest.raises(InvalidRequest, match="tuple"):
        build_vsd_version(
            store,
            "chat",
            traces[:3],
            max_contexts=8,
            calibrate_with=(StreamPolicy(), 0.5),  # type: ignore[arg-type]
        )
    with pytest.raises(InvalidRequest, match="no traces"):
        build_vsd_version(store, "chat", [])
    assert store.names() == ["tiny"]  # nothing was published by the failed calls


def test_warmstart_module_imports_torch_lazily() -> None:
    code = "import sys, skeleton_store._warmstart\nprint('torch' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
