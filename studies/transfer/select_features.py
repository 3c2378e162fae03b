"""Choose a feature set for ``liftguard fit --features`` by backward elimination,
cross-validated on the given labelled traces only.

    python -m studies.transfer.select_features TRACES.jsonl [TRACES.jsonl ...]
    python -m studies.transfer.select_features --cv NAME,... TRACES.jsonl [...]

Each file is one model's traces of the *selection* dataset. Starting from the 23
candidates of the ``lift`` group (below), each round drops the feature whose removal
gives the best criterion, while that does not lower it by more than 1e-4. The
criterion is the mean over the files of the out-of-fold AUROC of the logistic fit
(``liftguard fit``'s default L2), averaged over 4 repeats of stratified 5-fold
cross-validation (seed 0). Clamp ranges are each file's 1% / 99% token quantiles.
Prints the chosen names, comma-separated, on the last line of stdout (ready for
``--features``); a progress line on stderr when it is a terminal.

The transfer study uses it to fit NQ-Open -> TriviaQA certificates with features
chosen on NQ-Open alone, so that no choice there has seen TriviaQA (the shipped
presets were chosen on TriviaQA).

``--cv NAME,...`` selects nothing: it prints, per file, the same cross-validated
AUROC of the named features (e.g. a group's preset) fitted on that file itself. On a
test set this is an in-domain reference, not a result: what a statistic over these
features reaches when it is fitted on the test distribution, which a statistic fitted
on another dataset is not expected to beat.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from guardrail import ConfigError
from guardrail.evaluate import auroc
from guardrail.fitting import Feature, FitOptions, answer_features, fit_statistic, token_ranges
from guardrail.traces import read_traces

_HALF, _NINE = repr(math.log(0.5)), repr(math.log(0.9))
CANDIDATES = (
    "logprob.mean", "logprob.sum", "logprob.min", "logprob.max", "logprob.first",
    "logprob.lowest2", f"logprob.count_below@{_HALF}", f"logprob.count_below@{_NINE}",
    "margin.mean", "margin.min", "margin.first",
    "entropy.mean", "entropy.sum", "entropy.max", "entropy.first",
    "lift.mean", "lift.sum", "lift.min", "lift.max", "lift.first", "lift.lowest2",
    "length.count", "length.log",
)  # fmt: skip
FOLDS, REPEATS, SEED, TOLERANCE = 5, 4, 0, 1e-4

Matrix = npt.NDArray[np.float64]


class _Data:
    """One file's candidate features, labels and fold assignments."""

    def __init__(self, path: str, names: Sequence[str] = CANDIDATES) -> None:
        traces = [t for t in read_traces(path) if t.n_tokens]
        self.names = tuple(names)
        feats = [Feature.parse(n) for n in self.names]
        bases = sorted({f.base for f in feats if f.base != "length"})
        self.ranges = token_ranges(traces, bases, skeleton="prompt-free")
        self.x: Matrix = answer_features(traces, feats, ranges=self.ranges, skeleton="prompt-free")
        self.y = np.array([bool(t.correct) for t in traces])
        self.vocab = traces[0].vocab_size
        rng = np.random.default_rng(SEED)
        self.folds: list[npt.NDArray[np.int64]] = []
        for _ in range(REPEATS):
            f = np.empty(self.y.size, dtype=int)
            for cls in (False, True):
                idx = np.flatnonzero(self.y == cls)
                rng.shuffle(idx)
                f[idx] = np.arange(idx.size) % FOLDS
            self.folds.append(f)

    def cv_aurocs(self, cols: Sequence[int]) -> list[float]:
        """Out-of-fold AUROC of the features ``cols``, one per repeat."""
        feats = [Feature.parse(self.names[c]) for c in cols]
        ranges = {b: r for b, r in self.ranges.items() if any(f.base == b for f in feats)}
        x = self.x[:, list(cols)]
        out = []
        for f in self.folds:
            pred = np.empty(self.y.size)
            for k in range(FOLDS):
                test = f == k
                stat = fit_statistic(x[~test], self.y[~test], feats, vocab_size=self.vocab,
                                     l2=FitOptions().l2, ranges=ranges)  # fmt: skip
                pred[test] = stat.score(x[test])
            out.append(auroc(pred, self.y))
        return out

    def cv_auroc(self, cols: Sequence[int]) -> float:
        return float(np.mean(self.cv_aurocs(cols)))


def _criterion(data: list[_Data], cols: Sequence[int]) -> float:
    return float(np.mean([d.cv_auroc(cols) for d in data]))


def select(paths: Sequence[str]) -> tuple[list[str], float]:
    """The chosen feature names and their criterion."""
    data = [_Data(p) for p in paths]
    show = sys.stderr.isatty()
    cols = list(range(len(CANDIDATES)))
    best = _criterion(data, cols)
    while len(cols) > 1:
        trials = []
        for i, c in enumerate(cols):
            if show:
                print(f"\rselect: {len(cols)} features, trying {i + 1}/{len(cols)}  ",
                      end="", file=sys.stderr, flush=True)  # fmt: skip
            trials.append((_criterion(data, [d for d in cols if d != c]), c))
        score, drop = max(trials)
        if score < best - TOLERANCE:
            break
        best = max(best, score)
        cols.remove(drop)
    if show:
        print("\r" + " " * 40 + "\r", end="", file=sys.stderr, flush=True)
    return [CANDIDATES[c] for c in cols], best


def cross_validate(names: Sequence[str], path: str) -> tuple[float, float]:
    """Mean and standard deviation over the repeats of the out-of-fold AUROC of
    ``names`` fitted on ``path`` itself."""
    data = _Data(path, names)
    scores = data.cv_aurocs(range(len(data.names)))
    return float(np.mean(scores)), float(np.std(scores))


_USAGE = "usage: python -m studies.transfer.select_features [--cv NAME,...] TRACES.jsonl [...]"


def main(argv: Sequence[str]) -> int:
    if argv and argv[0] == "--cv":
        names = [n for n in argv[1].split(",") if n] if len(argv) > 1 else []
        if not names or len(argv) < 3:
            print(_USAGE, file=sys.stderr)
            return 2
        try:
            for n in names:
                Feature.parse(n)
        except ConfigError as exc:
            print(f"select_features.py: {exc}", file=sys.stderr)
            return 2
        for path in argv[2:]:
            mean, sd = cross_validate(names, path)
            print(f"{path}: cross-validated AUROC {mean:.4f} (sd {sd:.4f} over {REPEATS} "
                  f"repeats of {FOLDS}-fold), {len(names)} features")  # fmt: skip
        return 0
    if not argv or argv[0].startswith("-"):
        print(_USAGE, file=sys.stderr)
        return 2
    names, score = select(argv)
    print(f"cross-validated AUROC {score:.4f} (mean over {len(argv)} files), "
          f"{len(names)} of {len(CANDIDATES)} candidates")  # fmt: skip
    print(",".join(names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
