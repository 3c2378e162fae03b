"""Scopes: the part of a long answer a feature reads, told apart token by token as it streams.

A long answer mixes parts that say different things about whether it is right: the
steps of a worked solution and its final answer, the code block and the prose around
it, the numbers a calculation writes and the words between them. A **scoped** feature
(``"final:logprob.min"``, ``"code:entropy.mean"``; see
:class:`guardrail._aggregates.Feature`) aggregates a base feature over the tokens of one
scope only:

==========  ====================================================================
scope       the tokens in it
==========  ====================================================================
``final``   every token that starts at or after the end of the first final-answer
            marker: ``Answer:`` (any case, up to three spaces before the colon, not
            inside a word) or ``\\boxed{``. In ``... Answer: 18`` that is `` 18``
            and anything after it.
``code``    every token that starts inside a fenced code block: after the newline
            of a fence line (a line whose first non-blank characters, after spaces
            and tabs, are three backticks) and before the newline of the next
            one. The closing fence's own tokens therefore count as code.
``number``  every token whose text has an ASCII digit (``0`` to ``9``) in it: the
            numbers of a worked solution, where its arithmetic goes right or wrong
            (``" 1"``, ``"8"``, ``"2,"``; not ``" eighteen"``).
==========  ====================================================================

Whether a token is in a scope depends only on its own text and the text before it, so a
monitor knows it when the token arrives: :func:`scope_tracker` gives the streaming
object (``update(text) -> bool``, O(length of the token's text); its value, read again as
``value``, is whether the token just taken is in the scope); :func:`scope_mask` is its
batch twin over a whole answer's token texts, written independently (regular
expressions over the joined text); the tests compare the two at every token.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ._errors import ConfigError

__all__ = [
    "SCOPES",
    "CodeScope",
    "FinalAnswerScope",
    "NumberScope",
    "scope_mask",
    "scope_tracker",
]

SCOPES = ("final", "code", "number")
"""The scopes a feature can read."""

_MARKER = re.compile(r"(?<![A-Za-z0-9_])answer[ \t]{0,3}:|\\boxed\{", re.I)
_MARKER_MAX = 10
"""The longest text ``_MARKER`` matches (``answer   :``)."""
_FENCE_LINE = re.compile(r"^[ \t]*```[^\n]*\n", re.M)
_DIGIT = re.compile(r"[0-9]")
_digit = _DIGIT.search


class FinalAnswerScope:
    """Streaming ``final`` scope: whether each token starts after the first final-answer
    marker. Keeps the last few characters only.

    Examples
    --------
        >>> scope = FinalAnswerScope()
        >>> [scope.update(t) for t in ["2 + 2 = 4.", "\\n", "Answer", ":", " 4"]]
        [False, False, False, False, True]
    """

    __slots__ = ("tail", "value")

    def __init__(self) -> None:
        self.value = False
        """Whether the last token taken is in the scope (False before any)."""
        self.tail: str | None = ""  # None: the first marker ended in the last token

    def update(self, text: str) -> bool:
        """Take the token with ``text``; :attr:`value`, whether it is in the scope."""
        if self.value:
            return True
        tail = self.tail
        if tail is None:  # this token starts after the marker
            self.value = True
            return True
        # a match that ends in this token starts at most _MARKER_MAX - 1 characters
        # before it; one more character before that is the lookbehind's context
        kept = len(tail) > _MARKER_MAX
        buf = tail + text
        if _MARKER.search(buf, 1 if kept else 0) is not None:
            self.tail = None
        else:
            self.tail = buf[-(_MARKER_MAX + 1) :]
        return False


class CodeScope:
    """Streaming ``code`` scope: whether each token starts inside a fenced code block.

    Examples
    --------
        >>> scope = CodeScope()
        >>> [scope.update(t) for t in ["Here:\\n", "```", "python\\n", "x = 1", "\\n", "```"]]
        [False, False, False, True, True, True]
    """

    __slots__ = ("head", "inside", "value")

    def __init__(self) -> None:
        self.inside = False  # whether the next token starts inside a block
        self.head = ""  # the current line's leading blanks and first three other characters
        self.value = False
        """Whether the last token taken is in the scope (False before any)."""

    def update(self, text: str) -> bool:
        """Take the token with ``text``; :attr:`value`, whether it is in the scope."""
        inside = self.value = self.inside
        head = self.head
        if "\n" not in text and len(head.lstrip(" \t")) >= 3:
            return inside  # inside a line whose start is known: nothing to keep
        for ch in text:
            if ch == "\n":
                if head.lstrip(" \t").startswith("```"):
                    self.inside = not self.inside
                head = ""
            elif len(head.lstrip(" \t")) < 3:
                head += ch
        self.head = head
        return inside


class NumberScope:
    """Streaming ``number`` scope: whether each token's text has an ASCII digit. Keeps
    nothing between tokens but that.

    Examples
    --------
        >>> scope = NumberScope()
        >>> [scope.update(t) for t in [" 16", " -", " 3", " eggs", " =", " 1", "3", ".\\n"]]
        [True, False, True, False, False, True, True, False]
    """

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = False
        """Whether the last token taken is in the scope (False before any)."""

    def update(self, text: str) -> bool:
        """Take the token with ``text``; :attr:`value`, whether it is in the scope."""
        self.value = found = _digit(text) is not None
        return found


def scope_tracker(scope: str) -> FinalAnswerScope | CodeScope | NumberScope:
    """A fresh streaming tracker of ``scope`` (one per answer)."""
    if scope == "final":
        return FinalAnswerScope()
    if scope == "code":
        return CodeScope()
    if scope == "number":
        return NumberScope()
    raise ConfigError(f"unknown scope {scope!r}; choose one of {', '.join(SCOPES)}")


def scope_mask(texts: Sequence[str], scope: str) -> npt.NDArray[np.bool_]:
    """Batch twin of :func:`scope_tracker`: for each token of an answer (its text in
    ``texts``), whether it is in ``scope``."""
    starts = np.cumsum([0, *map(len, texts)])[:-1]
    text = "".join(texts)
    if scope == "final":
        ends = [m.end() for m in _MARKER.finditer(text)]
        if not ends:
            return np.zeros(len(texts), dtype=bool)
        return np.asarray(starts >= min(ends), dtype=bool)
    if scope == "code":
        toggles = np.array([m.end() for m in _FENCE_LINE.finditer(text)], dtype=np.int64)
        passed = np.searchsorted(toggles, starts, side="right")  # fence lines ended by then
        return np.asarray(passed % 2 == 1, dtype=bool)
    if scope == "number":
        digits = np.array([m.start() for m in _DIGIT.finditer(text)], dtype=np.int64)
        stops = starts + np.array([len(t) for t in texts], dtype=np.int64)
        # a token holds a digit iff a digit's position lies in [start, stop)
        before_end = np.searchsorted(digits, stops, side="left")
        before_start = np.searchsorted(digits, starts, side="left")
        return np.asarray(before_end > before_start, dtype=bool)
    raise ConfigError(f"unknown scope {scope!r}; choose one of {', '.join(SCOPES)}")
