"""The ``liftguard`` command line.

This is the application layer on top of the core: it reads files and prints.
Commands import what they need inside the command.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["main", "oracle_coverage"]

log = logging.getLogger(__name__)


def oracle_coverage(
    scores: npt.ArrayLike, correct: npt.ArrayLike, risk: float
) -> tuple[float, float]:
    """Largest coverage of a threshold rule whose risk on these examples is ``<= risk``.

    Returns ``(coverage, threshold)``; ``(0.0, inf)`` if no threshold qualifies.
    Thresholds are the distinct finite scores (ties answered together).
    """
    s = np.asarray(scores, dtype=np.float64)
    err = ~np.asarray(correct, dtype=bool)
    finite = np.isfinite(s)
    order = np.argsort(-s[finite], kind="stable")
    ss, ee = s[finite][order], err[finite][order]
    if ss.size == 0:
        return 0.0, float("inf")
    last = np.r_[ss[1:] != ss[:-1], True]
    n = (np.flatnonzero(last) + 1).astype(np.float64)
    k = np.cumsum(ee)[last]
    good = np.flatnonzero(k <= risk * n + 1e-12)
    if good.size == 0:
        return 0.0, float("inf")
    j = int(good[-1])
    return float(n[j] / s.size), float(ss[last][j])


def _split(
    n: int, fraction: float, seed: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    n_cal = round(n * fraction)
    return np.sort(perm[:n_cal]), np.sort(perm[n_cal:])


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from ._errors import GuardrailError
    from ._policy import StreamPolicy, critical_thresholds
    from ._scores import baseline_score, trace_clipped_lifts
    from ._traces import read_traces

    traces = read_traces(args.traces)
    if not traces:
        print(f"error: {args.traces} holds no traces", file=sys.stderr)
        return 2
    if args.score != "lift" and args.method == "paper":
        print("error: --method paper needs --score lift", file=sys.stderr)
        return 2
    correct = np.array([bool(t.correct) for t in traces])
    run = _Run(args, correct)
    if args.score == "lift":
        run.lifts = [trace_clipped_lifts(t, args.skeleton, args.clip) for t in traces]
        if args.boundary == "betting":
            run.policy = StreamPolicy(
                delta=args.stream_delta,
                clip=args.clip,
                min_tokens=args.min_tokens,
                aggregate=args.aggregate,
            )
            run.scores = critical_thresholds(run.policy, run.lifts)
        score_name = f"lift[{args.skeleton}, {args.aggregate}, {args.boundary}]"
    else:
        run.scores = np.array([baseline_score(t, args.score) for t in traces])
        score_name = args.score
    reports: list[tuple[Any, dict[str, Any]]] = []
    for r in range(args.repeats):
        try:
            reports.append(run.split(args.seed + r))
        except GuardrailError as exc:
            if args.repeats == 1:
                print(f"error: {exc}", file=sys.stderr)
                return 1
            log.info("split %d: %s", r, exc)
            reports.append((None, run.test_only(args.seed + r)))
    if args.repeats > 1:
        _print_repeats(args, score_name, reports)
        return 0
    result, test_report = reports[0]
    result = type(result).from_dict({**result.to_dict(), "extra": {"test": test_report}})
    _print_summary(args, score_name, result, test_report)
    if args.out:
        Path(args.out).write_text(result.to_json() + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


class _Run:
    """One calibrate invocation: the data, and one calibration/test split at a time."""

    def __init__(self, args: argparse.Namespace, correct: npt.NDArray[np.bool_]) -> None:
        self.args = args
        self.correct = correct
        self.lifts: list[npt.NDArray[np.float64]] | None = None
        self.scores: npt.NDArray[np.float64] | None = None
        self.policy: Any = None

    def split(self, seed: int) -> tuple[Any, dict[str, Any]]:
        from ._calibration import calibrate, calibrate_policy
        from ._policy import StreamPolicy, critical_thresholds, replay
        from ._subgamma import fit_gamma, inflate, model_check, subgamma_from_gamma

        args, correct = self.args, self.correct
        cal, test = _split(correct.size, args.cal_fraction, seed)
        if args.n_cal is not None:
            cal = cal[: args.n_cal]
        if cal.size == 0:
            from ._errors import InsufficientDataError

            raise InsufficientDataError("the calibration split is empty")
        policy = self.policy
        scores = self.scores
        if self.lifts is not None:
            lifts = self.lifts
            if policy is None:  # paper boundary: (v, c) from this calibration split
                budgets = np.array([lifts[i].mean() if lifts[i].size else 0.0 for i in cal])
                fit = fit_gamma(budgets)
                check = model_check(budgets, fit, seed=seed)
                params = inflate(subgamma_from_gamma(fit), check.inflation)
                policy = StreamPolicy(
                    boundary="paper",
                    delta=args.stream_delta,
                    clip=args.clip,
                    min_tokens=args.min_tokens,
                    v=params.v,
                    c=params.c,
                )
                scores = critical_thresholds(policy, lifts)
            assert scores is not None
            result = calibrate_policy(
                policy,
                [lifts[i] for i in cal],
                correct[cal],
                risk=args.risk,
                delta=args.delta,
                method=args.method,
                seed=seed,
                critical=scores[cal],
            )
        else:
            assert scores is not None
            result = calibrate(
                scores[cal],
                correct[cal],
                risk=args.risk,
                delta=args.delta,
                score_name=args.score,
                seed=seed,
            )
        report: dict[str, Any] = {}
        if test.size:
            assert scores is not None
            if self.lifts is not None and result.method == "paper":
                tau = result.tau
                shown = np.array(
                    [
                        bool(replay(policy, self.lifts[i], [tau]).answered[0])
                        if 0.0 < tau < args.clip
                        else bool(self.lifts[i].size and tau <= 0.0)
                        for i in test
                    ]
                )
            else:
                shown = scores[test] >= result.tau
            report = self._report(test, scores[test], shown)
        return result, report

    def test_only(self, seed: int) -> dict[str, Any]:
        """Test-split report of a split whose calibration refused: nothing shown."""
        _, test = _split(self.correct.size, self.args.cal_fraction, seed)
        scores = self.scores if self.scores is not None else np.zeros(self.correct.size)
        return self._report(test, scores[test], np.zeros(test.size, dtype=bool))

    def _report(
        self,
        test: npt.NDArray[np.int64],
        test_scores: npt.NDArray[np.float64],
        shown: npt.NDArray[np.bool_],
    ) -> dict[str, Any]:
        correct = self.correct[test]
        n_shown = int(shown.sum())
        wrong = int((shown & ~correct).sum())
        orc, _ = oracle_coverage(test_scores, correct, self.args.risk)
        cov = n_shown / test.size if test.size else 0.0
        return {
            "n": int(test.size),
            "coverage": cov,
            "risk": wrong / n_shown if n_shown else 0.0,
            "n_shown": n_shown,
            "n_wrong": wrong,
            "oracle_coverage": orc,
            "share_of_oracle": cov / orc if orc > 0 else None,
        }


def _print_repeats(
    args: argparse.Namespace, score_name: str, reports: list[tuple[Any, dict[str, Any]]]
) -> None:
    from ._bounds import clopper_pearson_interval

    tests = [rep for _, rep in reports if rep]
    refused = sum(result is None for result, _ in reports)
    cov = float(np.mean([t["coverage"] for t in tests])) if tests else 0.0
    orc = float(np.mean([t["oracle_coverage"] for t in tests])) if tests else 0.0
    shown = [t for t in tests if t["n_shown"]]
    risk = float(np.mean([t["risk"] for t in shown])) if shown else 0.0
    viol = sum(
        clopper_pearson_interval(t["n_wrong"], t["n_shown"], 0.05)[0] > args.risk for t in shown
    )
    share = f"{cov / orc:.0%}" if orc > 0 else "n/a (no threshold meets the target on test)"
    print(
        f"liftguard calibrate: {args.traces}  score {score_name}  method {args.method}\n"
        f"  target risk {args.risk:g}  delta {args.delta:g}  splits {len(reports)}  "
        f"calibration size {args.n_cal or 'all'}\n"
        f"  refused (too little data)  {refused} of {len(reports)}\n"
        f"  test coverage (mean)       {cov:.1%}\n"
        f"  oracle coverage (mean)     {orc:.1%}\n"
        f"  share of oracle            {share}\n"
        f"  test risk (mean, shown)    {risk:.3f}\n"
        f"  risk violations            {viol} of {len(reports)} splits (test risk's 95% "
        f"Clopper-Pearson lower bound above the target)"
    )


def _cmd_eval(args: argparse.Namespace) -> int:
    import json

    from ._evaluate import baseline_method, evaluate_methods, lift_method
    from ._policy import StreamPolicy
    from ._scores import BASELINES
    from ._traces import read_traces

    traces = read_traces(args.traces)
    if not traces:
        print(f"error: {args.traces} holds no traces", file=sys.stderr)
        return 2
    if args.top_k is not None:
        traces = [t.truncate_top(args.top_k) for t in traces]
    if args.boundary == "paper":
        print("error: eval supports --boundary betting only for now", file=sys.stderr)
        return 2
    policy = StreamPolicy(
        delta=args.stream_delta,
        clip=args.clip,
        min_tokens=args.min_tokens,
        aggregate=args.aggregate,
    )
    methods = [lift_method(traces, policy, args.skeleton)]
    methods += [baseline_method(traces, name) for name in BASELINES]
    correct = np.array([bool(t.correct) for t in traces])
    results = evaluate_methods(
        methods, correct, risk=args.risk, delta=args.delta, splits=args.splits, seed=args.seed
    )
    report = {
        "n": len(traces),
        "risk": args.risk,
        "delta": args.delta,
        "splits": args.splits,
        "top_k": args.top_k if args.top_k is not None else traces[0].top_k,
        "methods": results,
    }
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    print(
        f"liftguard eval: {args.traces}  n={len(traces)}  risk {args.risk:g}  "
        f"delta {args.delta:g}  splits {args.splits}"
    )
    print(f"  {'method':<14}{'coverage':>9}{'risk':>8}{'violations':>12}{'AUROC':>8}{'read':>7}")
    for name, r in results.items():
        print(
            f"  {name:<14}{r['coverage_mean']:>9.1%}{r['risk_mean']:>8.3f}"
            f"{r['risk_violation_rate']:>12.0%}{r['auroc']:>8.3f}{r['tokens_read_fraction']:>7.0%}"
        )
    return 0


def _print_summary(
    args: argparse.Namespace, score_name: str, result: Any, test: dict[str, Any]
) -> None:
    lines = [
        f"liftguard calibrate: {args.traces}",
        f"  score            {score_name}",
        f"  method           {result.method}   target risk {result.risk:g}   "
        f"delta {result.delta:g}",
        f"  calibration      n={result.n}  answered={result.n_answered}  errors={result.n_errors}",
        f"  tau              {result.tau:.4f}",
        f"  coverage (cal)   {result.coverage:.1%}   empirical risk {result.empirical_risk:.3f}"
        f"   Clopper-Pearson upper {result.risk_upper:.3f}",
    ]
    if result.v is not None:
        mc = result.model_check or {}
        lines.append(
            f"  sub-gamma        v={result.v:.4g}  c={result.c:.4g}  (Gamma MLE; model check "
            f"KS p={mc.get('ks_pvalue', float('nan')):.3f}, "
            f"AD p={mc.get('ad_pvalue', float('nan')):.3f}, "
            f"inflation x{mc.get('inflation', 1.0):.2f})"
        )
        lines.append(
            f"  mean budget      {result.mean_budget:.4f}   "
            f"PAC-Bayes upper bound {result.pac_bayes_bound:.4f}"
        )
    lines.append(
        f"  kappa            I(correct; score) = {result.kappa:.4f} nats -> answer rate <= "
        f"{result.kappa_bound:.3f}{' (vacuous for risk >= 0.5)' if result.risk >= 0.5 else ''}"
    )
    if test:
        share = test["share_of_oracle"]
        lines.append(
            f"  test split       n={test['n']}  coverage {test['coverage']:.1%}  "
            f"risk {test['risk']:.3f}"
            f"   oracle coverage {test['oracle_coverage']:.1%}"
            + (f"  ({share:.0%} of oracle)" if share is not None else "")
        )
    lines.append(f"  guarantee        {result.guarantee}")
    print("\n".join(lines))


def _build_parser() -> argparse.ArgumentParser:
    from ._scores import BASELINES, TRACE_SKELETONS

    parser = argparse.ArgumentParser(
        prog="liftguard", description="Certify or block LLM answers while they stream."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "calibrate",
        help="calibrate a threshold on labelled traces",
        description="Calibrate tau on labelled traces (JSONL trace format) and report "
        "coverage, risk and the oracle coverage on a held-out split.",
    )
    p.add_argument("--traces", required=True, help="JSONL trace file")
    p.add_argument("--risk", type=float, required=True, help="target selective risk h*")
    p.add_argument("--delta", type=float, default=0.05, help="calibration failure probability")
    p.add_argument("--skeleton", default="uniform", choices=TRACE_SKELETONS)
    p.add_argument("--boundary", default="betting", choices=("betting", "paper"))
    p.add_argument("--method", default="ltt", choices=("ltt", "paper"))
    p.add_argument(
        "--aggregate", default="min", choices=("mean", "min"), help="how token lifts combine"
    )
    p.add_argument(
        "--score",
        default="lift",
        choices=("lift", *BASELINES),
        help="decision score: the streaming lift policy or a baseline",
    )
    p.add_argument("--clip", type=float, default=12.0, help="clipping bound B")
    p.add_argument("--min-tokens", type=int, default=1)
    p.add_argument(
        "--stream-delta", type=float, default=0.05, help="evidence level of the in-stream boundary"
    )
    p.add_argument(
        "--cal-fraction",
        type=float,
        default=0.5,
        help="share of traces used for calibration; the rest is the test split",
    )
    p.add_argument(
        "--n-cal", type=int, default=None, help="use only the first N calibration traces"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="repeat over this many random splits (seeds seed, seed+1, ...) and summarise",
    )
    p.add_argument("--out", default=None, help="write the calibration as JSON here")
    p.set_defaults(func=_cmd_calibrate)

    e = sub.add_parser(
        "eval",
        help="compare the lift certificate with baselines over repeated splits",
        description="Calibrate the lift certificate and each baseline (entropy, mean_logprob, "
        "min_logprob, nll) by the same risk-control procedure on the same random 50/50 "
        "splits, and report test coverage, risk, risk violations, AUROC and tokens read.",
    )
    e.add_argument("--traces", required=True, help="JSONL trace file")
    e.add_argument("--risk", type=float, required=True, help="target selective risk h*")
    e.add_argument("--delta", type=float, default=0.05)
    e.add_argument("--splits", type=int, default=20)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--top-k", type=int, default=None, help="keep only the top K alternatives")
    e.add_argument("--skeleton", default="uniform", choices=TRACE_SKELETONS)
    e.add_argument("--boundary", default="betting", choices=("betting", "paper"))
    e.add_argument(
        "--aggregate", default="min", choices=("mean", "min"), help="how token lifts combine"
    )
    e.add_argument("--clip", type=float, default=12.0)
    e.add_argument("--min-tokens", type=int, default=1)
    e.add_argument("--stream-delta", type=float, default=0.05)
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.set_defaults(func=_cmd_eval)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    if not (0.0 < getattr(args, "cal_fraction", 0.5) <= 1.0):
        parser.error("--cal-fraction must be in (0, 1]")
    func = args.func
    return int(func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
