"""``liftguard calibrate --certificate CERT``: calibrate a fitted certificate's threshold
on labelled answers of another dataset (or fresh traffic), its statistic held fixed.

The statistic was fitted on the answers named in the certificate's provenance; tau is
chosen here, by the same fixed-sequence procedure as everywhere
(:func:`guardrail._fit._replay.calibrate_fitted`), on the answers given. The guarantee's
argument (``calibrate_fitted``'s docstring) needs those answers to be independent of
the fitting ones: the command refuses the data the statistic was fitted on, in any
container (the same file, or its Parquet or JSONL twin: the traces digest of
:func:`adapters._tracefiles._digest.trace_identity`; a certificate that records no digest is
compared by the file's sha256, as before), and the calibration record names both
files' sha256 and digests.

``--margins-from TRAFFIC`` first sets the statistic's early-block margins from every
answer of ``TRAFFIC`` (:func:`guardrail.fitting.block_margins` with ``answers="all"``;
labels are not read, so recorded traffic serves as it is), at ``--early-block``'s quantile
(default :data:`~adapters.cli._fit_args.TRAFFIC_EARLY_BLOCK`), ending where fewer than 20
traffic answers still run, or carried on to the token limit with ``--early-block-tail``
(``flat`` or ``sqrt``, as ``fit``'s). The margins are then part
of the rule calibration replays; they must be fixed before it, so answers that are
calibration answers (the same data in any container, or a calibration answer's id) are
refused.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ._common import CommandError, other_promise_line
from ._recorded import lacking_message, read_whole, supply_vocab_size

if TYPE_CHECKING:
    from guardrail import StreamPolicy
    from guardrail.fitting import FittedPath

__all__ = ["cmd_recalibrate"]

_FLAGS = (
    "score",
    "skeleton",
    "aggregate",
    "lowest_k",
    "boundary",
    "clip",
    "min_tokens",
    "stream_delta",
    "on_length",
    "method",
    "cal_fraction",
    "n_cal",
    "repeats",
    "model_id",
    "api_model",
    "context",
)


def _refuse_rule_flags(args: argparse.Namespace, defaults: dict[str, Any]) -> None:
    """The rule comes from the certificate: flags that would change it are usage errors."""
    given = [f for f in _FLAGS if getattr(args, f, None) != defaults.get(f)]
    if given:
        flags = ", ".join("--" + f.replace("_", "-") for f in given)
        raise CommandError(
            f"--certificate keeps the certificate's rule, model and context: drop {flags}",
            status=2,
        )


def cmd_recalibrate(args: argparse.Namespace, defaults: dict[str, Any]) -> int:
    """Calibrate ``args.certificate``'s tau on ``args.traces``; write ``args.out``."""
    from adapters._tracefiles._digest import same_traces
    from guardrail import Certificate, InsufficientDataError
    from guardrail._calibration import expectation_coverage
    from guardrail._fit._extrapolation import farthest_feature
    from guardrail._fit._replay import calibrate_fitted
    from guardrail.evaluate import auroc, ranking_check

    from ._margins import margins_blocked, margins_line, replays

    _refuse_rule_flags(args, defaults)
    if args.out is None:
        raise CommandError("--certificate needs --out (the recalibrated certificate)", status=2)
    cert = Certificate.load(args.certificate)
    stat = cert.statistic
    if stat is None:
        raise CommandError(
            f"{args.certificate}: has no fitted statistic; a single-score certificate is "
            "calibrated by the options of 'calibrate' itself"
        )
    fitted_on = cert.provenance.get("traces_sha256")
    traces, identity = _read_for(
        cert, args.traces, args.vocab_size, "calibrating on them", require_label=True
    )
    if same_traces(cert.provenance, identity):
        raise CommandError(
            f"{args.traces}: these are the traces the certificate's statistic was fitted on; "
            "calibrate on other labelled answers (the guarantee needs answers independent "
            "of the fit)"
        )
    models = {t.model for t in traces}
    if models != {cert.model.model_id}:
        print(
            f"liftguard calibrate: warning: the certificate is for model "
            f"{cert.model.model_id!r}, the traces are from {', '.join(sorted(models))} "
            "(certificates do not transfer across models)",
            file=sys.stderr,
        )
    skeleton = cert.replay_skeleton()
    far = farthest_feature(stat, traces, skeleton)
    if far is not None and far.far:
        print(f"liftguard calibrate: warning: {far.warning()}", file=sys.stderr)
    traffic = None
    if args.margins_from is not None:
        stat, traffic = _traffic_margins(args, cert, skeleton, traces, identity)
        cert = replace(cert, statistic=stat)
    plain, paths = replays(stat, traces, skeleton, cert.context.max_tokens)
    final = np.array([p.final for p in paths])  # eval's AUROC: the final score, not crit
    correct = np.array([bool(t.correct) for t in traces])
    ranking = ranking_check(final, traces, seed=args.seed)
    if ranking is not None and ranking.weaker:
        print(f"liftguard calibrate: warning: {ranking.warning()}", file=sys.stderr)
    try:
        cal, crit = calibrate_fitted(
            stat,
            traces,
            policy=cert.policy,
            risk=args.risk,
            delta=args.delta,
            skeleton=skeleton,
            max_tokens=cert.context.max_tokens,
            seed=args.seed,
            paths=paths,
            procedure=args.procedure,
        )
    except InsufficientDataError as exc:
        raise CommandError(f"calibration on {len(traces)} traces refused: {exc}") from exc
    cost = margins_blocked(stat, plain, correct, cert.policy, cal.tau)
    other = None  # what the promise in expectation would show, beside this one
    if args.procedure != "conformal":
        other = expectation_coverage(crit, ~correct, args.risk)
    read = _blocked_read(paths, crit, cert.policy, cal.tau)
    split = {
        "method": "the statistic was fitted on other answers (provenance.fit); all of "
        "these calibrate tau",
        "fitted_on": cert.provenance.get("traces"),
        "fitted_on_sha256": fitted_on,
        "fitted_on_digest": cert.provenance.get("traces_digest"),
        "n_calibration": len(traces),
    }
    extra = {"split": split, "calibration_auroc": auroc(final, correct), "margins_blocked": cost}
    cal = replace(cal, extra=extra)
    provenance = {
        **{k: v for k, v in cert.provenance.items() if k in ("fit", "note")},
        "fitted_on": cert.provenance.get("traces"),
        "fitted_on_sha256": fitted_on,
        "fitted_on_digest": cert.provenance.get("traces_digest"),
        "fit_command": cert.provenance.get("command", ""),
        "traces": Path(args.traces).name,
        **identity,
        "command": getattr(args, "command_line", ""),
    }
    out = replace(cert, tau=cal.tau, calibration=cal, provenance=provenance)
    out.save(args.out)
    summary = {
        "out": args.out,
        "n_calibration": len(traces),
        "risk": args.risk,
        "delta": args.delta,
        "tau": cal.tau,
        "coverage": cal.coverage,
        "empirical_risk": cal.empirical_risk,
        "risk_upper": cal.risk_upper,
        "calibration_auroc": cal.extra["calibration_auroc"],
        "margins_blocked": cost,
        "margins_from": traffic,
        "blocked_read": read,
        "in_expectation_coverage": other,
        "extrapolation": None if far is None else {"feature": far.feature,
                                                   "median_z": far.median_z, "far": far.far,
                                                   "clamped": far.clamped},
        "ranking": None if ranking is None else ranking.to_dict(),
    }  # fmt: skip
    if getattr(args, "json", False):
        print(json.dumps(summary, indent=2, sort_keys=True))
        return 0
    other_line = "" if other is None else other_promise_line(other) + "\n"
    print(
        f"liftguard calibrate: {args.traces}  certificate {args.certificate} (statistic held "
        f"fixed, fitted on {cert.provenance.get('traces', '?')})\n"
        f"  calibration      {len(traces)} traces: target risk {args.risk:g}, delta "
        f"{args.delta:g}, AUROC {summary['calibration_auroc']:.3f}\n"
        f"{_ranking_line(ranking)}"
        f"  tau              {cal.tau:.4f} log-odds\n"
        f"  coverage (cal)   {cal.coverage:.1%}   empirical risk {cal.empirical_risk:.3f}   "
        f"Clopper-Pearson upper {cal.risk_upper:.3f}\n"
        f"{other_line}"
        f"{_traffic_line(traffic)}"
        f"{margins_line(cost)}"
        f"{_blocked_read_line(read, args.margins_from is None)}"
        f"  guarantee        {cal.guarantee}\n"
        f"wrote the certificate {args.out}"
    )
    return 0


def _ranking_line(ranking: Any) -> str:
    """The statistic's ranking beside the best single score's, where there is one."""
    return "" if ranking is None else f"  ranking          {ranking.line()}\n"


def _read_for(
    cert: Any, path: str, vocab_size: int | None, use: str, *, require_label: bool
) -> tuple[list[Any], dict[str, str]]:
    """The whole answers of ``path`` (:func:`~adapters.cli._recorded.read_whole`; ``use``:
    what is done with them), refused in one line where they lack what ``cert``'s statistic
    reads or are of another vocabulary (``vocab_size``: ``--vocab-size``, for recordings
    without one); and the file's identity (:func:`adapters._tracefiles._digest.trace_identity`, its
    digest computed in the same pass)."""
    from adapters._tracefiles._digest import TraceDigest, trace_identity

    from ._eval import _certificate_needs

    digest = TraceDigest()
    traces = read_whole(path, "calibrate", use, require_label=require_label, digest=digest)
    identity = trace_identity(path, digest=digest.hexdigest())
    traces = supply_vocab_size(traces, vocab_size, path)
    fields, what = _certificate_needs(cert)
    refusal = lacking_message(path, traces, ("vocab_size", *fields), what, "")
    if refusal:
        raise CommandError(refusal)
    if any(t.vocab_size != cert.statistic.vocab_size for t in traces):
        raise CommandError(
            f"the certificate's statistic is for a vocabulary of {cert.statistic.vocab_size} "
            f"tokens; {path} has traces of another vocabulary: certificates are per model"
        )
    return traces, identity


def _traffic_margins(
    args: argparse.Namespace,
    cert: Any,
    skeleton: Any,
    calibration: list[Any],
    cal_identity: dict[str, str],
) -> tuple[Any, dict[str, Any]]:
    """The certificate's statistic with early-block margins from every answer of
    ``--margins-from`` (labels unread), and what to record of them. The margins are part
    of the rule that calibration replays, so they must not come from calibration answers:
    the same data (in any container), or answers with a calibration answer's id, are
    refused."""
    from adapters._tracefiles._digest import same_traces
    from guardrail.fitting import block_margins

    from ._fit_args import TRAFFIC_EARLY_BLOCK

    path = args.margins_from
    stat = cert.statistic
    use = "setting margins from them"
    traffic, identity = _read_for(cert, path, args.vocab_size, use, require_label=False)
    if same_traces(cal_identity, identity):  # labels unread: the same answers all the same
        raise CommandError(
            f"--margins-from {path}: these are the calibration traces; set the margins from "
            "other answers of the traffic (the guarantee needs them fixed before calibration)"
        )
    shared = {t.id for t in traffic} & {t.id for t in calibration}
    if shared:
        raise CommandError(
            f"--margins-from {path}: {len(shared)} of its answers have the id of a calibration "
            f"answer (e.g. {sorted(shared)[0]!r}); set the margins from other answers of the "
            "traffic (the guarantee needs them fixed before calibration)"
        )
    quantile = TRAFFIC_EARLY_BLOCK if args.early_block is None else args.early_block
    limit = cert.context.max_tokens
    tail = args.early_block_tail
    if tail is not None and limit is None:
        raise CommandError(
            "--early-block-tail carries the margins on to the token limit, and the "
            "certificate's context sets none (max_tokens)"
        )
    carry: dict[str, Any] = {} if tail is None else {"positions": limit, "tail": tail}
    margins = block_margins(stat, traffic, quantile, skeleton=skeleton, max_tokens=limit,
                            answers="all", **carry)  # fmt: skip
    n_answers = sum(1 for t in traffic if t.n_tokens)
    if not margins:
        raise CommandError(
            f"--margins-from {path}: its {n_answers} answers are too few to set a margin; "
            "record more of the traffic, or drop --margins-from to keep the certificate's "
            "margins"
        )
    record = {
        "quantile": quantile,
        "positions": len(margins),
        **({} if tail is None else {"tail": tail}),
        "answers": "all",
        "n_answers": n_answers,
        "traces": Path(path).name,
        **identity,
    }
    info = {**stat.info, "early_block": record}
    return replace(stat, block_margins=margins, info=info), record


def _traffic_line(record: dict[str, Any] | None) -> str:
    """The summary's line on margins set from ``--margins-from`` (empty without it)."""
    if record is None:
        return ""
    return (
        f"  margins          from {record['n_answers']} answers of {record['traces']} (labels "
        f"not read): the first {record['positions']} tokens, quantile {record['quantile']:g}\n"
    )


BLOCKED_READ_HINT = 0.5
"""Where a blocked calibration answer is read for more than this share of its tokens on
average, the summary names ``--margins-from``."""


def _blocked_read(
    paths: Sequence[FittedPath], crit: npt.NDArray[np.float64], policy: StreamPolicy, tau: float
) -> dict[str, float | int] | None:
    """How much of a blocked calibration answer the monitor reads at ``tau`` before it stops
    it (:func:`guardrail._fit._replay.read_share` of the answers not shown): the mean and
    median share of its tokens, and how many were blocked; ``None`` where none was."""
    from guardrail._fit._replay import read_share

    shares = np.array([read_share(p, policy, tau) for p, c in zip(paths, crit, strict=True)
                       if c < tau])  # fmt: skip
    shares = shares[~np.isnan(shares)]
    if not shares.size:
        return None
    return {"blocked": int(shares.size), "of": len(paths), "mean": float(shares.mean()),
            "median": float(np.median(shares))}  # fmt: skip


def _blocked_read_line(read: dict[str, float | int] | None, hint: bool) -> str:
    """The summary's line on how soon a blocked answer is stopped (empty where none is);
    ``hint``: name ``--margins-from`` where over :data:`BLOCKED_READ_HINT` is read."""
    if read is None:
        return ""
    line = (
        f"  blocked answers  read for {read['mean']:.0%} of their tokens before they are "
        f"stopped (median {read['median']:.0%}; {read['blocked']} of {read['of']} blocked)\n"
    )
    if hint and read["mean"] > BLOCKED_READ_HINT:
        line += (
            "                   over half: margins set from a recording of this traffic may "
            "stop them sooner (--margins-from TRAFFIC, unlabelled; some coverage for it)\n"
        )
    return line
