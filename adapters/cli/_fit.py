"""``liftguard fit``: fit a streaming statistic on part of a model's labelled traces,
calibrate ``tau`` on the disjoint rest, and write the certificate.

Traces recorded from an API stream (see :mod:`adapters.cli._recorded`) fit the
``api`` group, and the ``lift`` group with a skeleton that reads the top-k
alternatives (``--skeleton temperature``); ``--vocab-size N`` supplies the
vocabulary size they may lack. A group that reads a field they lack (``local``:
exact entropies; ``lift`` with ``prompt-free``) is refused in one line."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ._common import CommandError
from ._margins import early_line, early_margins, margins_blocked, margins_line, replays
from ._progress import Progress
from ._recorded import lacking_message, read_whole, supply_vocab_size

__all__ = ["DEFAULT_FIT_RISK", "cmd_fit"]

DEFAULT_FIT_RISK = 0.8
"""Risk target ``liftguard fit`` calibrates for unless told (that of the shipped
certificate: at most 80% of the answers shown wrong, for models as weak as the
bundled 135M one; pass ``--risk`` for a stronger model)."""


def _features(args: argparse.Namespace) -> tuple[Any, ...]:
    """The features of ``--features`` (checked; one way only for ``--form monotone``), else
    ``--group``'s preset."""
    from guardrail import ConfigError
    from guardrail.fitting import Feature, moves_one_way, preset_features

    if args.features is None:
        return preset_features(args.group, args.form)
    names = [n.strip() for n in args.features.split(",") if n.strip()]
    if not names:
        raise CommandError("--features: expected comma-separated feature names", status=2)
    try:
        feats = tuple(Feature.parse(n) for n in names)
    except ConfigError as exc:
        raise CommandError(f"--features: {exc}", status=2) from None
    if len(set(feats)) != len(feats):
        raise CommandError("--features: a feature is named twice", status=2)
    if args.form == "monotone":
        both = [f.name for f in feats if not moves_one_way(f)]
        if both:
            raise CommandError(
                f"--features with --form monotone: {', '.join(both)} can "
                "move either way as tokens arrive",
                status=2,
            )
    return feats


def _alternatives(
    args: argparse.Namespace, feats: tuple[Any, ...], traces: list[Any]
) -> tuple[int, str]:
    """The alternatives per token the statistic reads, and a note when the traces carry
    fewer than the default: it must read what the calibration and the streams see."""
    from guardrail.fitting import DEFAULT_ALTERNATIVES, FEATURE_SOURCES

    reads = sorted({f.name for f in feats if FEATURE_SOURCES.get(f.base) == "alternatives"})
    have = min(t.top_k for t in traces)
    if not reads:
        return args.alternatives or DEFAULT_ALTERNATIVES, ""
    if have < 1:
        raise CommandError(
            f"{args.traces}: the traces carry no alternatives, and {', '.join(reads)} read "
            "them; record with top_logprobs, or fit --features over logprob, lift and length"
        )
    if args.alternatives is not None:
        if args.alternatives > have:
            raise CommandError(
                f"--alternatives {args.alternatives}: the traces carry {have} per token"
            )
        return args.alternatives, ""
    if have >= DEFAULT_ALTERNATIVES:
        return DEFAULT_ALTERNATIVES, ""
    return have, (
        f"the traces carry {have} alternatives per token: the statistic reads "
        f"{have}, and a stream must send at least as many"
    )


def _group_needs(
    args: argparse.Namespace, bases: set[str]
) -> list[tuple[tuple[str, ...], str, str]]:
    """``(fields, what, hint)`` of each optional trace field the features read."""
    from ._recorded import VOCAB_HINT

    src = "--features" if args.features is not None else f"--group {args.group}"
    what = f"{src} (the alternatives' tail compensation)"
    needs: list[tuple[tuple[str, ...], str, str]] = [(("vocab_size",), what, VOCAB_HINT)]
    if "exact_entropy" in bases:
        what = f"{src} (its exact-entropy features)"
        needs.append((("entropy",), what, "use --group api"))
    if "lift" in bases and args.skeleton == "prompt-free":
        what = f"{src} with --skeleton prompt-free"
        hint = "use --group api, or --group lift --skeleton temperature"
        needs.append((("prompt_free_logprobs",), what, hint))
    return needs


def _ids_sha256(ids: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(ids)).encode("utf-8")).hexdigest()


def cmd_fit(args: argparse.Namespace) -> int:
    from adapters.tracefiles import TraceDigest, trace_identity
    from guardrail import Certificate, InsufficientDataError, ModelIdentity, StreamPolicy
    from guardrail.evaluate import auroc
    from guardrail.fitting import (
        answer_features,
        calibrate_fitted,
        critical_score,
        fit_statistic,
        stop_at,
        token_ranges,
    )

    from ._certify import read_context, skeleton_spec
    from ._fit_select import choose_statistic, scope_sum_features, scope_sums, selection_line

    if not 0.0 <= args.range_quantile < 0.5:
        raise CommandError("--range-quantile must lie in [0, 0.5)", status=2)
    context = read_context(args.context)
    digest = TraceDigest()
    traces = read_whole(args.traces, "fit", "fitting and calibrating on them", digest=digest)
    traces = supply_vocab_size(traces, args.vocab_size, args.traces)
    feats = _features(args)
    for needs in _group_needs(args, {f.base for f in feats}):
        refusal = lacking_message(args.traces, traces, *needs)
        if refusal:
            raise CommandError(refusal)
    vocab = traces[0].vocab_size
    if any(t.vocab_size != vocab or t.model != traces[0].model for t in traces):
        raise CommandError(f"{args.traces}: a certificate is for one model; the traces mix models")
    alternatives, alt_note = _alternatives(args, feats, traces)
    limit, limit_note = context.max_tokens or args.max_tokens, ""
    if limit is None:
        limit = max(t.n_tokens for t in traces)
        limit_note = f"token limit {limit}: the longest answer in the traces (pass --max-tokens)"
    context = replace(context, max_tokens=limit)
    n = len(traces)
    perm = np.random.default_rng(args.seed).permutation(n)
    n_fit = round(n * args.fit_fraction)
    fit_only = args.fit_fraction == 1.0
    if fit_only and n < 20:
        raise CommandError(f"{n} traces: the fit needs >= 20")
    if not fit_only and (n_fit < 20 or n - n_fit < 20):
        raise CommandError(
            f"{n} traces split {n_fit}/{n - n_fit}: both parts need >= 20 (or --fit-fraction 1 "
            "to fit on all of them and calibrate elsewhere)"
        )
    fit_idx, cal_idx = np.sort(perm[:n_fit]), np.sort(perm[n_fit:])
    fit_tr, cal_tr = [traces[i] for i in fit_idx], [traces[i] for i in cal_idx]
    feats, scopes = scope_sums(args, feats, fit_tr)
    spec = skeleton_spec(args.skeleton, vocab, args.skeleton_spec)
    skel: Any = "prompt-free" if args.skeleton == "prompt-free" else spec.build()
    bases = [f.base for f in feats if f.base != "length"]
    progress = Progress("liftguard fit: features")
    kw: dict[str, Any] = {"skeleton": skel, "alternatives": alternatives}
    ranges = token_ranges(fit_tr, bases, quantile=args.range_quantile, **kw)
    info: dict[str, Any] = {"traces": Path(args.traces).name, "skeleton": args.skeleton}
    l2, early_block = args.l2, args.early_block
    if args.select == "coverage":
        progress.step("liftguard fit: selection")
        chosen = choose_statistic(args, fit_tr, feats, ranges, kw, vocab, limit, progress)
        feats, l2, early_block, x, info["selection"] = chosen
        scopes = [c for c in scopes if scope_sum_features([c])[0] in feats]
    else:
        x = answer_features(fit_tr, feats, ranges=ranges, **kw)
    if scopes:
        info["scopes"] = scopes
    stat = fit_statistic(
        x,
        [bool(t.correct) for t in fit_tr],
        feats,
        vocab_size=vocab,
        form=args.form,
        l2=l2,
        ranges=ranges,
        alternatives=alternatives,
        info=info,
    )
    if early_block is not None:
        share = args.early_block_share
        margins, widened = early_margins(stat, fit_tr, early_block, share, skel, limit)
        info["early_block"] = {"quantile": early_block, **widened, "positions": len(margins)}
        stat = replace(stat, block_margins=margins, info=info)
    policy = StreamPolicy(on_length=args.on_length)
    refusal = ""
    progress.step("liftguard fit: calibration")
    progress(0, len(cal_tr))
    plain, paths = replays(stat, cal_tr, skel, limit)
    crit = np.array([critical_score(p, policy) for p in paths])
    cal, failed = None, ""
    if not fit_only:
        try:
            cal, _ = calibrate_fitted(
                stat,
                cal_tr,
                policy=policy,
                risk=args.risk,
                delta=args.delta,
                skeleton=skel,
                max_tokens=limit,
                seed=args.seed,
                paths=paths,
            )
        except InsufficientDataError as exc:
            failed = str(exc)
    if cal is None:
        cal = _certifies_nothing(stat, len(cal_tr), policy, args, limit)
        if fit_only:
            refusal = (
                f"the statistic is fitted on all {n} traces (--fit-fraction 1) and tau is not "
                f"calibrated, so the certificate certifies nothing (tau {cal.tau:.4g} is above "
                "every score the statistic can reach). Calibrate it on other labelled answers: "
                f"'liftguard calibrate --certificate {args.out} --traces OTHER.jsonl --risk R "
                "--out CALIBRATED.json'."
            )
        else:
            refusal = (
                f"calibration at risk {args.risk:g} on the {len(cal_tr)} held-out traces "
                f"({sum(bool(t.correct) for t in cal_tr)} correct) passed no threshold, so the "
                f"certificate certifies nothing (tau {cal.tau:.4g} is above every score the "
                f"statistic can reach). Recalibrate it with 'liftguard calibrate --certificate "
                f"{args.out} --traces MORE.jsonl --risk R' or refit with a laxer --risk. ({failed})"
            )
    progress.close()
    correct = np.array([bool(t.correct) for t in cal_tr])
    reads = [
        stop_at(p, policy, cal.tau) / t.n_tokens
        for p, t in zip(paths, cal_tr, strict=True)
        if t.n_tokens
    ]
    split = {
        "method": "numpy default_rng(seed).permutation; the first round(n * fit_fraction) "
        "traces fit the statistic, the rest calibrate tau",
        "seed": args.seed,
        "fit_fraction": args.fit_fraction,
        "n_fit": len(fit_tr),
        "n_calibration": len(cal_tr),
        "fit_ids_sha256": _ids_sha256([t.id for t in fit_tr]),
        "calibration_ids_sha256": _ids_sha256([t.id for t in cal_tr]),
    }
    cal_auroc = auroc(crit, correct) if cal_tr else None
    cost = None if refusal else margins_blocked(stat, plain, correct, policy, cal.tau)
    extra = {
        "split": split,
        "calibration_auroc": cal_auroc,
        "tokens_read_fraction": float(np.mean(reads)) if reads else 1.0,
        "margins_blocked": cost,
    }
    if refusal:
        extra["certifies_nothing"] = True
    cal = replace(cal, extra=extra)
    provenance: dict[str, Any] = {
        "traces": Path(args.traces).name,
        **trace_identity(args.traces, digest=digest.hexdigest()),
        "command": getattr(args, "command_line", ""),
        "fit": split,
    }
    skel_note = ""
    pf = "lift" in bases and args.skeleton == "prompt-free" and args.skeleton_spec is None
    if pf and not traces[0].model.startswith("smollm2"):
        skel_note = (
            "the certificate's prompt-free skeleton is the bundled SmolLM2 (no --skeleton-spec),"
            f" but the traces are {traces[0].model}'s: name the model and prefix that scored"
            " their prompt-free pass with --skeleton-spec, or serving it loads SmolLM2 and is"
            f" refused (vocabulary {vocab})"
        )
    notes = [n for n in (limit_note, alt_note, skel_note) if n]
    if notes:
        provenance["note"] = "; ".join(notes)
    model = ModelIdentity(
        args.model_id or traces[0].model, api_model=args.api_model, vocab_size=vocab
    )
    cert = Certificate(
        policy=policy,
        tau=cal.tau,
        skeleton=spec,
        model=model,
        context=context,
        calibration=cal,
        provenance=provenance,
        statistic=stat,
    )
    cert.save(args.out)
    if refusal:
        kind = "note" if fit_only else "warning"
        print(f"liftguard fit: {kind}: {refusal}", file=sys.stderr)
    summary = {
        "out": args.out,
        "group": stat.group,
        "scopes": scopes,
        "form": stat.form,
        "features": len(feats),
        "n_fit": len(fit_tr),
        "n_calibration": len(cal_tr),
        "risk": args.risk,
        "delta": args.delta,
        "tau": cal.tau,
        "tau_probability": _sigmoid(cal.tau),
        "coverage": cal.coverage,
        "empirical_risk": cal.empirical_risk,
        "risk_upper": cal.risk_upper,
        **extra,
        "certifies_nothing": bool(refusal),
        "max_tokens": limit,
        "selection": info.get("selection"),
        "early_block": info.get("early_block"),
    }
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return 0
    measured = (
        f"  coverage (cal)   {cal.coverage:.1%}   empirical risk {cal.empirical_risk:.3f}   "
        f"Clopper-Pearson upper {cal.risk_upper:.3f}\n"
        f"  tokens read      {extra['tokens_read_fraction']:.0%} before the verdict (mean, "
        f"calibration answers; token limit {limit})\n"
        f"{margins_line(cost)}"
    )
    cal_line = (
        "none: tau is for 'liftguard calibrate --certificate' to set"
        if fit_only
        else f"{len(cal_tr)} other traces: target risk {args.risk:g}, delta {args.delta:g}, "
        f"AUROC {cal_auroc:.3f}"
    )
    print(
        f"liftguard fit: {args.traces}  model {model.model_id}\n"
        f"  statistic        logistic over {len(feats)} features (group {stat.group}"
        f"{_scopes_note(scopes)}, form {stat.form}, {stat.alternatives} alternatives), "
        f"fitted on {len(fit_tr)} traces\n"
        f"{early_line(info.get('early_block'))}"
        f"{selection_line(info.get('selection'), args.risk)}"
        f"  calibration      {cal_line}\n"
        f"  tau              {cal.tau:.4f} log-odds (fitted probability {_sigmoid(cal.tau):.3f})"
        f"\n{'' if fit_only else measured}"
        f"  guarantee        {cal.guarantee}\n"
        f"wrote the certificate {args.out}"
    )
    for note in notes:
        print(f"liftguard fit: note: {note}")
    return 0


def _certifies_nothing(stat: Any, n: int, policy: Any, args: argparse.Namespace, limit: int) -> Any:
    """The calibration record of a threshold that shows no answer: the refusal's honest
    outcome (a rule that never answers has no selective risk to exceed)."""
    from guardrail import Calibration

    tau = stat.score_bounds(limit)[1] + 1.0
    return Calibration(
        method="ltt",
        tau=tau,
        risk=args.risk,
        delta=args.delta,
        score=f"fitted[{stat.group}, {stat.form}]",
        n=n,
        n_answered=0,
        n_errors=0,
        coverage=0.0,
        empirical_risk=0.0,
        risk_upper=0.0,
        seed=args.seed,
        policy=policy.to_dict(),
        guarantee="Certifies nothing: tau is not calibrated (the statistic was fitted on all "
        "the traces), so every answer is withheld; calibrate it with 'liftguard calibrate "
        "--certificate'."
        if n == 0
        else f"Certifies nothing: no threshold passed the risk test at risk {args.risk:g}, "
        f"delta {args.delta:g} on the calibration traces, so every answer is withheld.",
    )


def _scopes_note(scopes: list[str]) -> str:
    return f" + log-likelihood of scopes {'/'.join(scopes)}" if scopes else ""


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0
