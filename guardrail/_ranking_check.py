"""Whether a fitted statistic ranks a user's labelled answers at least as well as the single
scores do: the check ``liftguard calibrate --certificate`` runs on the labels it calibrates
with, before a user relies on a statistic fitted on other answers.

A fitted statistic is a logistic weighting learned on the answers it was fitted on. Under a
shift (other tasks, other prompts, answers of other lengths) its ranking can fall below a
single score's, where the single score would have been the better certificate (``python -m
studies.shift``: fitted on short TriviaQA answers and unclamped, it ranked long answers at
chance). Calibration keeps its guarantee whatever the ranking (tau is tested on these
labels), but a weaker ranking buys less coverage at the same risk, so the user should
hear of it. The check is information only: the statistic was chosen before these labels
were read, and nothing here changes tau or which statistic is calibrated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ._errors import ConfigError
from ._evaluate import auroc
from ._scores import BASELINES, baseline_score
from ._trace_format import Trace

__all__ = ["RankingCheck", "ranking_check"]


@dataclass(frozen=True)
class RankingCheck:
    """The fitted statistic's AUROC on labelled answers beside the best single score's.

    ``best_single`` is the single score (:data:`guardrail.traces.BASELINES`, those the
    answers carry what they need for) with the highest AUROC on these same answers,
    ``difference`` the paired percentile bootstrap 95% interval of the statistic's AUROC
    minus that score's (the score chosen anew in each resample, so the interval carries
    the choice), ``answers`` how many answers were ranked.

    Examples
    --------
        >>> check = RankingCheck(0.66, "mean_logprob", 0.74, (-0.19, -0.02), 164)
        >>> check.weaker  # the whole interval lies below 0
        True
        >>> RankingCheck(0.72, "nll", 0.73, (-0.06, 0.03), 250).weaker
        False
    """

    statistic_auroc: float
    best_single: str
    single_auroc: float
    difference: tuple[float, float]
    answers: int

    @property
    def weaker(self) -> bool:
        """The statistic ranks these answers worse than the best single score beyond what
        resampling them explains: the whole 95% interval of the difference lies below 0.

        A point difference would not do: the best of ten single scores, chosen on a few
        hundred answers, beats a fixed statistic by chance; ``python -m studies.shift``
        counts how often each rule warns on half of a shifted target, and how often the
        named score ranks the whole target better."""
        return self.difference[1] < 0.0

    def line(self) -> str:
        """The comparison in one line (without advice)."""
        lo, hi = self.difference
        return (
            f"AUROC {self.statistic_auroc:.3f} against {self.single_auroc:.3f} for "
            f"{self.best_single}, the best single score on these labels (difference "
            f"{self.statistic_auroc - self.single_auroc:+.3f}, 95% {lo:+.2f} to {hi:+.2f})"
        )

    def warning(self) -> str:
        """One line for a user whose statistic ranks these answers worse than a single
        score: what was measured and what to do."""
        return (
            f"the certificate's statistic ranks these answers worse than a single score: "
            f"{self.line()}; it was fitted on other answers and may not carry over to these. "
            f"Fit on answers like these, or calibrate the single score ('liftguard "
            f"calibrate --score {self.best_single}'); the guarantee holds either way, the "
            "coverage it buys does not"
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "difference": list(self.difference), "weaker": self.weaker}


def _single_scores(traces: Sequence[Trace]) -> dict[str, npt.NDArray[np.float64]]:
    """Every single score the traces carry what it needs for (exact entropies where
    recorded, else the top-k estimate; a score some trace cannot give is left out)."""
    out = {}
    for name in BASELINES:
        for exact in (True, False):
            try:
                out[name] = np.array([baseline_score(t, name, exact=exact) for t in traces])
                break
            except ConfigError:
                continue
    return out


def ranking_check(
    final: npt.ArrayLike,
    traces: Sequence[Trace],
    *,
    replicates: int = 1000,
    seed: int = 0,
) -> RankingCheck | None:
    """The :class:`RankingCheck` of a statistic whose final scores on the labelled
    ``traces`` are ``final`` (aligned); ``None`` where the labels hold one class only or
    no single score can be computed. Deterministic given ``seed``.

    Examples
    --------
        >>> from guardrail.traces import parse_trace
        >>> def answer(i, logprob, correct):
        ...     tokens = [{"id": 1, "text": "x", "logprob": logprob, "top": [[1, logprob]]}]
        ...     return parse_trace({"id": f"q{i}", "dataset": "demo", "model": "m",
        ...         "question": "?", "references": ["x"], "prompt": "?", "answer": "x",
        ...         "correct": correct, "top_k": 1, "tokens": tokens * 3})
        >>> traces = [answer(i, -0.1 * (i + 1), i < 5) for i in range(10)]
        >>> check = ranking_check([float(i % 2) for i in range(10)], traces, replicates=50)
        >>> check.best_single, round(check.single_auroc, 2), check.weaker
        ('min_logprob', 1.0, True)
    """
    scores = np.asarray(final, dtype=np.float64)
    ok = np.array([bool(t.correct) for t in traces])
    if scores.shape != ok.shape:
        raise ConfigError(f"{scores.size} final scores for {ok.size} answers")
    if isinstance(replicates, bool) or not isinstance(replicates, int) or replicates < 2:
        raise ConfigError(f"replicates must be an integer >= 2, got {replicates!r}")
    singles = _single_scores(traces)
    if not singles or ok.all() or not ok.any():
        return None
    names = list(singles)
    aucs = {name: auroc(s, ok) for name, s in singles.items()}
    best = max(names, key=lambda n: aucs[n])
    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(replicates):
        idx = rng.integers(0, ok.size, size=ok.size)
        ok_b = ok[idx]
        if ok_b.all() or not ok_b.any():
            continue
        top = max(auroc(singles[n][idx], ok_b) for n in names)
        diffs.append(auroc(scores[idx], ok_b) - top)
    lo, hi = (float(v) for v in np.quantile(diffs, [0.025, 0.975])) if diffs else (np.nan,) * 2
    return RankingCheck(auroc(scores, ok), best, aucs[best], (lo, hi), int(ok.size))
