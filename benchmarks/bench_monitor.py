"""Microseconds per token of the streaming monitor (``python -m benchmarks.bench_monitor``).

Feeds 400 answers of 500 tokens (200k tokens) of i.i.d. clipped lifts with mean
~2 nats to fresh monitors at ``tau = 2.0`` with ``delta = 1e-9``, so that no
stream is decided early and every token takes the full per-token path (the
table reports how many were decided). Best of 5 runs, ``time.perf_counter``.
The baseline is a bare Python loop that sums the same lifts; ``ratio`` is
monitor time / baseline time. ``update`` uses pre-built ``TokenEvent`` objects
and a ``UniformSkeleton`` (building the events is the adapter's cost, shown
separately). The last rows time building one ``TokenEvent`` and one ``Verdict``
(the frozen dataclass ``__init__``; the monitor itself builds its verdicts with a
faster slot-setting constructor, part of the ``update`` times above).
"""

from __future__ import annotations

import argparse
import math
import platform
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from guardrail import (
    Cause,
    Monitor,
    State,
    StreamPolicy,
    TokenEvent,
    UniformSkeleton,
    Verdict,
)

UNDECIDED = Cause.UNDECIDED
VOCAB = 262_144  # log V = 12.48 > clip: every lift in [0, 12] is a valid logprob
TAU = 2.0


def _best(fn: Callable[[], int], repeat: int, n_tokens: int) -> tuple[float, int]:
    """Best time per token (us) over ``repeat`` runs, and what the last run returned."""
    best, out = math.inf, 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best / n_tokens * 1e6, out


def _run_lifts(
    policy: StreamPolicy, track: bool, streams: list[list[float]], tau: float = TAU
) -> int:
    decided = 0
    for row in streams:
        update = Monitor.lift(policy, tau, track_bounds=track).update_evidence
        for x in row:
            v = update(x)
        decided += v.decided
    return decided


def _run_events(
    policy: StreamPolicy, track: bool, events: list[list[TokenEvent]], tau: float = TAU
) -> int:
    skel = UniformSkeleton(VOCAB)
    decided = 0
    for row in events:
        update = Monitor.lift(policy, tau, skeleton=skel, track_bounds=track).update
        for ev in row:
            v = update(ev)
        decided += v.decided
    return decided


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=400)
    ap.add_argument("--length", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n_tokens = args.streams * args.length
    rng = np.random.default_rng(0)
    # lifts X = clip(log P + log V, 0, 12) with mean ~2: draw log P so that X is Gamma-like
    lifts = np.clip(rng.gamma(0.8, 2.5, (args.streams, args.length)), 0.0, 12.0)
    streams = [[float(v) for v in row] for row in lifts]
    logv = math.log(VOCAB)
    events = [
        [TokenEvent(f"t{i}", x - logv, index=i) for i, x in enumerate(row)] for row in streams
    ]
    policies = {
        "betting": StreamPolicy(delta=1e-9),
        "paper": StreamPolicy(boundary="paper", v=4.0, c=4.0, delta=1e-9),
    }

    def baseline() -> int:
        for row in streams:
            total = 0.0
            for x in row:
                total += x
        return 0

    base, _ = _best(baseline, args.repeat, n_tokens)
    rows: list[tuple[str, bool, str, float, int]] = []
    for name, policy in policies.items():
        for track in (False, True):
            us, dec = _best(partial(_run_lifts, policy, track, streams), args.repeat, n_tokens)
            rows.append((name, track, "update_evidence", us, dec))
            us, dec = _best(partial(_run_events, policy, track, events), args.repeat, n_tokens)
            rows.append((name, track, "update", us, dec))
    # order-based aggregates block at the first weak token: a tau below every lift keeps
    # each stream open to its end, so every token takes the full path
    low_tau = 0.5 * float(lifts.min())
    for name, policy in {
        "min aggregate": StreamPolicy(aggregate="min"),
        "lowest-2 aggregate": StreamPolicy(aggregate="lowest", lowest_k=2),
    }.items():
        run = partial(_run_lifts, policy, False, streams, low_tau)
        us, dec = _best(run, args.repeat, n_tokens)
        rows.append((name, False, "update_evidence", us, dec))
        run_ev = partial(_run_events, policy, False, events, low_tau)
        us, dec = _best(run_ev, args.repeat, n_tokens)
        rows.append((name, False, "update", us, dec))

    def build_events() -> int:
        for row in streams:
            for i, x in enumerate(row):
                TokenEvent("t", x - logv, index=i)
        return 0

    def verdicts(make: Callable[..., Verdict]) -> Callable[[], int]:
        def go() -> int:
            for row in streams:
                for i, x in enumerate(row):
                    make(State.CONTINUE, i, x, 0.0, 12.0, TAU, "betting", "why", False, UNDECIDED)
            return 0

        return go

    extra = [
        ("TokenEvent(...) (adapter side)", _best(build_events, args.repeat, n_tokens)[0]),
        ("Verdict(...) dataclass __init__", _best(verdicts(Verdict), args.repeat, n_tokens)[0]),
    ]
    head = f"{n_tokens} tokens ({args.streams} x {args.length}), best of {args.repeat}"
    print(f"Python {platform.python_version()} on {platform.machine()}, {head}\n")
    print("| boundary | track_bounds | call | us/token | ratio to bare loop | decided |")
    print("|---|---|---|---:|---:|---:|")
    print(f"| - | - | bare `total += x` loop | {base:.3f} | 1.0 | - |")
    for name, track, call, us, dec in rows:
        print(f"| {name} | {track} | `{call}` | {us:.3f} | {us / base:.1f} | {dec} |")
    print("\n| other per-token cost | us/token |\n|---|---:|")
    for label, us in extra:
        print(f"| {label} | {us:.3f} |")


if __name__ == "__main__":
    main()
