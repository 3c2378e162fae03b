"""Microseconds per token of the streaming monitor on long answers (code, worked maths),
for the lift rule and the fitted rules.

    python -m benchmarks.bench_longform_monitor [--traces FILE ...] [--repeat 5]
    python -m benchmarks.bench_longform_monitor --docs-only

``--traces`` (repeatable; default: the committed MBPP traces,
``benchmarks/traces/mbpp_qwen25coder.jsonl.xz``) names labelled long-answer trace files, or
folders of xz parts (the GSM8K traces, ``benchmarks/traces/gsm8k_qwen25coder``, are a second
``--traces``: the commands read its parts joined, and the page names them as the
``<folder>.jsonl.xz`` the traces README's ``cat`` makes). Saves
``benchmarks/results/bench_longform_monitor.json`` and writes
``docs/results/longform_monitor.md``; ``--docs-only`` rewrites the page from the saved
JSON, running nothing.

The rules, made per trace file by the commands the docs give (``python -m adapters.cli``
of this checkout, every answer of the file: this measures speed, not accuracy):

- ``lift``: ``liftguard calibrate --traces FILE --risk 0.3`` with every default, the
  default lift rule (:class:`~guardrail.LiftRule`: uniform skeleton, mean of the lowest
  2 clipped lifts, betting boundary);
- ``fit``: ``liftguard fit --traces FILE --fit-fraction 1``, the default fitted rule
  (:class:`~guardrail.FittedRule`, group ``lift``: logprob, alternatives and prompt-free
  lift aggregates, early-block margins at the 0.99 quantile);
- ``fit --select``: ``liftguard fit --traces FILE --fit-fraction 1 --select coverage
  --risk 0.3`` (at 0.5, then 0.8, if the selection refuses 0.3; the page says which).

Each certificate is timed at ``tau`` = the median of its final scores on the file's
answers (the fitted certificates' own ``tau`` is uncalibrated, above every score, and would
block every answer at its first token), in two modes: **early verdicts on**, as deployed
(the certificate's policy; an answer's stream stops at its first final verdict: the page
reports how many answers were decided early and the tokens processed), and **early
verdicts off** (``early=False``: every token of every answer, verdict at ``finish()``; the
rules then check nothing in-stream and the fitted rules compute no bounds, so this is a
lower per-token cost). Every answer goes through a fresh ``certificate.monitor()`` and
``monitor.update(event)``, with
:class:`~guardrail.TokenEvent` objects built from the trace beforehand
(:func:`guardrail.fitting.trace_events`: logprob, token id, the trace's top-20
alternatives, exact entropy; building them is the adapter's cost). ``update`` times
exclude the per-answer ``certificate.monitor()`` and ``finish()``, shown apart. The
baseline, in the same run over the same events, is a bare Python loop summing
``event.logprob``; ``ratio`` is monitor time / baseline time. Best of ``--repeat`` runs
(default 5), ``time.perf_counter``: each run goes answer by answer, timing the baseline and
every rule and mode on the answer in turn (the order rotating), and the figures sum each
answer's fastest run (a machine shared with other work slows whole stretches of a run;
the JSON also keeps the fastest whole run, ``*_best_whole_run``);
beside it the same ``update`` spans in the thread's CPU time (``time.thread_time``, read
outside them), which leaves out the time the process waited for a core. Run it at low
priority (``nice -n 15``) on a machine that also generates traces: the page records the
niceness and the load.

The skeleton: the fitted rules read the prompt-free skeleton, whose log-probabilities are
here the traces' recorded ones (:class:`~guardrail.fitting.RecordedSkeleton`, as
:func:`guardrail.fitting.replay_fitted`, ``liftguard eval`` and ``calibrate`` replay
them), so the figures are the monitor's own cost. A live prompt-free skeleton adds one
evaluation of the prompt-free model per token on top (a forward step of that model,
milliseconds on a CPU): that is the skeleton's cost, not the monitor's. The lift rule's
uniform skeleton is a constant, read inside ``update`` and so timed with it.

Per-token cost by answer length (fewer than 64 tokens, 64-255, 256 and more) and by
position in the answer (tokens 1-64, 65-128, 129-256, 257-512) shows whether it grows
with length: for a streaming monitor with O(1) state it must not. Few answers run past 256
tokens, so the answers are also joined end to end, in the file's order and indexed anew,
into streams of 4,096 tokens (the rest left out), each rule timed on them with early
verdicts off (on, every stream would be decided early, and the fitted rules' token limit
would block it at 513) by position band 1-512, 513-1024, 1025-2048, 2049-4096: best of
``--repeat`` runs stream by stream and 256 tokens at a time.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from adapters.tracefiles import open_trace_objects
from benchmarks.longform_monitor_page import BANDS, BUCKETS, COMMAND, MODES, RULES, render
from benchmarks.longform_monitor_timing import (
    Stream,
    chained,
    median_tau,
    monitor_factory,
    recorded_skeletons,
    streams,
    summarise,
    time_baseline,
    time_chained,
    time_monitor,
    with_early,
)
from guardrail import Certificate, Monitor
from guardrail.fitting import trace_events
from guardrail.traces import parse_trace
from studies.tables import load, save, trace_parts, write_page

ROOT = Path(__file__).resolve().parents[1]

SAVED = ROOT / "benchmarks" / "results" / "bench_longform_monitor.json"
PAGE = ROOT / "docs" / "results" / "longform_monitor.md"
DEFAULT_TRACES = "benchmarks/traces/mbpp_qwen25coder.jsonl.xz"
RISKS = (0.3, 0.5, 0.8)
"""The risk each command is run at, the next if it refuses (timing needs a rule, not a
promise)."""


def _liftguard(args: Sequence[str]) -> tuple[int, str]:
    """``liftguard ARGS`` of this checkout (``python -m adapters.cli``): exit status, and the
    last line of stderr."""
    proc = subprocess.run([sys.executable, "-m", "adapters.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, check=False)  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    return proc.returncode, lines[-1] if lines else ""


def make_certificate(key: str, traces: str, out: Path, shown: str | None = None) -> dict[str, Any]:
    """Run ``key``'s command on ``traces`` at the first risk of :data:`RISKS` it does not
    refuse; what was run (``shown`` in place of ``traces``, for parts joined into a
    temporary file) and what the others said."""
    refused: list[dict[str, Any]] = []
    for risk in RISKS if key != "fit" else (None,):  # the default fit selects by no risk
        args = [*RULES[key][1], "--traces", traces]
        args += [] if risk is None else ["--risk", f"{risk:g}"]
        code, last = _liftguard([*args, "--out", str(out)])
        if code == 0:
            named = [shown if a == traces and shown else a for a in args]
            return {"command": "liftguard " + " ".join(named), "risk": risk, "refused": refused}
        refused.append({"risk": risk, "error": last})
    raise SystemExit(f"{key} on {traces}: every risk refused: {refused}")


def joined_parts(folder: Path, tmp: Path) -> Path:
    """The parts of ``folder`` (``part-*.jsonl.xz``, as ``benchmarks/traces/gsm8k_qwen25coder/``)
    joined in name order into ``tmp/<folder>.jsonl.xz``: xz streams one after another are
    one xz file, which every command reads as it is (the traces README's ``cat``)."""
    out = tmp / f"{folder.name}.jsonl.xz"
    with out.open("wb") as dst:
        for part in trace_parts(folder):
            dst.write(part.read_bytes())
    return out


def trace_file(path: str, tmp: Path, repeat: int) -> dict[str, Any]:
    """Every rule on the answers of ``path`` (a trace file, or a folder of xz parts), in
    both modes."""
    shown = None
    if (ROOT / path).is_dir():  # the commands read the parts joined, as the README says
        shown = f"{path.rstrip('/')}.jsonl.xz"
        path = os.path.relpath(joined_parts(ROOT / path, tmp), ROOT)
    resolved = str(ROOT / path)
    traces = [parse_trace(obj, source=path, line=n) for n, obj in open_trace_objects(resolved)]
    traces = [t for t in traces if t.n_tokens]
    events = [trace_events(t) for t in traces]
    lengths = np.array([t.n_tokens for t in traces])
    saved: dict[str, Any] = {
        "file": Path(shown or path).name, "path": shown or path, "n": len(traces),
        "n_correct": int(sum(bool(t.correct) for t in traces)), "tokens": int(lengths.sum()),
        "median_tokens": float(np.median(lengths)), "mean_tokens": float(lengths.mean()),
        "max_tokens": int(lengths.max()), "model": traces[0].model, "rules": {},
    }  # fmt: skip
    plan: list[tuple[str, str, list[Stream]]] = []
    makers: dict[tuple[str, str], Callable[[Any], Monitor]] = {}
    certs: dict[str, Certificate] = {}
    for key in RULES:
        out = tmp / f"{key}.json"
        made = make_certificate(key, path, out, shown)
        cert = Certificate.load(str(out))
        skels = recorded_skeletons(cert, traces)
        tau = median_tau(cert, events, skels)
        certs[key] = with_early(cert, early=cert.policy.early, tau=tau)
        stat, pol = cert.statistic, cert.policy
        lowest = f"-{pol.lowest_k}" if pol.aggregate == "lowest" else ""
        made.update({
            "own_tau": cert.tau, "tau": tau, "max_tokens": cert.context.max_tokens,
            "rule": f"lift[{cert.skeleton.kind}, {pol.aggregate}{lowest}, {pol.boundary}]"
                    if stat is None else
                    f"fitted[{stat.group}, {stat.form}], {len(stat.features)} features",
            "features": [] if stat is None else [f.name for f in stat.features],
            "skeleton": "recorded prompt-free" if skels[0] is not None else cert.skeleton.kind,
            "modes": {},
        })  # fmt: skip
        saved["rules"][key] = made
        for mode in MODES:
            timed = with_early(cert, early=mode == "early", tau=tau)
            plan.append((key, mode, streams(timed, events, skels)))
            makers[key, mode] = monitor_factory(timed)
        print(f"{Path(path).name}: {key} made ({made['command']})", file=sys.stderr)
    shape = (repeat, len(traces), len(BANDS))
    mon = {(k, m): np.zeros(shape) for k, m, _ in plan}
    base = {(k, m): np.zeros(shape) for k, m, _ in plan}
    setup = {(k, m): np.zeros((repeat, len(traces))) for k, m, _ in plan}
    cpu = {(k, m): np.zeros(shape) for k, m, _ in plan}
    for r in range(repeat):  # answer by answer, every rule and mode in turn, order rotating
        for i in range(len(traces)):
            for j in range(len(plan)):
                key, mode, items = plan[(i + r + j) % len(plan)]
                time_baseline(items[i], base[key, mode][r, i])
                setup[key, mode][r, i] = time_monitor(
                    makers[key, mode], items[i], mon[key, mode][r, i], cpu[key, mode][r, i]
                )
        print(f"{Path(path).name}: run {r + 1} of {repeat}", file=sys.stderr)
    for key, mode, items in plan:
        saved["rules"][key]["modes"][mode] = summarise(
            items, mon[key, mode], base[key, mode], cpu[key, mode], setup[key, mode]
        )
    for key, figures in time_chained(certs, chained(traces, events), repeat).items():
        saved["rules"][key]["chained"] = figures
    print(f"{Path(path).name}: chained streams timed", file=sys.stderr)
    return saved


def run(paths: Sequence[str], repeat: int) -> dict[str, Any]:
    saved: dict[str, Any] = {
        "generated_by": COMMAND, "repeat": repeat, "python": platform.python_version(),
        "implementation": platform.python_implementation(), "machine": platform.machine(),
        "cpus": os.cpu_count(), "niceness": os.nice(0), "load_before": os.getloadavg()[0],
        "buckets": [b[2] for b in BUCKETS], "bands": [b[2] for b in BANDS], "files": [],
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as t:
        for path in paths:
            saved["files"].append(trace_file(path, Path(t), repeat))
    saved["load_after"] = os.getloadavg()[0]
    return saved


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--traces", action="append", metavar="FILE",
                        help=f"labelled long-answer traces, a file or a folder of xz parts, "
                        f"repeatable (default: "
                        f"{DEFAULT_TRACES} of this checkout)")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=5, help="runs; the best is reported")
    parser.add_argument(
        "--docs-only", action="store_true", help="rewrite the page from the saved results"
    )
    args = parser.parse_args(argv)
    if args.docs_only:
        saved = load(SAVED)
    else:
        given = args.traces or [str(ROOT / DEFAULT_TRACES)]
        missing = [p for p in given if not (Path(p).is_file() or Path(p).is_dir())]
        if missing:
            parser.error(f"no such trace file or folder: {', '.join(missing)}")
        # named from the repository root, where the commands run
        saved = run([os.path.relpath(Path(p).resolve(), ROOT) for p in given], args.repeat)
        save(SAVED, saved)
    write_page(PAGE, render(saved))


if __name__ == "__main__":
    main()
