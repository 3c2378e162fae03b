"""``benchmarks/bench_vsd.py``'s per-iteration timing: a first call that also starts the
device (CUDA's context and kernels) is a warm-up, never the baseline of a timed run."""

from __future__ import annotations

import importlib
import time
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest

START_UP, PER_ITERATION = 0.3, 0.03


def _bench_vsd() -> ModuleType:
    return importlib.import_module("benchmarks.bench_vsd")


def test_per_iteration_time_is_never_negative_when_the_first_call_starts_the_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mod = _bench_vsd()
    calls: list[int] = []

    def slow_first_vsd(P: np.ndarray, *, max_iter: int, **options: object) -> SimpleNamespace:
        seconds = (0.0 if calls else START_UP) + PER_ITERATION * max_iter
        time.sleep(seconds)
        calls.append(max_iter)
        return SimpleNamespace(seconds=seconds, iterations=max_iter, evaluations=max_iter + 1)

    monkeypatch.setattr(mod, "vsd", slow_first_vsd)
    row = mod.per_iteration(np.ones((2, 3)) / 3, "scaled", k=2, repeat=2, device="cpu")
    assert calls[0] == 1 and calls[1:] == [0, 2, 0, 2]  # an untimed warm-up first
    assert 0.5 * PER_ITERATION < row["iteration"] < START_UP / 2
    assert row["setup"] < START_UP / 2 and row["passes"] == 1.0
