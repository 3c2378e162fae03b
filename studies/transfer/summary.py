"""Write the summary tables of the fitted certificates on held-out data from
``studies/transfer/results`` (the outputs of ``python -m studies.transfer.run``).

``python -m studies.transfer.summary`` writes, for the evaluation-results page:

- ``docs/results/transfer_summary.md``: a row per model and direction (fit -> test): the
  certificate's AUROC against the best single score and the in-domain ceiling of its
  features (``*_ceiling.json``), its coverage against the best baseline and its refused
  splits against nll's at each risk evaluated for that model (``models.py``), its risk
  violations, and the share of a blocked answer it reads before blocking it (beside
  ``lift``'s);
- ``docs/results/transfer_nq_features.md``: NQ-Open -> TriviaQA with the shipped feature
  preset (chosen on TriviaQA) against features chosen on NQ-Open alone (``*_nq2tq_clean_*``).

"Best single score" is the best AUROC among ``table.PEERS`` (the peers' scores and the
paper's configuration); "best baseline" also counts ``lift``, the default single-score
certificate, whose AUROC the row names where it is at least the certificate's. Bold
marks where the certificate clears the project's bar (:func:`auroc_bar` for AUROC; a
coverage at least the best baseline's; at most ``REFUSAL_SLACK`` more refused splits
than nll).

``--results DIR`` reads another results directory, ``--docs DIR`` writes the pages there
instead, ``--models KEY,...`` renders only those models (both for trial runs).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from studies.transfer.models import (
    DIRECTIONS,
    MODELS,
    Model,
    best_baseline,
    load,
    method_name,
    read_result,
    select,
)
from studies.transfer.table import PEERS

RESULTS = Path(__file__).parent / "results"
DOCS = Path(__file__).parents[2] / "docs" / "results"
OUT = DOCS / "transfer_summary.md"
OUT_FEATURES = DOCS / "transfer_nq_features.md"
COMMAND = "python -m studies.transfer.summary"
BAR = 0.01
"""The AUROC margin over the best single score the project asks of a certificate."""
CEILING_SLACK = 0.005
"""Where the in-domain ceiling is below the best single score + ``BAR``: how far under the
ceiling the certificate may stay."""
REFUSAL_SLACK = 2
"""How many more of the splits' calibrations the certificate may refuse than nll's."""


def _methods(results: Path, model: Model, tag: str, risk: str) -> dict[str, dict[str, Any]]:
    return dict(load(results, model, tag, risk)["methods"])


def _splits(results: Path, model: Model, tag: str, risk: str) -> int:
    return int(load(results, model, tag, risk)["splits"])


def _best_single(methods: dict[str, dict[str, Any]]) -> str:
    return max(PEERS, key=lambda n: methods[n]["auroc"])


def _bold(text: str, on: bool) -> str:
    return f"**{text}**" if on else text


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%" if x else "0%"


def _ceiling(results: Path, model: Model, tag: str) -> float:
    data = json.loads(read_result(results, f"{model.key}_{tag}_ceiling.json"))
    return float(data["auroc_mean"])


def auroc_bar(cert: float, best: float, ceiling: float) -> bool:
    """The project's AUROC bar: the best single score + ``BAR``, or, where the in-domain
    ceiling of the certificate's features lies below that, within ``CEILING_SLACK`` of
    the ceiling."""
    if cert >= best + BAR:
        return True
    return ceiling < best + BAR and cert >= ceiling - CEILING_SLACK


def _auroc(results: Path, model: Model, tag: str, risk: str) -> str:
    methods = _methods(results, model, tag, risk)
    cert, peer = methods["certificate"]["auroc"], _best_single(methods)
    best, ceiling = methods[peer]["auroc"], _ceiling(results, model, tag)
    lift = methods["lift"]["auroc"]
    own = f" (`lift`: {lift:.3f})" if lift >= cert else ""
    return (f"{_bold(f'{cert:.3f}', auroc_bar(cert, best, ceiling))}{own} / {best:.3f} "
            f"({method_name(peer)}) / {ceiling:.3f}")  # fmt: skip


def _coverage(methods: dict[str, dict[str, Any]]) -> str:
    """The certificate's coverage / the best baseline's (named)."""
    cert, top = methods["certificate"]["coverage_mean"], best_baseline(methods)
    best = methods[top]["coverage_mean"]
    name = f" ({method_name(top)})" if best else ""
    return f"{_bold(_pct(cert), cert >= best)} / {_pct(best)}{name}"


def _read(m: dict[str, Any]) -> str:
    mean, median = m.get("blocked_read_mean"), m.get("blocked_read_median")
    return "-" if mean is None else f"{mean:.0%} / {median:.0%}"


def _summary_row(results: Path, model: Model, tag: str) -> str:
    risks = model.risks[tag]
    cover, nothing, violations, refused, read = [], [], [], [], []
    for risk in risks:
        methods = _methods(results, model, tag, risk)
        cert = methods["certificate"]
        if all(m["coverage_mean"] == 0 for m in methods.values()):
            nothing.append(risk)
            continue
        cover.append(f"{risk}: {_coverage(methods)}")
        n = _splits(results, model, tag, risk)
        mine, nll = cert["refused"], methods["nll"]["refused"]
        refused.append(f"{risk}: {_bold(str(mine), mine <= nll + REFUSAL_SLACK)} / {nll}")
        if cert["risk_violation_rate"]:
            violations.append(f"{round(cert['risk_violation_rate'] * n)} of {n} ({risk})")
        read.append(f"{risk}: {_read(cert)} (`lift` {_read(methods['lift'])})")
    if nothing:
        cover.append(f"{' and '.join(nothing)}: 0% for every method")
    n = _splits(results, model, tag, risks[0])
    return (
        f"| {model.name}, {DIRECTIONS[tag]} | {_auroc(results, model, tag, risks[0])} | "
        f"{'; '.join(cover)} | {'; '.join(refused) or '-'} | "
        f"{', '.join(violations) or f'0 of {n}'} | {'; '.join(read) or '-'} |"
    )


def render(results: Path = RESULTS, models: Sequence[Model] = MODELS) -> str:
    """The whole of ``docs/results/transfer_summary.md``."""
    lines = [f"<!-- generated by `{COMMAND}` from studies/transfer/results; do not edit -->",
             "",
             "| model, fit -> test | AUROC: certificate / best single score / in-domain "
             "ceiling | coverage at each risk: certificate / best baseline | refused splits: "
             "certificate / nll | certificate's risk violations | tokens read before a block, "
             "blocked answers (mean / median) |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for model in models:
        for tag in DIRECTIONS:
            lines.append(_summary_row(results, model, tag))
    lines += ["", f"Bold: the certificate clears the bar: an AUROC at least the best single "
              f"score's + {BAR} (or, where the in-domain ceiling lies below that, within "
              f"{CEILING_SLACK} of the ceiling); a coverage at least the best baseline's; at "
              f"most {REFUSAL_SLACK} more refused splits than nll. The in-domain ceiling is the "
              "certificate's features fitted and scored out of fold on the test set itself "
              "(`select_features.py --cv`): it looks at the test set, so it is a reference, "
              "not a result. The best single score is the best of the peers' scores; `lift`, "
              "the project's own single-score certificate, counts among the baselines for "
              "coverage, and where it ranks at least as well as the certificate its AUROC "
              "follows the certificate's."]  # fmt: skip
    return "\n".join(lines) + "\n"


def render_features(results: Path = RESULTS, models: Sequence[Model] = MODELS) -> str:
    """The whole of ``docs/results/transfer_nq_features.md``."""
    head = " | ".join(f"{m.name} AUROC | coverage {' / '.join(m.risks['nq2tq'])}" for m in models)
    lines = [
        f"<!-- generated by `{COMMAND}` from studies/transfer/results; do not edit -->",
        "",
        f"| NQ-Open -> TriviaQA | {head} |",
        "|---|" + "---|" * 2 * len(models),
    ]
    for label, tag in (
        ("certificate, TriviaQA-chosen preset (shipped default)", "nq2tq"),
        ("certificate, features chosen on NQ-Open only", "nq2tq_clean"),
    ):
        cells = []
        for m in models:
            cert = [_methods(results, m, tag, r)["certificate"] for r in m.risks["nq2tq"]]
            cells.append(f"{cert[0]['auroc']:.3f} | "
                         + " / ".join(_pct(c["coverage_mean"]) for c in cert))  # fmt: skip
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    cells = []
    for m in models:
        runs = [_methods(results, m, "nq2tq", r) for r in m.risks["nq2tq"]]
        peer, tops = _best_single(runs[0]), [best_baseline(r) for r in runs]
        cover = " / ".join(f"{_pct(r[t]['coverage_mean'])} ({method_name(t)})"
                           for r, t in zip(runs, tops, strict=True))  # fmt: skip
        cells.append(f"{runs[0][peer]['auroc']:.3f} ({method_name(peer)}) | {cover}")
    label = "best single score (AUROC) / best baseline (coverage)"
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
    chosen = read_result(results, "nq_selected_features.txt").strip().splitlines()
    lines += ["", f"Chosen on NQ-Open by `select_features.py`, {chosen[0]}: "
              + ", ".join(f"`{f}`" for f in chosen[-1].split(",")) + "."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the transfer summary pages.")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--docs", type=Path, default=DOCS)
    parser.add_argument("--models", help="comma-separated keys of models.py (default: all)")
    args = parser.parse_args(argv)
    models = select(args.models)
    try:
        pages = {OUT.name: render(args.results, models),
                 OUT_FEATURES.name: render_features(args.results, models)}  # fmt: skip
    except FileNotFoundError as exc:
        print(f"summary.py: {exc}", file=sys.stderr)
        return 1
    args.docs.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (args.docs / name).write_text(text, encoding="utf-8")
        print(f"wrote {args.docs / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
