"""An LLM judge for labelling recorded answers (``liftguard traces label --judge``).

Any OpenAI-compatible Chat Completions endpoint works. The judge gets
:data:`JUDGE_SYSTEM` and, as the user message, :data:`JUDGE_PROMPT` filled with
the question, the reference answers (if the trace has any) and the answer, at
temperature 0 with at most 8 tokens. Its reply is parsed strictly
(:func:`parse_verdict`): after surrounding whitespace and one final period are
removed it must be exactly ``CORRECT`` or ``INCORRECT`` (any letter case);
anything else, an HTTP error, a timeout or a malformed response is a
:class:`JudgeFailure` and the trace stays unlabelled.

``timeout`` is the deadline of a whole call, from connecting to the last byte of
the reply, not of each read: a judge that trickles its reply a byte at a time is
cut off at the deadline like one that says nothing (:class:`_Deadline`). So that
the deadline can end any call, each call has a connection of its own.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
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


MAX_REPLY_BYTES = 1 << 20  # a verdict is a word: a larger reply is malformed


class _Deadline:
    """Ends one HTTP call ``seconds`` after it starts, in whatever phase it is.

    A timer shuts the call's socket down when the time is up, which wakes the read
    or write waiting on it (the call then fails, and :attr:`expired` says why). The
    socket comes from httpcore's ``trace`` extension once connected (pass
    :meth:`trace` as ``extensions={"trace": ...}``); it is held through a duplicate
    of its descriptor, so the client closing its own is harmless. A call still
    connecting when the time is up is shut down as soon as it connects (its
    connect timeout is the same number of seconds)."""

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._finished = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def trace(self, event: str, info: dict[str, Any]) -> None:
        if event != "connection.connect_tcp.complete":
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            if self._finished:
                return
            self._socks.append(sock.dup())
            if self.expired:
                self._shutdown()

    def _expire(self) -> None:
        with self._lock:
            if not self._finished:
                self.expired = True
                self._shutdown()

    def _shutdown(self) -> None:
        for sock in self._socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        with self._lock:
            self._finished = True
            for sock in self._socks:
                sock.close()
            self._socks.clear()


class Judge:
    """``judge(question, answer, references)`` through ``base_url`` with ``model``.

    Sends :data:`JUDGE_SYSTEM` and :data:`JUDGE_PROMPT` (the question, the reference
    answers and the answer) at temperature 0, at most 8 tokens; the reply must be
    ``CORRECT`` or ``INCORRECT`` (:func:`parse_verdict`), anything else is a
    :class:`JudgeFailure`. ``timeout`` (seconds) is the deadline of each call as a
    whole, from connecting to the last byte of the reply; a call past it is a
    :class:`JudgeFailure` with reason ``timeout``. Public as :class:`adapters.Judge`;
    needs httpx only.

    Examples
    --------
        >>> judge = Judge("http://127.0.0.1:8000/v1", "judge-model")
        >>> body = judge.request("Capital of France?", "Paris", ["Paris"])
        >>> body["model"], body["temperature"], body["max_tokens"]
        ('judge-model', 0, 8)
        >>> judge.close()
    """

    def __init__(
        self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 60.0
    ) -> None:
        try:
            import httpx
        except ImportError as exc:
            raise ImportError("the judge needs httpx: pip install httpx") from exc
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._httpx = httpx
        self.timeout = timeout
        self._client = httpx.Client(
            timeout=timeout,
            headers=headers,
            trust_env=False,
            limits=httpx.Limits(max_keepalive_connections=0),  # a connection per call
        )
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
        """The judge's label; :class:`JudgeFailure` if it gave none (in time)."""
        httpx = self._httpx
        body = self.request(question, answer, references)
        deadline = _Deadline(self.timeout)
        try:
            with (
                deadline,
                self._client.stream(
                    "POST", self.url, json=body, extensions={"trace": deadline.trace}
                ) as resp,
            ):
                status, raw = resp.status_code, _read_capped(resp)
        except httpx.HTTPError as exc:
            if deadline.expired or isinstance(exc, httpx.TimeoutException):
                raise JudgeFailure(
                    "timeout", f"the judge gave no reply within {self.timeout:g} s ({exc!r})"
                ) from exc
            raise JudgeFailure("transport", f"the judge could not be reached ({exc!r})") from exc
        if status != 200:
            raise JudgeFailure(f"http_{status}", raw[:200].decode("utf-8", "replace"))
        try:
            content = json.loads(raw)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise JudgeFailure("malformed", f"the judge's response is malformed ({exc!r})") from exc
        return parse_verdict(content)


def _read_capped(resp: Any) -> bytes:
    """The body of ``resp``; a :class:`JudgeFailure` past :data:`MAX_REPLY_BYTES`."""
    chunks, size = [], 0
    for chunk in resp.iter_bytes():
        size += len(chunk)
        if size > MAX_REPLY_BYTES:
            raise JudgeFailure("malformed", f"the judge's reply is over {MAX_REPLY_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
