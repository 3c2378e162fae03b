"""What ``calibrate``, ``eval``, ``fit`` and ``monitor`` do with traces that lack fields or
hold a prefix of their answer.

Traces recorded from an API stream (``liftguard serve --record``, labelled by
``liftguard traces label``) carry logprobs and top-k alternatives only: no
token ids, exact entropies, exact ``log Z_T`` or prompt-free log-probabilities,
and the vocabulary size only when the serving certificate knew it
(``Trace.missing`` names what a trace lacks). A score that needs an absent
field is refused with one line naming the field, the score and what to do
instead (:func:`score_needs`, :func:`lacking_message`); exact entropies and
``log Z_T`` are replaced by their top-k estimates, as on the deployed stream,
and a note says so (:func:`estimate_note`); ``--vocab-size N`` supplies the
vocabulary size (:func:`supply_vocab_size`). There is no table of known
tokenizers to take it from a model name.

The recorded files themselves are read by :func:`recorded_lines`, which skips a
torn last line (a record cut off mid-write) and says so; every file is opened by
:func:`adapters.tracefiles.open_trace_objects` (JSONL or Parquet by the suffix, a
local path or an fsspec URL such as ``s3://bucket/key``).

**Whole answers only.** A recorded line can hold a prefix of its answer, not the
answer: ``complete: false`` (the proxy blocked it mid-stream in ``buffered`` or
``passthrough`` mode and closed the upstream, or the upstream cut it off), which
``liftguard traces label --include-incomplete`` keeps. A score computed on a prefix
is not the score of the answer the rule will see, so a threshold or a statistic set
on prefixes carries no guarantee. ``calibrate``, ``fit`` and ``eval`` read their
files through :func:`read_whole` and ``monitor`` sorts its lines with the same
:class:`WholeAnswers`: prefixes are left out with one note on stderr, and a file
that holds prefixes only is refused in one line.

**What a command holds.** Each line is parsed as it is read and only its compact
trace is kept (:meth:`guardrail.Trace.compact`: the numbers and token texts, not the
question, prompt, answer or references, which no score reads); the decoded line is
dropped before the next is read. The whole answers of a recording
made in a mode that cuts off what it blocks are a biased sample (mostly the ones
the serving certificate showed): a warning names the bias and the fix, recording in
``--mode observe``.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ._common import CommandError, no_traces

if TYPE_CHECKING:
    from adapters._tracefiles._digest import TraceDigest

__all__ = [
    "VOCAB_HINT",
    "WholeAnswers",
    "absent",
    "carries",
    "estimate_note",
    "lacking_message",
    "prefix_reason",
    "read_whole",
    "recorded_lines",
    "score_needs",
    "supply_vocab_size",
    "verdict_shown",
    "whole_traces",
]


def recorded_lines(path: str, torn: Callable[[int], None]) -> Iterator[tuple[int, object]]:
    """``(line or row number, value)`` of each trace of a recorded file, JSONL or Parquet,
    local or an fsspec URL (:func:`adapters.tracefiles.open_trace_objects`; in JSONL a
    BOM is skipped).

    A last line that does not end with a newline and is not JSON (or not even UTF-8)
    is a record an interrupted write cut off (a full disk, a crash, a recorder of an
    older version): it is skipped and ``torn(line number)`` is called. Any other
    line that is not JSON is an error naming ``path:line``, as ``json_lines`` says:
    the file is corrupt, not torn."""
    from adapters.tracefiles import open_trace_objects

    return open_trace_objects(path, torn=torn)


VOCAB_HINT = "pass --vocab-size N, the model's vocabulary size"


def carries(traces: Sequence[Any], field: str) -> bool:
    """Whether every trace carries the optional ``field`` (see ``Trace.missing``)."""
    return not any(field in t.missing for t in traces)


def supply_vocab_size(traces: list[Any], vocab_size: int | None, path: str) -> list[Any]:
    """``--vocab-size N``: given to the traces that lack the size; a trace that carries
    another size is a usage error."""
    if vocab_size is None:
        return traces
    for t in traces:
        if "vocab_size" not in t.missing and t.vocab_size != vocab_size:
            raise CommandError(
                f"--vocab-size {vocab_size}: {path} holds traces of vocabulary size "
                f"{t.vocab_size} (e.g. {t.id!r})",
                status=2,
            )
    return [t.with_vocab_size(vocab_size) for t in traces]


def score_needs(
    score: str, skeleton: str, traces: Sequence[Any]
) -> tuple[tuple[str, ...], str, str]:
    """``(fields, what, hint)``: the optional trace fields that ``score`` (``"lift"`` with
    ``skeleton``, or a baseline) reads on these traces, its name in messages and what
    to do instead. Exact ``log Z_T`` and entropies are read where every trace carries
    them, else estimated from the top-k alternatives, which needs the vocabulary size."""
    if score == "lift":
        what = f"the lift with --skeleton {skeleton}"
        if skeleton == "prompt-free":
            return ("prompt_free_logprobs",), what, "use --skeleton uniform or temperature"
        if skeleton == "uniform" or not carries(traces, "logz"):
            return ("vocab_size",), what, VOCAB_HINT
        return (), what, ""
    what = f"the {score} score"
    if score == "pmi":
        return ("prompt_free_logprobs",), what, "choose a score that reads the logprobs only"
    narrow = any(t.top_logprobs.shape[1] < 2 for t in traces)
    if (score in ("entropy", "max_entropy") and not carries(traces, "entropy")) or (
        score in ("mean_margin", "min_margin") and narrow
    ):
        return ("vocab_size",), what, VOCAB_HINT
    return (), what, ""


def absent(traces: Sequence[Any], fields: Sequence[str]) -> list[str]:
    """The words for those of ``fields`` that some trace lacks (e.g. ``"vocabulary size"``)."""
    from guardrail._trace_format import OPTIONAL_FIELDS

    return [OPTIONAL_FIELDS[f] for f in dict.fromkeys(fields) if not carries(traces, f)]


def lacking_message(
    path: str, traces: Sequence[Any], fields: Sequence[str], what: str, hint: str = ""
) -> str | None:
    """The one-line refusal of ``what`` if some traces lack one of ``fields``, else None."""
    lack = [t for t in traces if any(f in t.missing for f in fields)]
    if not lack:
        return None
    message = (
        f"{path}: {len(lack)} of {len(traces)} traces carry no "
        f"{' and no '.join(absent(lack, fields))} "
        f"(e.g. {lack[0].id!r}, as traces recorded from an API stream may), which {what} needs"
    )
    return f"{message}; {hint}" if hint else message


def estimate_note(scores: Sequence[tuple[str, str]], traces: Sequence[Any]) -> str:
    """What the ``(score, skeleton)`` pairs estimate from the top-k alternatives because
    the traces lack the exact values (``""`` if nothing)."""
    parts = []
    if any(sc == "lift" and sk.startswith("temperature") for sc, sk in scores) and not carries(
        traces, "logz"
    ):
        parts.append("log Z_T (temperature skeleton)")
    if any(sc in ("entropy", "max_entropy") for sc, _ in scores) and not carries(traces, "entropy"):
        parts.append("entropies")
    if not parts:
        return ""
    return (
        f"the traces carry no exact {' or '.join(parts)}: estimated from their top-k "
        "alternatives instead (as on a deployed API stream)"
    )


# --------------------------------------------------------------------------- #
# Whole answers only (see the module docstring)
# --------------------------------------------------------------------------- #

#: The proxy's modes that cut off an answer they block: its line holds a prefix.
_CUTTING_MODES = ("buffered", "passthrough")

_WHY = "a score on a prefix is not the score of the answer the rule sees"


def prefix_reason(obj: object) -> str | None:
    """Why the trace line ``obj`` holds a prefix of its answer (``"complete: false"``, or
    ``"no finish_reason"`` for a recorded line without ``complete`` whose upstream never
    finished), or None for a whole answer (every line of a trace file that is not a
    recording)."""
    if not isinstance(obj, dict):
        return None  # not a trace line: the strict parser says so
    if obj.get("complete") is False:
        return "complete: false"
    if "complete" not in obj and "verdict" in obj and obj.get("finish_reason", "") is None:
        return "no finish_reason"
    return None


def verdict_shown(obj: object) -> bool:
    """Whether the recorded line ``obj``'s verdict (the proxy's) certified its answer."""
    verdict = obj.get("verdict") if isinstance(obj, dict) else None
    return isinstance(verdict, dict) and verdict.get("state") == "certified"


class WholeAnswers:
    """Sorts the lines of trace files into whole answers and prefixes (:meth:`whole`),
    and says in one line each what it left out (:meth:`note`), what bias the whole
    answers carry (:meth:`bias`), or that nothing whole is left (:meth:`report`).

    ``command`` names the command in the lines printed (``liftguard <command>: ...``).
    """

    def __init__(self, command: str) -> None:
        self.command = command
        self.read = 0
        self.prefixes: Counter[str] = Counter()  # why -> how many
        self.prefixes_shown = 0  # prefixes whose recorded verdict certified them
        self.cut = 0  # whole answers recorded in a mode that cuts off what it blocks
        self.cut_shown = 0  # ... of them, certified by the serving certificate
        self.modes: Counter[str] = Counter()
        self.certificates: Counter[str] = Counter()

    @property
    def n_whole(self) -> int:
        return self.read - sum(self.prefixes.values())

    def whole(self, obj: object) -> bool:
        """Count the line ``obj``; whether it holds a whole answer (to read)."""
        self.read += 1
        why = prefix_reason(obj)
        if why is not None:
            self.prefixes[why] += 1
            self.prefixes_shown += verdict_shown(obj)
            return False
        verdict = obj.get("verdict") if isinstance(obj, dict) else None
        if isinstance(verdict, dict) and verdict.get("mode") in _CUTTING_MODES:
            self.cut += 1
            self.cut_shown += verdict_shown(obj)
            self.modes[str(verdict["mode"])] += 1
            self.certificates[str(verdict.get("certificate"))] += 1
        return True

    def reasons(self) -> str:
        """``why: how many`` of the prefixes, e.g. ``complete: false: 26``."""
        return ", ".join(f"{why}: {n}" for why, n in sorted(self.prefixes.items()))

    def note(self, where: str) -> str | None:
        """The line on the prefixes left out (None if there were none)."""
        n = sum(self.prefixes.values())
        if not n:
            return None
        return (
            f"liftguard {self.command}: note: {where}: left out {n} of {self.read} answers, "
            f"prefixes of their answers ({self.reasons()}): {self.command} reads whole "
            f"answers only ({_WHY})"
        )

    def bias(self, where: str, use: str) -> str | None:
        """The warning on whole answers recorded in a mode that cuts off what it blocks
        (None if there were none); ``use`` says what the command does with them."""
        if not self.cut:
            return None
        modes = " and ".join(sorted(self.modes))
        certs = ", ".join(sorted(self.certificates))
        left = sum(self.prefixes.values())
        here = f"{left} left out here" if left else "none of them in this file"
        return (
            f"liftguard {self.command}: warning: {where}: {self.cut} of these answers were "
            f"recorded in {modes} mode, which cuts off what certificate {certs} blocked: "
            f"they are the ones it showed ({self.cut_shown} of {self.cut}) and those it "
            f"blocked at their end; the ones it blocked mid-stream were recorded as prefixes "
            f"({here}): {use} over-states coverage and the guarantee does not hold for the "
            "traffic; record in --mode observe"
        )

    def report(self, where: str, use: str) -> None:
        """Print :meth:`note` and :meth:`bias` on stderr; a one-line refusal (status 2) if
        every answer read is a prefix."""
        if self.read and not self.n_whole:
            raise CommandError(
                f"{where}: all {self.read} answers are prefixes of their answers "
                f"({self.reasons()}), none is whole: {self.command} reads whole answers "
                f"only ({_WHY}); record in --mode observe",
                status=2,
            )
        for line in (self.note(where), self.bias(where, use)):
            if line:
                print(line, file=sys.stderr)


def whole_traces(
    path: str,
    sort: WholeAnswers,
    *,
    require_label: bool = True,
    digest: TraceDigest | None = None,
) -> Iterator[Any]:
    """The compact traces (:meth:`guardrail.Trace.compact`) of the whole answers of the
    trace file ``path`` (JSONL or Parquet, local or a URL:
    :func:`adapters.tracefiles.open_trace_objects`), parsed strictly one at a time as the
    file is read, ``sort`` (:class:`WholeAnswers`) counting every line and telling the
    prefixes apart. ``digest``: a :class:`adapters._tracefiles._digest.TraceDigest` fed every trace
    read, prefixes too (the file's traces digest, in the same pass). Nothing of a line is
    held once its trace is yielded: what a command keeps is the compact traces."""
    from adapters.tracefiles import open_trace_objects
    from guardrail.traces import parse_trace

    for lineno, obj in open_trace_objects(path):
        if digest is not None:
            digest.add(obj)
        if sort.whole(obj):
            trace = parse_trace(obj, source=path, line=lineno, require_label=require_label)
            yield trace.compact()


def read_whole(
    path: str,
    command: str,
    use: str,
    *,
    require_label: bool = True,
    digest: TraceDigest | None = None,
) -> list[Any]:
    """The whole answers of the trace file ``path``, compact (:func:`whole_traces`), in a
    list: prefixes left out and said so, a file of prefixes refused
    (:meth:`WholeAnswers.report`; ``use``: what ``command`` does with them, for the bias
    warning), a file without traces refused."""
    sort = WholeAnswers(command)
    traces = list(whole_traces(path, sort, require_label=require_label, digest=digest))
    sort.report(path, use)
    if not traces:
        raise no_traces(path)
    return traces
