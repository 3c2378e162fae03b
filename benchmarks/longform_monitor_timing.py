"""The timing of ``benchmarks/bench_longform_monitor.py``: each answer streamed token by
token through a fresh monitor against a bare loop over the same events, by answer length
and by position, and the answers joined end to end into long streams."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np

from benchmarks.longform_monitor_page import BANDS, BUCKETS, CHAIN, CHAIN_BANDS, SLOT
from guardrail import Certificate, Monitor, TokenEvent
from guardrail.fitting import RecordedSkeleton


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


def monitor_factory(cert: Certificate) -> Callable[[Any], Monitor]:
    stat = cert.statistic
    entropy = stat is not None and "exact_entropy" in stat.requires

    def make(skeleton: Any) -> Monitor:
        return cert.monitor(skeleton=skeleton, exact_entropy=entropy)

    return make


def recorded_skeletons(cert: Certificate, traces: Sequence[Any]) -> list[Any]:
    """Per answer, the skeleton the monitor is given: the recorded prompt-free one where
    the statistic reads it (as replay does), else none (the certificate builds its own)."""
    if cert.statistic is not None and cert.replay_skeleton() == "prompt-free":
        return [RecordedSkeleton(t.prompt_free_logprobs) for t in traces]
    return [None] * len(traces)


def median_tau(cert: Certificate, events: Sequence[list[TokenEvent]], skels: list[Any]) -> float:
    """The median final score of ``cert``'s statistic on the answers."""
    make = monitor_factory(with_early(cert, early=False))
    finals = []
    for evs, skel in zip(events, skels, strict=True):
        mon = make(skel)
        for ev in evs:
            mon.update(ev)
        finals.append(mon.value)
    return float(np.median(finals))


def with_early(cert: Certificate, *, early: bool, tau: float | None = None) -> Certificate:
    tau = cert.tau if tau is None else tau
    return replace(cert, policy=replace(cert.policy, early=early), tau=tau, calibration=None)


def streams(
    cert: Certificate, events: Sequence[list[TokenEvent]], skels: list[Any]
) -> list[Stream]:
    """Each answer as ``cert``'s monitor streams it (an untimed pass): to its first final
    verdict, else to its end."""
    make = monitor_factory(cert)
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


def time_monitor(
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


def time_baseline(s: Stream, out: np.ndarray) -> None:
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


def time_chained(
    certs: dict[str, Certificate], chains: list[Chain], repeat: int
) -> dict[str, dict[str, Any]]:
    """Every rule with early verdicts off on the chained streams, best of ``repeat`` runs
    stream by stream and slot by slot."""
    if not chains:
        return {}
    plan: list[tuple[str, Callable[[Any], Monitor], list[Stream]]] = []
    for key, cert in certs.items():
        off = with_early(cert, early=False)
        skels = _chain_skeletons(cert, chains)
        items = []
        for (evs, _), skel in zip(chains, skels, strict=True):
            mon = monitor_factory(off)(skel)
            for ev in evs:
                mon.update(ev)
            state = mon.finish().state.value
            slots = [(j, evs[j * SLOT : (j + 1) * SLOT]) for j in range(CHAIN // SLOT)]
            items.append(Stream(slots, skel, state, CHAIN, CHAIN, False))
        plan.append((key, monitor_factory(off), items))
    shape = (repeat, len(chains), CHAIN // SLOT)
    mon = {k: np.zeros(shape) for k, _, _ in plan}
    base = {k: np.zeros(shape) for k, _, _ in plan}
    cpu = {k: np.zeros(shape) for k, _, _ in plan}
    for r in range(repeat):
        for i in range(len(chains)):
            for j in range(len(plan)):
                key, make, items = plan[(i + r + j) % len(plan)]
                time_baseline(items[i], base[key][r, i])
                time_monitor(make, items[i], mon[key][r, i], cpu[key][r, i])
    return {k: summarise_chained(items, mon[k], base[k], cpu[k]) for k, _, items in plan}


def _chain_skeletons(cert: Certificate, chains: list[Chain]) -> list[Any]:
    """Per chained stream, the recorded prompt-free skeleton where the statistic reads it."""
    if cert.statistic is not None and cert.replay_skeleton() == "prompt-free":
        return [RecordedSkeleton(free) for _, free in chains]
    return [None] * len(chains)
