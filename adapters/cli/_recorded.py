"""What ``calibrate``, ``eval`` and ``fit`` do with traces that lack fields.

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
torn last line (a record cut off mid-write) and says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ._common import CommandError

__all__ = [
    "VOCAB_HINT",
    "absent",
    "carries",
    "estimate_note",
    "lacking_message",
    "recorded_lines",
    "score_needs",
    "supply_vocab_size",
]

_BOM = b"\xef\xbb\xbf"


def recorded_lines(path: str, torn: Callable[[int], None]) -> Iterator[tuple[int, object]]:
    """``(line number, value)`` of each non-blank line of a recorded JSONL file (a BOM is
    skipped).

    A last line that does not end with a newline and is not JSON (or not even UTF-8)
    is a record an interrupted write cut off (a full disk, a crash, a recorder of an
    older version): it is skipped and ``torn(line number)`` is called. Any other
    line that is not JSON is a :class:`CommandError` naming ``path:line``, as
    ``json_lines`` does: the file is corrupt, not torn."""
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if lineno == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            last = not raw.endswith(b"\n")  # only the end of the file lacks one
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                if last:
                    torn(lineno)
                    return
                raise CommandError(
                    f"{path}:{lineno}: invalid UTF-8 (byte {exc.start + 1} of the line)"
                ) from exc
            if not text.strip():
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                if last:
                    torn(lineno)
                    return
                raise CommandError(
                    f"{path}:{lineno}: invalid JSON: {exc.msg} (column {exc.colno})"
                ) from exc
            yield lineno, value


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
    from guardrail.traces import OPTIONAL_FIELDS

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
