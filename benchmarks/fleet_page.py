"""The page of ``python -m benchmarks.bench_fleet`` (``page``, from the saved run) and the
settings the run and the page share."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from studies.tables import DOCS, RESULTS, ROOT, header

COMMAND = "python -m benchmarks.bench_fleet"
SAVED = RESULTS / "bench_fleet.json"
OUT = DOCS / "fleet.md"
SCRATCH = ROOT / "out" / "bench_fleet"
"""Where a ``--quick`` run writes (``/out/`` is ignored by git)."""

TARGET, ALPHA, SEED, REPLICAS = 0.3, 0.05, 2024, 3
GOOD, BEFORE, AFTER, HORIZON = 1000, 0.2, 0.4, 3000
"""Drift: ``GOOD`` labels at ``BEFORE``, then up to ``HORIZON - GOOD`` at ``AFTER``;
boundary: ``HORIZON`` labels at the target."""
BLOCK = 250
"""Answers each replica's writer sends before their labels are sent."""
DRIFT_RUNS = 40
FLEET_TIMEOUT_S = 0.5
"""``--fleet-timeout`` of the latency part's replicas (the default)."""
WARM_UP = 4
"""Answers of each path's warm-up round."""
LABELS_CHECKED = 6
"""Labels sent in each Redis state of the latency part."""
PATHS = ("direct", "up", "stopped", "hung")
PATH_NAMES = {
    "direct": "direct (no proxy)",
    "up": "proxy, Redis up",
    "stopped": "proxy, Redis stopped (nothing listens)",
    "hung": "proxy, Redis hung (SIGSTOP)",
}
CRITERION_DELAY, CRITERION_WALL = 0.10, 1.02
CRITERION_FIRST_S, CRITERION_STALL_S = 1.0, 0.050
"""Start-up: the first request served within 1 s; no request stalled over 50 ms."""


def _alarm_cell(s: dict[str, Any], scenario: str) -> str:
    lo, hi = s["false_alarm_ci95"]
    rate = f"{s['false_alarm_rate']:.1%} (95% CI {lo:.1%}–{hi:.1%})"
    if scenario == "boundary":
        return f"{rate} false alarms"
    med = s["median_delay"]
    delay = f"> {HORIZON - GOOD:,}" if med is None else f"{med:.0f}"
    early = f"; {rate} false alarms before it" if s["false_alarms"] else ""
    return f"median delay {delay} (missed {s['missed']} of {s['runs']}){early}"


def page(saved: dict[str, Any], source: Path = SAVED) -> str:
    lines = [header(COMMAND, f"from {source.relative_to(ROOT)}"), ""]
    alarm = saved.get("alarm")
    if alarm is not None:
        lines += [
            f"**Alarm.** Target risk {alarm['target']}, level {alarm['alpha']} (the first "
            "test's share of it, as in one process); labels of "
            f"shown answers, seeded. The fleet: {alarm['replicas']} `FleetRiskWatch` replicas "
            "on one Valkey server, answer *i* served by replica *i* mod 3 and its label sent "
            "to replica *i* + 1 mod 3 (`alabel`, the feedback endpoint's path), the alarm read "
            "from every replica after `refresh()`. One process: one `RiskMonitor` fed the same "
            "labels in the same order. Independent replicas (what the fleet replaces): three "
            "monitors at one process's level "
            "each, each fed the labels one replica receives (a third), the "
            "first alarm of the three: each holds its level, the three together only three "
            "times it. Delays are labels after the drift (missed: none within "
            f"{HORIZON - GOOD:,}).",
            "",
            "| stream | fleet (3 replicas, one monitor) | one process | 3 independent replicas |",
            "|---|---|---|---|",
        ]
        for s in alarm["scenarios"]:
            name = s["scenario"]
            title = (
                f"error rate {s['rate']} → {s['drift_to']} after {s['good']:,} labels "
                f"({s['runs']} runs)"
                if name == "drift"
                else f"error rate {s['rate']} (= target), {s['horizon']:,} labels "
                f"({s['runs']} runs)"
            )
            cells = [_alarm_cell(s[k], name) for k in ("fleet", "one_process", "independent")]
            lines.append(f"| {title} | {' | '.join(cells)} |")
        lines.append("")
        notes = []
        for s in alarm["scenarios"]:
            notes.append(
                f"{s['scenario']}: the fleet alarmed at the same label as one process in "
                f"{s['runs_alarm_equal']} of {s['runs']} runs, its log e-value after its last "
                f"label equal to the bit in {s['runs_log_e_equal']}, its three replicas agreeing "
                f"in {s['runs_replicas_agree']} ({s['labels_sent']:,} labels through the fleet, "
                f"{s['fleet_labels_per_s']:.0f} a second, {s['redis_errors']} Redis errors)"
            )
        drift = next(s for s in alarm["scenarios"] if s["scenario"] == "drift")
        ratio = drift["fleet_over_one_process_delay"]
        verdict = "—" if ratio is None else (
            f"{ratio:.3f} ({'within' if abs(ratio - 1) <= CRITERION_DELAY else 'NOT within'} "
            f"{CRITERION_DELAY:.0%})"
        )  # fmt: skip
        lines += [
            f"The fleet's median delay over one process's: {verdict}. Per run: "
            + "; ".join(notes) + ".",
            "",
        ]  # fmt: skip
    latency = saved.get("latency")
    if latency is not None:
        spec = latency["spec"]
        timeout = latency["fleet_timeout_s"]
        lines += [
            f"**Latency.** The paced scenario of `benchmarks/bench_proxy.py`: {spec['tokens']} "
            f"tokens {1000 * spec['delay']:.0f} ms apart, {latency['streams']} answers read "
            f"{latency['concurrency']} at a time, through `liftguard serve` with a calibrated "
            f"certificate and `--redis` at a running Valkey, at a port nothing listens on, and "
            f"at a Valkey paused with SIGSTOP (`--fleet-timeout {timeout:g}`); the best of "
            f"{latency['rounds']} rounds, the order reversed every other round.",
            "",
            "| path | wall time of the round | ratio to Redis up |",
            "|---|---|---|",
        ]
        for name in PATHS:
            p = latency["paths"][name]
            if name == "up":
                ratio_text = "1"
            elif name == "direct":
                ratio_text = f"{1 / latency['ratio_up_direct']:.3f}"
            else:
                ratio = latency[f"ratio_{name}_up"]
                ok = "within" if ratio <= CRITERION_WALL else "NOT within"
                ratio_text = f"{ratio:.3f} ({ok} {CRITERION_WALL})"
            lines.append(f"| {PATH_NAMES[name]} | {p['wall_s']:.3f} s | {ratio_text} |")
        checks = latency["checks"]
        down, back = checks["stopped"]["while_down"], checks["stopped"]["after_start"]
        earlier = back["labels_of_earlier_answers"]
        hung, resumed = checks["hung"]["while_hung"], checks["hung"]["after_resume"]
        answers = latency["answers_per_replica"]
        lines += [
            "",
            f"Labels and `/healthz`: {LABELS_CHECKED} fresh answers in each state, each "
            "served and certified, then labelled. Failed calls to Redis are counted in "
            f"`liftguard_fleet_errors_total` over the replica's {answers} answers by then "
            "(`keep`: an answer's record, `verdict`: its verdict, both dropped off the "
            "request path).",
            "",
            f"- Redis up: labels {_codes_text(checks['up']['labels'])}; blind: "
            f"{_blind(checks['up']['blind'])}.",
            f"- Redis stopped: labels {_codes_text(down['labels'])}; `/healthz` blind: "
            f"{_blind(down['blind'])}; `liftguard_fleet_blind` "
            f"{down['metrics'].get('blind', math.nan):g}; failed calls: "
            f"{_errors(down['metrics'])}.",
            f"- Started again (empty): labels of new answers {_codes_text(back['labels'])}, "
            f"of the answers served while it was down {_codes_text(earlier)}; "
            f"blind: {_blind(back['blind'])}; the replica logged going blind "
            f"{_times(checks['stopped']['log_went_blind'])} and seeing again "
            f"{_times(checks['stopped']['log_saw_again'])}.",
            f"- Redis hung (paused after the first {WARM_UP} answers): labels "
            f"{_codes_text(hung['labels'])}, each after at most {hung['label_s_max']:.2f} s; "
            f"`/healthz` blind: {_blind(hung['blind'])}, in {hung['healthz_s']:.2f} s; "
            f"failed calls: {_errors(hung['metrics'])}.",
            f"- Resumed: labels of new answers {_codes_text(resumed['labels'])}; blind: "
            f"{_blind(resumed['blind'])}; the replica logged going blind "
            f"{_times(checks['hung']['log_went_blind'])} and seeing again "
            f"{_times(checks['hung']['log_saw_again'])}.",
        ]  # fmt: skip
    startup = saved.get("startup")
    if startup is not None:
        lines += _startup_lines(startup)
    machine = saved.get("machine", {})
    load_avg = machine.get("load_average_at_start")
    busy = "" if load_avg is None else f", load average {load_avg:.1f} when the run started"
    lines += [
        "",
        f"Measured on {machine.get('cpus', '?')} CPUs{busy} (Python "
        f"{machine.get('python', '?')}, {saved.get('valkey', 'Valkey')}).",
    ]
    return "\n".join(lines) + "\n"


SERVE_COLUMNS = (
    "launch_to_listening_s",
    "listening_to_first_answer_s",
    "listening_to_first_label_s",
)


def _startup_lines(startup: dict[str, Any]) -> list[str]:
    fed, kept = startup.get("fed"), startup.get("kept")
    simulated = (
        ""
        if fed is None
        else f" Beyond {fed:,} labels the record's monitor is fed {fed:,} seeded labels and "
        "its counts are then advanced to the label count in its serialised state (the state "
        "is constant in size: what a start reads is the same bytes); the history and the "
        f"audit stream are as full as their caps allow and the latest {kept:,} answers are "
        "kept."
    )
    lines = [
        "",
        "**Start-up and loss.** For each label count, a fleet's state after that many "
        "labels (the version's record, its history, the answers kept for their labels, the "
        f"trimmed audit stream of labels) in a Valkey server of the script's own.{simulated} "
        f"Then, {startup['repeats']} times: a new replica reads the record, keeps an answer "
        "and takes its label (*start*); the record is deleted and the replica's next "
        "`refresh()` detects the loss and starts the next test (*loss*: what a generation "
        "change was). Medians; *longest stall*: the longest a task that wants the replica's "
        "event loop every millisecond waited meanwhile. And once: a real `liftguard serve` "
        "replica launched on that state, its time to listening (its socket bound: the "
        "interpreter and the command line's imports), then to its first answer served (the "
        "proxy built meanwhile: its imports, the certificate, the monitors, the fleet's "
        "record read) and to that answer's label taken (counted on top of the record's "
        "labels).",
        "",
        "| labels taken | start: first label taken | longest stall | loss: next test "
        "started | longest stall | serve: launch to listening | listening to first answer "
        "| to its label | the record | server memory |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = startup["rows"]
    for row in rows:
        serve = [f"{row[k]:.2f} s" if k in row else "–" for k in SERVE_COLUMNS]
        lines.append(
            f"| {row['labels']:,} | {1000 * row['start_s']:.1f} ms | "
            f"{1000 * row['start_stall_s']:.1f} ms | {1000 * row['loss_s']:.1f} ms | "
            f"{1000 * row['loss_stall_s']:.1f} ms | {' | '.join(serve)} | "
            f"{row['record_bytes'] / 1024:.1f} kB | {row['server_memory_bytes'] / 2**20:.1f} MB |"
        )
    top, low = rows[-1], rows[0]
    if "launch_to_listening_s" in top:
        first, few = top["listening_to_first_label_s"], low["listening_to_first_label_s"]
        stall = max(top["start_stall_s"], top["loss_stall_s"])
        late = startup.get("late_imports", [])
        of_which = "" if not late else (
            "; the heaviest imports after listening, each in a fresh interpreter: "
            + ", ".join(f"`{i['module']}` {i['s']:.2f} s ({i['what']})" for i in late)
        )  # fmt: skip
        lines += [
            "",
            f"The issue's criteria, at {top['labels']:,} labels: the fleet's part of a start "
            f"(read the record, take a first label) takes {1000 * top['start_s']:.1f} ms "
            f"({'within' if top['start_s'] < CRITERION_FIRST_S else 'over'} "
            f"{CRITERION_FIRST_S:g} s); a real `liftguard serve` serves its first answer and "
            f"takes its label {first:.2f} s after it listens, against {few:.2f} s with "
            f"{low['labels']:,} labels: the process's own start, not the labels "
            f"({'within' if first < CRITERION_FIRST_S else 'over'} {CRITERION_FIRST_S:g} s"
            f"{of_which}). A loss, and a start, stall the event loop at most "
            f"{1000 * stall:.1f} ms ({'within' if stall <= CRITERION_STALL_S else 'over'} "
            f"{1000 * CRITERION_STALL_S:.0f} ms).",
        ]
    return lines


def _codes_text(codes: dict[str, int]) -> str:
    """``6 accepted``, ``6 refused (503 fleet_unavailable)``."""
    return ", ".join(
        f"{n} {code}" if code == "accepted" else f"{n} refused (`{code}`)"
        for code, n in sorted(codes.items())
    )


def _times(n: int) -> str:
    return {0: "never", 1: "once", 2: "twice"}.get(n, f"{n} times")


def _blind(reason: str | None) -> str:
    return "no" if reason is None else f"yes (`{reason}`)"


def _errors(metrics: dict[str, float]) -> str:
    ops = {k.removeprefix("errors_"): v for k, v in metrics.items() if k.startswith("errors_")}
    return ", ".join(f"{op} {v:g}" for op, v in sorted(ops.items())) or "none"


# --- main ------------------------------------------------------------------------------------
