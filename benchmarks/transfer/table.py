"""Print the README's per-method transfer tables from ``benchmarks/transfer/results``.

``python benchmarks/transfer/table.py``: one Markdown table per direction, a row per
method (the fitted certificate first, then every baseline ``liftguard eval`` reports),
AUROC and test coverage at the given risk for both models; then, from the evaluations
run with ``--bootstrap``, the certificate's paired 95% intervals against the best single
score (AUROC) and the best baseline (coverage).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
PEERS = ("nll", "mean_logprob", "min_logprob", "entropy", "max_entropy", "mean_margin",
         "min_margin", "pmi", "lift_paper")  # fmt: skip
"""The single scores (the peers' and the paper's); the best baseline also counts ``lift``."""
INTERVALS = (("nq2tq", "NQ-Open -> TriviaQA", ("0.8", "0.7")),
             ("tq2nq", "TriviaQA -> NQ-Open", ("0.95", "0.9")))  # fmt: skip
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
    _intervals()


def _pts(lo_hi: list[float], scale: float, fmt: str) -> str:
    return f"[{scale * lo_hi[0]:{fmt}}, {scale * lo_hi[1]:{fmt}}]"


def _intervals() -> None:
    print("\nCertificate minus the best single score (AUROC) and the best baseline (coverage),"
          " 95% paired bootstrap intervals (200 resamples of the test answers):\n")  # fmt: skip
    print("| model, fit -> test | risk | AUROC difference | coverage difference (points) |")
    print("|---|---|---|---|")
    for m in MODELS:
        for tag, title, risks in INTERVALS:
            for risk in risks:
                methods = json.loads((RESULTS / f"{m}_{tag}_r{risk}.json").read_text())["methods"]
                peer = max(PEERS, key=lambda n: methods[n]["auroc"])
                best = max((n for n in methods if n != "certificate"),
                           key=lambda n: methods[n]["coverage_mean"])  # fmt: skip
                auc = methods[peer]["bootstrap"]["certificate_minus"]["auroc"]
                cov = methods[best]["bootstrap"]["certificate_minus"]["coverage_mean"]
                zero = " (every baseline 0%)" if methods[best]["coverage_mean"] == 0 else ""
                print(f"| {m}, {title} | {risk} | {_pts(auc, 1, '+.3f')} vs {peer} | "
                      f"{_pts(cov, 100, '+.1f')} vs {best}{zero} |")  # fmt: skip


if __name__ == "__main__":
    main()
