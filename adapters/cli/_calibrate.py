"""``liftguard calibrate``.

On traces recorded from an API stream, a score that needs a field they lack is
refused in one line, exact ``log Z_T`` and entropies are estimated from the
top-k alternatives (with a note), and ``--vocab-size N`` supplies the
vocabulary size: see :mod:`adapters.cli._recorded`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ._common import (
    CommandError,
    oracle_coverage,
    other_promise_line,
    resolve_clip,
    split_indices,
    stream_policy,
)
from ._recorded import (
    VOCAB_HINT,
    carries,
    estimate_note,
    lacking_message,
    read_whole,
    score_needs,
    supply_vocab_size,
)

__all__ = ["cmd_calibrate"]

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- #
# The command
# --------------------------------------------------------------------------- #


def cmd_calibrate(args: argparse.Namespace) -> int:
    from adapters._tracefiles._digest import TraceDigest
    from guardrail import GuardrailError
    from guardrail._lift import DEFAULT_CLIP
    from guardrail.evaluate import critical_thresholds
    from guardrail.traces import baseline_score

    if args.score != "lift" and args.method == "paper":
        raise CommandError("--method paper needs --score lift", status=2)
    if args.out and args.score == "lift":
        from ._certify import read_context

        read_context(args.context)  # a bad context file fails before the work
    digest = TraceDigest()
    traces = read_whole(args.traces, "calibrate", "calibrating on them", digest=digest)
    traces = supply_vocab_size(traces, args.vocab_size, args.traces)
    fields, what, hint = score_needs(args.score, args.skeleton, traces)
    if args.out and args.score == "lift" and args.skeleton != "prompt-free":
        fields, what = (*fields, "vocab_size"), f"{what} (and its certificate's skeleton)"
        hint = hint or VOCAB_HINT
    refusal = lacking_message(args.traces, traces, fields, what, hint)
    if refusal:
        raise CommandError(refusal)
    exact_logz = carries(traces, "logz")
    note = estimate_note([(args.score, args.skeleton)], traces)
    if note:
        print(f"liftguard calibrate: note: {note}", file=sys.stderr)
    correct = np.array([bool(t.correct) for t in traces])
    run = _Run(args, correct)
    if carries(traces, "vocab_size"):
        resolve_clip(args, traces[0].vocab_size)
    elif args.clip is None:  # a score that does not read the vocabulary size (checked above)
        args.clip = DEFAULT_CLIP
    if args.score == "lift":
        run.lifts = [_lifts(t, args.skeleton, args.clip, exact_logz) for t in traces]
        if args.boundary == "betting":
            run.policy = stream_policy(args)
            run.scores = critical_thresholds(run.policy, run.lifts)
        score_name = f"lift[{args.skeleton}, {args.aggregate}, {args.boundary}]"
    else:
        exact = carries(traces, "entropy")
        run.scores = np.array([baseline_score(t, args.score, exact=exact) for t in traces])
        score_name = args.score
    reports: list[tuple[Any, dict[str, Any]]] = []
    for r in range(args.repeats):
        try:
            reports.append(run.split(args.seed + r))
        except GuardrailError as exc:
            if args.repeats == 1:
                raise
            log.info("split %d: %s", r, exc)
            reports.append((None, run.test_only(args.seed + r)))
    if args.repeats > 1:
        summary = _repeats_summary(args, reports)
        if args.json:
            print(json.dumps({"score_name": score_name, **summary}, indent=2, sort_keys=True))
        else:
            _print_repeats(args, score_name, summary)
        return 0
    result, test_report = reports[0]
    result = type(result).from_dict(
        {**result.to_dict(), "extra": {**result.extra, "test": test_report}}
    )
    other = _other_promise(args, run)
    if not args.json:
        _print_summary(args, score_name, result, test_report, other)
    wrote = ""
    if args.out and args.score == "lift":
        from ._certify import build_certificate

        cert = build_certificate(
            args, traces[0].model, traces[0].vocab_size, result, digest=digest.hexdigest()
        )
        cert.save(args.out)
        wrote = f"wrote the certificate {args.out}"
    elif args.out:  # a baseline score is a threshold on a whole answer, not a streaming rule
        Path(args.out).write_text(result.to_json() + "\n", encoding="utf-8")
        wrote = f"wrote the calibration record {args.out} (a baseline is not a certificate)"
    if args.json:
        record = {"score_name": score_name, "out": args.out, **result.to_dict(),
                  "in_expectation_coverage": other}  # fmt: skip
        print(json.dumps(record, indent=2, sort_keys=True))
    elif wrote:
        print(wrote)
    return 0


def _lifts(trace: Any, skeleton: str, clip: float, exact_logz: bool) -> npt.NDArray[np.float64]:
    """Clipped lifts of one trace; without exact log Z_T (an API recording) the temperature
    skeleton's log Z_T is estimated from the top-k alternatives by the deployed rule."""
    from guardrail._lift import clipped_lifts
    from guardrail._scores import trace_clipped_lifts, trace_skeleton_logprobs

    if exact_logz or not skeleton.startswith("temperature"):
        return trace_clipped_lifts(trace, skeleton, clip)
    log_s = trace_skeleton_logprobs(trace, skeleton, exact=False, rule="anchored")
    return clipped_lifts(trace.logprobs, log_s, clip)


class _Run:
    """One calibrate invocation: the data, and one calibration/test split at a time."""

    def __init__(self, args: argparse.Namespace, correct: npt.NDArray[np.bool_]) -> None:
        self.args = args
        self.correct = correct
        self.lifts: list[npt.NDArray[np.float64]] | None = None
        self.scores: npt.NDArray[np.float64] | None = None
        self.policy: Any = None
        self.cal: tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]] | None = None

    def split(self, seed: int) -> tuple[Any, dict[str, Any]]:
        from guardrail import StreamPolicy, calibrate, calibrate_policy
        from guardrail._policy import shown_at
        from guardrail._subgamma import checked_subgamma
        from guardrail.evaluate import critical_thresholds

        args, correct = self.args, self.correct
        cal, test = split_indices(correct.size, args.cal_fraction, seed)
        if args.n_cal is not None:
            cal = cal[: args.n_cal]
        if cal.size == 0:
            from guardrail import InsufficientDataError

            raise InsufficientDataError("the calibration split is empty")
        policy = self.policy
        scores = self.scores
        if self.lifts is not None:
            lifts = self.lifts
            if policy is None:  # paper boundary: (v, c) from this calibration split
                budgets = np.array([lifts[i].mean() if lifts[i].size else 0.0 for i in cal])
                params, _ = checked_subgamma(budgets, seed=seed)
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
                procedure=args.procedure,
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
                procedure=args.procedure,
            )
        assert scores is not None
        self.cal = scores[cal], ~correct[cal]  # the last split's scores and errors
        report: dict[str, Any] = {}
        if test.size:
            if self.lifts is not None:  # the deployed policy, as calibration replayed it
                shown = shown_at(policy, [self.lifts[i] for i in test], [result.tau])[:, 0]
            else:
                shown = scores[test] >= result.tau
            report = self._report(test, scores[test], shown)
        return result, report

    def test_only(self, seed: int) -> dict[str, Any]:
        """Test-split report of a split whose calibration refused: nothing shown."""
        _, test = split_indices(self.correct.size, self.args.cal_fraction, seed)
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


def _repeats_summary(
    args: argparse.Namespace, reports: list[tuple[Any, dict[str, Any]]]
) -> dict[str, Any]:
    """What ``--repeats`` measured over its splits (a refused split shows nothing)."""
    from guardrail.stats import clopper_pearson_interval

    tests = [rep for _, rep in reports if rep]
    shown = [t for t in tests if t["n_shown"]]
    cov = float(np.mean([t["coverage"] for t in tests])) if tests else 0.0
    orc = float(np.mean([t["oracle_coverage"] for t in tests])) if tests else 0.0
    return {
        "method": args.method,
        "risk": args.risk,
        "delta": args.delta,
        "splits": len(reports),
        "n_cal": args.n_cal,
        "refused": sum(result is None for result, _ in reports),
        "coverage_mean": cov,
        "oracle_coverage_mean": orc,
        "share_of_oracle": cov / orc if orc > 0 else None,
        "risk_mean": float(np.mean([t["risk"] for t in shown])) if shown else 0.0,
        "violations": sum(
            clopper_pearson_interval(t["n_wrong"], t["n_shown"], 0.05)[0] > args.risk for t in shown
        ),
    }


def _print_repeats(args: argparse.Namespace, score_name: str, summary: dict[str, Any]) -> None:
    share = summary["share_of_oracle"]
    n = summary["splits"]
    print(
        f"liftguard calibrate: {args.traces}  score {score_name}  method {args.method}\n"
        f"  target risk {args.risk:g}  delta {args.delta:g}  splits {n}  "
        f"calibration size {args.n_cal or 'all'}\n"
        f"  refused (too little data)  {summary['refused']} of {n}\n"
        f"  test coverage (mean)       {summary['coverage_mean']:.1%}\n"
        f"  oracle coverage (mean)     {summary['oracle_coverage_mean']:.1%}\n"
        f"  share of oracle            "
        + (f"{share:.0%}" if share is not None else "n/a (no threshold meets the target on test)")
        + f"\n  test risk (mean, shown)    {summary['risk_mean']:.3f}\n"
        f"  risk violations            {summary['violations']} of {n} splits (test risk's 95% "
        f"Clopper-Pearson lower bound above the target)"
    )


SUMMARY_DOCS = "docs/fitting.md#reading-the-calibrate-summary"
"""Where every term of the summary is explained (the docs' own test checks each one)."""


def _other_promise(args: argparse.Namespace, run: _Run) -> float | None:
    """What the promise in expectation would show of the calibration answers, beside a
    high-probability calibration (``None`` for ``--procedure conformal``, the paper's
    method, or where it shows nothing)."""
    from guardrail._calibration import expectation_coverage

    if args.method != "ltt" or args.procedure == "conformal" or run.cal is None:
        return None
    return expectation_coverage(*run.cal, args.risk)


def _print_summary(
    args: argparse.Namespace,
    score_name: str,
    result: Any,
    test: dict[str, Any],
    other: float | None = None,
) -> None:
    lines = [
        f"liftguard calibrate: {args.traces}",
        f"  score            {score_name}",
        f"  method           {result.method}   target risk {result.risk:g}   "
        + (
            "in expectation (procedure conformal; delta unused)"
            if result.extra.get("promise") == "in expectation"
            else f"delta {result.delta:g}"
        ),
        f"  calibration      n={result.n}  answered={result.n_answered}  errors={result.n_errors}",
        f"  tau              {result.tau:.4f}",
        f"  coverage (cal)   {result.coverage:.1%}   empirical risk {result.empirical_risk:.3f}"
        f"   Clopper-Pearson upper {result.risk_upper:.3f}",
    ]
    if other is not None:
        lines.append(other_promise_line(other))
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
    lines.append(f"  explained in     {SUMMARY_DOCS}")
    print("\n".join(lines))
