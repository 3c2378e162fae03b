"""Correctness labels for short open-domain answers: two rules against reference answers.

Both rules compare normalised text. Both the answer and each reference are
normalised (:func:`normalize_answer`): lowercase; every ASCII punctuation
character deleted; the whole words ``a``, ``an``, ``the`` replaced by a space;
whitespace collapsed and stripped. A reference whose normalisation is empty, or
already occurs (as whole words) in the normalised question, is skipped by both,
so an answer that only repeats the question is not correct for free.

- **contains** (:func:`is_correct`, the trace format's rule and the one the
  shared traces and the shipped certificates are labelled with): correct if the
  normalised answer is non-empty and some usable reference ``r`` equals it or
  occurs in it as whole words. Generous to sentence answers ("The capital is
  Paris." names "paris"), strict with partial ones ("fusion" does not name
  "nuclear fusion"). Numbers are words compared by value: a run of digits, with
  thousands separators (``1,000``) and a decimal part (``100.0``) or not, is read
  as a number before punctuation is deleted, so "approximately 100.0 degrees"
  names "100" and "1,000" names "1000", while "1000" does not name "100" and
  "100.0" does not name "1000" (deleting the point would have made it "1000").
  Equal values only, no relative tolerance: for years and counts, 1914 is not
  1915. A number glued to letters ("100km", "A1") stays part of its word. It
  reads words, not meaning: "Leonardo da Vinci, but Michelangelo was the actual
  artist" names the reference "Leonardo da Vinci", and is correct by this rule
  (a judge, or a look at the answers, catches such contradictions).
- **f1** (:func:`token_f1`, :func:`is_correct_f1`): SQuAD's token F1, the
  harmonic mean of precision and recall of the answer's bag of tokens (the
  normalised text split on whitespace) against a reference's, the maximum over
  the usable references; correct if it reaches a threshold,
  :data:`DEFAULT_F1_THRESHOLD` unless given. Generous to partial answers
  ("fusion" against "nuclear fusion": 2/3), strict with sentence answers (one
  right word in six: 2/7).

Why 0.6 and not SQuAD's customary 0.5: for the one- to three-word answers these
rules are for, F1 takes few values, ``2k / (a + r)`` with ``k`` shared tokens,
``a`` answer tokens and ``r`` reference tokens. At exactly 0.5 lie the answers
that share one word of two with a two-word reference ("George III" against
"George V", "John Ford" against "John Huston"): a different person, place or
thing with a common first word. Read by hand on the shared TriviaQA traces,
almost all of the answers that 0.5 adds to the contains rule's correct ones
are of that kind and wrong. Any threshold in ``(0.5, 2/3]`` rejects that band
and keeps a one-word answer that is one of a two-word reference's words
("fusion", "pressure": 2/3); 0.6 is the round number in it.
``studies/label_agreement.py`` measures how often the rules disagree.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Iterator
from decimal import Decimal

from ._errors import ConfigError

__all__ = [
    "DEFAULT_F1_THRESHOLD",
    "is_correct",
    "is_correct_f1",
    "normalize_answer",
    "token_f1",
]

#: The token-F1 an answer needs to count as correct under the ``f1`` rule (see the
#: module docstring for why 0.6).
DEFAULT_F1_THRESHOLD = 0.6

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


def _usable(references: Iterable[str], question: str) -> Iterator[tuple[str, str]]:
    """``(reference, normalised)`` of the references, without the empty ones and those the
    question holds."""
    q = normalize_answer(question)
    for ref in references:
        r = normalize_answer(ref)
        if r and not (q and _contains(q, r)):
            yield ref, r


def _usable_references(references: Iterable[str], question: str) -> Iterator[str]:
    """The normalised references, without the empty ones and those the question holds."""
    return (r for _, r in _usable(references, question))


# A number not glued to a word: digits with thousands separators or not, a decimal part
# or not; not a piece of a longer run of digits, points and commas ("1.2.3", "3,5").
_NUMBER = re.compile(r"(?<![\w.,])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\w|[.,]\d)")


_DIGITS = re.compile(r"[0-9]+")


def _normal_words(text: str) -> list[str | Decimal]:
    """The words of :func:`normalize_answer`, a word of digits its value."""
    return [Decimal(w) if _DIGITS.fullmatch(w) else w for w in normalize_answer(text).split()]


def _words(text: str) -> list[str | Decimal]:
    """``text`` as the contains rule reads it: the words of :func:`normalize_answer`, with
    each number (``_NUMBER``) one word, its value."""
    out: list[str | Decimal] = []
    start = 0
    for match in _NUMBER.finditer(text):
        out += _normal_words(text[start : match.start()])
        out.append(Decimal(match.group().replace(",", "")))
        start = match.end()
    return out + _normal_words(text[start:])


def _names(answer: list[str | Decimal], reference: list[str | Decimal]) -> bool:
    """Whether the words ``reference`` occur in ``answer``, in a row (a number equals a
    number of the same value, never a word)."""
    n = len(reference)

    def same(a: str | Decimal, r: str | Decimal) -> bool:
        return type(a) is type(r) and a == r

    return any(all(map(same, answer[i : i + n], reference)) for i in range(len(answer) - n + 1))


def is_correct(answer: str, references: Iterable[str], question: str = "") -> bool:
    """Whether ``answer`` names one of ``references`` (the **contains** rule of the
    module docstring).

    >>> is_correct("The capital is Paris.", ["Paris"])
    True
    >>> is_correct("approximately 100.0 degrees Celsius", ["100"])
    True
    >>> is_correct("1000 degrees", ["100"]), is_correct("1,000", ["1000"])
    (False, True)
    """
    words = _words(answer)
    refs = (_words(ref) for ref, _ in _usable(references, question))
    return bool(words) and any(r and _names(words, r) for r in refs)


def _bag_f1(answer_tokens: Counter[str], n_answer: int, reference: str) -> float:
    ref_tokens = reference.split()
    shared = sum((answer_tokens & Counter(ref_tokens)).values())
    return 0.0 if shared == 0 else 2.0 * shared / (n_answer + len(ref_tokens))


def token_f1(answer: str, references: Iterable[str], question: str = "") -> float:
    """SQuAD's token F1 of ``answer`` against its best reference, in ``[0, 1]``.

    Answer and references are normalised as :func:`normalize_answer` does and
    split on whitespace; the F1 of the two bags of tokens (``2 * shared / (answer
    tokens + reference tokens)``, ``shared`` counted with multiplicity) is taken
    against each usable reference and the largest returned. An empty answer, or
    no usable reference (empty, or held by the normalised ``question``: see the
    module docstring), gives 0.0.
    """
    tokens = normalize_answer(answer).split()
    if not tokens:
        return 0.0
    bag, refs = Counter(tokens), _usable_references(references, question)
    return max((_bag_f1(bag, len(tokens), r) for r in refs), default=0.0)


def is_correct_f1(
    answer: str,
    references: Iterable[str],
    question: str = "",
    *,
    threshold: float = DEFAULT_F1_THRESHOLD,
) -> bool:
    """Whether :func:`token_f1` of ``answer`` reaches ``threshold`` (the **f1** rule).

    ``threshold`` must lie in ``(0, 1]`` (1 asks for the same bag of tokens as a
    reference); :class:`~guardrail.ConfigError` otherwise.
    """
    if not 0.0 < threshold <= 1.0:  # also refuses NaN
        raise ConfigError(f"threshold: expected a number in (0, 1], got {threshold!r}")
    return token_f1(answer, references, question) >= threshold
