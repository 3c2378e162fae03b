"""``liftguard skeleton ...``: build or put (a certificate), inspect, move and verify versions.

Store errors (:class:`skeleton_store.StoreError`: a missing store or version, a
damaged file, an unreachable backend; each one line naming the file or URL)
propagate to :func:`adapters.cli.main`, which prints
``liftguard skeleton <cmd>: error: <message>`` and exits with status 1.
Warnings of the store (a version that ``latest`` skips, an alias left out of a
listing, a repair) are printed as ``liftguard skeleton <cmd>: warning: <message>``
(with ``-v``, the log shows them instead).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._store_warnings import with_store_warnings

__all__ = ["add_skeleton_parser", "parse_storage_option"]


def parse_storage_option(text: str, into: dict[str, Any]) -> None:
    """Add ``KEY=VALUE`` to the storage options ``into`` (ValueError if malformed).

    ``VALUE`` is parsed as JSON when it parses (``true``, ``1``, ``{"a": 1}``),
    else kept as a string; a dotted ``KEY`` nests (``client_kwargs.endpoint_url=URL``
    -> ``{"client_kwargs": {"endpoint_url": "URL"}}``). A key given twice, or
    both as a value and as an object, is refused.
    """
    key, sep, raw = text.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(p.strip() for p in parts):
        raise ValueError("expected KEY=VALUE, KEY a name or dotted path (a.b.c)")
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    node = into
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ValueError(f"{'.'.join(parts[: i + 1])} is already set to {child!r}")
        node = child
    if parts[-1] in node:
        raise ValueError(f"{key.strip()} is given twice")
    node[parts[-1]] = value


class _StorageOptionAction(argparse.Action):
    """``--storage-option KEY=VALUE`` (repeatable) -> one nested dict; exit 2 if malformed."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        options = dict(getattr(namespace, self.dest, None) or {})
        try:
            parse_storage_option(str(values), options)
        except ValueError as exc:
            parser.error(f"argument {option_string}: {values!r}: {exc}")
        setattr(namespace, self.dest, options)


def _store(args: argparse.Namespace) -> Any:
    from skeleton_store import SkeletonStore

    return SkeletonStore(args.store, storage_options=args.storage_options)


def _print(obj: Any) -> None:
    """A text as it is, anything else as indented JSON."""
    print(obj if isinstance(obj, str) else json.dumps(obj, indent=2, sort_keys=True, default=str))


def _cmd_build(args: argparse.Namespace) -> int:
    from guardrail import GuardrailError, StreamPolicy, calibrate_policy
    from guardrail._scores import unigram_log_probs
    from guardrail.traces import read_traces, vector_clipped_lifts

    traces = read_traces(args.traces)
    if not traces:
        print(f"error: {args.traces} holds no traces", file=sys.stderr)
        return 2
    if args.kind == "vsd":
        return _build_vsd(args, traces)
    vocab = traces[0].vocab_size
    if any(t.vocab_size != vocab for t in traces):
        print("error: the traces mix vocabularies", file=sys.stderr)
        return 2
    if args.kind == "uniform":
        log_s = np.full(vocab, -math.log(vocab))
        params: dict[str, Any] = {}
    else:
        ids = np.concatenate([t.token_ids for t in traces])
        log_s = unigram_log_probs(ids, vocab, smoothing=args.smoothing, floor=args.floor)
        params = {"smoothing": args.smoothing, "floor": args.floor, "tokens": int(ids.size)}
    calibration = None
    if args.risk is not None:
        policy = StreamPolicy(aggregate=args.aggregate, clip=args.clip, lowest_k=args.lowest_k)
        lifts = [vector_clipped_lifts(t, log_s, args.clip) for t in traces]
        correct = np.array([bool(t.correct) for t in traces])
        try:
            calibration = calibrate_policy(
                policy, lifts, correct, risk=args.risk, delta=args.delta
            ).to_dict()
        except GuardrailError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    version = _store(args).put(
        args.name,
        {"log_probs": log_s},
        kind=args.kind,
        parent=args.parent,
        model_id=args.model_id or traces[0].model,
        vocab_size=vocab,
        logprob_mode=args.logprob_mode,
        params=params,
        calibration=calibration,
        extra={"traces": str(args.traces), "n_traces": len(traces)},
    )
    print(f"wrote {args.name} {version.tag} ({args.kind}, vocabulary {vocab})")
    if calibration is not None:
        print(
            f"  calibrated: tau {calibration['tau']:.4f}, coverage {calibration['coverage']:.1%}, "
            f"risk {calibration['empirical_risk']:.3f} (target {args.risk:g}, delta {args.delta:g})"
        )
    return 0


def _target(args: argparse.Namespace) -> Any:
    from guardrail import StreamPolicy

    if args.risk is None:
        return None
    policy = StreamPolicy(aggregate=args.aggregate, clip=args.clip, lowest_k=args.lowest_k)
    return (policy, args.risk, args.delta)


def _report_vsd(args: argparse.Namespace, version: Any) -> int:
    trace = version.vsd_trace or {}
    print(
        f"wrote {version.name} {version.tag} (vsd, parent {version.parent}): "
        f"{trace.get('iterations')} iterations, {trace.get('seconds', 0.0):.2f} s, "
        f"converged {trace.get('converged')}"
    )
    cal = version.calibration
    if cal is not None:
        print(
            f"  calibrated: tau {cal['tau']:.4f}, coverage {cal['coverage']:.1%}, "
            f"risk {cal['empirical_risk']:.3f} (target {cal['risk']:g}, delta {cal['delta']:g})"
        )
    return 0


def _build_vsd(args: argparse.Namespace, traces: Any) -> int:
    from skeleton_store import build_vsd_version

    version = build_vsd_version(
        _store(args),
        args.name,
        traces,
        lam=args.lam,
        clip=args.clip,
        calibrate_with=_target(args),
        parent=args.parent,
        model_id=args.model_id or traces[0].model,
        logprob_mode=args.logprob_mode,
    )
    return _report_vsd(args, version)


def _cmd_warm_start(args: argparse.Namespace) -> int:
    from guardrail.traces import read_traces
    from skeleton_store import warm_start

    traces = read_traces(args.traces)
    if not traces:
        print(f"error: {args.traces} holds no traces", file=sys.stderr)
        return 2
    version = warm_start(
        _store(args), args.name, traces, alias=args.alias, calibrate_with=_target(args)
    )
    return _report_vsd(args, version)


def _cmd_put(args: argparse.Namespace) -> int:
    """Store a certificate file (``calibrate``/``fit --out``) as a new version; print its number."""
    from pathlib import Path

    from guardrail import Certificate
    from skeleton_store._names import check_alias

    if args.promote is not None:
        check_alias(args.promote, settable=True)  # before anything is written
    cert = Certificate.load(args.certificate)  # a missing or invalid file: one line naming it
    store = _store(args)
    extra = {"certificate_file": Path(args.certificate).name}
    version = store.put(
        args.name, {}, kind="certificate", certificate=cert, parent=args.parent, extra=extra
    )
    moved = ""
    if args.promote is not None:
        store.promote(args.name, version.version, alias=args.promote)
        moved = f"; {args.promote} -> {version.tag}"
    print(version.version)
    print(
        f"liftguard skeleton put: wrote {args.name} {version.tag} to {store.url} from "
        f"{args.certificate} (tau {cert.tau:.4g}){moved}",
        file=sys.stderr,
    )
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    _print([info.to_dict() for info in _store(args).list(args.name)])
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    _print(_store(args).show(args.name, args.ref))
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    from ._skeleton_diff import certificate_comparison

    store = _store(args)
    short = None if args.json else certificate_comparison(store, args.name, args.a, args.b)
    _print(short if short is not None else store.diff(args.name, args.a, args.b))
    return 0


def _cmd_promote(args: argparse.Namespace) -> int:
    _print(_store(args).promote(args.name, args.ref, alias=args.alias).to_dict())
    return 0


def _cmd_rollback(args: argparse.Namespace) -> int:
    _print(_store(args).rollback(args.name, alias=args.alias).to_dict())
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    store = _store(args)
    report: dict[str, Any] = {"store": store.url}
    if args.repair:
        report["repaired"] = store.repair(args.name)
    report["problems"] = store.verify(args.name)
    _print(report)
    return 1 if report["problems"] else 0


def add_skeleton_parser(sub: Any) -> None:
    """Register ``liftguard skeleton`` and its sub-commands."""
    sk = sub.add_parser("skeleton", help="build and manage versioned skeletons")
    sk.add_argument(
        "--store", default=None, help="store URL or directory (default: $LIFTGUARD_STORE)"
    )
    sk.add_argument(
        "--storage-option",
        dest="storage_options",
        action=_StorageOptionAction,
        default=None,
        metavar="KEY=VALUE",
        help="fsspec storage option for a store URL (repeatable). VALUE is JSON when it "
        "parses (true, 1, {...}), else a string; dotted keys nest: "
        "client_kwargs.endpoint_url=http://host:9000, anon=true, profile=NAME",
    )
    cmds = sk.add_subparsers(dest="skeleton_command", required=True)

    b = cmds.add_parser("build", help="build a skeleton from traces and store a new version")
    b.add_argument("--name", required=True)
    b.add_argument("--traces", required=True, help="JSONL trace file (vocabulary and tokens)")
    b.add_argument("--kind", default="unigram", choices=("unigram", "uniform", "vsd"))
    b.add_argument("--lam", type=float, default=0.5, help="VSD lambda (0.3-0.7)")
    b.add_argument("--smoothing", type=float, default=1.0)
    b.add_argument("--floor", type=float, default=1e-3)
    b.add_argument("--risk", type=float, default=None, help="also calibrate for this risk")
    b.add_argument("--delta", type=float, default=0.05)
    b.add_argument("--aggregate", default="min", choices=("mean", "min", "lowest"))
    b.add_argument("--lowest-k", type=int, default=2)
    b.add_argument("--clip", type=float, default=12.0)
    b.add_argument("--parent", default=None, help="version this one derives from")
    b.add_argument("--model-id", default=None)
    b.add_argument("--logprob-mode", default="processed", choices=("raw", "processed"))
    b.set_defaults(func=with_store_warnings(_cmd_build))

    ws = cmds.add_parser(
        "warm-start",
        help="re-run VSD on a changed model's traces from the stored version; new child version",
    )
    ws.add_argument("name")
    ws.add_argument("--traces", required=True, help="traces of the new model")
    ws.add_argument("--alias", default="latest", help="version to start from")
    ws.add_argument("--risk", type=float, default=None, help="recalibrate for this risk")
    ws.add_argument("--delta", type=float, default=0.05)
    ws.add_argument("--aggregate", default="min", choices=("mean", "min", "lowest"))
    ws.add_argument("--lowest-k", type=int, default=2)
    ws.add_argument("--clip", type=float, default=12.0)
    ws.set_defaults(func=with_store_warnings(_cmd_warm_start))

    pu = cmds.add_parser(
        "put",
        help="store a certificate file as a new version (prints its number)",
        description="Publish CERT.json (from 'calibrate --out' or 'fit --out') as a new "
        "version of NAME holding the whole deployed rule; with --promote, point ALIAS at "
        "it, which 'liftguard serve --certificate STORE#NAME@ALIAS' picks up.",
    )
    pu.add_argument("name")
    pu.add_argument("--certificate", required=True, metavar="CERT.json")
    pu.add_argument("--promote", metavar="ALIAS", default=None, help="e.g. production")
    pu.add_argument("--parent", default=None, help="version this one derives from")
    pu.set_defaults(func=with_store_warnings(_cmd_put))

    ls = cmds.add_parser("list", help="list versions")
    ls.add_argument("name", nargs="?", default=None)
    ls.set_defaults(func=with_store_warnings(_cmd_list))

    sh = cmds.add_parser("show", help="show one version's manifest")
    sh.add_argument("name")
    sh.add_argument("ref", nargs="?", default="latest")
    sh.set_defaults(func=with_store_warnings(_cmd_show))

    df = cmds.add_parser(
        "diff",
        help="compare two versions: tau, risk, coverage, context "
        "and statistic of certificates; arrays and TV distance of skeletons",
    )
    df.add_argument("name")
    df.add_argument("a")
    df.add_argument("b", nargs="?", default="latest")
    df.add_argument("--json", action="store_true", help="the full diff as JSON")
    df.set_defaults(func=with_store_warnings(_cmd_diff))

    pr = cmds.add_parser("promote", help="point an alias (default production) at a version")
    pr.add_argument("name")
    pr.add_argument("ref")
    pr.add_argument("--alias", default="production")
    pr.set_defaults(func=with_store_warnings(_cmd_promote))

    rb = cmds.add_parser("rollback", help="move an alias back to its previous version")
    rb.add_argument("name")
    rb.add_argument("--alias", default="production")
    rb.set_defaults(func=with_store_warnings(_cmd_rollback))

    vf = cmds.add_parser(
        "verify",
        help="check every manifest, array hash and alias event (exit 1 if any problem)",
        description="Load every version (manifest and arrays) and every alias event and "
        "print the problems found. --repair first fixes what is safe to fix: an alias "
        "whose newest event is damaged gets a new event restoring the newest event that "
        "verifies, and damaged events are kept but marked as superseded (nothing is "
        "deleted). Damaged versions are reported, not repaired ('latest' skips them).",
    )
    vf.add_argument("name", nargs="?", default=None, help="only this skeleton")
    vf.add_argument("--repair", action="store_true", help="fix damaged alias heads first")
    vf.set_defaults(func=with_store_warnings(_cmd_verify))
