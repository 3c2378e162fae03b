"""What ``liftguard fit --scopes auto`` (the default) adds: the preset against the preset
plus the log-likelihood of each scope the fitting answers use, cross-validated on the
fitting halves only.

    python -m studies.scope_sums [--traces-dir SHARED_TRACES_DIR]
    python -m studies.scope_sums --docs-only

Writes ``benchmarks/results/scope_sums.json`` and ``docs/results/scope_sums.md``.

Each trace file (Qwen2.5-Coder's MBPP and GSM8K answers, committed under
``benchmarks/traces/``; the shared TriviaQA answers of three models) is split in halves
by the seeded permutation every held-out benchmark here uses (seed 0), and only half A
is read: the test halves stay unread by whatever this page is used to choose. On half
A, the statistic ``fit`` makes by default (group ``lift``, the prompt-free skeleton,
L2 10, early-block margins at the 0.99 quantile widened to the default share) is scored by
:func:`guardrail.fitting.cv_coverage`, replayed as the monitor streams it: out-of-fold
scores from 5 folds, then 50 random halves of them, one calibrating at the risk (delta
0.05, as ``eval``), the other measuring coverage; the whole done twice over. The
scopes added are those :func:`guardrail.fitting.fit_certificate` adds fitting on half A,
as ``fit`` would; a file where it adds none gets the preset only, and no run.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from guardrail.fitting import FitOptions
from studies.tables import (
    DEFAULT_TRACES,
    Progress,
    halves,
    header,
    load,
    pct,
    plain_traces,
    save,
    write_page,
)

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_EARLY_BLOCK = FitOptions().early_block
DEFAULT_EARLY_BLOCK_SHARE = FitOptions().early_block_share

COMMAND = "python -m studies.scope_sums"
SAVED = ROOT / "benchmarks" / "results" / "scope_sums.json"
PAGE = ROOT / "docs" / "results" / "scope_sums.md"
LONG = {"gsm8k": ("GSM8K (maths)", "benchmarks/traces/gsm8k_qwen25coder"),
        "mbpp": ("MBPP (code)", "benchmarks/traces/mbpp_qwen25coder.jsonl.xz")}  # fmt: skip
SHORT = {"smollm2": "TriviaQA, SmolLM2", "gemma3": "TriviaQA, Gemma 3",
         "qwen25coder": "TriviaQA, Qwen"}  # fmt: skip
RISKS = {"gsm8k": (0.2, 0.3, 0.4), "mbpp": (0.2, 0.3, 0.4), "smollm2": (0.8, 0.9),
         "gemma3": (0.7, 0.8), "qwen25coder": (0.5, 0.7)}  # fmt: skip
"""Per file, the risks: the long answers' targets and the next one up; for TriviaQA, those
of the held-out short-answer pages (``select_coverage``)."""
FOLDS, SPLITS, REPEATS, SEED, DELTA = 5, 50, 2, 0, 0.05


def default_inputs(
    traces: list[Any],
) -> tuple[tuple[Any, ...], list[str], tuple[Any, ...], Any, Any]:
    """What ``fit``'s defaults read on ``traces``: the ``lift`` preset, the scopes
    ``--scopes auto`` adds, the features with them, the per-token ranges (the 0.01
    quantiles) and the answers' features ``x`` (a column per feature with the scopes)."""
    from guardrail.fitting import (
        Feature,
        answer_features,
        fit_certificate,
        preset_features,
        token_ranges,
    )

    preset = preset_features("lift")
    _, report = fit_certificate(traces, FitOptions(fit_fraction=1.0, early_block=None))
    scopes = list(report.scopes)
    added = (*preset, *(Feature.parse(f"{s}:logprob.sum") for s in scopes))
    kw: dict[str, Any] = {"skeleton": "prompt-free", "alternatives": 5}
    bases = sorted({f.base for f in preset if f.base != "length"})
    ranges = token_ranges(traces, bases, quantile=0.01, **kw)
    return preset, scopes, added, ranges, answer_features(traces, added, ranges=ranges, **kw)


def _measure(path: Path, risks: tuple[float, ...], progress: Progress) -> dict[str, Any]:
    """Half A of ``path``: its size, the scopes ``fit`` adds, and per risk each statistic's
    cross-validated coverage, refusals and out-of-fold AUROC."""
    from guardrail import StreamPolicy
    from guardrail.fitting import Candidate, Deployment, FitOptions, cv_coverage
    from guardrail.traces import read_traces

    traces = list(read_traces(path))
    preset, scopes, added, ranges, x = default_inputs(traces)
    correct = [bool(t.correct) for t in traces]
    deployment = Deployment(
        traces,
        StreamPolicy(),
        skeleton="prompt-free",
        max_tokens=max(t.n_tokens for t in traces),
        ranges=ranges,
        alternatives=5,
        early_block_share=DEFAULT_EARLY_BLOCK_SHARE,
    )
    out: dict[str, Any] = {"n": len(traces), "n_correct": sum(correct), "scopes": scopes,
                           "risks": {}}  # fmt: skip
    statistics = {"preset": preset, "with_scopes": added} if scopes else {"preset": preset}
    for risk in risks:
        row: dict[str, Any] = {}
        for name, feats in statistics.items():
            progress.show(f"{path.name}, risk {risk:g}: {name}")
            cand = Candidate(name, feats, FitOptions().l2, early_block=DEFAULT_EARLY_BLOCK)
            score = cv_coverage(x, correct, cand, added, vocab_size=traces[0].vocab_size,
                                risk=risk, delta=DELTA, folds=FOLDS, splits=SPLITS,
                                seed=SEED, deployment=deployment, repeats=REPEATS)  # fmt: skip
            row[name] = {"coverage": score.coverage, "refused": score.refused,
                         "auroc": score.auroc}  # fmt: skip
        out["risks"][f"{risk:g}"] = row
        progress.advance()
    return out


def run(traces_dir: Path) -> dict[str, Any]:
    files = {k: ROOT / rel for k, (_, rel) in LONG.items()}
    files |= {k: traces_dir / f"triviaqa_{k}.jsonl" for k in SHORT}
    missing = [str(p) for p in files.values() if not p.exists()]
    if missing:
        raise SystemExit(f"no such traces: {', '.join(missing)}")
    saved: dict[str, Any] = {"generated_by": COMMAND, "folds": FOLDS, "splits": SPLITS,
                             "repeats": REPEATS, "delta": DELTA, "files": {}}  # fmt: skip
    progress = Progress(sum(len(RISKS[k]) for k in files))
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for key, path in files.items():
            half_a, _ = halves(plain_traces(path, tmp), tmp)
            saved["files"][key] = _measure(half_a, RISKS[key], progress)
    progress.close()
    return saved


def render(saved: dict[str, Any]) -> str:
    names = {k: label for k, (label, _) in LONG.items()} | SHORT
    lines = [
        header(COMMAND, "from the fitting halves (half A) only"),
        "",
        "| fitting half | answers (correct) | scopes added | risk | preset | preset + scopes "
        "| AUROC (preset / + scopes) |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for key in (k for k in names if k in saved["files"]):  # long answers first
        entry = saved["files"][key]
        scopes = ", ".join(entry["scopes"]) or "none"
        for risk, row in entry["risks"].items():
            pre, add = row["preset"], row.get("with_scopes")
            cell = "same" if add is None else f"{pct(add['coverage'])} ({add['refused']})"
            roc = f"{pre['auroc']:.3f}" + ("" if add is None else f" / {add['auroc']:.3f}")
            lines.append(
                f"| {names[key]} | {entry['n']} ({entry['n_correct']}) | {scopes} | {risk} | "
                f"{pct(pre['coverage'])} ({pre['refused']}) | {cell} | {roc} |"
            )
    runs = saved["repeats"] * saved["splits"]
    lines += [
        "",
        f"Coverage: mean over {saved['repeats']} cross-validations ({saved['folds']} folds) of "
        f"{saved['splits']} calibration splits each, at delta {saved['delta']:g}, a refused "
        f"split counting 0; in brackets, the splits (of {runs}) that certified nothing. "
        "*Scopes added*: those at least 10% of the half's answers have a token in, each "
        "read as its log-likelihood (`scope:logprob.sum`); *same*: none added, so the "
        "default is the preset.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--traces-dir", type=Path, default=ROOT / DEFAULT_TRACES,
                        help=f"the shared TriviaQA traces (default {DEFAULT_TRACES})")  # fmt: skip
    parser.add_argument(
        "--docs-only", action="store_true", help="rewrite the page from the saved results"
    )
    args = parser.parse_args()
    if not args.docs_only:
        save(SAVED, run(args.traces_dir))
    write_page(PAGE, render(load(SAVED)))


if __name__ == "__main__":
    main()
