"""Early blocks on held-out data: the fitted certificate (``liftguard fit``'s default
early-block margins, ``run.py``'s results) beside the same fit with other
``--early-block`` settings (0.9 among them, the quantile the rule of
``margin_quantile.py`` picks within TriviaQA), in every direction and at every risk of
``run.py``.

    python -m studies.transfer.early_block SHARED_TRACES_DIR NQ_TRACES_DIR
        [--results DIR] [--models KEY,...] [--render-only]

For each model and each setting of :data:`QUANTILES` (``none``: the exact early blocks
only), fits ``liftguard fit --fit-fraction 1 --early-block Q`` on each dataset (the
margins come from that dataset's correct answers, as the statistic does) and evaluates
it on the other exactly as ``run.py`` evaluates the certificate
(``*_eb{Q}_r{risk}.json``, no bootstrap). Then writes
``docs/results/transfer_early_block.md``: per setting, coverage, refused splits and the
share of a blocked answer read before the block, for the certificate, for each
setting, and the best baseline; and, per model and direction, the share of each
dataset's correct answers that rose past each certificate's margins at some position
(:func:`past_margins`, ``*_past_margins.json``). ``--render-only`` rewrites the page from
the saved results.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from guardrail.fitting import FitOptions
from studies.transfer.models import (
    DIRECTIONS,
    MODELS,
    Model,
    cell,
    load,
    method_name,
    page_main,
    read_result,
    settings,
)
from studies.transfer.run import EVAL, liftguard

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

DEFAULT_EARLY_BLOCK = FitOptions().early_block

QUANTILES = ("none", "0.95", "0.9")
LABELS = {"none": "without margins", "0.95": "early block 0.95", "0.9": "early block 0.9"}
OUT = ROOT / "docs" / "results" / "transfer_early_block.md"
COMMAND = "python -m studies.transfer.early_block"
FIT_ON = {"nq2tq": "nq", "tq2nq": "tq"}


def run(tq_dir: Path, nq_dir: Path, out: Path, models: tuple[Model, ...]) -> None:
    for m in models:
        start = time.monotonic()
        data = {"tq": str(tq_dir / m.triviaqa), "nq": str(nq_dir / m.nq_open)}
        test = {"nq2tq": data["tq"], "tq2nq": data["nq"]}
        for q in QUANTILES:
            for tag, fit_on in FIT_ON.items():
                cert = str(out / f"{m.key}_{fit_on}_eb{q}.json")
                liftguard("fit", "--context", str(ROOT / m.context), "--fit-fraction", "1",
                           "--early-block", q, "--traces", data[fit_on], "--out", cert)  # fmt: skip
                for r in m.risks[tag]:
                    liftguard("eval", "--traces", test[tag], "--certificate", cert, "--risk", r,
                               *EVAL, out=out / f"{m.key}_{tag}_eb{q}_r{r}.json")  # fmt: skip
        print(f"{m.key}: {time.monotonic() - start:.0f}s", file=sys.stderr)
    past_margins(tq_dir, nq_dir, out, models)


def _past(cert_path: Path, traces_path: str) -> float:
    """Share of the correct answers in ``traces_path`` whose score, replayed through the
    certificate's statistic without margins, rose by more than the certificate's margin
    after some position: those its margins could block before the end."""
    from dataclasses import replace

    from guardrail import Certificate
    from guardrail.fitting import replay_fitted
    from guardrail.traces import read_traces

    cert = Certificate.load(cert_path)
    stat = cert.statistic
    assert stat is not None and stat.block_margins, cert_path
    plain, margins = replace(stat, block_margins=()), stat.block_margins
    skel = cert.replay_skeleton()
    right = [t for t in read_traces(traces_path) if t.correct and t.n_tokens]
    past = 0
    for t in right:
        s = replay_fitted(plain, t, skeleton=skel, max_tokens=cert.context.max_tokens).scores
        past += any(s[-1] - s[i] > margins[i] for i in range(min(len(margins), s.size)))
    return past / len(right)


def past_margins(tq_dir: Path, nq_dir: Path, out: Path, models: tuple[Model, ...]) -> None:
    """For each model and direction, and each quantile with margins (the default
    certificate's and :data:`QUANTILES`'), the share of the fitting dataset's and of the
    other dataset's correct answers that rose past the margins at some position
    (``*_past_margins.json``)."""
    for m in models:
        data = {"tq": str(tq_dir / m.triviaqa), "nq": str(nq_dir / m.nq_open)}
        shares: dict[str, dict[str, list[float]]] = {}
        for tag, fit_on in FIT_ON.items():
            other = "nq" if fit_on == "tq" else "tq"
            certs = {f"{DEFAULT_EARLY_BLOCK:g}": out / f"{m.key}_{fit_on}.json"}
            certs |= {q: out / f"{m.key}_{fit_on}_eb{q}.json" for q in QUANTILES if q != "none"}
            shares[tag] = {q: [_past(c, data[fit_on]), _past(c, data[other])]
                           for q, c in certs.items()}  # fmt: skip
        (out / f"{m.key}_past_margins.json").write_text(json.dumps(shares, indent=1) + "\n")


def render(results: Path, models: tuple[Model, ...] = MODELS) -> str:
    """The whole of ``docs/results/transfer_early_block.md``."""
    head = " | ".join(LABELS[q] for q in QUANTILES)
    lines = [f"<!-- generated by `{COMMAND}` from studies/transfer/results; do not edit -->",
             "",
             f"| model, fit -> test | risk | certificate (early block {DEFAULT_EARLY_BLOCK:g}) | "
             f"{head} | "
             "best baseline |",
             "|---|---|---|" + "---|" * len(QUANTILES) + "---|"]  # fmt: skip
    for row in settings(results, models):
        best = row.best_coverage
        gated = [load(results, row.model, f"{row.tag}_eb{q}", row.risk)["methods"]["certificate"]
                 for q in QUANTILES]  # fmt: skip
        cells = " | ".join(cell(g, best) for g in gated)
        lines.append(f"| {row.label} | {cell(row.methods['certificate'], best)} | {cells} | "
                     f"{100 * best:.1f}% ({method_name(row.best)}) |")  # fmt: skip
    lines += ["", "Each cell: coverage (bold: at least the best baseline's), refused splits of "
              "50, and the share of a blocked answer read before the block (mean / median). "
              "Risks where no method certifies anything are left out."]  # fmt: skip
    quantiles = [f"{DEFAULT_EARLY_BLOCK:g}", *(q for q in QUANTILES if q != "none")]
    lines += ["", "Correct answers whose score rose past the margins at some position (so "
              "the margins could block them before the end), of the fitting dataset / of the "
              "other dataset:", "",
              "| model, fit -> test | " + " | ".join(f"early block {q}" for q in quantiles)
              + " |", "|---|" + "---|" * len(quantiles)]  # fmt: skip
    for model in models:
        shares = json.loads(read_result(results, f"{model.key}_past_margins.json"))
        for tag, direction in DIRECTIONS.items():
            cells = " | ".join(f"{shares[tag][q][0]:.0%} / {shares[tag][q][1]:.0%}"
                               for q in quantiles)  # fmt: skip
            lines.append(f"| {model.name}, {direction} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return page_main(argv, __doc__ or "", run, render, OUT, HERE / "results")


if __name__ == "__main__":
    raise SystemExit(main())
