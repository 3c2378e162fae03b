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
from collections.abc import Callable
from typing import Any

from ._common import CommandError
from ._label_refs import Labeller
from ._recorded import recorded_lines

__all__ = ["Labels", "Progress", "resume_ids", "tokens_per_second"]

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
    """``done/total answers, correct, tokens/s, s/answer, time left``: on a terminal, one
    stderr line rewritten after every answer; otherwise (a run in the background, its
    stderr a log) a plain line at most every ``every`` seconds, so that a slow run shows in
    its log. :meth:`rate` is the tokens per second so far (for the closing summary).

    ``clock``: seconds, monotonic (``time.perf_counter``; a test passes its own)."""

    def __init__(
        self, total: int, every: float = 60.0, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.total, self.every, self.clock = total, every, clock
        self.live = sys.stderr.isatty()
        self.t0 = self.last = clock()
        self.tokens = 0
        self.drawn = False

    def rate(self) -> str:
        """``N tokens in S s, R tokens/s`` so far."""
        took = self.clock() - self.t0
        return f"{self.tokens} tokens in {took:.1f} s, {tokens_per_second(self.tokens, took)}"

    def update(self, done: int, n_ok: int, n_tokens: int = 0) -> None:
        self.tokens += n_tokens
        now = self.clock()
        if not self.live and (done >= self.total or now - self.last < self.every):
            return  # a log gets a line now and then, and the summary at the end
        self.last = now
        took = now - self.t0
        rate = took / max(done, 1)
        left = rate * (self.total - done)
        speed = f"{tokens_per_second(self.tokens, took)}, " if self.tokens else ""
        text = (
            f"{done}/{self.total} answers, {n_ok} correct, {speed}{rate:.2f} s/answer, "
            f"about {left / 60:.0f} min left"
        )
        if self.live:
            print(f"\r{text} ", end="", file=sys.stderr, flush=True)
            self.drawn = True
        else:
            print(f"liftguard traces generate: {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.drawn:
            print(file=sys.stderr, flush=True)


def tokens_per_second(tokens: int, seconds: float) -> str:
    """``R tokens/s`` to three significant digits (a slow run reads 0.412, not 0)."""
    return f"{tokens / seconds:.3g} tokens/s" if seconds > 0 else "- tokens/s"
