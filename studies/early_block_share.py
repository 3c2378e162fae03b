"""How far ``liftguard fit`` widens its early-block margins on long answers
(``--early-block-share``): coverage against the tokens a blocked answer is read for,
cross-validated on the fitting halves only.

    python -m studies.early_block_share
    python -m studies.early_block_share --docs-only

Writes ``benchmarks/results/early_block_share.json`` and
``docs/results/early_block_share.md``.

Half A of the committed MBPP and GSM8K traces (the halves of ``longform.py``, seed 0; half
B is never read). ``fit``'s default features on it (the ``lift`` preset and the
log-likelihood of each scope the answers use, as ``studies/scope_sums.py``) are fitted
on 4 of 5 folds; the early-block margins are the 0.99 quantile per position of how far a
correct answer of those folds still rose, widened to each share
(:func:`guardrail.fitting.margins_from_scores`; *per position*: not widened; *exact only*:
no margins); every answer of the fifth fold is replayed through the monitor's objects
with them. Over 50 random halves of the out-of-fold answers (the whole done twice over),
one half calibrates ``tau`` at the risk (delta 0.05), the other gives the coverage and,
for each answer not shown, the share of its tokens generated before the block
(:func:`guardrail.fitting.stop_at`), pooled over the blocked answers.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from guardrail.fitting import FitOptions
from studies.scope_sums import default_inputs
from studies.tables import Progress, halves, header, load, pct, plain_traces, save, write_page

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_EARLY_BLOCK = FitOptions().early_block
DEFAULT_EARLY_BLOCK_SHARE = FitOptions().early_block_share

COMMAND = "python -m studies.early_block_share"
SAVED = ROOT / "benchmarks" / "results" / "early_block_share.json"
PAGE = ROOT / "docs" / "results" / "early_block_share.md"
FILES = {"gsm8k": ("GSM8K (maths)", "benchmarks/traces/gsm8k_qwen25coder"),
         "mbpp": ("MBPP (code)", "benchmarks/traces/mbpp_qwen25coder.jsonl.xz")}  # fmt: skip
SHARES: tuple[str, ...] = ("0.9", "0.95", "0.99", "per position", "exact only")
RISKS = (0.2, 0.3, 0.4)
FOLDS, SPLITS, REPEATS, SEED, DELTA = 5, 50, 2, 0, 0.05


def _margins(right: list[Any], scheme: str) -> tuple[float, ...]:
    from guardrail.fitting import margins_from_scores

    if scheme == "exact only":
        return ()
    share = None if scheme == "per position" else float(scheme)
    return margins_from_scores(right, DEFAULT_EARLY_BLOCK, share=share)


def _measure(path: Path, progress: Progress) -> dict[str, Any]:
    from guardrail import InsufficientDataError, StreamPolicy
    from guardrail.evaluate import ltt_threshold
    from guardrail.fitting import (
        FitOptions,
        critical_score,
        fit_statistic,
        replay_fitted,
        stop_at,
        with_margins,
    )
    from guardrail.traces import read_traces

    traces = list(read_traces(path))
    _, _, feats, ranges, x = default_inputs(traces)
    y = np.array([bool(t.correct) for t in traces])
    limit, policy = max(t.n_tokens for t in traces), StreamPolicy()
    rng = np.random.default_rng(SEED)
    cov: dict[str, dict[float, list[float]]] = {s: {r: [] for r in RISKS} for s in SHARES}
    read: dict[str, dict[float, list[float]]] = {s: {r: [] for r in RISKS} for s in SHARES}
    for _ in range(REPEATS):
        fold = rng.permutation(y.size) % FOLDS
        paths: dict[str, list[Any]] = {s: [None] * y.size for s in SHARES}
        for k in range(FOLDS):
            progress.show(f"{path.name}: fold {k + 1} of {FOLDS}")
            train = np.flatnonzero(fold != k)
            stat = fit_statistic(x[train], y[train], feats, vocab_size=traces[0].vocab_size,
                                 l2=FitOptions().l2, ranges=ranges, alternatives=5)  # fmt: skip
            right = [replay_fitted(stat, traces[i], skeleton="prompt-free",
                                   max_tokens=limit).scores
                     for i in train if traces[i].correct and traces[i].n_tokens]  # fmt: skip
            margins = {s: _margins(right, s) for s in SHARES}
            for i in np.flatnonzero(fold == k):
                plain = replay_fitted(stat, traces[i], skeleton="prompt-free", max_tokens=limit)
                for s in SHARES:
                    paths[s][i] = with_margins(plain, margins[s]) if margins[s] else plain
        perms = [rng.permutation(y.size) for _ in range(SPLITS)]
        for s in SHARES:
            crit = np.array([critical_score(p, policy) if p.scores.size else -np.inf
                             for p in paths[s]])  # fmt: skip
            for risk in RISKS:
                for perm in perms:
                    cal, test = perm[: y.size // 2], perm[y.size // 2 :]
                    try:
                        tau = ltt_threshold(crit[cal], ~y[cal], risk, DELTA).tau
                    except InsufficientDataError:
                        cov[s][risk].append(0.0)
                        continue
                    shown = crit[test] >= tau
                    cov[s][risk].append(float(shown.mean()))
                    for i in test[~shown]:
                        path_i = paths[s][i]
                        size = path_i.scores.size
                        if size:
                            read[s][risk].append(min(stop_at(path_i, policy, tau), size) / size)
        progress.advance()
    return {
        "n": int(y.size),
        "n_correct": int(y.sum()),
        "schemes": {
            s: {f"{r:g}": {"coverage": float(np.mean(cov[s][r])),
                           "blocked_read": float(np.mean(read[s][r])) if read[s][r] else None}
                for r in RISKS}
            for s in SHARES
        },
    }  # fmt: skip


def run() -> dict[str, Any]:
    saved: dict[str, Any] = {"generated_by": COMMAND, "folds": FOLDS, "splits": SPLITS,
                             "repeats": REPEATS, "delta": DELTA, "files": {}}  # fmt: skip
    progress = Progress(len(FILES) * REPEATS)
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for key, (_, rel) in FILES.items():
            half_a, _ = halves(plain_traces(ROOT / rel, tmp), tmp)
            saved["files"][key] = _measure(half_a, progress)
    progress.close()
    return saved


def render(saved: dict[str, Any]) -> str:
    cells = " | ".join(f"risk {r:g}" for r in RISKS)
    lines = [
        header(COMMAND, "from the fitting halves (half A) only"),
        "",
        f"| fitting half | margins | {cells} |",
        "|---|---|" + "---:|" * len(RISKS),
    ]
    for key in (k for k in FILES if k in saved["files"]):
        entry = saved["files"][key]
        for scheme in (s for s in SHARES if s in entry["schemes"]):  # sorted when saved
            row = entry["schemes"][scheme]
            name = f"share {scheme}" if scheme[0].isdigit() else scheme
            if scheme == f"{DEFAULT_EARLY_BLOCK_SHARE:g}":
                name = f"**{name}** (default)"
            at = [row[f"{r:g}"] for r in RISKS]
            vals = " | ".join(f"{pct(c['coverage'])} / {pct(c['blocked_read'], 0)}" for c in at)
            lines.append(f"| {FILES[key][0]}, {entry['n']} ({entry['n_correct']} correct) | "
                         f"{name} | {vals} |")  # fmt: skip
    lines += [
        "",
        f"Each cell: coverage / mean share of a blocked answer's tokens generated before the "
        f"block; {saved['repeats']} cross-validations ({saved['folds']} folds) of "
        f"{saved['splits']} calibration splits each, at delta {saved['delta']:g}, a refused "
        "split counting 0 coverage.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--docs-only", action="store_true", help="rewrite the page from the saved results"
    )
    args = parser.parse_args()
    if not args.docs_only:
        save(SAVED, run())
    write_page(PAGE, render(load(SAVED)))


if __name__ == "__main__":
    main()
