"""Print the README's per-method transfer tables from ``benchmarks/transfer/results``.

``python benchmarks/transfer/table.py``: one Markdown table per direction, a row per
method (the fitted certificate first, then every baseline ``liftguard eval`` reports),
AUROC and test coverage at the given risk for both models.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
MODELS = ("smollm2", "gemma3")
DIRECTIONS = (
    ("nq2tq", "NQ-Open -> TriviaQA", "0.8"),
    ("nq2tq_clean", "NQ-Open -> TriviaQA (features chosen on NQ-Open)", "0.8"),
    ("tq2nq", "TriviaQA -> NQ-Open", "0.95"),
)


def _cell(m: dict[str, float | int | None]) -> str:
    auroc = m.get("auroc")
    cov = m.get("coverage_mean") or 0.0
    a = "-" if auroc is None or math.isnan(float(auroc)) else f"{float(auroc):.3f}"
    return f"{a} | {100 * float(cov):.1f}%"


def main() -> None:
    for tag, title, risk in DIRECTIONS:
        runs = {m: json.loads((RESULTS / f"{m}_{tag}_r{risk}.json").read_text())["methods"]
                for m in MODELS}  # fmt: skip
        names = ["certificate", *sorted(n for n in runs[MODELS[0]] if n != "certificate")]
        print(f"\nFit {title}, risk {risk}:\n")
        print("| method | SmolLM2 AUROC | SmolLM2 coverage | Gemma 3 AUROC | Gemma 3 coverage |")
        print("|---|---|---|---|---|")
        for name in names:
            print(f"| {name} | " + " | ".join(_cell(runs[m][name]) for m in MODELS) + " |")


if __name__ == "__main__":
    main()
