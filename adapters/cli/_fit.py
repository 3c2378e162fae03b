"""``liftguard fit``: fit a streaming statistic on part of a model's labelled traces,
calibrate ``tau`` on the disjoint rest, and write the certificate. The recipe is
:func:`guardrail.fitting.fit_certificate`; here are its arguments, the files it reads and
writes, and the summary it prints.

Traces recorded from an API stream (see :mod:`adapters.cli._recorded`) fit the
``api`` group, and the ``lift`` group with a skeleton that reads the top-k
alternatives (``--skeleton temperature``); ``--vocab-size N`` supplies the
vocabulary size they may lack. A group that reads a field they lack (``local``:
exact entropies; ``lift`` with ``prompt-free``) is refused in one line."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from ._common import CommandError, other_promise_line
from ._margins import early_line, margins_line
from ._progress import Progress
from ._recorded import lacking_message, read_whole, supply_vocab_size

__all__ = ["cmd_fit"]


def _features(args: argparse.Namespace) -> tuple[Any, ...] | None:
    """The features ``--features`` names, else ``None`` (``--group``'s preset); which
    features a fit may read, :class:`~guardrail.fitting.FitOptions` checks."""
    from guardrail import ConfigError
    from guardrail.fitting import Feature

    if args.features is None:
        return None
    names = [n.strip() for n in args.features.split(",") if n.strip()]
    if not names:
        raise CommandError("--features: expected comma-separated feature names", status=2)
    try:
        return tuple(Feature.parse(n) for n in names)
    except ConfigError as exc:
        raise CommandError(f"--features: {exc}", status=2) from None


def _scopes(args: argparse.Namespace) -> tuple[str, ...] | None:
    """``--scopes``: ``None`` for ``auto`` (each scope the fitting answers use), else the
    scopes named (none for ``none``); with ``--features`` the features are as given."""
    from guardrail._scopes import SCOPES

    if args.features is not None:
        if args.scopes is not None:
            raise CommandError(
                "--scopes adds to --group's preset; with --features name scoped features "
                "yourself (e.g. number:logprob.sum)",
                status=2,
            )
        return None
    given = (args.scopes or "auto").strip().lower()
    if given in ("auto", "none"):
        return None if given == "auto" else ()
    scopes = [n.strip() for n in given.split(",") if n.strip()]
    if any(n not in SCOPES for n in scopes) or not scopes or len(set(scopes)) != len(scopes):
        raise CommandError(
            f"--scopes: expected auto, none or distinct scopes of {', '.join(SCOPES)}; "
            f"got {args.scopes!r}",
            status=2,
        )
    return tuple(scopes)


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


def fit_options(args: argparse.Namespace) -> Any:
    """The :class:`~guardrail.fitting.FitOptions` of ``liftguard fit``'s arguments (a
    value they refuse is a usage error that names its flag)."""
    from dataclasses import fields

    from guardrail import ConfigError
    from guardrail.fitting import FitOptions

    early = (args.early_block,) if args.early_block_given else FitOptions().early_block_choices
    try:
        return FitOptions(
            risk=args.risk,
            delta=args.delta,
            procedure=args.procedure,
            group=args.group,
            features=_features(args),
            scopes=_scopes(args),
            form=args.form,
            skeleton=args.skeleton,
            fit_fraction=args.fit_fraction,
            seed=args.seed,
            l2=args.l2,
            select=args.select,
            early_block=args.early_block,
            early_block_choices=early,
            early_block_share=args.early_block_share,
            early_block_tail=args.early_block_tail,
            clamp_features=args.feature_clamps == "fit",
            alternatives=args.alternatives,
            range_quantile=args.range_quantile,
            on_length=args.on_length,
            max_tokens=args.max_tokens,
            model_id=args.model_id,
            api_model=args.api_model,
        )
    except ConfigError as exc:  # "range_quantile must ..." -> "--range-quantile must ..."
        text = str(exc)
        field = text.split(" ", 1)[0].rstrip(":")
        if field in {f.name for f in fields(FitOptions)}:
            text = "--" + field.replace("_", "-") + text[len(field) :]
        raise CommandError(text.replace(" form monotone", " --form monotone"), status=2) from None


def cmd_fit(args: argparse.Namespace) -> int:
    from adapters._tracefiles._digest import TraceDigest, trace_identity
    from guardrail.fitting import fit_certificate, preset_features

    from ._certify import read_context, skeleton_spec

    options = fit_options(args)
    context = read_context(args.context)
    digest = TraceDigest()
    traces = read_whole(args.traces, "fit", "fitting and calibrating on them", digest=digest)
    traces = supply_vocab_size(traces, args.vocab_size, args.traces)
    feats = options.features or preset_features(options.group, options.form)
    for needs in _group_needs(args, {f.base for f in feats}):
        refusal = lacking_message(args.traces, traces, *needs)
        if refusal:
            raise CommandError(refusal)
    spec = None
    if args.skeleton_spec is not None:
        spec = skeleton_spec(args.skeleton, traces[0].vocab_size, args.skeleton_spec)
    progress = Progress("liftguard fit: features")

    def told(stage: str, done: int, total: int) -> None:
        progress.step(f"liftguard fit: {stage}")
        progress(done, total)

    identity = trace_identity(args.traces, digest=digest.hexdigest())
    provenance = {**identity, "command": getattr(args, "command_line", "")}
    try:
        cert, report = fit_certificate(traces, options, context=context, skeleton_spec=spec,
                                       source=args.traces, provenance=provenance,
                                       progress=told)  # fmt: skip
    finally:
        progress.close()
    cert.save(args.out)
    _print(args, cert, report)
    return 0


def _refusal(args: argparse.Namespace, cert: Any, report: Any) -> str:
    """Why the certificate certifies nothing, and what to run next."""
    tau = cert.calibration.tau
    if not report.calibrated:
        return (
            f"the statistic is fitted on all {report.n_fit} traces (--fit-fraction 1) and tau "
            f"is not calibrated, so the certificate certifies nothing (tau {tau:.4g} is above "
            "every score the statistic can reach). Calibrate it on other labelled answers: "
            f"'liftguard calibrate --certificate {args.out} --traces OTHER.jsonl --risk R "
            "--out CALIBRATED.json'."
        )
    return (
        f"calibration at risk {args.risk:g} on the {report.n_calibration} held-out traces "
        f"({report.n_calibration_correct} correct) passed no threshold, so the "
        f"certificate certifies nothing (tau {tau:.4g} is above every score the "
        f"statistic can reach). Recalibrate it with 'liftguard calibrate --certificate "
        f"{args.out} --traces MORE.jsonl --risk R' or refit with a laxer --risk. "
        f"({report.refusal})"
    )


def _print(args: argparse.Namespace, cert: Any, report: Any) -> None:
    """The summary of one ``fit`` run: JSON with ``--json``, else lines."""
    stat, cal = cert.statistic, cert.calibration
    if report.certifies_nothing:
        kind = "warning" if report.calibrated else "note"
        print(f"liftguard fit: {kind}: {_refusal(args, cert, report)}", file=sys.stderr)
    extra = cal.extra
    summary = {
        "out": args.out,
        "group": stat.group,
        "scopes": list(report.scopes),
        "form": stat.form,
        "features": len(stat.features),
        "n_fit": report.n_fit,
        "n_calibration": report.n_calibration,
        "risk": args.risk,
        "delta": args.delta,
        "tau": cal.tau,
        "tau_probability": _sigmoid(cal.tau),
        "coverage": cal.coverage,
        "empirical_risk": cal.empirical_risk,
        "risk_upper": cal.risk_upper,
        **extra,
        "certifies_nothing": report.certifies_nothing,
        "max_tokens": report.max_tokens,
        "selection": report.selection,
        "early_block": report.early_block,
        "in_expectation_coverage": report.in_expectation_coverage,
    }
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return
    other = report.in_expectation_coverage
    other_line = "" if other is None else other_promise_line(other) + "\n"
    measured = (
        f"  coverage (cal)   {cal.coverage:.1%}   empirical risk {cal.empirical_risk:.3f}   "
        f"Clopper-Pearson upper {cal.risk_upper:.3f}\n"
        f"{other_line}"
        f"  tokens read      {report.tokens_read_fraction:.0%} before the verdict (mean, "
        f"calibration answers; token limit {report.max_tokens})\n"
        f"{margins_line(report.margins_blocked)}"
    )
    cal_line = (
        f"{report.n_calibration} other traces: target risk {args.risk:g}, delta "
        f"{args.delta:g}, AUROC {report.calibration_auroc:.3f}"
        if report.calibrated
        else "none: tau is for 'liftguard calibrate --certificate' to set"
    )
    print(
        f"liftguard fit: {args.traces}  model {cert.model.model_id}\n"
        f"  statistic        logistic over {len(stat.features)} features (group {stat.group}"
        f"{_scopes_note(report.scopes)}, form {stat.form}, {stat.alternatives} alternatives), "
        f"fitted on {report.n_fit} traces\n"
        f"{early_line(report.early_block)}"
        f"{selection_line(report.selection, args.risk)}"
        f"  calibration      {cal_line}\n"
        f"  tau              {cal.tau:.4f} log-odds (fitted probability {_sigmoid(cal.tau):.3f})"
        f"\n{measured if report.calibrated else ''}"
        f"  guarantee        {cal.guarantee}\n"
        f"wrote the certificate {args.out}"
    )
    for note in report.notes:
        print(f"liftguard fit: note: {note}")


def selection_line(table: list[dict[str, Any]] | None, risk: float) -> str:
    """The summary's line for the selection (empty without one)."""
    if not table:
        return ""
    best = next(r for r in table if r["chosen"])
    line = (
        f"  selection        {best['candidate']}: cross-validated coverage "
        f"{best['cv_coverage']:.1%} at risk {risk:g}, best of {len(table)} candidates\n"
    )
    level = round(best["cv_coverage"], 12)
    tied = sum(round(r["cv_coverage"], 12) == level for r in table)
    if tied > 1:
        what = (
            f"{tied} candidates tie on coverage"
            if tied < len(table)
            else "every candidate certifies all of the fitting answers at this risk"
            if best["cv_coverage"] >= 1.0
            else "no candidate certifies anything at this risk"
            if best["cv_coverage"] == 0.0
            else f"all {tied} candidates tie on coverage"
        )
        line += (
            f"                   {what}: the choice fell to fewer refusals, then the "
            "out-of-fold AUROC, then the order listed\n"
        )
    behind = [r for r in table if round(r["cv_coverage"], 12) < level]
    if behind:  # how far ahead the choice is: a hair is no evidence for it
        second = max(behind, key=lambda r: r["cv_coverage"])
        gap = 100 * (best["cv_coverage"] - second["cv_coverage"])
        line += (
            f"                   next best {second['candidate']}: {second['cv_coverage']:.1%}, "
            f"{gap:.2f} points behind\n"
        )
    return line


def _scopes_note(scopes: tuple[str, ...]) -> str:
    return f" + log-likelihood of scopes {'/'.join(scopes)}" if scopes else ""


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0
