"""The page of ``benchmarks/bench_longform_monitor.py``: its tables, rendered from the
saved run (``render``), and the names the run and the page share."""

from __future__ import annotations

from typing import Any

from studies.tables import header

COMMAND = "python -m benchmarks.bench_longform_monitor"
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
