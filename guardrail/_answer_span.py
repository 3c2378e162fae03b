"""The final answer of a worked solution: where its number lies among the answer's tokens.

A step-by-step maths answer (GSM8K) ends with its result, as ``Answer: 42`` (the line
the task's system prompt asks for) or as ``\\boxed{42}`` (what many models write by
habit). The confidence a model puts in those few tokens is a strong single-pass
baseline for such answers, and it needs the tokens that spell the number.

The rule, on the text the tokens spell (their texts joined):

1. the number after the last ``Answer`` marker (``Answer: 42``, ``**Answer:** $1,234``,
   ``The answer is 7``), as :func:`adapters.check_number` reads it;
2. else the first number inside the last ``\\boxed{...}``;
3. else the last number in the text.

A number is an optional minus sign, digits with optional thousands commas and an
optional decimal part (``-3``, ``1,234``, ``0.5``, ``.5``); a ``$`` or a space before
it is not part of it (after a minus sign it is: the tokens of ``-$5`` all count). The
label check (:func:`adapters.check_number`) reads rules 1 and 3 only: the two pick
different numbers only when a boxed number is followed by another number and no
``Answer`` marker (rare; the boxed one is then the answer the model states). The
span's tokens are those whose text overlaps the number's characters.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["final_number_span"]

_NUMBER = r"-?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\$?\.\d+"
"""A number as the label check reads it (:mod:`adapters._labels._checks`; a test keeps
the two in step)."""
_ANSWER = re.compile(r"\banswer\W{0,4}\s*(?:is\s*)?\W{0,3}(" + _NUMBER + ")", re.I)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_NUMBER_RE = re.compile(_NUMBER)
_LEAD = re.compile(r"[$\s]*")


def _number_chars(text: str) -> tuple[int, int] | None:
    """``[start, end)`` of the final number of ``text`` (the rule above), without a
    leading ``$`` or space; None without a number."""
    marked = list(_ANSWER.finditer(text))
    if marked:
        start, end = marked[-1].span(1)
    else:
        found: tuple[int, int] | None = None
        boxes = list(_BOXED.finditer(text))
        if boxes:
            inner = _NUMBER_RE.search(boxes[-1].group(1))
            if inner is not None:
                offset = boxes[-1].start(1)
                found = (offset + inner.start(), offset + inner.end())
        if found is None:
            numbers = list(_NUMBER_RE.finditer(text))
            if not numbers:
                return None
            found = numbers[-1].span()
        start, end = found
    if text[start] == "-":  # a minus sign starts the number ("-$5" spans "-", "$", "5")
        return start, end
    lead = _LEAD.match(text, start)
    assert lead is not None  # matches the empty string at worst
    return lead.end(), end


def final_number_span(token_texts: Sequence[str]) -> range | None:
    """The indices of the tokens that spell the final number of a worked answer (see the
    module docstring for the rule), or None if the text has no number.

    Examples
    --------
        >>> tokens = ["So", " she", " makes", " $", "1", "8", ".\\n", "Answer", ":", " ", "1", "8"]
        >>> final_number_span(tokens)
        range(10, 12)
        >>> final_number_span(["The", " total", " is", " \\\\boxed{", "4", "2", "}."])
        range(4, 6)
        >>> final_number_span(["no", " digits"]) is None
        True
    """
    text = "".join(token_texts)
    chars = _number_chars(text)
    if chars is None:
        return None
    start, end = chars
    first = last = -1
    pos = 0
    for i, piece in enumerate(token_texts):
        nxt = pos + len(piece)
        if nxt > start and pos < end:  # overlaps [start, end)
            first = i if first < 0 else first
            last = i
        pos = nxt
        if pos >= end:
            break
    return range(first, last + 1)
