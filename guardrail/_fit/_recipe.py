"""Fitting a certificate: the whole recipe, from labelled traces to the deployed rule.

:func:`fit_certificate` splits the traces by a seeded permutation, fits a logistic
statistic over per-token features on one part (its clamp ranges, the scopes it reads,
optionally the statistic chosen by cross-validated coverage, its early-block margins;
:mod:`guardrail._fit._choice`), calibrates ``tau`` on the disjoint rest by the risk
control of :func:`~guardrail._fit._replay.calibrate_fitted`, and returns the
:class:`~guardrail.Certificate` with a :class:`FitReport` of what it measured
(:class:`FitOptions` and :class:`FitReport`: :mod:`guardrail._fit._options`).
``liftguard fit`` is this function behind a command line.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import PurePath
from typing import Any

import numpy as np

from .._aggregates import Feature
from .._calibration_record import Calibration
from .._certificate import Certificate
from .._certificate_parts import GenerationContext, ModelIdentity
from .._errors import ConfigError, InsufficientDataError
from .._features import SOURCES
from .._policy import StreamPolicy
from .._skeleton_spec import SkeletonSpec
from .._trace_format import Trace
from ._choice import (
    choose_statistic,
    early_margins,
    margins_blocked,
    replays,
    scope_sums,
)
from ._cv_coverage import Deployment
from ._logistic import answer_features, fit_statistic, token_ranges
from ._options import FitOptions, FitReport
from ._replay import calibrate_fitted, critical_score, stop_at
from ._statistic import DEFAULT_ALTERNATIVES, FittedStatistic, preset_features

__all__ = ["FitOptions", "FitReport", "fit_certificate"]

MIN_PART = 20
"""Fewest answers each part of the split (fitting, calibration) may hold."""


def fit_certificate(
    traces: Sequence[Trace],
    options: FitOptions | None = None,
    *,
    context: GenerationContext | None = None,
    skeleton_spec: SkeletonSpec | None = None,
    source: str = "",
    provenance: Mapping[str, Any] | None = None,
    progress: Callable[[str, int, int], object] | None = None,
) -> tuple[Certificate, FitReport]:
    """Fit a statistic on part of ``traces`` (labelled answers of one model), calibrate its
    tau on the disjoint rest, and return the certificate and a :class:`FitReport`.

    ``context``: the generation context of the traces (it gets the token limit);
    ``skeleton_spec``: the spec of ``options.skeleton`` the certificate records (default:
    that skeleton's own; either records the traces' vocabulary size); ``source``: the
    traces' file name or URL, recorded; ``provenance``: more entries for the certificate's
    provenance (the file's identity, the command); ``progress(stage, done, total)``: told
    of the slow stages (``"selection"``, ``"calibration"``). The docs page "Fitting from
    Python" fits, calibrates and evaluates one on the committed MBPP traces.

    Same traces, options and context, same certificate as ``liftguard fit``'s, byte for
    byte (the command passes the file's name, identity and command line as ``source``
    and ``provenance``).
    """
    opts = FitOptions() if options is None else options
    traces = list(traces)
    where = f"{source}: " if source else ""
    if not traces:
        raise ConfigError(f"{where}no traces to fit on")
    vocab, model_name = traces[0].vocab_size, traces[0].model
    if any(t.vocab_size != vocab or t.model != model_name for t in traces):
        raise ConfigError(f"{where}a certificate is for one model; the traces mix models")
    feats = preset_features(opts.group, opts.form) if opts.features is None else opts.features
    alternatives, alt_note = _alternatives(opts, feats, traces, where)
    ctx = GenerationContext() if context is None else context
    limit, limit_note = ctx.max_tokens or opts.max_tokens, ""
    if limit is None:
        limit = max(t.n_tokens for t in traces)
        limit_note = f"token limit {limit}: the longest answer in the traces (pass --max-tokens)"
    ctx = replace(ctx, max_tokens=limit)
    fit_tr, cal_tr, split = _split(traces, opts)
    spec = (
        SkeletonSpec.of_trace_skeleton(opts.skeleton, vocab)
        if skeleton_spec is None
        else _with_vocab(skeleton_spec, vocab, where)
    )
    skel: Any = "prompt-free" if opts.skeleton == "prompt-free" else spec.build()
    bases = [f.base for f in feats if f.base != "length"]
    info: dict[str, Any] = {"traces": PurePath(source).name} if source else {}
    info["skeleton"] = opts.skeleton
    stat, scopes = _fit(opts, fit_tr, feats, skel, alternatives, limit, info, progress)
    policy = StreamPolicy(on_length=opts.on_length)
    if progress is not None:
        progress("calibration", 0, len(cal_tr))
    plain, paths = replays(stat, cal_tr, skel, limit)
    cal, failed = None, ""
    if cal_tr:
        try:
            cal, _ = calibrate_fitted(stat, cal_tr, policy=policy, risk=opts.risk,
                                      delta=opts.delta, skeleton=skel, max_tokens=limit,
                                      seed=opts.seed, paths=paths,
                                      procedure=opts.procedure)  # fmt: skip
        except InsufficientDataError as exc:
            failed = str(exc)
    nothing = cal is None
    if cal is None:
        cal = _certifies_nothing(stat, len(cal_tr), policy, opts, limit)
    correct = np.array([bool(t.correct) for t in cal_tr])
    reads = [stop_at(p, policy, cal.tau) / t.n_tokens
             for p, t in zip(paths, cal_tr, strict=True) if t.n_tokens]  # fmt: skip
    cal_auroc: float | None = None
    other: float | None = None
    if cal_tr:
        from .._calibration import expectation_coverage
        from .._evaluate import auroc

        crit = np.array([critical_score(p, policy) for p in paths])
        cal_auroc = auroc(crit, correct)
        if opts.procedure != "conformal":
            other = expectation_coverage(crit, ~correct, opts.risk)
    cost = None if nothing else margins_blocked(stat, plain, correct, policy, cal.tau)
    extra: dict[str, Any] = {
        **cal.extra,  # the procedure's own record (its promise, its level), if any
        "split": split,
        "calibration_auroc": cal_auroc,
        "tokens_read_fraction": float(np.mean(reads)) if reads else 1.0,
        "margins_blocked": cost,
    }
    if nothing:
        extra["certifies_nothing"] = True
    cal = replace(cal, extra=extra)
    skel_note = _skeleton_note(opts, bases, skeleton_spec, model_name, vocab)
    notes = tuple(n for n in (limit_note, alt_note, skel_note) if n)
    record: dict[str, Any] = {"traces": PurePath(source).name} if source else {}
    record |= {**(provenance or {}), "fit": split}
    if notes:
        record["note"] = "; ".join(notes)
    model = ModelIdentity(opts.model_id or model_name, api_model=opts.api_model,
                          vocab_size=vocab)  # fmt: skip
    cert = Certificate(policy=policy, tau=cal.tau, skeleton=spec, model=model, context=ctx,
                       calibration=cal, provenance=record, statistic=stat)  # fmt: skip
    report = FitReport(
        scopes=tuple(scopes),
        n_fit=len(fit_tr),
        n_calibration=len(cal_tr),
        n_calibration_correct=int(correct.sum()),
        max_tokens=limit,
        calibrated=bool(cal_tr),
        calibration_auroc=cal_auroc,
        tokens_read_fraction=extra["tokens_read_fraction"],
        margins_blocked=cost,
        certifies_nothing=nothing,
        refusal=failed,
        in_expectation_coverage=other,
        selection=stat.info.get("selection"),
        early_block=stat.info.get("early_block"),
        notes=notes,
    )
    return cert, report


def _fit(
    opts: FitOptions,
    fit_tr: list[Trace],
    feats: tuple[Feature, ...],
    skel: Any,
    alternatives: int,
    limit: int,
    info: dict[str, Any],
    progress: Callable[[str, int, int], object] | None,
) -> tuple[FittedStatistic, list[str]]:
    """The statistic fitted on ``fit_tr`` (the scopes added, the one chosen where
    ``select="coverage"``, its early-block margins; how, in ``info``) and the scopes it
    reads."""
    vocab = fit_tr[0].vocab_size
    scopes: list[str] = []
    if opts.features is None:
        feats, scopes = scope_sums(feats, opts.scopes, fit_tr)
    bases = [f.base for f in feats if f.base != "length"]
    ranges = token_ranges(fit_tr, bases, quantile=opts.range_quantile, skeleton=skel,
                          alternatives=alternatives)  # fmt: skip
    l2, early_block = opts.l2, opts.early_block
    if opts.select == "coverage":
        deployment = Deployment(fit_tr, StreamPolicy(on_length=opts.on_length), skeleton=skel,
                                max_tokens=limit, form=opts.form, ranges=ranges,
                                alternatives=alternatives,
                                early_block_share=opts.early_block_share,
                                early_block_tail=opts.early_block_tail,
                                clamp=opts.clamp_features)  # fmt: skip
        name = "features" if opts.features is not None else f"group {opts.group}"
        told = None if progress is None else _stage(progress, "selection")
        chosen = choose_statistic(opts, name, fit_tr, feats, deployment, vocab, told)
        feats, l2, early_block, x, info["selection"] = chosen
        scopes = [s for s in scopes if Feature.parse(f"{s}:logprob.sum") in feats]
    else:
        x = answer_features(fit_tr, feats, ranges=ranges, skeleton=skel,
                            alternatives=alternatives)  # fmt: skip
    if scopes:
        info["scopes"] = scopes
    stat = fit_statistic(x, [bool(t.correct) for t in fit_tr], feats, vocab_size=vocab,
                         form=opts.form, l2=l2, ranges=ranges, alternatives=alternatives,
                         info=info, clamp=opts.clamp_features)  # fmt: skip
    if early_block is not None:
        tail = opts.early_block_tail
        margins, widened = early_margins(stat, fit_tr, early_block, opts.early_block_share,
                                         skel, limit, tail)  # fmt: skip
        info["early_block"] = {"quantile": early_block, **widened, "positions": len(margins),
                               **({"tail": tail} if tail != "flat" else {})}  # fmt: skip
        stat = replace(stat, block_margins=margins, info=info)
    return stat, scopes


def _stage(progress: Callable[[str, int, int], object], stage: str) -> Callable[[int, int], None]:
    def told(done: int, total: int) -> None:
        progress(stage, done, total)

    return told


def _alternatives(
    opts: FitOptions, feats: tuple[Feature, ...], traces: list[Trace], where: str
) -> tuple[int, str]:
    """The alternatives per token the statistic reads, and a note when the traces carry
    fewer than the default: it must read what the calibration and the streams see."""
    reads = sorted({f.name for f in feats if SOURCES.get(f.base) == "alternatives"})
    have = min(t.top_k for t in traces)
    if not reads:
        return opts.alternatives or DEFAULT_ALTERNATIVES, ""
    if have < 1:
        raise ConfigError(
            f"{where}the traces carry no alternatives, and {', '.join(reads)} read "
            "them; record with top_logprobs, or fit --features over logprob, lift and length"
        )
    if opts.alternatives is not None:
        if opts.alternatives > have:
            raise ConfigError(
                f"--alternatives {opts.alternatives}: the traces carry {have} per token"
            )
        return opts.alternatives, ""
    if have >= DEFAULT_ALTERNATIVES:
        return DEFAULT_ALTERNATIVES, ""
    return have, (
        f"the traces carry {have} alternatives per token: the statistic reads "
        f"{have}, and a stream must send at least as many"
    )


def _split(
    traces: list[Trace], opts: FitOptions
) -> tuple[list[Trace], list[Trace], dict[str, Any]]:
    """The fitting and calibration answers (a seeded permutation; both at least
    :data:`MIN_PART`), and the split's record."""
    n = len(traces)
    perm = np.random.default_rng(opts.seed).permutation(n)
    n_fit = round(n * opts.fit_fraction)
    if opts.fit_fraction == 1.0 and n < MIN_PART:
        raise InsufficientDataError(f"{n} traces: the fit needs >= {MIN_PART}")
    if opts.fit_fraction != 1.0 and (n_fit < MIN_PART or n - n_fit < MIN_PART):
        raise InsufficientDataError(
            f"{n} traces split {n_fit}/{n - n_fit}: both parts need >= {MIN_PART} (or "
            "--fit-fraction 1 to fit on all of them and calibrate elsewhere)"
        )
    fit_tr = [traces[i] for i in np.sort(perm[:n_fit])]
    cal_tr = [traces[i] for i in np.sort(perm[n_fit:])]
    split = {
        "method": "numpy default_rng(seed).permutation; the first round(n * fit_fraction) "
        "traces fit the statistic, the rest calibrate tau",
        "seed": opts.seed,
        "fit_fraction": opts.fit_fraction,
        "n_fit": len(fit_tr),
        "n_calibration": len(cal_tr),
        "fit_ids_sha256": _ids_sha256([t.id for t in fit_tr]),
        "calibration_ids_sha256": _ids_sha256([t.id for t in cal_tr]),
    }
    return fit_tr, cal_tr, split


def _with_vocab(spec: SkeletonSpec, vocab: int, where: str) -> SkeletonSpec:
    """``spec`` recording the traces' vocabulary size (refused if it records another)."""
    try:
        return spec.with_vocab_size(vocab)
    except ConfigError as exc:
        raise ConfigError(f"{where}skeleton_spec {exc}") from None


def _ids_sha256(ids: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(ids)).encode("utf-8")).hexdigest()


def _skeleton_note(
    opts: FitOptions, bases: list[str], given: SkeletonSpec | None, model: str, vocab: int
) -> str:
    """A note when the certificate's prompt-free skeleton (the bundled SmolLM2, none named)
    is not the model that scored the traces' prompt-free pass."""
    if "lift" not in bases or opts.skeleton != "prompt-free" or given is not None:
        return ""
    if model.startswith("smollm2"):
        return ""
    return (
        "the certificate's prompt-free skeleton is the bundled SmolLM2 (no --skeleton-spec),"
        f" but the traces are {model}'s: name the model and prefix that scored"
        " their prompt-free pass with --skeleton-spec, or serving it loads SmolLM2 and is"
        f" refused (vocabulary {vocab})"
    )


def _certifies_nothing(
    stat: FittedStatistic, n: int, policy: StreamPolicy, opts: FitOptions, limit: int
) -> Calibration:
    """The calibration record of a threshold that shows no answer: the refusal's honest
    outcome (a rule that never answers has no selective risk to exceed)."""
    tau = stat.score_bounds(limit)[1] + 1.0
    return Calibration(
        method="ltt",
        tau=tau,
        risk=opts.risk,
        delta=opts.delta,
        score=f"fitted[{stat.group}, {stat.form}]",
        n=n,
        n_answered=0,
        n_errors=0,
        coverage=0.0,
        empirical_risk=0.0,
        risk_upper=0.0,
        seed=opts.seed,
        policy=policy.to_dict(),
        guarantee="Certifies nothing: tau is not calibrated (the statistic was fitted on all "
        "the traces), so every answer is withheld; calibrate it with 'liftguard calibrate "
        "--certificate'."
        if n == 0
        else f"Certifies nothing: no threshold passed the risk test at risk {opts.risk:g}, "
        f"delta {opts.delta:g} on the calibration traces, so every answer is withheld.",
    )
