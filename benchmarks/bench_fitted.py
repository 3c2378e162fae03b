"""Microseconds per token of the fitted-statistic monitor (``python -m benchmarks.bench_fitted``).

Fits the default statistic (feature group ``lift``, or ``--group``) on one half of a
trace file, then streams the token events of the other half's answers, repeated
to ``--tokens`` tokens, through fresh :class:`~guardrail.Monitor` (fitted rule)
objects (the prompt-free skeleton reads the recorded log-probabilities). The token
limit is set far beyond the answers (``max_tokens=10_000``) and ``tau`` to the
median final score, so that early verdicts are rare and almost every token takes
the full path: base features, running aggregates, score, and the bound on the side
that could decide (the table reports how many answers were decided early). Best
of 5 runs, ``time.perf_counter``; building the events is the adapter's cost and
is done beforehand; the per-answer cost (a fresh monitor and its ``finish()``) is
also shown alone, and the per-token time without it. The component rows time the
base features
(:class:`~guardrail.fitting.EventReader`) and the state update with both
bounds (:class:`~guardrail.fitting.FittedState`) alone.

Default input: the committed fixture sample (for a quick check); pass
``--traces`` with the shared trace files for the numbers in the docs (``docs/results/index.md``).
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from guardrail import Monitor, StreamPolicy, TokenEvent
from guardrail.fitting import (
    EventReader,
    FittedState,
    RecordedSkeleton,
    answer_features,
    fit_statistic,
    preset_features,
    token_ranges,
    trace_events,
)
from guardrail.traces import read_traces

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "traces_smollm2_sample.jsonl"


def _best(fn: Callable[[], int], repeat: int, n_tokens: int) -> tuple[float, int]:
    best, out = math.inf, 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best / n_tokens * 1e6, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", default=str(FIXTURE))
    parser.add_argument("--group", default="lift", choices=("api", "local", "lift"))
    parser.add_argument("--form", default="answer", choices=("answer", "monotone"))
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    traces = [t for t in read_traces(args.traces) if t.n_tokens]
    half = len(traces) // 2
    fit, test = traces[:half], traces[half:]
    feats = preset_features(args.group, args.form)
    bases = [f.base for f in feats if f.base != "length"]
    ranges = token_ranges(fit, bases, skeleton="prompt-free")
    x = answer_features(fit, feats, skeleton="prompt-free", ranges=ranges)
    stat = fit_statistic(x, [bool(t.correct) for t in fit], feats,
                         vocab_size=fit[0].vocab_size, form=args.form, ranges=ranges)  # fmt: skip
    policy = StreamPolicy(on_length="answer")
    streams: list[tuple[list[TokenEvent], RecordedSkeleton, list[float]]] = []
    n = 0
    while n < args.tokens:
        for t in test:
            streams.append((trace_events(t), RecordedSkeleton(t.prompt_free_logprobs),
                            t.entropy.tolist()))  # fmt: skip
            n += t.n_tokens
            if n >= args.tokens:
                break
    tau = float(np.median(stat.score(answer_features(test, feats, skeleton="prompt-free",
                                                     ranges=ranges))))  # fmt: skip

    def run_monitor() -> int:
        decided = 0
        for events, skel, _ in streams:
            mon = Monitor.fitted(stat, policy, tau, skeleton=skel, max_tokens=10_000)
            update = mon.update
            for ev in events:
                v = update(ev)
            decided += v.decided
            mon.finish()
        return decided

    def run_answers() -> int:
        for _, skel, _ in streams:
            Monitor.fitted(stat, policy, tau, skeleton=skel, max_tokens=10_000).finish()
        return 0

    reader_cache = [(EventReader(stat, skel), events, ent) for events, skel, ent in streams]
    values = [[r.read(ev) for ev in events] for r, events, _ in reader_cache]  # fmt: skip

    def run_features() -> int:
        for r, events, _ in reader_cache:
            read = r.read
            for ev in events:
                read(ev)
        return 0

    def run_state() -> int:
        for rows in values:
            st = FittedState(stat, 10_000)
            for row in rows:
                assert isinstance(row, list)
                st.update(row)
                st.upper()
                st.lower()
        return 0

    mon_us, decided = _best(run_monitor, args.repeat, n)
    answer_us, _ = _best(run_answers, args.repeat, len(streams))
    feat_us, _ = _best(run_features, args.repeat, n)
    state_us, _ = _best(run_state, args.repeat, n)
    print(f"liftguard fitted monitor: {Path(args.traces).name}, group {args.group}, form "
          f"{args.form}, {len(feats)} features ({stat.group}), {n} tokens in "
          f"{len(streams)} answers")  # fmt: skip
    print(f"python {platform.python_version()} on {platform.machine()}, best of {args.repeat}")
    print(f"  {'Monitor.update, fitted rule (per token, all)':<48}{mon_us:>8.2f} us")
    print(f"    {'answers decided early':<46}{decided:>8d} of {len(streams)}")
    steady = mon_us - answer_us * len(streams) / n
    print(f"  {'  per token, without the per-answer cost':<48}{steady:>8.2f} us")
    print(f"  {'per answer: a fresh monitor and finish()':<48}{answer_us:>8.2f} us")
    print(f"  {'  base features (EventReader.read)':<48}{feat_us:>8.2f} us")
    print(f"  {'  state update + both bounds':<48}{state_us:>8.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
