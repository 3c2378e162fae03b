"""VSD cost and cold vs warm convergence (``python -m benchmarks.bench_vsd [TRACES]``).

1. Cost per iteration. ``N`` synthetic next-token distributions (default
   256; rows = a Zipf base over the vocabulary times log-normal noise) at
   vocabulary sizes 50,000 and 262,144 (Gemma 3), float32, on the chosen
   device. One *pass* evaluates the objective and its gradient (one chunked
   sweep over the ``N x V`` array); an iteration is one or more passes (line
   search trials) plus a sort-based projection. The time per iteration is
   ``(t(k iterations) - t(0 iterations)) / k`` with ``tol=0``, so setup
   (validation, column sums) is reported apart; best of ``--repeat``, after one
   untimed warm-up run; on CUDA each timed call starts and ends with
   ``torch.cuda.synchronize()``.

2. Cold vs warm start on real traces (default
   ``../shared/data/traces/triviaqa_smollm2.jsonl``: SmolLM2-135M, V = 49,152).
   The first ``--answers`` answers' steps (at most ``--contexts``, evenly
   spaced) give ``P`` of the "old model"; VSD (``lam=0.5``, ``tol=0.01``)
   fits the old skeleton. The *simulated model change*: every step's top-20
   log-probabilities get i.i.d. Gaussian noise of standard deviation
   ``sigma`` nats (the tail mass outside the top 20 is kept, the row is
   renormalised and re-sorted), a crude stand-in for a fine-tune that moves
   next-token log-probabilities by about ``sigma``. On the new ``P``: cold
   (uniform start) vs warm (start from the old skeleton), for both
   geometries. ``gap`` is the final objective minus a reference optimum (the
   scaled method run to ``tol=1e-7``): how far from the optimum the paper's
   stopping rule (objective change < 0.01) leaves each run.

Prints Markdown tables. Timings on a shared machine vary with its load:
compare rows of one run, not across runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from guardrail.traces import Trace, read_traces
from guardrail.vsd import Geometry, VSDResult, distributions_from_traces, vsd

SIZES = (50_000, 262_144)
DEFAULT_TRACES = Path("../shared/data/traces/triviaqa_smollm2.jsonl")
GEOMETRIES: tuple[Geometry, ...] = ("scaled", "euclidean")


def synthetic(n: int, v: int, seed: int = 0) -> np.ndarray:
    """``(n, v)`` float32 rows: a Zipf(1.1) base times log-normal noise (sigma 2), renormalised."""
    rng = np.random.default_rng(seed)
    log_base = -1.1 * np.log(np.arange(1, v + 1, dtype=np.float32))
    out = np.empty((n, v), dtype=np.float32)
    for i in range(n):
        row = np.exp(log_base + 2.0 * rng.standard_normal(v, dtype=np.float32))
        out[i] = row / row.sum(dtype=np.float64)
    return out


def _synchronize(device: str) -> None:
    """Wait for the work queued on ``device`` (CUDA runs kernels asynchronously)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def timed_vsd(P: np.ndarray, device: str, **options: Any) -> tuple[float, VSDResult]:
    """Wall seconds of one :func:`vsd` call with nothing queued on ``device`` before it
    and everything it queued finished after it, and its result."""
    _synchronize(device)
    start = time.perf_counter()
    res = vsd(P, device=device, **options)
    _synchronize(device)
    return time.perf_counter() - start, res


def per_iteration(
    P: np.ndarray, geometry: Geometry, k: int, repeat: int, device: str
) -> dict[str, float]:
    """Setup and per-iteration seconds, best of ``repeat``, after one untimed warm-up run
    (on CUDA the first call also starts the context and loads the kernels: timed, it
    made the 0-iteration run slower than the ``k``-iteration one)."""
    timed_vsd(P, device, max_iter=1, tol=0.0, geometry=geometry)  # warm-up
    best: dict[str, float] = {}
    for _ in range(repeat):
        t0, _ = timed_vsd(P, device, max_iter=0, tol=0.0, geometry=geometry)
        tk, res = timed_vsd(P, device, max_iter=k, tol=0.0, geometry=geometry)
        row = {
            "setup": t0,
            "iteration": (tk - t0) / res.iterations,
            "passes": (res.evaluations - 1) / res.iterations,
        }
        row["pass"] = row["iteration"] / row["passes"]
        if not best or row["iteration"] < best["iteration"]:
            best = row
    return best


def model_change(trace: Trace, sigma: float, rng: np.random.Generator) -> Trace:
    """The simulated model change of the module docstring, applied to one trace."""
    lp = trace.top_logprobs
    if lp.size == 0:
        return trace
    tail = np.maximum(1.0 - np.exp(lp).sum(axis=1), 1e-12)
    noisy = lp + sigma * rng.standard_normal(lp.shape)
    new = noisy - np.log(np.exp(noisy).sum(axis=1) + tail)[:, None]
    order = np.argsort(-new, axis=1, kind="stable")
    ids = np.take_along_axis(trace.top_ids, order, axis=1)
    new = np.take_along_axis(new, order, axis=1)
    hit = ids == trace.token_ids[:, None]
    logprobs = np.where(hit.any(axis=1), (new * hit).sum(axis=1), trace.logprobs)
    return dataclasses.replace(trace, top_ids=ids, top_logprobs=new, logprobs=logprobs)


def _run_row(label: str, res: VSDResult, ref: float) -> str:
    return (
        f"| {label} | {res.iterations} | {res.evaluations} | {res.seconds:.2f} | "
        f"{res.objective[-1]:.4f} | {res.objective[-1] - ref:.4f} | {res.stop_reason} |"
    )


def cold_vs_warm(args: argparse.Namespace) -> None:
    path = Path(args.traces)
    if not path.is_file():
        print(f"\n(skipping cold vs warm: no trace file at {path})")
        return
    traces = read_traces(str(path), limit=args.answers)
    steps = sum(t.n_tokens for t in traces)
    old_p = distributions_from_traces(traces, max_contexts=args.contexts, dtype=np.float32)
    old = vsd(old_p, device=args.device)
    del old_p
    print(
        f"\n## Cold vs warm start: {path.name}, first {len(traces)} answers, "
        f"{min(steps, args.contexts)} of {steps} steps, V = {traces[0].vocab_size}, "
        f"lam = 0.5, tol = 0.01\n"
    )
    print(
        f"Old skeleton (scaled, cold): {old.iterations} iterations, "
        f"J = {old.objective[-1]:.4f}, {old.seconds:.2f} s.\n"
    )
    print("| sigma | start | geometry | iterations | passes | seconds | J | gap | stop |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---|")
    for sigma in args.sigma:
        rng = np.random.default_rng(args.seed)
        new_traces = [model_change(t, sigma, rng) for t in traces]
        P = distributions_from_traces(new_traces, max_contexts=args.contexts, dtype=np.float32)
        ref = vsd(P, tol=1e-7, max_iter=1000, init=old.skeleton, device=args.device)
        for geometry in GEOMETRIES:
            for start, init in (("cold", None), ("warm", old.skeleton)):
                res = vsd(P, geometry=geometry, init=init, device=args.device)
                print(_run_row(f"{sigma:g} | {start} | {geometry}", res, ref.objective[-1]))
        del P


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="?", default=str(DEFAULT_TRACES))
    ap.add_argument("--contexts", type=int, default=256, help="N (contexts) in both parts")
    ap.add_argument("--answers", type=int, default=400, help="answers read from the trace file")
    ap.add_argument("--sigma", type=float, nargs="+", default=[0.1, 0.3, 1.0])
    ap.add_argument("--iterations", type=int, default=4, help="k for the per-iteration time")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": args.device,
        "cpu": platform.processor() or platform.machine(),
    }
    print("# VSD benchmark\n")
    print(", ".join(f"{k} {v}" for k, v in info.items()))
    print(f"\n## Cost per iteration: N = {args.contexts} contexts, float32\n")
    print("| V | geometry | setup s | pass s | passes / iteration | iteration s |")
    print("|---:|---|---:|---:|---:|---:|")
    for v in SIZES:
        P = synthetic(args.contexts, v, seed=args.seed)
        for geometry in GEOMETRIES:
            r = per_iteration(P, geometry, args.iterations, args.repeat, args.device)
            print(
                f"| {v:,} | {geometry} | {r['setup']:.3f} | {r['pass']:.3f} | "
                f"{r['passes']:.2f} | {r['iteration']:.3f} |"
            )
        del P
    cold_vs_warm(args)


if __name__ == "__main__":
    main()
