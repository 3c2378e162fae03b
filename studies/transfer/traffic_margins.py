"""Early-block margins from the guarded traffic: a certificate fitted on one dataset, its
margins set from unlabelled answers of the other (as ``liftguard calibrate --certificate
... --margins-from`` sets them), evaluated on the rest of the other.

    python -m studies.transfer.traffic_margins SHARED_TRACES_DIR NQ_TRACES_DIR
        [--results DIR] [--models KEY,...] [--render-only]

**The quantile, chosen within TriviaQA.** Margins from every answer (no label) are a rule
of their own, so their quantile is chosen as ``margin_quantile.py`` chose the one for the
fitting answers, by the rule written down there (:func:`margin_quantile.chosen`): for
each model, the certificate fitted on TriviaQA half A without margins
(``margin_quantile.py``'s ``*_tq_half_ebnone.json``) gets margins from every answer of
half A at each quantile of :data:`QUANTILES` (``*_tq_half_all{Q}.json``) and is evaluated
on half B (``*_in_tq_all{Q}_r{risk}.json``). ``calibrate --margins-from``'s default,
:data:`TRAFFIC_EARLY_BLOCK`, is the quantile the rule picks.

**Held out.** For each model and direction (fit -> test), the test dataset is split in
halves (seed 0, as everywhere). Each half in turn is the traffic: the certificate fitted
on the whole fitting dataset without margins (``early_block.py``'s ``*_{tq,nq}_ebnone.json``)
gets margins from every answer of that half at ``TRAFFIC_EARLY_BLOCK``
(``*_{tag}_traffic{H}.json``) and is evaluated on the other half
(``*_{tag}_on{E}_traffic_r{risk}.json``), beside the default certificate (margins from the
fitting dataset's correct answers, ``run.py``'s ``*_{tq,nq}.json``) and every baseline on
the same half (``*_{tag}_on{E}_default_r{risk}.json``), exactly as ``run.py`` evaluates,
with 95% paired bootstrap intervals at the ``intervals`` risks of ``models.py``.
Then writes ``docs/results/traffic_margins.md``. ``--render-only`` rewrites the page from
the saved results.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from guardrail.fitting import FitOptions
from studies.tables import halves
from studies.transfer.margin_quantile import TAG, TIE, certificate_rows, chosen, mean_coverage
from studies.transfer.models import (
    DIRECTIONS,
    MODELS,
    Model,
    best_baseline,
    cell,
    load,
    method_name,
    page_main,
)
from studies.transfer.run import EVAL, liftguard

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

DEFAULT_EARLY_BLOCK = FitOptions().early_block
TRAFFIC_EARLY_BLOCK = 0.95
"""``liftguard calibrate --certificate ... --margins-from``'s default quantile, the one the
rule picks here (``tests/studies/test_transfer_table.py`` checks that the command's default is
this value and that the saved results pick it)."""

QUANTILES = ("0.99", "0.95", "0.9", "0.8")
"""The quantiles of margins from every answer compared within TriviaQA."""
BOOTSTRAP = "200"
"""Resamples of the paired intervals (the traffic certificate's evaluations at each model's
``intervals`` risks), as ``run.py``'s."""
HALVES = {"A": "B", "B": "A"}
"""The traffic half -> the half evaluated."""
FIT_ON = {"nq2tq": "nq", "tq2nq": "tq"}
OUT = ROOT / "docs" / "results" / "traffic_margins.md"
COMMAND = "python -m studies.transfer.traffic_margins"


def with_traffic_margins(plain: Path, traffic: Path, quantile: float, out: Path) -> None:
    """``plain`` (a fitted certificate without margins) with margins from every answer of
    ``traffic`` at ``quantile``, written to ``out``: what ``liftguard calibrate
    --certificate ... --margins-from`` sets before it calibrates tau (``eval`` recalibrates
    tau on each split, so none is set here)."""
    from guardrail import Certificate
    from guardrail.fitting import block_margins
    from guardrail.traces import read_traces

    cert = Certificate.load(plain)
    stat = cert.statistic
    assert stat is not None and not stat.block_margins, plain
    skel = cert.replay_skeleton()
    answers = read_traces(traffic, require_label=False)
    margins = block_margins(stat, answers, quantile, skeleton=skel,
                            max_tokens=cert.context.max_tokens, answers="all")  # fmt: skip
    record = {"quantile": quantile, "positions": len(margins), "answers": "all",
              "traces": traffic.name}  # fmt: skip
    stat = replace(stat, block_margins=margins, info={**stat.info, "early_block": record})
    replace(cert, statistic=stat).save(out)


def run(tq_dir: Path, nq_dir: Path, out: Path, models: tuple[Model, ...]) -> None:
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for m in models:
            start = time.monotonic()
            data = {"tq": tq_dir / m.triviaqa, "nq": nq_dir / m.nq_open}
            # the quantile, within TriviaQA
            a, b = halves(data["tq"], tmp)
            for q in QUANTILES:
                cert = out / f"{m.key}_tq_half_all{q}.json"
                with_traffic_margins(out / f"{m.key}_tq_half_ebnone.json", a, float(q), cert)
                for r in m.risks[TAG]:
                    result = out / f"{m.key}_in_tq_all{q}_r{r}.json"
                    liftguard("eval", "--traces", str(b), "--certificate", str(cert),
                               "--risk", r, *EVAL, out=result)  # fmt: skip
            # held out: fit on one dataset, margins from one half of the other
            for tag, fit_on in FIT_ON.items():
                test = data["nq" if fit_on == "tq" else "tq"]
                parts = dict(zip(HALVES, halves(test, tmp), strict=True))
                for traffic, evaluated in HALVES.items():
                    cert = out / f"{m.key}_{tag}_traffic{traffic}.json"
                    with_traffic_margins(out / f"{m.key}_{fit_on}_ebnone.json", parts[traffic],
                                         TRAFFIC_EARLY_BLOCK, cert)  # fmt: skip
                    default = str(out / f"{m.key}_{fit_on}.json")
                    for r in m.risks[tag]:
                        on = f"{m.key}_{tag}_on{evaluated}"
                        boot = ("--bootstrap", BOOTSTRAP) if r in m.intervals[tag] else ()
                        for kind, c, more in (
                            ("traffic", str(cert), boot),
                            ("default", default, ()),
                        ):
                            liftguard("eval", "--traces", str(parts[evaluated]),
                                       "--certificate", c, "--risk", r, *EVAL, *more,
                                       out=out / f"{on}_{kind}_r{r}.json")  # fmt: skip
            print(f"{m.key}: {time.monotonic() - start:.0f}s", file=sys.stderr)


def _choice(results: Path, models: tuple[Model, ...]) -> list[str]:
    """The page's first table: margins from every answer within TriviaQA, per quantile."""
    rows = certificate_rows(results, models, "in_tq_all", QUANTILES)
    ref_rows = certificate_rows(results, models, "in_tq_eb", (f"{DEFAULT_EARLY_BLOCK:g}",))
    fitting = {(m.key, r): row for m, r, row in ref_rows}
    head = " | ".join(f"every answer, {q}" for q in QUANTILES)
    lines = [f"| model (TriviaQA, half A -> half B) | risk | correct fitting answers, "
             f"{DEFAULT_EARLY_BLOCK:g} | {head} |",
             "|---|---|---|" + "---|" * len(QUANTILES)]  # fmt: skip
    for m, risk, row in rows:
        ref = fitting[(m.key, risk)][f"{DEFAULT_EARLY_BLOCK:g}"]
        best = max(r["coverage_mean"] for r in [*row.values(), ref])
        cells = " | ".join(cell(row[q], best) for q in QUANTILES)
        lines.append(f"| {m.name} | {risk} | {cell(ref, best)} | {cells} |")
    means = [*mean_coverage(ref_rows).values(), *mean_coverage(rows).values()]
    lines.append("| mean | | " + " | ".join(f"{cov:.2f}%, {read:.0%} read"
                                             for cov, read in means) + " |")  # fmt: skip
    pick = chosen(results, models, "in_tq_all", QUANTILES)
    lines += ["", "Each cell: coverage (bold: the row's best), refused splits of 50, and the "
              "share of a blocked answer read before the block (mean / median); the mean row: "
              "mean coverage and mean read. The rule of `margin_quantile.py` (the largest mean "
              f"coverage, quantiles within {TIE:g} points of it level, of those the one that "
              f"reads least) picks **{pick}** among the margins from every answer."]  # fmt: skip
    return lines


def _held_out(results: Path, models: tuple[Model, ...]) -> tuple[list[str], dict[str, Any]]:
    """The page's second table, and what its note counts."""
    lines = ["| model, fit -> test | risk | evaluated half | default certificate | margins "
             "from the other half | best baseline | margins from the other half minus the best "
             "baseline |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    counts = {"rows": 0, "default": 0, "traffic": 0}
    reads: dict[str, list[float]] = {"default": [], "traffic": []}
    for m in models:
        for tag in DIRECTIONS:
            for risk in m.risks[tag]:
                for evaluated in HALVES.values():
                    on = f"on{evaluated}"
                    base = load(results, m, f"{tag}_{on}_default", risk)["methods"]
                    mine = load(results, m, f"{tag}_{on}_traffic", risk)["methods"]
                    cert = {"default": base["certificate"], "traffic": mine["certificate"]}
                    if all(x["coverage_mean"] == 0 for x in [*base.values(), cert["traffic"]]):
                        continue
                    top = best_baseline(base)
                    best = base[top]["coverage_mean"]
                    counts["rows"] += 1
                    for kind, c in cert.items():
                        counts[kind] += c["coverage_mean"] >= best
                        if m.key == "smollm2" and tag == "tq2nq" and risk == "0.95":
                            reads[kind].append(c.get("blocked_read_mean") or 1.0)
                    boot = mine[top].get("bootstrap", {}).get("certificate_minus", {})
                    diff = boot.get("coverage_mean")
                    interval = f"[{100 * diff[0]:+.1f}, {100 * diff[1]:+.1f}]" if diff else "-"
                    cells = f"{cell(cert['default'], best)} | {cell(cert['traffic'], best)}"
                    lines.append(f"| {m.name}, {DIRECTIONS[tag]} | {risk} | {evaluated} | "
                                 f"{cells} | {100 * best:.1f}% ({method_name(top)}) | "
                                 f"{interval} |")  # fmt: skip
    return lines, {**counts, "reads": reads}


def render(results: Path, models: tuple[Model, ...] = MODELS) -> str:
    """The whole of ``docs/results/traffic_margins.md``."""
    held, counts = _held_out(results, models)
    lines = [f"<!-- generated by `{COMMAND}` from studies/transfer/results; do not edit -->",
             "", "The quantile, chosen within TriviaQA:", "", *_choice(results, models), "",
             f"Held out, margins from every answer of one half of the test dataset at "
             f"{TRAFFIC_EARLY_BLOCK:g}, evaluated on the other half:", "", *held, ""]  # fmt: skip
    note = (
        f"Each cell as above (bold: at least the best baseline's); the last column: 95% "
        f"paired bootstrap interval of the difference in coverage, in points ({BOOTSTRAP} "
        f"resamples of the evaluated answers; at the risks the transfer tables give intervals "
        f"at). At or above the best "
        f"baseline: the default certificate in {counts['default']} of {counts['rows']} "
        f"rows, margins from the traffic in {counts['traffic']}."
    )
    read = counts["reads"]
    if read["default"]:
        mean = {k: sum(v) / len(v) for k, v in read.items()}
        note += (
            f" SmolLM2's NQ-Open chat answers (fit on TriviaQA, risk 0.95), mean share of "
            f"a blocked answer read over both halves: {mean['default']:.0%} with the "
            f"default certificate, {mean['traffic']:.0%} with margins from the traffic."
        )
    lines.append(note)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return page_main(argv, __doc__ or "", run, render, OUT, HERE / "results")


if __name__ == "__main__":
    raise SystemExit(main())
