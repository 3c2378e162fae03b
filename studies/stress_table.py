"""The skeleton-corruption study, by ``liftguard stress`` on the shared TriviaQA traces.

    python -m studies.stress_table [--traces-dir DIR] [--docs-only]

Runs ``liftguard stress --traces DIR/triviaqa_gemma3.jsonl --risk 0.8 --json`` and, for
SmolLM2, the same at the laxer risks of ``SMOLLM2_RISKS`` (its unigram certificate may not
calibrate at all: the command's error is then what the page reports); a few seconds each.
Saves each command and what it printed in ``benchmarks/results/stress.json`` and writes
``docs/results/stress.md``, included by the evaluation-results page. ``--docs-only``
rewrites the page from the saved JSON.
"""

from __future__ import annotations

import json
from typing import Any

from studies.tables import (
    DOCS,
    MODELS,
    RESULTS,
    Progress,
    header,
    regenerate,
    run_liftguard,
)

COMMAND = "python -m studies.stress_table"
SAVED = RESULTS / "stress.json"
OUT = DOCS / "stress.md"
JOBS = (("gemma3", 0.8), ("smollm2", 0.8), ("smollm2", 0.85))


def run(traces_dir: str) -> dict[str, Any]:
    progress = Progress(len(JOBS))
    runs = []
    for model, risk in JOBS:
        args = ["stress", "--traces", f"{traces_dir}/triviaqa_{model}.jsonl",
                "--risk", f"{risk:g}", "--json"]  # fmt: skip
        progress.show("liftguard " + " ".join(args))
        out = run_liftguard(args, allow_failure=True)
        result = json.loads(out["stdout"]) if out["returncode"] == 0 else None
        runs.append({"model": model, "risk": risk, "command": out["command"],
                     "result": result, "error": out["error"]})  # fmt: skip
        progress.advance()
    progress.close()
    return {"generated_by": COMMAND, "runs": runs}


def _table(command: str, rep: dict[str, Any]) -> list[str]:
    clean = rep["clean"]
    lines = [f"`{command}`: tau {rep['tau']:.3f}; clean skeleton: coverage "
             f"{clean['coverage']:.1%}, risk {clean['risk']:.3f}.", "",
             "| corruption | strength | eta (TV) | budget-shift bound | coverage (change) | "
             "risk (change) |", "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in rep["rows"]:
        lines.append(
            f"| {r['corruption']} | {r['strength']:.0%} | {r['eta']:.3f} | "
            f"{r['budget_shift_bound']:.2f} | {r['coverage']:.1%} ({r['coverage_change']:+.1%}) | "
            f"{r['risk']:.3f} ({r['risk_change']:+.3f}) |"
        )
    return lines


def render(saved: dict[str, Any]) -> str:
    """The whole of ``docs/results/stress.md``."""
    lines = [header(COMMAND, "(or `--docs-only` from its JSON)")]
    for run in saved["runs"]:
        lines += ["", f"{MODELS[run['model']]}, target risk {run['risk']:g}:", ""]
        if run["result"] is None:
            error = run["error"].removeprefix("liftguard stress: error: ")
            lines.append(f"`{run['command']}` fails: {error}")
        else:
            lines += _table(run["command"], run["result"])
    return "\n".join(lines) + "\n"


def main() -> None:
    regenerate(__doc__, SAVED, run, lambda saved: {OUT: render(saved)})


if __name__ == "__main__":
    main()
