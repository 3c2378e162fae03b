"""The certificate against the baselines on the shared TriviaQA traces, and the default's
neighbours: ``liftguard eval`` at risks 0.6, 0.7 and 0.8 for both models, then the same
command with one flag changed.

    python -m studies.eval_baselines [--traces-dir DIR] [--docs-only]

Runs (about three minutes on 2 cores; a progress line on a terminal):

- ``liftguard eval --traces DIR/triviaqa_MODEL.jsonl --risk R --splits 20 --json`` for
  MODEL in gemma3, smollm2 and R in 0.6, 0.7, 0.8;
- the same at Gemma's risk 0.7 and SmolLM2's 0.8 with each of ``NEIGHBOURS``' flags.

Saves every run's command and output in ``benchmarks/results/eval_baselines.json`` and
writes ``docs/results/eval_baselines.md`` (a table per model) and
``docs/results/eval_neighbours.md`` (the neighbours' coverage, AUROC and tokens read),
both included by the evaluation-results page. ``--docs-only`` rewrites the two pages from
the saved JSON without running anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from guardrail.traces import BASELINES
from studies.tables import (
    DOCS,
    MODELS,
    RESULTS,
    SHORT,
    Progress,
    header,
    pct,
    regenerate,
    run_liftguard,
    trace_summary,
)

COMMAND = "python -m studies.eval_baselines"
SAVED = RESULTS / "eval_baselines.json"
OUT = DOCS / "eval_baselines.md"
OUT_NEIGHBOURS = DOCS / "eval_neighbours.md"
RISKS = (0.6, 0.7, 0.8)
SPLITS = 20
NEIGHBOUR_RISK = {"gemma3": 0.7, "smollm2": 0.8}
NEIGHBOURS: tuple[tuple[str, ...], ...] = (
    ("--lowest-k", "1"),
    ("--aggregate", "min"),
    ("--lowest-k", "3"),
    ("--clip", "12"),
    ("--skeleton", "prompt-free", "--aggregate", "mean"),
    ("--skeleton", "temperature", "--aggregate", "mean"),
)
"""One flag changed from the default (the paper's configurations change two)."""
METHODS = ("lift", "lift_paper", *BASELINES)
"""The order ``liftguard eval`` reports its methods in (a saved run made before a baseline
was added has no row for it)."""


def _eval_args(traces: str, risk: float, flags: tuple[str, ...] = ()) -> list[str]:
    return ["eval", "--traces", traces, "--risk", f"{risk:g}", "--splits", str(SPLITS),
            *flags, "--json"]  # fmt: skip


def run(traces_dir: str) -> dict[str, Any]:
    """Run every command; what each printed, and a summary of each trace file."""
    jobs: list[tuple[str, float, tuple[str, ...]]] = [(m, r, ()) for m in MODELS for r in RISKS]
    jobs += [(m, NEIGHBOUR_RISK[m], flags) for flags in NEIGHBOURS for m in MODELS]
    progress = Progress(len(jobs))
    runs = []
    for model, risk, flags in jobs:
        args = _eval_args(f"{traces_dir}/triviaqa_{model}.jsonl", risk, flags)
        progress.show("liftguard " + " ".join(args))
        out = run_liftguard(args)
        result = json.loads(out["stdout"])
        if flags:  # the flags change only the `lift` method
            result["methods"] = {"lift": result["methods"]["lift"]}
        for method in result["methods"].values():
            method.pop("refusal_reason", None)  # a sentence; `all_refused` says it
        runs.append({"model": model, "risk": risk, "flags": list(flags),
                     "command": out["command"], "result": result})  # fmt: skip
        progress.advance()
    progress.close()
    traces = {m: trace_summary(Path(traces_dir) / f"triviaqa_{m}.jsonl") for m in MODELS}
    return {"generated_by": COMMAND, "traces": traces, "runs": runs}


def _find(saved: dict[str, Any], model: str, risk: float, flags: tuple[str, ...] = ()) -> Any:
    for r in saved["runs"]:
        if r["model"] == model and r["risk"] == risk and tuple(r["flags"]) == flags:
            return r
    raise KeyError(f"no saved run for {model} at risk {risk} with {flags}")


def _row(risk: float, name: str, m: dict[str, Any]) -> str:
    auroc = "-" if m["auroc"] is None else f"{m['auroc']:.3f}"
    if m["all_refused"]:  # no split calibrated: nothing answered, nothing to read
        return f"| {risk:g} | {name} | refused | - | - | {auroc} | - |"
    risk_mean = "-" if m["risk_mean"] is None else f"{m['risk_mean']:.3f}"
    read = f"{pct(m['tokens_read_fraction'], 0)} / {pct(m['tokens_read_median'], 0)}"
    return (f"| {risk:g} | {name} | {pct(m['coverage_mean'])} | {risk_mean} | "
            f"{pct(m['risk_violation_rate'], 0)} | {auroc} | {read} |")  # fmt: skip


def _model_line(model: str, t: dict[str, Any]) -> str:
    lengths = f"median answer {t['median_tokens']:g} tokens"
    if t["one_token"] > 0:
        lengths += (f", {pct(t['one_token'], 0)} of them one token and "
                    f"{pct(t['at_most_three_tokens'], 0)} at most three")  # fmt: skip
    return (f"{MODELS[model]} (`{t['file']}`: {t['n_correct']:,} of {t['n']:,} answers correct, "
            f"{pct(t['n_correct'] / t['n'])}; {lengths}):")  # fmt: skip


def render(saved: dict[str, Any]) -> str:
    """The whole of ``docs/results/eval_baselines.md``."""
    lines = [header(COMMAND, "(or `--docs-only` from its JSON)")]
    for model in MODELS:
        lines += ["", _model_line(model, saved["traces"][model]), "",
                  "| target risk | method | coverage | test risk | violations | AUROC | "
                  "tokens read (mean / median) |",
                  "|---:|---|---:|---:|---:|---:|---:|"]  # fmt: skip
        for risk in RISKS:
            methods = _find(saved, model, risk)["result"]["methods"]
            lines += [_row(risk, name, methods[name]) for name in METHODS if name in methods]
    lines += ["", "*refused*: calibration refused on every split (no threshold passes the "
              "risk test), so the method answers nothing."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _cell(m: dict[str, Any]) -> str:
    if m["all_refused"]:
        return f"refused | {m['auroc']:.3f} | -"
    return f"{pct(m['coverage_mean'])} | {m['auroc']:.3f} | {pct(m['tokens_read_median'], 0)}"


def render_neighbours(saved: dict[str, Any]) -> str:
    """The whole of ``docs/results/eval_neighbours.md``."""
    cols = " | ".join(f"{SHORT[m]} {h}" for m in MODELS
                      for h in ("coverage", "AUROC", "tokens read (median)"))  # fmt: skip
    risks = " / ".join(f"{MODELS[m]} at risk {NEIGHBOUR_RISK[m]:g}" for m in MODELS)
    lines = [header(COMMAND, "(or `--docs-only` from its JSON)"), "",
             f"`liftguard eval` with the flags shown ({risks}; {SPLITS} splits):", "",
             f"| flags | {cols} |", "|---|" + "---:|" * 3 * len(MODELS)]  # fmt: skip
    for flags in ((), *NEIGHBOURS):
        cells = [_cell(_find(saved, m, NEIGHBOUR_RISK[m], flags)["result"]["methods"]["lift"])
                 for m in MODELS]  # fmt: skip
        label = f"`{' '.join(flags)}`" if flags else "(default)"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    regenerate(
        __doc__, SAVED, run,
        lambda saved: {OUT: render(saved), OUT_NEIGHBOURS: render_neighbours(saved)},
    )  # fmt: skip


if __name__ == "__main__":
    main()
