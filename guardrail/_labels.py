"""Correctness labels for short open-domain answers (the trace format's rule).

Both the answer and each reference are normalised: lowercase; every ASCII
punctuation character deleted; the whole words ``a``, ``an``, ``the``
replaced by a space; whitespace collapsed and stripped. An answer is correct
if its normalisation is non-empty and, for at least one usable reference
``r``, ``r`` equals the answer or occurs in it as whole words. A reference
whose normalisation already occurs (as whole words) in the normalised
question is skipped, so an answer that only repeats the question is not
correct for free.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

__all__ = ["is_correct", "normalize_answer"]

_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPACE = re.compile(r"\s+")


def normalize_answer(text: str) -> str:
    """Lowercase, drop ASCII punctuation and articles, collapse whitespace."""
    s = text.lower().translate(_PUNCT)
    s = _ARTICLES.sub(" ", s)
    return _SPACE.sub(" ", s).strip()


def _contains(haystack: str, needle: str) -> bool:
    return f" {needle} " in f" {haystack} "


def is_correct(answer: str, references: Iterable[str], question: str = "") -> bool:
    """Whether ``answer`` names one of ``references`` (see the module docstring)."""
    a = normalize_answer(answer)
    if not a:
        return False
    q = normalize_answer(question)
    for ref in references:
        r = normalize_answer(ref)
        if not r or (q and _contains(q, r)):
            continue
        if a == r or _contains(a, r):
            return True
    return False
