"""What the guarantee costs: coverage against calibration size, by ``liftguard calibrate``
on the shared TriviaQA traces.

    python -m studies.calibration_size [--traces-dir DIR] [--docs-only]

Runs, for each model (Gemma 3 at target risk 0.7, SmolLM2 at 0.8), each score in
``SCORES`` and each calibration size N in ``SIZES`` (30 runs, about five minutes on 2
cores; a progress line on a terminal)::

    liftguard calibrate --traces DIR/triviaqa_MODEL.jsonl --risk R --score S [FLAGS] \\
        --n-cal N --repeats 20

(20 random 50/50 splits, the first N answers of each calibration half used to calibrate).
Saves each command and what it printed in ``benchmarks/results/calibration_size.json``
and writes the table into ``docs/results/calibration_size.md``, included by the
evaluation-results page. ``--docs-only`` rewrites the page from the saved JSON.
"""

from __future__ import annotations

import re
from typing import Any

from studies.tables import (
    DOCS,
    RESULTS,
    Progress,
    header,
    regenerate,
    run_liftguard,
)

COMMAND = "python -m studies.calibration_size"
SAVED = RESULTS / "calibration_size.json"
OUT = DOCS / "calibration_size.md"
RISKS = {"gemma3": 0.7, "smollm2": 0.8}
SCORES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("min_logprob", ("--score", "min_logprob")),
    ("lift, paper config", ("--score", "lift", "--skeleton", "prompt-free", "--aggregate", "mean")),
    ("lift (default)", ("--score", "lift")),
)
SIZES = (50, 100, 250, 500, 1000)
REPEATS = 20

_FIELDS = {
    "refused": r"refused \(too little data\)\s+(\d+) of (\d+)",
    "coverage": r"test coverage \(mean\)\s+([\d.]+)%",
    "oracle": r"oracle coverage \(mean\)\s+([\d.]+)%",
    "share": r"share of oracle\s+(\d+%|n/a)",
    "risk": r"test risk \(mean, shown\)\s+([\d.]+)",
    "violations": r"risk violations\s+(\d+) of (\d+) splits",
}


def parse(stdout: str) -> dict[str, str]:
    """The summary ``liftguard calibrate --repeats`` printed, field by field, as printed."""
    out = {}
    for name, pattern in _FIELDS.items():
        match = re.search(pattern, stdout)
        if match is None:
            raise ValueError(f"no {name!r} in the output of liftguard calibrate:\n{stdout}")
        out[name] = " of ".join(match.groups())
    return out


def run(traces_dir: str) -> dict[str, Any]:
    jobs = [(m, label, flags, n) for m in RISKS for label, flags in SCORES for n in SIZES]
    progress = Progress(len(jobs))
    runs = []
    for model, label, flags, n in jobs:
        args = ["calibrate", "--traces", f"{traces_dir}/triviaqa_{model}.jsonl",
                "--risk", f"{RISKS[model]:g}", *flags, "--n-cal", str(n),
                "--repeats", str(REPEATS)]  # fmt: skip
        progress.show("liftguard " + " ".join(args))
        out = run_liftguard(args)
        parse(out["stdout"])  # fail now, not when the page is written
        runs.append({"model": model, "score": label, "n_cal": n,
                     "command": out["command"], "stdout": out["stdout"]})  # fmt: skip
        progress.advance()
    progress.close()
    return {"generated_by": COMMAND, "runs": runs}


def render(saved: dict[str, Any]) -> str:
    """The whole of ``docs/results/calibration_size.md``."""
    lines = [header(COMMAND, "(or `--docs-only` from its JSON)"), "",
             "| model | score | calibration size | refused | test coverage | oracle coverage | "
             "share of oracle | test risk (shown) | risk violations |",
             "|---|---|---:|---|---:|---:|---:|---:|---|"]  # fmt: skip
    for r in saved["runs"]:
        f = parse(r["stdout"])
        lines.append(f"| {r['model']} | {r['score']} | {r['n_cal']} | {f['refused']} | "
                     f"{f['coverage']}% | {f['oracle']}% | {f['share']} | "
                     f"{'-' if float(f['coverage']) == 0 else f['risk']} | "
                     f"{f['violations']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    regenerate(__doc__, SAVED, run, lambda saved: {OUT: render(saved)})


if __name__ == "__main__":
    main()
