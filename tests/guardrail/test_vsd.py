"""Variational Skeleton Design: objective, gradient, projection, optimiser, inputs."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from guardrail import ConfigError
from guardrail.traces import read_traces
from guardrail.vsd._design import (
    Geometry,
    VSDResult,
    _run,
    distributions_from_logits,
    distributions_from_traces,
    vsd,
    vsd_objective,
)

torch = pytest.importorskip("torch")

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "traces_smollm2_sample.jsonl"
FloatArray = npt.NDArray[np.float64]


def synthetic(n: int = 200, v: int = 50, seed: int = 0) -> FloatArray:
    """Peaked rows around a shared Zipf-like base, as next-token distributions are."""
    rng = np.random.default_rng(seed)
    base = 1.0 / np.arange(1, v + 1) ** 1.1
    logits = np.log(base)[None, :] + 2.0 * rng.standard_normal((n, v))
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    out: FloatArray = p / p.sum(axis=1, keepdims=True)
    return out


def run_unchecked(
    P: FloatArray, *, lam: float, geometry: Geometry, max_iter: int, tol: float
) -> VSDResult:
    """The optimiser without the paper-range check on ``lam`` (to test ``lam = 0``)."""
    return _run(
        P,
        lam=lam,
        clip=12.0,
        lr=None,
        max_iter=max_iter,
        tol=tol,
        init=None,
        device="cpu",
        floor=1e-8,
        geometry=geometry,
        chunk_rows=None,
    )


def autograd_objective(
    P: FloatArray, s: FloatArray, lam: float, clip: float
) -> tuple[float, FloatArray]:
    pt = torch.tensor(P, dtype=torch.float64)
    st = torch.tensor(s, dtype=torch.float64, requires_grad=True)
    lift = torch.clamp(torch.log(pt) - torch.log(st), 0.0, clip)
    kl = (torch.xlogy(pt, pt) - pt * torch.log(st)).sum(dim=1)
    obj = (kl - lam * (pt * lift).sum(dim=1)).mean()
    obj.backward()
    assert st.grad is not None
    return float(obj.detach()), st.grad.numpy()


# --------------------------------------------------------------------------- #
# Objective and gradient
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.5, 0.7])
def test_gradient_matches_autograd(lam: float) -> None:
    P = synthetic(n=40, v=30, seed=1)
    rng = np.random.default_rng(2)
    s = rng.dirichlet(np.ones(30))
    s[:3] = 1e-8  # far below P: lifts above the clip bound
    s /= s.sum()
    ratio = np.log(P / s)
    # every region of the clipped lift is exercised: below 0, inside [0, B], above B
    assert (ratio < 0).any() and ((ratio >= 0) & (ratio <= 12)).any() and (ratio > 12).any()
    obj, grad = vsd_objective(P, s, lam=lam, clip=12.0)
    ref_obj, ref_grad = autograd_objective(P, s, lam, 12.0)
    assert obj == pytest.approx(ref_obj, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-12)
    closed = -(P / s * (1 - lam * ((ratio >= 0) & (ratio <= 12)))).mean(axis=0)
    np.testing.assert_allclose(grad, closed, rtol=1e-10)


def test_objective_handles_zero_probabilities() -> None:
    P = synthetic(n=10, v=20)
    P[:, :5] = 0.0
    P /= P.sum(axis=1, keepdims=True)
    s = np.full(20, 1 / 20)
    obj, grad = vsd_objective(P, s, lam=0.5)
    ref_obj, ref_grad = autograd_objective(P, s, 0.5, 12.0)
    assert math.isfinite(obj) and obj == pytest.approx(ref_obj, rel=1e-12)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-14)


# --------------------------------------------------------------------------- #
# Projection
# --------------------------------------------------------------------------- #


def bisection_projection(v: FloatArray, d: FloatArray, floor: float) -> FloatArray:
    lo, hi = ((v - floor) / d).min() - 1.0, ((v - floor) / d).max() + 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if np.maximum(v - mid * d, floor).sum() > 1.0:
            lo = mid
        else:
            hi = mid
    out: FloatArray = np.maximum(v - (lo + hi) / 2 * d, floor)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_projection_is_exact(seed: int) -> None:
    from guardrail.vsd._design import _project

    rng = np.random.default_rng(seed)
    v = rng.standard_normal(200) * 0.05 + 1 / 200
    for d in (np.ones(200), rng.uniform(1e-6, 1.0, 200)):
        got = _project(torch.tensor(v), torch.tensor(d), 1e-4).numpy()
        want = bisection_projection(v, d, 1e-4)
        np.testing.assert_allclose(got, want, atol=1e-12)
        assert got.sum() == pytest.approx(1.0, abs=1e-12)
        assert got.min() >= 1e-4


def test_projection_keeps_a_feasible_point() -> None:
    from guardrail.vsd._design import _project

    s = np.random.default_rng(0).dirichlet(np.ones(50)) * (1 - 50e-6) + 1e-6
    got = _project(torch.tensor(s), torch.tensor(s), 1e-6).numpy()
    np.testing.assert_allclose(got, s, atol=1e-15)


# --------------------------------------------------------------------------- #
# The optimiser
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("geometry", ["scaled", "euclidean"])
def test_objective_decreases_and_result_is_on_the_floored_simplex(geometry: Geometry) -> None:
    P = synthetic()
    res = vsd(P, geometry=geometry)
    assert isinstance(res, VSDResult)
    obj = np.array(res.objective)
    assert res.iterations == len(obj) - 1 >= 1
    assert (np.diff(obj) <= 1e-12).all()  # the line search never accepts an increase
    assert res.converged and res.stop_reason == "tol"
    assert obj[-2] - obj[-1] < 0.01
    s = res.skeleton
    assert s.dtype == np.float64 and s.shape == (50,) and not s.flags.writeable
    assert s.sum() == pytest.approx(1.0, abs=1e-12)
    assert s.min() >= 1e-8 * (1 - 1e-12)
    assert obj[-1] == pytest.approx(vsd_objective(P, s)[0], abs=1e-9)
    assert res.evaluations >= res.iterations + 1
    assert res.device == "cpu" and not res.warm_start and res.seconds > 0
    assert res.to_dict()["iterations"] == res.iterations


def test_floor_binds_where_the_mean_is_smaller() -> None:
    P = synthetic(n=20, v=30)
    P[:, :4] = 1e-12
    P /= P.sum(axis=1, keepdims=True)
    res = vsd(P, floor=1e-6, tol=1e-9)
    np.testing.assert_allclose(res.skeleton[:4], 1e-6, rtol=1e-9)
    assert res.skeleton.min() >= 1e-6 * (1 - 1e-12)


@pytest.mark.parametrize("geometry", ["scaled", "euclidean"])
def test_lam_zero_gives_the_mean_of_the_rows(geometry: Geometry) -> None:
    P = synthetic()
    res = run_unchecked(P, lam=0.0, geometry=geometry, max_iter=20_000, tol=0.0)
    assert res.converged and res.stop_reason == "stationary"
    mean = P.mean(axis=0)
    np.testing.assert_allclose(res.skeleton, mean, rtol=1e-5)
    # the mean is the KL minimiser: nothing nearby on the simplex does better
    best = vsd_objective(P, mean, lam=0.0)[0]
    rng = np.random.default_rng(3)
    for _ in range(5):
        other = np.abs(mean + 1e-3 * rng.standard_normal(50) * mean)
        assert vsd_objective(P, other / other.sum(), lam=0.0)[0] > best


def test_scaled_step_solves_lam_zero_in_one_iteration() -> None:
    P = synthetic()
    res = run_unchecked(P, lam=0.0, geometry="scaled", max_iter=50, tol=1e-12)
    np.testing.assert_allclose(res.skeleton, P.mean(axis=0), rtol=1e-10)
    assert res.objective[1] == pytest.approx(res.objective[-1], abs=1e-12)


@pytest.mark.parametrize("geometry", ["scaled", "euclidean"])
def test_warm_start_from_the_cold_solution_needs_fewer_iterations(geometry: Geometry) -> None:
    P = synthetic(v=80)
    cold = vsd(P, geometry=geometry)
    warm = vsd(P, geometry=geometry, init=cold.skeleton)
    assert warm.warm_start and not cold.warm_start
    assert warm.iterations < cold.iterations
    assert warm.objective[-1] <= cold.objective[-1] + 1e-12


def test_scaled_reaches_a_lower_objective_than_euclidean_on_real_traces() -> None:
    P = distributions_from_traces(read_traces(FIXTURE), max_contexts=48, dtype=np.float32)
    scaled = vsd(P)
    euclid = vsd(P, geometry="euclidean")
    assert scaled.converged and euclid.converged
    assert scaled.objective[-1] < euclid.objective[-1]
    assert scaled.objective[-1] < scaled.objective[0] - 1.0


def test_lambda_outside_the_paper_range_is_refused() -> None:
    P = synthetic(n=5, v=10)
    for lam in (0.0, 0.29, 0.71, 1.0, float("nan")):
        with pytest.raises(ConfigError, match=r"\[0.3, 0.7\]"):
            vsd(P, lam=lam)
    assert vsd(P, lam=0.3).converged and vsd(P, lam=0.7).converged


def test_torch_float32_and_numpy_agree() -> None:
    P = synthetic()
    ref = vsd(P)
    got = vsd(torch.tensor(P, dtype=torch.float32), chunk_rows=7)
    np.testing.assert_allclose(got.skeleton, ref.skeleton, rtol=1e-4, atol=1e-9)
    assert got.iterations == ref.iterations


def test_chunking_does_not_change_the_result() -> None:
    P = synthetic()
    a, b = vsd(P, chunk_rows=1), vsd(P, chunk_rows=1000)
    np.testing.assert_allclose(a.skeleton, b.skeleton, rtol=1e-12)
    np.testing.assert_allclose(a.objective, b.objective, rtol=1e-12)


def test_max_iter_stops_without_convergence() -> None:
    res = vsd(synthetic(), geometry="euclidean", max_iter=1, tol=0.0)
    assert res.iterations == 1 and not res.converged and res.stop_reason == "max_iter"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu() -> None:  # pragma: no cover - needs a GPU
    P = synthetic()
    cpu, gpu = vsd(P), vsd(P, device="cuda")
    assert gpu.device.startswith("cuda")
    np.testing.assert_allclose(gpu.skeleton, cpu.skeleton, rtol=1e-9)


# --------------------------------------------------------------------------- #
# Input validation
# --------------------------------------------------------------------------- #


def test_bad_inputs_are_config_errors() -> None:
    P = synthetic(n=5, v=10)
    bad_rows = P.copy()
    bad_rows[0] *= 2
    negative = P.copy()
    negative[0, 0] = -0.1
    nan = P.copy()
    nan[1, 1] = np.nan
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: vsd(P[0]), "N, V"),
        (lambda: vsd(bad_rows), "row 0 sums"),
        (lambda: vsd(negative), "non-negative"),
        (lambda: vsd(nan), "finite"),
        (lambda: vsd(P, init=np.ones(9)), "9 entries"),
        (lambda: vsd(P, init=-np.ones(10)), "non-negative"),
        (lambda: vsd(P, floor=0.2), "floor"),
        (lambda: vsd(P, clip=0.0), "clip"),
        (lambda: vsd(P, tol=-1.0), "tol"),
        (lambda: vsd(P, max_iter=-1), "max_iter"),
        (lambda: vsd(P, lr=0.0), "lr"),
        (lambda: vsd(P, geometry="mirror"), "geometry"),  # type: ignore[arg-type]
        (lambda: vsd(P, device="tpu"), "device"),
        (lambda: vsd(P, chunk_rows=0), "chunk_rows"),
        (lambda: vsd_objective(P, np.zeros(10)), "positive"),
    ]
    if not torch.cuda.is_available():
        cases.append((lambda: vsd(P, device="cuda"), "CUDA"))
    for call, match in cases:
        with pytest.raises(ConfigError, match=match):
            call()


def test_init_is_normalised_and_projected() -> None:
    P = synthetic(n=20, v=10)
    res = vsd(P, init=np.arange(10.0), max_iter=0)
    expected = np.arange(10.0) / 45
    expected[0] = 1e-8
    np.testing.assert_allclose(res.skeleton, expected, atol=1e-8)
    assert res.iterations == 0 and res.stop_reason == "max_iter" and res.warm_start


# --------------------------------------------------------------------------- #
# Building P
# --------------------------------------------------------------------------- #


def test_distributions_from_traces_places_top_k_and_a_uniform_tail() -> None:
    traces = read_traces(FIXTURE)[:3]
    P = distributions_from_traces(traces)
    n_steps = sum(t.n_tokens for t in traces)
    assert P.shape == (n_steps, 49152) and P.dtype == np.float64
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    t = traces[0]
    row = P[0]
    top = np.exp(t.top_logprobs[0])
    # top-k probabilities at their ids (up to the renormalisation), equal mass elsewhere
    scale = row[t.top_ids[0]] / top
    np.testing.assert_allclose(scale, scale[0], rtol=1e-12)
    assert scale[0] == pytest.approx(1.0, abs=1e-3)
    rest = np.delete(row, t.top_ids[0])
    np.testing.assert_allclose(rest, rest[0], rtol=1e-12)
    assert rest[0] * rest.size == pytest.approx(1 - row[t.top_ids[0]].sum(), rel=1e-9)
    # a later trace's rows follow in order
    second = traces[1]
    j = t.n_tokens
    ratio = P[j, second.top_ids[0]] / np.exp(second.top_logprobs[0])
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-12)


def test_distributions_from_traces_places_an_emitted_token_outside_the_top_k() -> None:
    t = read_traces(FIXTURE)[0]
    cut = dataclasses.replace(t, top_ids=t.top_ids[:, 1:6], top_logprobs=t.top_logprobs[:, 1:6])
    P = distributions_from_traces([cut])
    for i in range(t.n_tokens):
        emitted = int(t.token_ids[i])
        assert emitted not in cut.top_ids[i]
        ratio = P[i, emitted] / math.exp(t.logprobs[i])
        assert ratio == pytest.approx(P[i, cut.top_ids[i][0]] / math.exp(cut.top_logprobs[i][0]))
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)


def test_max_contexts_is_an_even_deterministic_subsample() -> None:
    traces = read_traces(FIXTURE)
    full = distributions_from_traces(traces[:5])
    sub = distributions_from_traces(traces[:5], max_contexts=7, dtype=np.float32)
    again = distributions_from_traces(traces[:5], max_contexts=7, dtype=np.float32)
    idx = np.unique(np.linspace(0, full.shape[0] - 1, 7).round().astype(int))
    assert sub.dtype == np.float32 and sub.shape == (7, 49152)
    np.testing.assert_allclose(sub, full[idx], rtol=1e-6)
    np.testing.assert_array_equal(sub, again)
    assert distributions_from_traces(traces[:2], max_contexts=10_000).shape[0] == sum(
        t.n_tokens for t in traces[:2]
    )


def test_distributions_from_traces_refuses_bad_input() -> None:
    traces = read_traces(FIXTURE)
    other = dataclasses.replace(traces[1], vocab_size=60000)
    with pytest.raises(ConfigError, match="vocabulary"):
        distributions_from_traces([traces[0], other])
    with pytest.raises(ConfigError, match="no trace"):
        distributions_from_traces([])
    with pytest.raises(ConfigError, match="max_contexts"):
        distributions_from_traces(traces, max_contexts=0)


def test_distributions_from_logits_is_a_softmax() -> None:
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((4, 9)) * 5
    logits[0, 0] = -np.inf
    P = distributions_from_logits(logits)
    ref = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(P, ref / ref.sum(axis=1, keepdims=True), rtol=1e-12)
    assert P[0, 0] == 0.0
    assert distributions_from_logits(logits, dtype=np.float32).dtype == np.float32
    log_softmax = np.log(P[1:])
    np.testing.assert_allclose(distributions_from_logits(log_softmax), P[1:], rtol=1e-12)
    with pytest.raises(ConfigError):
        distributions_from_logits(np.full((2, 3), -np.inf))
    with pytest.raises(ConfigError):
        distributions_from_logits(np.zeros(3))


def test_vsd_module_imports_torch_lazily() -> None:
    code = "import sys, guardrail, guardrail.vsd._design\nprint('torch' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
