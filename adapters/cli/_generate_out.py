"""The output side of ``liftguard traces generate``: resuming a file, labelling each
answer as it is written, the progress line and the summary.

**Resuming** (``--resume``): the ids already in ``--out`` are read as the other readers
of recorded files read them (:func:`adapters.cli._recorded.recorded_lines`); a torn
last line (a line cut off mid-write by a crash or an interrupt) is removed from the
file with a warning, so its question is answered again, and the new lines are
appended after the whole ones.

**Labels**: factoid questions are labelled by their references
(:func:`guardrail.traces.is_correct`, the trace format's rule); ``--check`` labels by
checking, with the labeller of ``liftguard traces label --check``
(:func:`adapters.cli._label_check.by_check`) against the questions file's rows, and
the line names it in ``label_rule`` as ``traces label`` does; a task's answers without
``--check`` are written unlabelled (no ``correct`` key), for ``traces label --check``.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from typing import Any

from ._common import CommandError
from ._label_refs import Labeller
from ._recorded import recorded_lines

__all__ = ["Labels", "Progress", "resume_ids"]

_CHUNK = 1 << 16


def _last_newline_end(path: str) -> int:
    """The offset just after the last newline of ``path`` (0 if it has none)."""
    with open(path, "rb") as fh:
        end = fh.seek(0, os.SEEK_END)
        while end > 0:
            start = max(0, end - _CHUNK)
            fh.seek(start)
            at = fh.read(end - start).rfind(b"\n")
            if at >= 0:
                return start + at + 1
            end = start
    return 0


def resume_ids(path: str) -> set[str]:
    """The ids of the traces in ``path`` (none if it does not exist), leaving the file
    ready to append to: a torn last line removed (with a warning), a whole last line
    without its newline given one."""
    if not os.path.exists(path):
        return set()
    torn: list[int] = []
    ids: set[str] = set()
    for lineno, obj in recorded_lines(path, torn.append):
        key = obj.get("id") if isinstance(obj, dict) else None
        if not isinstance(key, str):
            raise CommandError(
                f'{path}:{lineno}: expected a trace with a string "id" (--resume continues '
                "a file of traces)"
            )
        ids.add(key)
    size, whole = os.path.getsize(path), _last_newline_end(path)
    if torn:
        os.truncate(path, whole)
        print(
            f"liftguard traces generate: warning: {path}:{torn[0]}: removed 1 torn last line "
            "(a record cut off mid-write); its question is answered again",
            file=sys.stderr,
        )
    elif whole < size:
        with open(path, "ab") as fh:
            fh.write(b"\n")
    return ids


class Labels:
    """Labels each written answer (``label(obj)``) and counts the outcomes.

    ``labeller``: None leaves every answer unlabelled (``no_check``); ``rule``: what a
    labelled line's ``label_rule`` says (None: no such key, as in the shared traces).
    """

    def __init__(self, labeller: Labeller | None, rule: str | None) -> None:
        self.labeller, self.rule = labeller, rule
        self.counts: Counter[str] = Counter()

    def label(self, obj: dict[str, Any]) -> bool | None:
        """The label of the trace object ``obj`` (``label_rule`` added when labelled)."""
        correct, why = self.labeller(obj) if self.labeller else (None, "no_check")
        if correct is None:
            self.counts[f"unlabelled: {why}"] += 1
            return None
        self.counts["correct" if correct else "wrong"] += 1
        if self.rule is not None:
            obj["label_rule"] = self.rule
        return correct

    def summary(self) -> str:
        """``N correct, M wrong`` and the unlabelled answers by reason."""
        c = self.counts
        text = f"{c['correct']} correct, {c['wrong']} wrong"
        left = sorted((k.split(": ", 1)[1], v) for k, v in c.items() if k.startswith("unl"))
        if left:
            text += (
                f", {sum(v for _, v in left)} unlabelled ("
                + ", ".join(f"{why} {n}" for why, n in left)
                + ")"
            )
        return text


class Progress:
    """``done/total answers, correct, tokens/s, s/answer`` on one rewritten stderr line,
    only when stderr is a terminal; silent otherwise."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.live = sys.stderr.isatty()
        self.t0 = time.perf_counter()
        self.tokens = 0

    def update(self, done: int, n_ok: int, n_tokens: int = 0) -> None:
        self.tokens += n_tokens
        if not self.live:
            return
        took = time.perf_counter() - self.t0
        rate = took / max(done, 1)
        left = rate * (self.total - done)
        speed = f"{self.tokens / took:.1f} tokens/s, " if self.tokens and took > 0 else ""
        print(
            f"\r{done}/{self.total} answers, {n_ok} correct, {speed}{rate:.2f} s/answer, "
            f"about {left / 60:.0f} min left ",
            end="",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        if self.live:
            print(file=sys.stderr, flush=True)
