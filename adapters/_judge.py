"""An LLM judge for labelling recorded answers (``liftguard traces label --judge``).

Any OpenAI-compatible Chat Completions endpoint works. The judge gets
:data:`JUDGE_SYSTEM` and, as the user message, :data:`JUDGE_PROMPT` filled with
the question, the reference answers (if the trace has any) and the answer, at
temperature 0 with at most 8 tokens. Its reply is parsed strictly
(:func:`parse_verdict`): after surrounding whitespace and one final period are
removed it must be exactly ``CORRECT`` or ``INCORRECT`` (any letter case);
anything else, an HTTP error, a timeout or a malformed response is a
:class:`JudgeFailure` and the trace stays unlabelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["JUDGE_PROMPT", "JUDGE_SYSTEM", "Judge", "JudgeFailure", "parse_verdict"]

JUDGE_SYSTEM = (
    "You grade answers to questions. Reply with exactly one word: CORRECT if the answer "
    "to grade answers the question correctly, INCORRECT otherwise (wrong, incomplete, "
    "cut off before the answer, evasive or not an answer)."
)
JUDGE_PROMPT = (
    "Question: {question}\n"
    "Reference answers: {references}\n"
    "Answer to grade: {answer}\n\n"
    "Reply with exactly one word: CORRECT or INCORRECT."
)


class JudgeFailure(Exception):
    """The judge gave no usable verdict; ``reason`` is one word for the summary
    (``http_<status>``, ``timeout``, ``transport``, ``malformed``, ``unparseable``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def parse_verdict(text: object) -> bool:
    """``True`` for ``CORRECT``, ``False`` for ``INCORRECT``; :class:`JudgeFailure` otherwise."""
    if not isinstance(text, str):
        raise JudgeFailure("malformed", f"the judge's message content is {text!r}")
    word = text.strip()
    if word.endswith("."):
        word = word[:-1]
    word = word.upper()
    if word == "CORRECT":
        return True
    if word == "INCORRECT":
        return False
    raise JudgeFailure("unparseable", f"the judge replied {text[:80]!r}, not CORRECT/INCORRECT")


class Judge:
    """``judge(question, answer, references)`` through ``base_url`` with ``model``.

    Sends :data:`JUDGE_SYSTEM` and :data:`JUDGE_PROMPT` (the question, the reference
    answers and the answer) at temperature 0, at most 8 tokens; the reply must be
    ``CORRECT`` or ``INCORRECT`` (:func:`parse_verdict`), anything else is a
    :class:`JudgeFailure`. Public as :class:`adapters.proxy.Judge`."""

    def __init__(
        self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 60.0
    ) -> None:
        try:
            import httpx
        except ImportError as exc:
            raise ImportError('the judge needs httpx: pip install "liftguard[serve]"') from exc
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._httpx = httpx
        self._client = httpx.Client(timeout=timeout, headers=headers, trust_env=False)
        self.url = f"{base_url.rstrip('/')}/chat/completions"
        self.model = model

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, question: str, answer: str, references: Sequence[str]) -> dict[str, Any]:
        """The Chat Completions request body for one answer."""
        refs = "; ".join(references) if references else "(none given)"
        prompt = JUDGE_PROMPT.format(question=question, references=refs, answer=answer)
        return {
            "model": self.model,
            "messages": [
                {"role": "system", "content": JUDGE_SYSTEM},
                {"role": "user", "content": prompt},
            ],
            "temperature": 0,
            "max_tokens": 8,
        }

    def judge(self, question: str, answer: str, references: Sequence[str] = ()) -> bool:
        """The judge's label; :class:`JudgeFailure` if it gave none."""
        httpx = self._httpx
        try:
            resp = self._client.post(self.url, json=self.request(question, answer, references))
        except httpx.TimeoutException as exc:
            raise JudgeFailure("timeout", f"the judge timed out ({exc!r})") from exc
        except httpx.HTTPError as exc:
            raise JudgeFailure("transport", f"the judge could not be reached ({exc!r})") from exc
        if resp.status_code != 200:
            raise JudgeFailure(f"http_{resp.status_code}", resp.text[:200])
        try:
            content = resp.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise JudgeFailure("malformed", f"the judge's response is malformed ({exc!r})") from exc
        return parse_verdict(content)
