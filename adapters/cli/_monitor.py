"""``liftguard monitor``: replay labelled recordings through a certificate and its
:class:`~guardrail.RiskMonitor`.

Each recorded answer is decided by the certificate as calibration replays it (the lift
policy's ``shown_at`` on the trace's clipped lifts, or a fitted statistic's replay through
the deployed monitor's objects, as ``calibrate`` and ``eval`` do); every verdict goes to
``update_shown`` and the label of every shown answer to ``update``, in order. The
report says where the alarm fired (the answer's position in the merged order, its id and
``file:line``, and how many labelled shown answers it took), the final bounds (``lower``:
:attr:`~guardrail.RiskMonitor.lower_bound`, from the alarm's own test, at least the
target exactly when the alarm fired; ``upper``: the upper end of
:attr:`~guardrail.RiskMonitor.bounds`, on the labelled answers after ``after``), the
coverage and whether it drew a warning.

Whole answers only: a line that holds a prefix of its answer (``complete: false``, an
answer the proxy blocked mid-stream in ``buffered`` or ``passthrough`` mode) is not
replayed, since a score on a prefix is not the answer's (:class:`~adapters.cli._recorded.
WholeAnswers`), but it is one of the answers of the traffic: it counts in the coverage as
the recording's verdict says (not shown, unless certified before it was cut), its label
unread. Whole answers of such a recording without its prefixes are the ones the serving
certificate showed or blocked at their end: the coverage of those alone over-states the
traffic's, and a warning says the monitor cannot see the true coverage.

Order: several files (e.g. one per proxy replica) are merged by the ``created`` time the
proxy's recorder writes on every line (ISO 8601; ties keep the files' order). If any
line has no ``created``, the files are taken one after the other, each in file order,
and the report says so (``"order": "file"``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
import numpy.typing as npt

from ._common import CommandError, integer, probability
from ._recorded import (
    WholeAnswers,
    lacking_message,
    recorded_lines,
    score_needs,
    supply_vocab_size,
    verdict_shown,
)

__all__ = ["add_monitor_parser", "cmd_monitor"]

_TRACE_SKELETON = {"uniform": "uniform", "prompt_free": "prompt-free"}


def add_monitor_parser(sub: Any) -> None:
    """The ``monitor`` subcommand."""
    p = sub.add_parser(
        "monitor",
        help="replay labelled recordings through a certificate's risk monitor",
        description="Decide each recorded answer with the certificate, feed the labels of "
        "the shown ones, in order, to an anytime-valid risk monitor at the certificate's "
        "target, and report where its alarm fired, the final bounds and the coverage. "
        "Several --traces files are merged by the lines' 'created' time.",
    )
    p.add_argument(
        "--traces",
        action="append",
        required=True,
        metavar="LABELLED",
        help="labelled trace file, JSONL or .parquet, a local path or a URL such as "
        "s3://bucket/key (repeatable: the replicas' recordings)",
    )
    p.add_argument("--certificate", required=True, metavar="CERT", help="certificate file")
    p.add_argument(
        "--alpha",
        type=probability,
        default=0.05,
        help="false-alarm probability over any horizon (default 0.05)",
    )
    p.add_argument(
        "--vocab-size",
        type=integer(2),
        default=None,
        metavar="N",
        help="the model's vocabulary size, for traces that do not carry it (default: the "
        "certificate's)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_monitor)


def _created(value: object, where: str) -> datetime:
    if not isinstance(value, str):
        raise CommandError(f"{where}: created: expected an ISO 8601 time, got {value!r}")
    try:
        when = datetime.fromisoformat(value)
    except ValueError as exc:
        raise CommandError(f"{where}: created: not an ISO 8601 time ({value!r})") from exc
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def read_merged(paths: list[str]) -> tuple[list[Any], list[str], str, WholeAnswers]:
    """The answers of ``paths`` in time order (a labelled trace for each whole answer, for
    each prefix whether its recorded verdict showed it), each one's ``file:line``, the
    order used (``"created"`` or ``"file"``) and what the sort into whole answers and
    prefixes counted."""
    from guardrail.traces import parse_trace

    rows: list[tuple[Any, str, object]] = []
    sort = WholeAnswers("monitor")
    for path in paths:

        def torn(lineno: int, path: str = path) -> None:
            print(f"liftguard monitor: {path}:{lineno}: skipped a torn last line", file=sys.stderr)

        for lineno, obj in recorded_lines(path, torn):
            if sort.whole(obj):
                trace = parse_trace(obj, source=path, line=lineno)  # type: ignore[arg-type]
                answer: Any = trace.compact()
            else:
                answer = _Prefix(shown=verdict_shown(obj))
            created = obj.get("created") if isinstance(obj, dict) else None
            rows.append((answer, f"{path}:{lineno}", created))
    if not rows:
        raise CommandError(f"{', '.join(paths)}: holds no traces")
    order = "file"
    if all(created is not None for *_, created in rows):
        times = [_created(created, where) for _, where, created in rows]
        keys = sorted(range(len(rows)), key=times.__getitem__)  # stable: ties keep file order
        rows = [rows[i] for i in keys]
        order = "created"
    return [r[0] for r in rows], [r[1] for r in rows], order, sort


@dataclass(frozen=True)
class _Prefix:
    """A recorded prefix of an answer: not replayed; ``shown``: its recorded verdict."""

    shown: bool


def _trace_skeleton(kind: str, params: Any) -> str:
    """The trace skeleton (``guardrail._scores.TRACE_SKELETONS``) a lift certificate's
    skeleton spec was calibrated with (the inverse of ``calibrate``'s choice)."""
    if kind == "temperature":
        t = float(params.get("temperature", 1.5))
        return "temperature" if t == 1.5 else f"temperature-{t:.1f}"
    if kind not in _TRACE_SKELETON:
        raise CommandError(f"the certificate's {kind!r} skeleton cannot be replayed from traces")
    return _TRACE_SKELETON[kind]


def shown_by(cert: Any, traces: list[Any], where: str) -> npt.NDArray[np.bool_]:
    """Whether the certificate shows each answer, replayed as calibration replays it."""
    from guardrail._policy import shown_at
    from guardrail.evaluate import fitted_method

    from ._calibrate import _lifts
    from ._eval import _certificate_needs
    from ._recorded import carries

    name = ""
    if cert.statistic is not None:
        fields, what = _certificate_needs(cert)
        fields = ("vocab_size", *fields)
        hint = ""
    else:
        name = _trace_skeleton(cert.skeleton.kind, cert.skeleton.params)
        fields, what, hint = score_needs("lift", name, traces)
    refusal = lacking_message(where, traces, fields, what, hint)
    if refusal:
        raise CommandError(refusal)
    if cert.statistic is not None:
        method = fitted_method(traces, cert)
        return method.shown(np.arange(len(traces)), cert.tau)
    exact = carries(traces, "logz")
    lifts = [_lifts(t, name, cert.policy.clip, exact) for t in traces]
    return np.asarray(shown_at(cert.policy, lifts, [cert.tau])[:, 0], dtype=bool)


def _report_sort(sort: WholeAnswers, where: str) -> bool:
    """Print what became of the prefixes and, for a recording that cut off what it blocked
    and holds none of those prefixes, that the coverage cannot be seen; whether it cannot."""
    if not sort.n_whole:
        sort.report(where, "")  # refuses: nothing to replay
    n = sum(sort.prefixes.values())
    if n:
        print(
            f"liftguard monitor: note: {where}: {n} of {sort.read} answers are prefixes of "
            f"their answers ({sort.reasons()}): not replayed (a score on a prefix is not the "
            "answer's), counted in the coverage as their recorded verdict says "
            f"({sort.prefixes_shown} shown), their labels unread",
            file=sys.stderr,
        )
    blind = bool(sort.cut) and not sort.prefixes
    if blind:
        print(
            f"liftguard monitor: warning: {where}: {sort.cut} answers were recorded in "
            f"{' and '.join(sorted(sort.modes))} mode, which cuts off what it blocks, and "
            "none of the cut-off answers is here: the coverage below counts the answers "
            "the certificate showed or blocked at their end only, and over-states the "
            "traffic's (the monitor cannot see the true coverage); label the recording "
            "with --include-incomplete, or record in --mode observe",
            file=sys.stderr,
        )
    return blind


def cmd_monitor(args: argparse.Namespace) -> int:
    from guardrail import Certificate

    cert = Certificate.load(args.certificate)
    monitor = cert.risk_monitor(alpha=args.alpha)  # a ConfigError if uncalibrated
    answers, sources, order, sort = read_merged(args.traces)
    where = ", ".join(args.traces)
    blind = _report_sort(sort, where)
    whole = [i for i, a in enumerate(answers) if not isinstance(a, _Prefix)]
    traces = [answers[i] for i in whole]
    vocab = cert.model.vocab_size
    if args.vocab_size is None and vocab is not None:  # the certificate's model is the traces'
        for i in whole:
            t = answers[i]
            if "vocab_size" not in t.missing and t.vocab_size != vocab:
                raise CommandError(
                    f"{sources[i]}: a trace of vocabulary size {t.vocab_size}; the certificate "
                    f"is for {vocab} tokens (certificates are per model)"
                )
    traces = supply_vocab_size(traces, args.vocab_size or vocab, where)
    replayed = dict(zip(whole, shown_by(cert, traces, where).tolist(), strict=True))
    labels = dict(zip(whole, (bool(t.correct) for t in traces), strict=True))
    alarm: dict[str, Any] | None = None
    warning: dict[str, Any] | None = None
    for i, answer in enumerate(answers):
        is_shown = answer.shown if isinstance(answer, _Prefix) else replayed[i]
        name = sources[i] if isinstance(answer, _Prefix) else answer.id
        if monitor.update_shown(is_shown) and warning is None:
            warning = {"answer": i + 1, "id": name, "source": sources[i]}
        if i in labels and is_shown and monitor.update(correct=labels[i]) and alarm is None:
            alarm = {"answer": i + 1, "labelled": monitor.n, "id": name, "source": sources[i]}
    report = {
        "certificate": args.certificate,
        "traces": list(args.traces),
        "order": order,
        "target": monitor.target,
        "alpha": monitor.alpha,
        "answers": monitor.answers,
        "shown": monitor.shown,
        "errors": monitor.errors,
        "coverage": monitor.shown_rate,
        "expected_coverage": monitor.coverage,
        "alarm": alarm,
        "coverage_warning": warning,
        "prefixes": sum(sort.prefixes.values()),
        "prefixes_shown": sort.prefixes_shown,
        "coverage_seen": "partial" if blind else "all",
        "log_e_value": monitor.log_e_value,
        "bounds": {
            "lower": monitor.lower_bound,
            "upper": monitor.bounds[1],
            "after": monitor.bounds_since,
            "labelled": monitor.n,
        },
    }
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print(_text(report))
    return 0


def _text(r: dict[str, Any]) -> str:
    merged = "merged by 'created' time" if r["order"] == "created" else "in file order"
    expected = r["expected_coverage"]
    cov = f"coverage {r['coverage']:.1%}" + (
        f", expected at least {expected:.1%}" if expected is not None else ""
    )
    if r["prefixes"]:
        cov += f"; {r['prefixes']} of them prefixes, {r['prefixes_shown']} shown by the recording"
    if r["coverage_seen"] == "partial":
        cov += "; over-states the traffic's: the answers cut off are not in the files"
    wrong = f" ({r['errors'] / r['shown']:.1%})" if r["shown"] else ""
    a, w, b = r["alarm"], r["coverage_warning"], r["bounds"]
    alarm = (
        f"fired at answer {a['answer']} ({a['id']}, {a['source']}), labelled shown "
        f"answer {a['labelled']}"
        if a
        else "none"
    )
    warn = f"fewer shown than expected from answer {w['answer']} ({w['source']})" if w else "none"
    return (
        f"liftguard monitor: {r['answers']} answers {merged}; certificate "
        f"{r['certificate']} (target risk {r['target']:g}, alpha {r['alpha']:g})\n"
        f"  shown            {r['shown']} of {r['answers']} ({cov})\n"
        f"  wrong            {r['errors']} of {r['shown']} shown{wrong}\n"
        f"  risk alarm       {alarm}\n"
        f"  lower bound      {b['lower']:.3f}: the error probability of shown answers has been "
        f"shown to exceed it (the alarm's test: at least the target exactly on an alarm)\n"
        f"  upper bound      {b['upper']:.3f} on the average error probability of the "
        f"{b['labelled'] - b['after']} labelled answers after the first {b['after']}\n"
        f"  coverage         {warn}"
    )
