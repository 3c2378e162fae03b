"""``liftguard eval``.

On traces that lack fields (recorded from an API stream; see
:mod:`adapters.cli._recorded`) a method that needs one is not evaluated: it is
reported as refused on every split, with ``refusal_reason`` naming what is
missing and ``missing_fields``; exact entropies and ``log Z_T`` are estimated
from the top-k alternatives, as with ``--top-k``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ._common import CommandError, resolve_clip, stream_policy
from ._eval_report import finite_or_null, print_intervals, refusal_note, share, trailing_note
from ._recorded import (
    absent,
    carries,
    estimate_note,
    lacking_message,
    read_whole,
    score_needs,
    supply_vocab_size,
)

__all__ = ["cmd_eval"]

MIN_REPLICATES = 20


def _read_certificate(path: str) -> Any:
    from guardrail import Certificate

    cert = Certificate.load(path)
    if cert.statistic is None:
        raise CommandError(
            f"{path}: has no fitted statistic (make one with 'liftguard fit'); a lift "
            "certificate is evaluated by the options of 'eval' itself"
        )
    return cert


def _check_certificate(
    args: argparse.Namespace, cert: Any, traces: list[Any], digest: str | None = None
) -> None:
    """Refuse traces of another vocabulary; warn (stderr) when the traces are from another
    model or are the very traces the certificate was made on, in any container (not a
    held-out evaluation; ``digest``: their traces digest, computed as they were read)."""
    from adapters._tracefiles._digest import same_traces, trace_identity

    model, vocab = traces[0].model, traces[0].vocab_size
    if cert.statistic is not None and vocab != cert.statistic.vocab_size:
        raise CommandError(
            f"the certificate's statistic is for a vocabulary of {cert.statistic.vocab_size} "
            f"tokens, the traces' model ({model!r}) has {vocab}: certificates are per model"
        )
    if model != cert.model.model_id:
        print(
            f"liftguard eval: warning: the certificate is for model {cert.model.model_id!r}, "
            f"the traces are from {model!r} (certificates do not transfer across models)",
            file=sys.stderr,
        )
    if same_traces(cert.provenance, trace_identity(args.traces, digest=digest)):
        print(
            "liftguard eval: warning: these are the traces the certificate was fitted and "
            "calibrated on: its results here are not held out",
            file=sys.stderr,
        )
    fit = cert.provenance.get("fit") or {}
    n_fit, n_cal = fit.get("n_fit"), fit.get("n_calibration")
    if isinstance(n_fit, int) and isinstance(n_cal, int) and n_cal > 0:
        print(
            f"liftguard eval: note: the certificate's statistic was fitted on {n_fit} of its "
            f"{n_fit + n_cal} traces; the other {n_cal} calibrated the tau that eval "
            "recalibrates on each split. To compare the statistic with the baselines, fit it "
            "on all of them with --fit-fraction 1",
            file=sys.stderr,
        )


def _warn_if_far(cert: Any, traces: list[Any]) -> None:
    """Warn (stderr) when the certificate's statistic would extrapolate on the traces."""
    from guardrail._fit._extrapolation import farthest_feature

    far = farthest_feature(cert.statistic, traces, cert.replay_skeleton())
    if far is not None and far.far:
        print(f"liftguard eval: warning: {far.warning()}", file=sys.stderr)


def _certificate_needs(cert: Any) -> tuple[tuple[str, ...], str]:
    """The optional trace fields that replaying ``cert``'s fitted statistic reads."""
    req = cert.statistic.requires
    fields: tuple[str, ...] = ("entropy",) if "exact_entropy" in req else ()
    if "skeleton" in req:
        kind = cert.skeleton.kind
        fields += ("prompt_free_logprobs",) if kind == "prompt_free" else ()
        fields += ("token_ids",) if kind in ("vector", "unigram", "ngram") else ()
    return fields, f"the certificate's statistic (group {cert.statistic.group!r})"


def _too_few_alternatives(args: argparse.Namespace, cert: Any, traces: list[Any]) -> str:
    """Why the traces cannot feed the statistic the alternatives it reads ('' if they can):
    a deployed stream with fewer would be scored differently from its calibration."""
    stat = cert.statistic
    have = min(t.top_k for t in traces)
    if "alternatives" not in stat.requires or have >= stat.alternatives:
        return ""
    source = f"--top-k {args.top_k} keeps" if args.top_k is not None else "the traces carry"
    return (
        f"the certificate's statistic reads {stat.alternatives} alternatives per token; "
        f"{source} {have}"
    )


def _unavailable(reason: str, fields: tuple[str, ...], splits: int) -> dict[str, Any]:
    """The result of a method that the traces cannot evaluate (refused on every split)."""
    nan = float("nan")
    return {
        "coverage_mean": 0.0,
        "risk_mean": nan,
        "wrong_share_mean": 0.0,
        "risk_violation_rate": 0.0,
        "auroc": nan,
        "tokens_read_fraction": nan,
        "tokens_read_median": nan,
        "blocked_read_mean": nan,
        "blocked_read_median": nan,
        "refused": splits,
        "all_refused": True,
        "refusal_reason": reason,
        "missing_fields": sorted(fields),
    }


def cmd_eval(args: argparse.Namespace) -> int:
    from adapters._tracefiles._digest import TraceDigest
    from guardrail import StreamPolicy
    from guardrail._evaluate import baseline_method, bootstrap_intervals
    from guardrail._lift import DEFAULT_CLIP
    from guardrail.evaluate import evaluate_methods, fitted_method, lift_method
    from guardrail.traces import BASELINES

    from ._progress import Progress

    if args.boundary == "paper":
        raise CommandError("eval supports --boundary betting only for now", status=2)
    if 0 < args.bootstrap < MIN_REPLICATES:
        raise CommandError(
            f"--bootstrap {args.bootstrap}: a 95% interval needs at least {MIN_REPLICATES} "
            "resamples (200 is a good choice), or 0 for none",
            status=2,
        )
    cert = _read_certificate(args.certificate) if args.certificate else None
    digest = TraceDigest()
    traces = read_whole(args.traces, "eval", "evaluating on them", digest=digest)
    if args.top_k is not None:
        traces = [t.truncate_top(args.top_k) for t in traces]
    vocab = args.vocab_size
    if vocab is None and cert is not None and not carries(traces, "vocab_size"):
        vocab = cert.statistic.vocab_size  # the certificate's model is the traces' model
    traces = supply_vocab_size(traces, vocab, args.traces)
    if carries(traces, "vocab_size"):
        resolve_clip(args, traces[0].vocab_size)
    elif args.clip is None:  # the uniform skeleton is refused below
        args.clip = DEFAULT_CLIP
    policy = stream_policy(args)
    exact_logz = args.top_k is None and carries(traces, "logz")
    exact_entropy = args.top_k is None and carries(traces, "entropy")
    # the paper's configuration: temperature skeleton T=1.5, mean lift, betting boundary, B=12
    paper = StreamPolicy(delta=args.stream_delta, on_length=policy.on_length)
    plan: list[tuple[str, str, str, Any]] = [
        (
            "lift",
            "lift",
            args.skeleton,
            lambda: lift_method(traces, policy, args.skeleton, exact=exact_logz),
        ),
        (
            "lift_paper",
            "lift",
            "temperature",
            lambda: lift_method(traces, paper, "temperature", "lift_paper", exact=exact_logz),
        ),
        *(
            (name, name, "", lambda name=name: baseline_method(traces, name, exact=exact_entropy))
            for name in BASELINES
        ),
    ]
    progress = Progress("liftguard eval: scores")
    methods, unavailable, used = [], {}, []
    why: dict[str, list[str]] = {}  # reason -> the methods it refuses
    for name, score, skeleton, make in plan:
        fields, what, hint = score_needs(score, skeleton, traces)
        reason = lacking_message(args.traces, traces, fields, what, hint)
        if reason:
            unavailable[name] = _unavailable(reason, fields, args.splits)
            lacks = " and no ".join(absent(traces, fields))
            why.setdefault(f"no {lacks}{'; ' + hint if hint else ''}", []).append(name)
        else:
            methods.append(make())
            used.append((score, skeleton))
    if cert is not None:
        _check_certificate(args, cert, traces, digest.hexdigest())
        fields, what = _certificate_needs(cert)
        reason = lacking_message(args.traces, traces, fields, what)
        few = _too_few_alternatives(args, cert, traces)
        if reason:
            unavailable["certificate"] = _unavailable(reason, fields, args.splits)
            why.setdefault(f"no {' and no '.join(absent(traces, fields))}", []).append(
                "certificate"
            )
        elif few:
            unavailable["certificate"] = _unavailable(few, (), args.splits)
            why.setdefault(few, []).append("certificate")
        else:
            _warn_if_far(cert, traces)
            progress.step("liftguard eval: replaying the certificate")
            limit = _replay_limit(cert, traces)
            methods.append(fitted_method(traces, cert, progress=progress, max_tokens=limit))
    correct = np.array([bool(t.correct) for t in traces])
    progress.step("liftguard eval: calibrating methods")
    evaluated = evaluate_methods(
        methods,
        correct,
        risk=args.risk,
        delta=args.delta,
        splits=args.splits,
        seed=args.seed,
        progress=progress,
        procedure=args.procedure,
    )
    reference = "certificate" if "certificate" in evaluated else None
    intervals: dict[str, dict[str, Any]] = {}
    if args.bootstrap:
        progress.step(f"liftguard eval: bootstrap ({args.splits} splits each)")
        intervals = bootstrap_intervals(
            methods,
            correct,
            risk=args.risk,
            delta=args.delta,
            splits=args.splits,
            replicates=args.bootstrap,
            seed=args.seed,
            reference=reference,
            progress=progress,
            procedure=args.procedure,
        )
        for name, entry in intervals.items():
            evaluated[name]["bootstrap"] = entry
    progress.close()
    note = refusal_note(args, len(traces), evaluated)
    order = [name for name, *_ in plan] + (["certificate"] if cert is not None else [])
    results = {n: evaluated[n] if n in evaluated else unavailable[n] for n in order}
    if why:
        lacking = "; ".join(f"{', '.join(names)} ({reason})" for reason, names in why.items())
        note = f"{note} Not evaluated, the traces carry too little: {lacking}.".strip()
    estimated = estimate_note(used, traces)
    if estimated and args.top_k is None:
        print(f"liftguard eval: note: {estimated}", file=sys.stderr)
    report = {
        "n": len(traces),
        "risk": args.risk,
        "delta": args.delta,
        "procedure": args.procedure,
        "splits": args.splits,
        "top_k": args.top_k if args.top_k is not None else traces[0].top_k,
        "methods": results,
    }
    if args.bootstrap:
        report["bootstrap"] = {
            "replicates": args.bootstrap,
            "level": 0.95,
            "reference": reference,
            "method": "percentile intervals over resamples of the answers with replacement, "
            "each rerunning every split; paired across methods",
        }
    if cert is not None and cert.statistic is not None:
        stat = cert.statistic
        report["certificate"] = {
            "path": args.certificate,
            "group": stat.group,
            "form": stat.form,
            "features": [f.name for f in stat.features],
            "alternatives": stat.alternatives,
            "max_tokens": cert.context.max_tokens,
            "model_id": cert.model.model_id,
        }
    if args.plot:
        from ._plots import write_plots

        title = f"{Path(args.traces).stem} (n={len(traces)})"
        path = write_plots(args.plot, methods, correct, evaluated, title=title, risk=args.risk)
        print(f"wrote {path} and its figures", file=sys.stderr)
    if note:
        print(f"liftguard eval: note: {note}", file=sys.stderr)
    trailing = trailing_note(args, results, intervals, ("lift", *BASELINES))
    if trailing:
        print(f"liftguard eval: note: {trailing}", file=sys.stderr)
    if args.json:
        print(json.dumps(finite_or_null(report), indent=2, sort_keys=True, allow_nan=False))
        return 0
    print(
        f"liftguard eval: {args.traces}  n={len(traces)}  risk {args.risk:g}  "
        + (
            "in expectation (procedure conformal)"
            if args.procedure == "conformal"
            else f"delta {args.delta:g}"
            + ("" if args.procedure == "fixed-sequence" else f" ({args.procedure})")
        )
        + f"  splits {args.splits}"
    )
    print(
        f"  {'method':<14}{'coverage':>9}{'refused':>8}{'risk':>8}{'violations':>12}"
        f"{'AUROC':>8}{'read':>7}{'median':>8}{'blocked':>9}{'median':>8}"
    )
    for name, r in results.items():
        if r["all_refused"]:  # nothing was ever calibrated: no coverage, risk or reading
            auc = f"{r['auroc']:>8.3f}" if math.isfinite(r["auroc"]) else f"{'-':>8}"
            print(
                f"  {name:<14}{'refused':>9}{r['refused']:>8}{'-':>8}{'-':>12}{auc}"
                f"{'-':>7}{'-':>8}{'-':>9}{'-':>8}"
            )
            continue
        blocked = [
            share(r[k], w) for k, w in (("blocked_read_mean", 9), ("blocked_read_median", 8))
        ]
        print(
            f"  {name:<14}{r['coverage_mean']:>9.1%}{r['refused']:>8}{r['risk_mean']:>8.3f}"
            f"{r['risk_violation_rate']:>12.0%}{r['auroc']:>8.3f}{r['tokens_read_fraction']:>7.0%}"
            f"{r['tokens_read_median']:>8.0%}{blocked[0]}{blocked[1]}"
        )
    print(
        f"  refused: splits (of {args.splits}) whose calibration passed no threshold; read: "
        "share of an answer's tokens\n  read before its verdict, over all test answers "
        "and over the blocked ones"
    )
    if intervals:
        print_intervals(intervals, reference, args.bootstrap)
    return 0


def _replay_limit(cert: Any, traces: list[Any]) -> int | None:
    """The token limit to replay ``cert`` with: its context's, unless the test answers
    run longer (they were generated with a larger limit): then the longest answer's,
    with a note. A monitor told the context's limit would block every such answer
    (``over_token_limit``); deployed like these answers were, it is told theirs."""
    limit = cert.context.max_tokens
    longest = max((t.n_tokens for t in traces), default=0)
    if limit is None or longest <= limit:
        return None
    over = sum(t.n_tokens > limit for t in traces)
    print(
        f"liftguard eval: note: {over} of {len(traces)} answers are longer than the "
        f"certificate's token limit {limit} (the longest has {longest} tokens): they were "
        f"generated with a larger limit, so the certificate is replayed as deployed with "
        f"max_tokens={longest} (Certificate.monitor(max_tokens=...))",
        file=sys.stderr,
    )
    return longest
