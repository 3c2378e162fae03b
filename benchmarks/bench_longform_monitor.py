"""Microseconds per token of the streaming monitor on long answers (code, worked maths),
for the lift rule and the fitted rules.

    python benchmarks/bench_longform_monitor.py [--traces FILE ...] [--repeat 5]
    python benchmarks/bench_longform_monitor.py --docs-only

``--traces`` (repeatable; default: the committed MBPP traces,
``benchmarks/traces/mbpp_qwen25coder.jsonl.xz``) names labelled long-answer trace files
(the GSM8K traces, once made, are a second ``--traces``). Saves
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
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from _tables import header, load, save, write_page  # noqa: E402

from adapters.tracefiles import open_trace_objects  # noqa: E402
from guardrail import Certificate, Monitor, TokenEvent  # noqa: E402
from guardrail.fitting import RecordedSkeleton, trace_events  # noqa: E402
from guardrail.traces import parse_trace  # noqa: E402

COMMAND = "python benchmarks/bench_longform_monitor.py"
SAVED = ROOT / "benchmarks" / "results" / "bench_longform_monitor.json"
PAGE = ROOT / "docs" / "results" / "longform_monitor.md"
DEFAULT_TRACES = "benchmarks/traces/mbpp_qwen25coder.jsonl.xz"
RISKS = (0.3, 0.5, 0.8)
"""The risk each command is run at, the next if it refuses (timing needs a rule, not a
promise)."""
BUCKETS = ((0, 64, "< 64"), (64, 256, "64-255"), (256, None, ">= 256"))
"""Answer lengths in tokens: ``[lo, hi)`` and the column label."""
BANDS = ((0, 64, "1-64"), (64, 128, "65-128"), (128, 256, "129-256"), (256, 512, "257-512"),
         (512, None, "> 512"))  # fmt: skip
"""Token positions within an answer (0-based ``[lo, hi)``) and the column label."""
CHAIN, SLOT = 4096, 256
"""The chained streams: the file's answers joined end to end into streams of ``CHAIN``
tokens, timed ``SLOT`` tokens at a time."""
CHAIN_BANDS = ((0, 512, "1-512"), (512, 1024, "513-1024"), (1024, 2048, "1025-2048"),
               (2048, 4096, "2049-4096"))  # fmt: skip
"""Token positions within a chained stream (0-based ``[lo, hi)``) and the column label."""
MODES = ("early", "all")
MODE_LABEL = {"early": "on", "all": "off"}
RULES = {
    "lift": ("`lift` (`calibrate`)", ("calibrate",)),
    "fit": ("fitted (`fit`)", ("fit", "--fit-fraction", "1")),
    "select": ("fitted (`fit --select coverage`)",
               ("fit", "--fit-fraction", "1", "--select", "coverage")),
}  # fmt: skip
"""Key -> (row label, the ``liftguard`` command before ``--traces``, ``--risk``, ``--out``)."""


def _liftguard(args: Sequence[str]) -> tuple[int, str]:
    """``liftguard ARGS`` of this checkout (``python -m adapters.cli``): exit status, and the
    last line of stderr."""
    proc = subprocess.run([sys.executable, "-m", "adapters.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, check=False)  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    return proc.returncode, lines[-1] if lines else ""


def make_certificate(key: str, traces: str, out: Path) -> dict[str, Any]:
    """Run ``key``'s command on ``traces`` at the first risk of :data:`RISKS` it does not
    refuse; what was run and what the others said."""
    refused: list[dict[str, Any]] = []
    for risk in RISKS if key != "fit" else (None,):  # the default fit selects by no risk
        args = [*RULES[key][1], "--traces", traces]
        args += [] if risk is None else ["--risk", f"{risk:g}"]
        code, last = _liftguard([*args, "--out", str(out)])
        if code == 0:
            return {"command": "liftguard " + " ".join(args), "risk": risk, "refused": refused}
        refused.append({"risk": risk, "error": last})
    raise SystemExit(f"{key} on {traces}: every risk refused: {refused}")


# --------------------------------------------------------------------------- #
# Timing
# --------------------------------------------------------------------------- #


class Stream(NamedTuple):
    """One answer, ready to stream: its chunks of events by position band (up to where the
    mode stops), the skeleton it is monitored with, and the verdict it must end with."""

    chunks: list[tuple[int, list[TokenEvent]]]
    skeleton: Any
    state: str
    tokens: int
    length: int
    early: bool
    """The final verdict came from ``update``, before ``finish()``."""


def _chunks(events: list[TokenEvent], stop: int) -> list[tuple[int, list[TokenEvent]]]:
    out: list[tuple[int, list[TokenEvent]]] = []
    for b, (lo, hi, _) in enumerate(BANDS):
        part = events[lo : stop if hi is None else min(hi, stop)]
        if part:
            out.append((b, part))
    return out


Chain = tuple[list[TokenEvent], list[float]]


def chained(traces: Sequence[Any], events: Sequence[list[TokenEvent]]) -> list[Chain]:
    """The answers joined end to end into whole streams of :data:`CHAIN` tokens (the rest left
    out): each stream's events, indexed anew, and its recorded prompt-free log-probabilities."""
    out: list[Chain] = []
    evs: list[TokenEvent] = []
    free: list[float] = []
    for t, answer in zip(traces, events, strict=True):
        pf = t.prompt_free_logprobs.tolist()
        for ev, lp in zip(answer, pf, strict=True):
            evs.append(replace(ev, index=len(evs)))
            free.append(lp)
            if len(evs) == CHAIN:
                out.append((evs, free))
                evs, free = [], []
    return out


def _factory(cert: Certificate) -> Callable[[Any], Monitor]:
    stat = cert.statistic
    entropy = stat is not None and "exact_entropy" in stat.requires

    def make(skeleton: Any) -> Monitor:
        return cert.monitor(skeleton=skeleton, exact_entropy=entropy)

    return make


def _skeletons(cert: Certificate, traces: Sequence[Any]) -> list[Any]:
    """Per answer, the skeleton the monitor is given: the recorded prompt-free one where
    the statistic reads it (as replay does), else none (the certificate builds its own)."""
    if cert.statistic is not None and cert.replay_skeleton() == "prompt-free":
        return [RecordedSkeleton(t.prompt_free_logprobs) for t in traces]
    return [None] * len(traces)


def _median_tau(cert: Certificate, events: Sequence[list[TokenEvent]], skels: list[Any]) -> float:
    """The median final score of ``cert``'s statistic on the answers."""
    make = _factory(_with(cert, early=False))
    finals = []
    for evs, skel in zip(events, skels, strict=True):
        mon = make(skel)
        for ev in evs:
            mon.update(ev)
        finals.append(mon.value)
    return float(np.median(finals))


def _with(cert: Certificate, *, early: bool, tau: float | None = None) -> Certificate:
    tau = cert.tau if tau is None else tau
    return replace(cert, policy=replace(cert.policy, early=early), tau=tau, calibration=None)


def streams(
    cert: Certificate, events: Sequence[list[TokenEvent]], skels: list[Any]
) -> list[Stream]:
    """Each answer as ``cert``'s monitor streams it (an untimed pass): to its first final
    verdict, else to its end."""
    make = _factory(cert)
    out = []
    for evs, skel in zip(events, skels, strict=True):
        mon = make(skel)
        stop, early = len(evs), False
        for i, ev in enumerate(evs):
            if mon.update(ev).final:
                stop, early = i + 1, True
                break
        state = mon.finish().state.value
        out.append(Stream(_chunks(evs, stop), skel, state, stop, len(evs), early))
    return out


def _time_monitor(
    make: Callable[[Any], Monitor], s: Stream, out: np.ndarray, cpu: np.ndarray
) -> float:
    """One answer, one run: ``out[band]`` the seconds of ``update`` on the answer's tokens in
    the band (``perf_counter``), ``cpu[band]`` the thread's CPU seconds around the same span
    (read outside it); returns the seconds of its ``monitor()`` and ``finish()``."""
    clock, cpu_clock = time.perf_counter, time.thread_time
    t0 = clock()
    mon = make(s.skeleton)
    t1 = clock()
    update = mon.update
    for b, chunk in s.chunks:
        u0 = cpu_clock()
        c0 = clock()
        for ev in chunk:
            update(ev)
        out[b] = clock() - c0
        cpu[b] = cpu_clock() - u0
    t2 = clock()
    verdict = mon.finish()
    setup = (t1 - t0) + (clock() - t2)
    if verdict.state.value != s.state:  # outside the timed spans
        raise SystemExit(f"{verdict.state.value}, where the untimed pass gave {s.state}")
    return setup


def _time_baseline(s: Stream, out: np.ndarray) -> None:
    clock = time.perf_counter
    total = 0.0
    for b, chunk in s.chunks:
        c0 = clock()
        for ev in chunk:
            total += ev.logprob  # type: ignore[operator]
        out[b] = clock() - c0


def _us(seconds: np.ndarray, tokens: int) -> float | None:
    """Microseconds per token of the fastest run of each answer and band (``seconds``: runs x
    answers [x bands]), summed; None for no tokens."""
    return float(seconds.min(axis=0).sum()) / tokens * 1e6 if tokens else None


def summarise(
    items: list[Stream], mon: np.ndarray, base: np.ndarray, cpu: np.ndarray, setup: np.ndarray
) -> dict[str, Any]:
    """The saved figures of one rule in one mode from its runs (``mon``, ``base``, ``cpu``:
    runs x answers x bands; ``setup``: runs x answers)."""
    tokens = np.array([s.tokens for s in items])
    lengths = np.array([s.length for s in items])
    per_band = np.zeros((len(items), len(BANDS)), dtype=int)
    for i, s in enumerate(items):
        for b, chunk in s.chunks:
            per_band[i, b] = len(chunk)
    n = int(tokens.sum())
    buckets = []
    for lo, hi, _ in BUCKETS:
        sel = (lengths >= lo) & (lengths < (hi if hi is not None else math.inf))
        k = int(tokens[sel].sum())
        buckets.append({"answers": int(sel.sum()), "tokens": k,
                        "update_us": _us(mon[:, sel], k), "update_cpu_us": _us(cpu[:, sel], k),
                        "baseline_us": _us(base[:, sel], k)})  # fmt: skip
    positions = []
    for b in range(len(BANDS)):
        k = int(per_band[:, b].sum())
        positions.append({"tokens": k, "update_us": _us(mon[:, :, b], k),
                          "update_cpu_us": _us(cpu[:, :, b], k),
                          "baseline_us": _us(base[:, :, b], k)})  # fmt: skip
    return {
        "answers": len(items),
        "decided_early": sum(s.early for s in items),
        "tokens": n,
        "states": {st: sum(s.state == st for s in items) for st in ("certified", "blocked")},
        "update_us": _us(mon, n),
        "update_cpu_us": _us(cpu, n),
        "update_us_best_whole_run": float(mon.sum(axis=(1, 2)).min()) / n * 1e6,
        "baseline_us_best_whole_run": float(base.sum(axis=(1, 2)).min()) / n * 1e6,
        "baseline_us": _us(base, n),
        "setup_us_per_answer": float(setup.min(axis=0).mean()) * 1e6,
        "buckets": buckets,
        "positions": positions,
    }


def summarise_chained(
    items: list[Stream], mon: np.ndarray, base: np.ndarray, cpu: np.ndarray
) -> dict[str, Any]:
    """The figures of the chained streams (``mon``, ``base``, ``cpu``: runs x streams x
    slots of :data:`SLOT` tokens), by :data:`CHAIN_BANDS`."""
    positions = []
    for lo, hi, _ in CHAIN_BANDS:
        sl = slice(lo // SLOT, hi // SLOT)
        k = len(items) * (hi - lo)
        positions.append({"tokens": k, "update_us": _us(mon[:, :, sl], k),
                          "update_cpu_us": _us(cpu[:, :, sl], k),
                          "baseline_us": _us(base[:, :, sl], k)})  # fmt: skip
    n = len(items) * CHAIN
    return {"streams": len(items), "tokens": n, "update_us": _us(mon, n),
            "update_cpu_us": _us(cpu, n), "baseline_us": _us(base, n),
            "positions": positions}  # fmt: skip


def _time_chained(
    certs: dict[str, Certificate], chains: list[Chain], repeat: int
) -> dict[str, dict[str, Any]]:
    """Every rule with early verdicts off on the chained streams, best of ``repeat`` runs
    stream by stream and slot by slot."""
    if not chains:
        return {}
    plan: list[tuple[str, Callable[[Any], Monitor], list[Stream]]] = []
    for key, cert in certs.items():
        off = _with(cert, early=False)
        skels = _chain_skeletons(cert, chains)
        items = []
        for (evs, _), skel in zip(chains, skels, strict=True):
            mon = _factory(off)(skel)
            for ev in evs:
                mon.update(ev)
            state = mon.finish().state.value
            slots = [(j, evs[j * SLOT : (j + 1) * SLOT]) for j in range(CHAIN // SLOT)]
            items.append(Stream(slots, skel, state, CHAIN, CHAIN, False))
        plan.append((key, _factory(off), items))
    shape = (repeat, len(chains), CHAIN // SLOT)
    mon = {k: np.zeros(shape) for k, _, _ in plan}
    base = {k: np.zeros(shape) for k, _, _ in plan}
    cpu = {k: np.zeros(shape) for k, _, _ in plan}
    for r in range(repeat):
        for i in range(len(chains)):
            for j in range(len(plan)):
                key, make, items = plan[(i + r + j) % len(plan)]
                _time_baseline(items[i], base[key][r, i])
                _time_monitor(make, items[i], mon[key][r, i], cpu[key][r, i])
    return {k: summarise_chained(items, mon[k], base[k], cpu[k]) for k, _, items in plan}


def _chain_skeletons(cert: Certificate, chains: list[Chain]) -> list[Any]:
    """Per chained stream, the recorded prompt-free skeleton where the statistic reads it."""
    if cert.statistic is not None and cert.replay_skeleton() == "prompt-free":
        return [RecordedSkeleton(free) for _, free in chains]
    return [None] * len(chains)


def trace_file(path: str, tmp: Path, repeat: int) -> dict[str, Any]:
    """Every rule on the answers of ``path``, in both modes."""
    resolved = str(ROOT / path)
    traces = [parse_trace(obj, source=path, line=n) for n, obj in open_trace_objects(resolved)]
    traces = [t for t in traces if t.n_tokens]
    events = [trace_events(t) for t in traces]
    lengths = np.array([t.n_tokens for t in traces])
    saved: dict[str, Any] = {
        "file": Path(path).name, "path": path, "n": len(traces),
        "n_correct": int(sum(bool(t.correct) for t in traces)), "tokens": int(lengths.sum()),
        "median_tokens": float(np.median(lengths)), "mean_tokens": float(lengths.mean()),
        "max_tokens": int(lengths.max()), "model": traces[0].model, "rules": {},
    }  # fmt: skip
    plan: list[tuple[str, str, list[Stream]]] = []
    makers: dict[tuple[str, str], Callable[[Any], Monitor]] = {}
    certs: dict[str, Certificate] = {}
    for key in RULES:
        out = tmp / f"{key}.json"
        made = make_certificate(key, path, out)
        cert = Certificate.load(str(out))
        skels = _skeletons(cert, traces)
        tau = _median_tau(cert, events, skels)
        certs[key] = _with(cert, early=cert.policy.early, tau=tau)
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
            timed = _with(cert, early=mode == "early", tau=tau)
            plan.append((key, mode, streams(timed, events, skels)))
            makers[key, mode] = _factory(timed)
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
                _time_baseline(items[i], base[key, mode][r, i])
                setup[key, mode][r, i] = _time_monitor(
                    makers[key, mode], items[i], mon[key, mode][r, i], cpu[key, mode][r, i]
                )
        print(f"{Path(path).name}: run {r + 1} of {repeat}", file=sys.stderr)
    for key, mode, items in plan:
        saved["rules"][key]["modes"][mode] = summarise(
            items, mon[key, mode], base[key, mode], cpu[key, mode], setup[key, mode]
        )
    for key, figures in _time_chained(certs, chained(traces, events), repeat).items():
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


# --------------------------------------------------------------------------- #
# The page
# --------------------------------------------------------------------------- #


def _rules(f: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A file's rules in :data:`RULES`' order (the saved JSON sorts its keys)."""
    return [(key, f["rules"][key]) for key in RULES if key in f["rules"]]


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _ratio(us: float | None, base: float | None) -> str:
    return "-" if us is None or not base else f"{us / base:.0f}"


def _cell(entry: dict[str, Any]) -> str:
    """µs/token, wall / CPU, of a bucket or band; ``-`` without tokens."""
    if not entry["tokens"]:
        return "-"
    return f"{_f(entry['update_us'])} / {_f(entry['update_cpu_us'])}"


def _growth(f: dict[str, Any]) -> str:
    """A sentence on how the per-token cost moves with the position in a stream: the last
    band against the first, rule by rule, in CPU time (which a wait for a core does not
    inflate), on the chained streams where there are any, else on the answers."""
    ratios, where = [], "the answers"
    for _, rule in _rules(f):
        if "chained" in rule:
            runs = [rule["chained"]["positions"]]
            where = f"the chained streams of {CHAIN} tokens"
        else:
            runs = [rule["modes"][mode]["positions"] for mode in MODES]
        for pos in runs:
            cells = [p["update_cpu_us"] for p in pos if p["tokens"]]
            if len(cells) > 1:
                ratios.append(cells[-1] / cells[0])
    if not ratios:
        return ""
    verdict = (
        "the cost per token does not grow with the position in the stream"
        if max(ratios) <= 1.1
        else "the cost per token grows with the position in the stream"
    )
    return (f"On {where}, in CPU time per token, the last position band costs "
            f"{min(ratios):.2f} to {max(ratios):.2f} times the first, rule by rule: "
            f"{verdict}.")  # fmt: skip


def _chained_table(f: dict[str, Any]) -> list[str]:
    rows = [(key, rule["chained"]) for key, rule in _rules(f) if "chained" in rule]
    if not rows:
        return []
    first = rows[0][1]
    heads = " | ".join(f"tokens {label}" for _, _, label in CHAIN_BANDS)
    lines = [
        "",
        f"The same answers joined end to end into {first['streams']} streams of {CHAIN} "
        f"tokens (early verdicts off, so every token goes through; the rest of the answers "
        f"left out), `update` µs/token, wall / CPU, by position in the stream:",
        "",
        f"| rule | all {first['tokens']} tokens | ratio to the bare loop | {heads} |",
        "|---|---:|---:|" + "---:|" * len(CHAIN_BANDS),
    ]
    for key, c in rows:
        cells = " | ".join(_cell(p) for p in c["positions"])
        lines.append(f"| {RULES[key][0]} | {_cell(c)} | {_ratio(c['update_us'], c['baseline_us'])}"
                     f" | {cells} |")  # fmt: skip
    return lines


def render(saved: dict[str, Any]) -> str:
    """The whole of ``docs/results/longform_monitor.md``."""
    lines = [header(COMMAND, "(or `--docs-only` from its JSON)"), ""]
    lines += [
        f"{saved['implementation']} {saved['python']} on {saved['machine']}, {saved['cpus']} "
        f"CPUs, run at niceness {saved['niceness']} (load average {saved['load_before']:.1f} "
        f"before, {saved['load_after']:.1f} after); `time.perf_counter`, best of "
        f"{saved['repeat']} runs answer by answer (each run times the bare loop and every "
        "rule on one answer after another, and the figures sum each answer's fastest run).",
        "",
    ]
    for f in saved["files"]:
        lines += [
            f"**`{f['file']}`** ({f['model']}): {f['n']} answers, {f['tokens']} tokens; "
            f"{f['median_tokens']:g} tokens median, {f['mean_tokens']:.0f} mean, "
            f"{f['max_tokens']} at most.",
            "",
            "| rule | early verdicts | answers decided early | tokens processed | "
            "`update` µs/token | bare loop µs/token | ratio | `update` CPU µs/token | "
            "per answer: `monitor()` + `finish()` µs |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for key, rule in _rules(f):
            for mode in MODES:
                m = rule["modes"][mode]
                decided = f"{m['decided_early']} of {m['answers']}" if mode == "early" else "-"
                lines.append(
                    f"| {RULES[key][0]} | {MODE_LABEL[mode]} | {decided} | {m['tokens']} | "
                    f"{_f(m['update_us'])} | {_f(m['baseline_us'], 3)} | "
                    f"{_ratio(m['update_us'], m['baseline_us'])} | {_f(m['update_cpu_us'])} | "
                    f"{_f(m['setup_us_per_answer'], 1)} |"
                )
        first = next(r for _, r in _rules(f))["modes"]["all"]
        heads = " | ".join(
            f"{label} tokens ({b['answers']} answers)"
            for label, b in zip(saved["buckets"], first["buckets"], strict=True)
        )
        lines += ["", "By answer length, `update` µs/token, wall / CPU:", "",
                  f"| rule | early verdicts | {heads} |",
                  "|---|---|" + "---:|" * len(saved["buckets"])]  # fmt: skip
        for key, rule in _rules(f):
            for mode in MODES:
                cells = " | ".join(_cell(b) for b in rule["modes"][mode]["buckets"])
                lines.append(f"| {RULES[key][0]} | {MODE_LABEL[mode]} | {cells} |")
        used = [i for i, p in enumerate(first["positions"]) if p["tokens"]]
        heads = " | ".join(
            f"tokens {saved['bands'][i]} ({first['positions'][i]['tokens']})" for i in used
        )
        lines += ["", "By position in the answer, `update` µs/token, wall / CPU (in the "
                  "header, the tokens there with early verdicts off):",
                  "", f"| rule | early verdicts | {heads} |",
                  "|---|---|" + "---:|" * len(used)]  # fmt: skip
        for key, rule in _rules(f):
            for mode in MODES:
                pos = rule["modes"][mode]["positions"]
                cells = " | ".join(_cell(pos[i]) for i in used)
                lines.append(f"| {RULES[key][0]} | {MODE_LABEL[mode]} | {cells} |")
        lines += _chained_table(f)
        lines += ["", _growth(f), ""]
        lines += ["The rules timed:", ""]
        for key, rule in _rules(f):
            feats = ", ".join(f"`{x}`" for x in rule["features"])
            refused = ", ".join(f"{r['risk']:g}" for r in rule["refused"])
            risk = f" (refused at risk {refused})" if refused else ""
            lines.append(
                f"- {RULES[key][0]}: `{rule['command']}`{risk}: {rule['rule']}"
                f"{': ' + feats if feats else ''}; skeleton {rule['skeleton']}; timed at tau "
                f"{rule['tau']:.4g} (the median final score; the certificate's own "
                f"{rule['own_tau']:.4g})."
            )
        lines.append("")
    lines += [
        "*early verdicts on*: the certificate's policy, each answer streamed to its first final "
        "verdict (*tokens processed*); *off*: `early=False`, every token, the verdict at "
        "`finish()` (no in-stream check; the fitted rules then compute no bounds). "
        "*`update` µs/token*: "
        "`monitor.update(event)` on events built beforehand, without the per-answer "
        "`certificate.monitor()` and `finish()` (last column); *CPU*: the same spans in the "
        "thread's CPU time (`time.thread_time`), which leaves out any wait for a core. "
        "*bare loop*: a Python loop "
        "summing `event.logprob` over the same events. The fitted rules read the prompt-free "
        "skeleton from the traces' recorded log-probabilities: a live prompt-free skeleton adds "
        "one evaluation of the prompt-free model per token on top of these figures, the "
        "skeleton's cost, not the monitor's.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--traces", action="append", metavar="FILE",
                        help=f"labelled long-answer traces, repeatable (default: "
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
        missing = [p for p in given if not Path(p).is_file()]
        if missing:
            parser.error(f"no such trace file: {', '.join(missing)}")
        # named from the repository root, where the commands run
        saved = run([os.path.relpath(Path(p).resolve(), ROOT) for p in given], args.repeat)
        save(SAVED, saved)
    write_page(PAGE, render(saved))


if __name__ == "__main__":
    main()
