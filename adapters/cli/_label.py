"""``liftguard traces label``: add correctness labels to recorded traces.

Input: trace lines, e.g. those ``liftguard serve --record`` writes (one JSON
object per line with ``question``, ``answer`` and ``tokens``). Output: the same
lines with ``correct`` (inserted after ``answer``), only for the traces that
got a label, so that the file feeds ``liftguard calibrate`` directly. Skipped,
and counted in the summary on stderr:

- an **incomplete** answer (``complete: false``: blocked early or cut off, so
  the trace holds a prefix, not the answer; record in ``--mode observe`` to get
  complete answers), unless ``--include-incomplete`` (``calibrate``, ``fit`` and
  ``eval`` leave such lines out all the same; ``monitor`` counts them in the
  coverage: :mod:`adapters.cli._recorded`);
- an answer **without usable logprobs** (a token without a finite logprob <= 0,
  e.g. OpenAI's censored -9999): it cannot be replayed;
- an answer **without a label**: no reference matches its id or question
  (``--references``), or the judge failed (``--judge``, by reason).

Labelling by references: ``FILE`` is JSONL with ``"question"`` (or ``"id"``) and
the references as ``"answer"`` or ``"references"`` (a string or a list), as
``liftguard traces generate`` reads; a trace matches by ``id`` first, then by
its question text (surrounding whitespace ignored; a row's question is its
``"question"``, else its ``"text"`` as in MBPP); the trace's ``references``
are filled in and ``correct`` comes from ``--rule``: ``contains`` (the default,
the trace format's rule, :func:`guardrail.traces.is_correct`: the answer names a
reference) or ``f1`` (SQuAD token F1 against the best reference at least
``--f1-threshold``, :func:`guardrail.traces.is_correct_f1`). By judge: see
:class:`adapters.Judge` for the prompt and the strict parsing; the key comes
from ``--judge-key-env``. By checking (``--check code|number|MODULE:FUNCTION``, with
``--references`` holding the task rows, e.g. MBPP's tests or GSM8K's final numbers):
see :mod:`adapters.cli._label_check`; an answer its check cannot label is left
unlabelled by reason (``no_task``, ``no_code_block``, ``sandbox_failed_to_start``...).
``--unlabelled FILE`` writes the traces left without
a label (to retry).

Each labelled line names what labelled it in ``label_rule``, a key the trace
format does not name (so it goes after the documented keys, and readers ignore
it): ``"contains"``, ``"f1>=0.6"`` (the threshold used), ``"check:code"`` (or
``check:number``, ``check:MODULE:FUNCTION``) or ``"judge:MODEL"``;
the summary on stderr names it too. A rule that labels almost none or almost all
of at least 20 answers correct draws a warning naming another rule to try
(:func:`lopsided_labels`).

Every other line must be a trace (:func:`guardrail.traces.parse_trace`, without a
label; what an API stream lacks may be null): a malformed one stops the command
with one line naming the file, the line and the field. The one exception is a
**torn last line** (a file's last line, without its newline, that is not JSON:
a record cut off mid-write by a crash or a full disk): it is skipped with a
warning naming it, and counted in the summary. A trace without
``vocab_size`` (the serving certificate did not know it) is labelled:
``calibrate``, ``fit`` and ``eval`` take ``--vocab-size N`` for it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

from ._common import CommandError
from ._label_refs import Labeller, lines, match, read_references, usable

__all__ = ["add_label_parser", "cmd_label"]

#: The key of a labelled line that names what labelled it (see the module docstring).
_RULE_KEY = "label_rule"


def _rule_name(rule: str, f1_threshold: float) -> str:
    """What ``label_rule`` says for labelling by references with ``rule``."""
    return f"f1>={f1_threshold:g}" if rule == "f1" else rule


def _by_references(path: str, rule: str, f1_threshold: float) -> Labeller:
    from guardrail.traces import is_correct, is_correct_f1

    by_id, by_question = read_references(path)

    def correct(answer: str, refs: list[str], question: str) -> bool:
        if rule == "f1":
            return is_correct_f1(answer, refs, question, threshold=f1_threshold)
        return is_correct(answer, refs, question)

    def label(obj: dict[str, Any]) -> tuple[bool | None, str]:
        refs = match(obj, by_id, by_question)
        if not refs:
            return None, "no_reference"
        obj["references"] = list(dict.fromkeys(refs))
        return correct(obj["answer"], refs, obj["question"]), ""

    return label


def _by_judge(judge: Any) -> Labeller:
    from adapters import JudgeFailure

    def label(obj: dict[str, Any]) -> tuple[bool | None, str]:
        refs = [r for r in obj.get("references") or () if isinstance(r, str)]
        try:
            return judge.judge(obj["question"], obj["answer"], refs), ""
        except JudgeFailure as exc:
            return None, f"judge_{exc.reason}"

    return label


def label_file(
    traces: list[str],
    out: str,
    labeller: Labeller,
    *,
    include_incomplete: bool,
    unlabelled: str | None,
    rule: str,
) -> Counter[str]:
    """Label the trace files ``traces`` into ``out``, each labelled line naming ``rule``
    (``label_rule``); the counts of the summary."""
    from guardrail.traces import parse_trace

    counts: Counter[str] = Counter()

    def torn(path: str) -> Callable[[int], None]:
        def skip(lineno: int) -> None:
            counts["skipped: torn last line"] += 1
            print(
                f"liftguard traces label: warning: {path}:{lineno}: skipped 1 torn last line "
                "(a record cut off mid-write, e.g. by a full disk or a crash)",
                file=sys.stderr,
            )

        return skip

    from guardrail.traces._write import label_line  # the format's one writer: order, encoding

    with (
        _Output(out) as fh,
        open(unlabelled, "w", encoding="utf-8") if unlabelled else open(os.devnull, "w") as left,
    ):
        for path, lineno, obj in ((p, *item) for p in traces for item in lines(p, torn(p))):
            counts["read"] += 1
            if obj.get("complete") is False and not include_incomplete:
                counts["skipped: incomplete"] += 1
                continue
            if not usable(obj):
                counts["skipped: no usable logprobs"] += 1
                continue
            parse_trace(obj, source=path, line=lineno, require_label=False)  # strict, or fail
            correct, why = labeller(obj)
            if correct is None:
                counts[f"unlabelled: {why}"] += 1
                left.write(label_line(obj, None) + "\n")
                continue
            counts["labelled"] += 1
            counts["correct"] += bool(correct)
            obj[_RULE_KEY] = rule
            fh.write(label_line(obj, correct))
    return counts


class _Output:
    """The labelled traces' file: JSONL lines as written, or, for a ``.parquet`` name, the
    same objects in the columnar format (:class:`adapters.tracefiles.TraceFileWriter`)."""

    def __init__(self, path: str) -> None:
        from adapters._tracefiles._files import is_parquet
        from adapters.tracefiles import TraceFileWriter

        self._parquet = TraceFileWriter(path) if is_parquet(path) else None
        self._fh = None if self._parquet else open(path, "w", encoding="utf-8")  # noqa: SIM115

    def write(self, line: str) -> None:
        if self._parquet is not None:
            self._parquet.write(json.loads(line))  # the line's object, label in its place
        elif self._fh is not None:
            self._fh.write(line + "\n")

    def __enter__(self) -> _Output:
        return self

    def __exit__(self, *exc: object) -> None:
        for closing in (self._parquet, self._fh):
            if closing is not None:
                closing.close()


#: ``(fewest answers, share)``: a rule that labels fewer than ``share`` or more than
#: ``1 - share`` of at least that many answers correct draws a warning.
LOPSIDED = (20, 0.02)

_OTHER_RULE = {
    "contains": "--rule f1 (partial answers such as 'fusion' for 'nuclear fusion')",
    "f1": "--rule contains (answers in sentences score a low F1 against a short reference)",
    "check": "matching answers and tasks by hand (a check that never or always passes often "
    "reads the wrong task, or a code block the answers do not have)",
}


def lopsided_labels(correct: int, labelled: int, rule: str) -> str | None:
    """The warning when ``rule`` labelled almost none or almost all of ``labelled`` (at least
    ``LOPSIDED[0]``) answers correct, naming another rule to try; None otherwise.

    >>> lopsided_labels(0, 96, "f1>=0.6")[:44]
    'the rule f1>=0.6 labelled 0 of 96 answers co'
    >>> lopsided_labels(40, 96, "contains") is None
    True
    """
    fewest, share = LOPSIDED
    if labelled < fewest or share <= correct / labelled <= 1 - share:
        return None
    kind = rule.split(">=")[0].split(":")[0]
    other = _OTHER_RULE.get(kind, "--references with --rule contains or f1")
    which = "almost none" if correct / labelled < share else "almost all"
    return (
        f"the rule {rule} labelled {correct} of {labelled} answers correct ({which}): labels "
        f"that say the same of every answer teach calibration nothing and may be the rule's "
        f"fault, not the model's; read a few labelled answers, and try {other}"
        + ("" if kind in ("judge", "check") else " or a --judge")
    )


def _check_rule(args: argparse.Namespace) -> None:
    """``--rule`` and ``--f1-threshold`` go with ``--references``, the threshold with
    ``--rule f1``; ``--check`` with ``--references`` and no ``--rule``."""
    if args.check is not None and args.references is None:
        raise CommandError("--check needs --references FILE (the tasks to check against)",
                           status=2)  # fmt: skip
    if args.check is not None and (args.rule is not None or args.f1_threshold is not None):
        raise CommandError("--rule labels by reference answers; --check labels by checking",
                           status=2)  # fmt: skip
    if args.judge is not None and args.rule is not None:
        raise CommandError("--rule labels by --references; a --judge labels on its own", status=2)
    if args.f1_threshold is not None and args.rule != "f1":
        raise CommandError("--f1-threshold goes with --rule f1", status=2)


def cmd_label(args: argparse.Namespace) -> int:
    _check_rule(args)
    if args.references is None and args.judge is None:
        raise CommandError("give --references FILE or --judge URL --judge-model NAME", status=2)
    if args.judge is not None and not args.judge_model:
        raise CommandError("--judge needs --judge-model NAME", status=2)
    from adapters._tracefiles._files import is_url

    for path in args.traces:
        if not is_url(path) and not os.path.isfile(path):
            raise CommandError(f"{path}: no such file")

    def run(labeller: Labeller, rule: str) -> Counter[str]:
        return label_file(
            args.traces,
            args.out,
            labeller,
            rule=rule,
            include_incomplete=args.include_incomplete,
            unlabelled=args.unlabelled,
        )

    if args.check is not None:
        from ._label_check import by_check

        labeller, rule = by_check(args.check, args.references)
        counts = run(labeller, rule)
    elif args.references is not None:
        from guardrail.traces import DEFAULT_F1_THRESHOLD

        how = args.rule or "contains"
        threshold = DEFAULT_F1_THRESHOLD if args.f1_threshold is None else args.f1_threshold
        rule = _rule_name(how, threshold)
        counts = run(_by_references(args.references, how, threshold), rule)
    else:
        from adapters import Judge

        rule = f"judge:{args.judge_model}"
        key = os.environ.get(args.judge_key_env) or None
        with Judge(args.judge, args.judge_model, api_key=key, timeout=args.judge_timeout) as j:
            counts = run(_by_judge(j), rule)
    skipped = {k: v for k, v in sorted(counts.items()) if k.startswith(("skipped", "unlabelled"))}
    rest = "; ".join(f"{k} {v}" for k, v in skipped.items())
    print(
        f"labelled {counts['labelled']} of {counts['read']} traces into {args.out} by {rule} "
        f"({counts['correct']} correct){'; ' + rest if rest else ''}",
        file=sys.stderr,
    )
    lopsided = lopsided_labels(counts["correct"], counts["labelled"], rule)
    if lopsided:
        print(f"liftguard traces label: warning: {lopsided}", file=sys.stderr)
    return 0 if counts["labelled"] or not counts["read"] else 1


def add_label_parser(cmds: Any) -> None:
    """Register ``label`` on the subparsers of ``liftguard traces``."""
    from guardrail.traces import DEFAULT_F1_THRESHOLD

    from ._common import fraction, output_file, positive

    lb = cmds.add_parser(
        "label",
        help="add correctness labels to recorded traces (by references, checks or a judge)",
        description="Label the traces that 'liftguard serve --record' writes, by reference "
        "answers (--rule contains or f1), by checking them against their tasks (--check: "
        "run code's tests, compare final numbers), or by an LLM judge behind any "
        "OpenAI-compatible endpoint; the output feeds 'liftguard calibrate'. Incomplete "
        "answers, answers without usable logprobs and answers the labeller could not label "
        "are left out and counted.",
    )
    lb.add_argument(
        "--traces",
        required=True,
        nargs="+",
        metavar="FILE",
        help="recorded trace files (JSONL, or Parquet if FILE ends with .parquet; a local "
        "path or a URL such as s3://bucket/key; e.g. every file under --record DIR)",
    )
    lb.add_argument(
        "--out",
        type=output_file,
        required=True,
        help="labelled traces (JSONL, or Parquet if OUT ends with .parquet)",
    )
    how = lb.add_mutually_exclusive_group()  # one of them: cmd_label says which goes how
    how.add_argument(
        "--references",
        metavar="FILE",
        help='JSONL with "question" (or "id") and "answer"/"references"',
    )
    how.add_argument("--judge", metavar="URL", help="OpenAI-compatible base URL of the judge")
    lb.add_argument(
        "--rule",
        choices=("contains", "f1"),
        default=None,
        help="how --references label: 'contains' (default; the answer names a reference, "
        "as the shared traces and the shipped certificates are labelled) or 'f1' (SQuAD "
        "token F1 against the best reference at least --f1-threshold)",
    )
    lb.add_argument(
        "--f1-threshold",
        type=fraction,
        default=None,
        metavar="F",
        help=f"the token F1 that --rule f1 counts as correct, in (0, 1] "
        f"(default {DEFAULT_F1_THRESHOLD:g})",
    )
    lb.add_argument(
        "--check",
        metavar="HOW",
        default=None,
        help="label by checking each answer against its task row in --references instead of "
        "matching text: 'code' (run the answer's Python with the task's test_setup_code and "
        "test_list asserts, in a sandbox), 'number' (its final number against the task's "
        "answer) or MODULE:FUNCTION (your own check, (answer, task) -> bool | None)",
    )
    lb.add_argument("--judge-model", metavar="NAME", help="the judge's model name")
    lb.add_argument(
        "--judge-key-env",
        default="OPENAI_API_KEY",
        metavar="VAR",
        help="environment variable holding the judge's API key",
    )
    lb.add_argument(
        "--judge-timeout",
        type=positive,
        default=60.0,
        metavar="SECONDS",
        help="deadline of each judge call as a whole, from connecting to the last byte of "
        "its reply; an answer the judge has not graded by then is left unlabelled",
    )
    lb.add_argument(
        "--include-incomplete",
        action="store_true",
        help="also label answers that were blocked early or cut off (prefixes): "
        "calibrate, fit and eval leave them out, monitor counts them in the coverage",
    )
    lb.add_argument(
        "--unlabelled",
        type=output_file,
        default=None,
        metavar="FILE",
        help="write the traces left without a label here",
    )
    lb.set_defaults(func=cmd_label)
