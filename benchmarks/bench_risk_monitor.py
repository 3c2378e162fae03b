"""``guardrail.RiskMonitor`` against MAPIE's ``RiskMonitoring`` on the same seeded streams.

    pip install mapie   # 1.6.0 has mapie.exchangeability_testing.RiskMonitoring
    python -m benchmarks.bench_risk_monitor [--runs N] [--write-docs | --docs-only]

Streams of labelled shown answers (True = wrong), seeded, at target risk 0.3 and level
0.05: no drift at error rates 0.3 and 0.2 (false-alarm rate: runs with any alarm within
3,000 answers), and a drift from 0.2 to 0.4 after 1,000 answers (median delay in labelled
answers after the drift; runs that never alarm within 2,000 answers after it count as
infinitely late). ``RiskMonitor`` alone also gets a drift after 5,000 good answers.

MAPIE (Podkopaev & Ramdas) tests the cumulative risk since the start: its alarm is the
first time the running intersection of its conjugate-mixture empirical-Bernstein lower
bound exceeds ``threshold``, set to the target. Its level is halved twice (mapie 1.6.0):
``RiskMonitoring`` spends ``test_level / 2`` on the online bound even with ``threshold``
given, and ``conjugate_mixture_empirical_bernstein_bound(alpha=a)`` computes the one-sided
boundary at ``a / 2`` (the split of a two-sided sequence), of which the lower side alone
raises the alarm. So ``test_level`` is four times the one-sided level it tests at: the
column "MAPIE RiskMonitoring" runs it at ``test_level = 2 * alpha`` (one-sided
``alpha / 2``), as this benchmark always has; the column "MAPIE at one-sided alpha" at
``test_level = 4 * alpha``, the level ``RiskMonitor`` tests at. Its path is computed by the
same function its ``update`` calls, on the whole stream at once (checked equal to updating
one by one on a short stream, at both levels); ``RiskMonitor``'s by
``RiskMonitor.log_e_path``, its batch twin.

A plain run saves every number in ``out/bench_risk_monitor/risk_monitor.json`` and writes
the table to ``out/bench_risk_monitor/risk_monitor.md`` (untracked); ``--write-docs``
writes them to the committed ``benchmarks/results/risk_monitor.json`` and
``docs/results/risk_monitor.md`` (included by ``docs/risk-monitor.md``) instead, and
``--docs-only`` rewrites the committed page from the committed JSON, running nothing.
Progress on a terminal only. About 14 minutes on one shared core with the default 200
runs (MAPIE's bound, at two levels, takes most of it).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from guardrail import RiskMonitor
from guardrail.stats import clopper_pearson_interval
from studies.tables import DOCS, RESULTS, ROOT, Progress, header, load, save, write_page

COMMAND = "python -m benchmarks.bench_risk_monitor"
SAVED = RESULTS / "risk_monitor.json"
OUT = DOCS / "risk_monitor.md"
SCRATCH = ROOT / "out" / "bench_risk_monitor"
"""Where a plain run writes (``/out/`` is ignored by git)."""
TARGET, ALPHA, SEED = 0.3, 0.05, 2024
HORIZON, AFTER = 3000, 2000
MAPIE = "MAPIE RiskMonitoring"
MAPIE_MATCHED = "MAPIE at one-sided alpha"
MAPIE_TEST_LEVELS = {MAPIE: 2 * ALPHA, MAPIE_MATCHED: 4 * ALPHA}
"""``RiskMonitoring``'s ``test_level`` of each MAPIE column (one-sided: a quarter of it)."""
Alarms = Callable[[npt.NDArray[np.bool_]], int | None]


def _streams(good: int, rate: float, drift: float | None, runs: int, seed: int) -> Any:
    n = good + (AFTER if drift is not None else 0)
    p = np.full(n, rate)
    if drift is not None:
        p[good:] = drift
    return np.random.default_rng(seed).random((runs, n)) < p


def ours(wrong: npt.NDArray[np.bool_]) -> int | None:
    """Labels fed when RiskMonitor's alarm fired (None: never)."""
    hit = RiskMonitor.log_e_path(wrong, TARGET) >= math.log(1.0 / ALPHA)
    return int(hit.argmax()) + 1 if hit.any() else None


def one_sided_level(test_level: float) -> float:
    """The one-sided level of MAPIE's online test at ``test_level`` (see the docstring)."""
    return test_level / 4


def mapie_at(test_level: float) -> Alarms:
    """Labels fed when MAPIE's RiskMonitoring at ``test_level`` first flagged a harmful
    shift (None: never)."""

    def alarm(wrong: npt.NDArray[np.bool_]) -> int | None:
        from mapie.exchangeability_testing.bounds import (
            conjugate_mixture_empirical_bernstein_bound,
        )

        lower = conjugate_mixture_empirical_bernstein_bound(
            wrong.astype(np.float64), v_opt=1, alpha=test_level / 2, bound_side="lower"
        )
        hit = lower > TARGET
        return int(hit.argmax()) + 1 if hit.any() else None

    return alarm


def _check_mapie_path(test_level: float) -> None:
    """The whole-stream path equals RiskMonitoring.update one label at a time (on a short
    stream that alarms: each update recomputes the bound over the whole history)."""
    from mapie.exchangeability_testing import RiskMonitoring

    wrong = np.random.default_rng(SEED).random(300) < 0.6

    monitor = RiskMonitoring("accuracy", test_level=test_level, threshold=TARGET, warn=False)
    truth = np.ones(wrong.size, dtype=int)
    first = None
    for i in range(wrong.size):
        monitor.update(truth[i : i + 1], (~wrong[i : i + 1]).astype(int))
        if first is None and monitor.harmful_shift_detected:
            first = i + 1
    batch = mapie_at(test_level)(wrong)
    assert first == batch, (test_level, first, batch)


def _scenarios(runs: int) -> list[dict[str, Any]]:
    return [
        {"name": "no drift, error rate 0.3 (= target)", "good": HORIZON, "rate": 0.3,
         "drift": None, "runs": runs, "mapie": True},
        {"name": "no drift, error rate 0.2", "good": HORIZON, "rate": 0.2, "drift": None,
         "runs": runs, "mapie": True},
        {"name": "0.2 -> 0.4 after 1,000 answers", "good": 1000, "rate": 0.2, "drift": 0.4,
         "runs": runs, "mapie": True},
        {"name": "0.2 -> 0.4 after 5,000 answers", "good": 5000, "rate": 0.2, "drift": 0.4,
         "runs": runs, "mapie": False},
    ]  # fmt: skip


def _summary(firsts: list[int | None], good: int, drift: bool) -> dict[str, Any]:
    runs = len(firsts)
    early = sum(f is not None and f <= good for f in firsts)
    out: dict[str, Any] = {"runs": runs, "alarm_rate": early / runs}
    if drift:
        delays = [math.inf if f is None else f - good for f in firsts if f is None or f > good]
        med = float(np.median(delays)) if delays else math.nan
        out.update(median_delay=None if math.isinf(med) else med,
                   missed=sum(math.isinf(d) for d in delays))  # fmt: skip
    return out


def run(runs: int) -> dict[str, Any]:
    scenarios = _scenarios(runs)
    progress = Progress(sum(1 + len(MAPIE_TEST_LEVELS) * s["mapie"] for s in scenarios))
    started = time.monotonic()
    for test_level in MAPIE_TEST_LEVELS.values():
        _check_mapie_path(test_level)
    rows = []
    for i, s in enumerate(scenarios):
        wrong = _streams(s["good"], s["rate"], s["drift"], runs, SEED + i)
        row: dict[str, Any] = {k: s[k] for k in ("name", "good", "rate", "drift")}
        methods: list[tuple[str, Alarms]] = [("RiskMonitor", ours)]
        if s["mapie"]:
            methods += [(name, mapie_at(level)) for name, level in MAPIE_TEST_LEVELS.items()]
        for label, method in methods:
            progress.show(f"{s['name']}: {label}")
            row[label] = _summary([method(w) for w in wrong], s["good"], s["drift"] is not None)
            progress.advance()
        rows.append(row)
    progress.close()
    from importlib.metadata import version

    return {"target": TARGET, "alpha": ALPHA, "seed": SEED, "runs": runs,
            "mapie": version("mapie"), "mapie_test_levels": MAPIE_TEST_LEVELS,
            "seconds": round(time.monotonic() - started, 1), "rows": rows}  # fmt: skip


def page(saved: dict[str, Any]) -> str:
    def cell(r: dict[str, Any] | None, drift: bool) -> str:
        if r is None:
            return "—"
        if not drift:
            count = round(r["alarm_rate"] * r["runs"])
            lo, hi = clopper_pearson_interval(count, r["runs"], 0.05)
            return f"{r['alarm_rate']:.1%} false alarms (95% CI {lo:.1%}–{hi:.1%})"
        med = r["median_delay"]
        delay = f"> {AFTER:,}" if med is None else f"{med:.0f}"
        return f"median delay {delay} (missed {r['missed']} of {r['runs']})"

    levels = saved.get("mapie_test_levels", {MAPIE: 2 * ALPHA})
    columns = [name for name in (MAPIE, MAPIE_MATCHED) if name in levels]
    titles = [
        f"{name} (test_level {levels[name]:g}: one-sided {one_sided_level(levels[name]):g})"
        for name in columns
    ]
    fair = columns[-1]  # the ratio: against MAPIE at RiskMonitor's level where it ran there
    lines = [
        header(COMMAND, f"(mapie {saved['mapie']}, {saved['runs']} seeded runs per row)"),
        "",
        f"Target risk {saved['target']}, level {saved['alpha']}: RiskMonitor tests one-sided "
        f"at {saved['alpha']}; MAPIE's RiskMonitoring tests one-sided at a quarter of its "
        f"`test_level`. False alarms are runs with any alarm within {HORIZON:,} answers; delays "
        f"are labelled answers after the drift (missed: no alarm within {AFTER:,}); the ratio "
        f"is the median delay of MAPIE at test_level {levels[fair]:g} over RiskMonitor's.",
        "",
        f"| stream | RiskMonitor | {' | '.join(titles)} | ratio |",
        "|---|---|" + "---|" * len(columns) + "---|",
    ]
    for row in saved["rows"]:
        drift = row["drift"] is not None
        a, b = row["RiskMonitor"], row.get(fair)
        ratio = "—"
        if drift and b is not None and a["median_delay"]:
            mb = b["median_delay"]
            slower = AFTER if mb is None else mb
            ratio = f"{'> ' if mb is None else ''}{slower / a['median_delay']:.1f}x"
        cells = [cell(row.get(name), drift) for name in columns]
        lines.append(f"| {row['name']} | {cell(a, drift)} | {' | '.join(cells)} | {ratio} |")
    return "\n".join(lines) + "\n"


def outputs(write_docs: bool) -> tuple[Path, Path]:
    """Where a run saves its numbers and writes its page: the committed files with
    ``--write-docs``, else :data:`SCRATCH` (untracked)."""
    return (SAVED, OUT) if write_docs else (SCRATCH / SAVED.name, SCRATCH / OUT.name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="seeded runs per stream")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--write-docs",
        action="store_true",
        help=f"save to {SAVED.relative_to(ROOT)} and rewrite {OUT.relative_to(ROOT)} "
        f"(default: both under {SCRATCH.relative_to(ROOT)}/)",
    )
    mode.add_argument(
        "--docs-only", action="store_true", help="rewrite the committed page from its JSON"
    )
    args = parser.parse_args(argv)
    if args.docs_only:
        write_page(OUT, page(load(SAVED)))
        return
    saved_path, page_path = outputs(args.write_docs)
    saved = run(args.runs)
    save(saved_path, saved)
    write_page(page_path, page(saved))


if __name__ == "__main__":
    main()
