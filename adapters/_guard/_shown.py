"""The text shown is the text read: a provider item's shown text checked against its tokens.

A Chat Completions chunk carries its text twice: ``delta.content`` (what a client shows)
and the tokens of ``logprobs.content`` (what the guard scores). An upstream, a proxy in
between or a bug can make them differ, and a guard that scored the tokens but let the
content through would certify text it never read. :class:`ShownText` keeps them equal:
the text shown so far must be the start of the tokens read so far, compared as UTF-8
bytes (a token's ``bytes`` when it has them, else its text), so that a character whose
bytes span several tokens may be shown with the token that completes it (OpenAI's
partial tokens ``"bytes:\\xf0\\x9f"``, ``"\\x91"``); at the end nothing read may be left
unshown. Any other difference blocks the answer with cause ``content_mismatch``.

Nothing after the finish is read either: once an item carried the finish reason, a later
item that carries anything of an answer (:func:`carries_answer`: tokens, text, another
finish, a refusal, a tool call, a stray choice) blocks it with cause ``after_finish``,
whatever it says (``"length"`` then ``"stop"`` is not a clean stop). An item with no
choice (a usage chunk, llama.cpp's timings) may follow.

:class:`ReadText` holds both rules for one answer; the stream step asks it about every
item before the item's tokens reach the monitor.
"""

from __future__ import annotations

from typing import Any

from guardrail import Cause, TokenEvent

__all__ = [
    "AFTER_FINISH_REASON", "CONTENT_MISMATCH_REASON", "UNSHOWN_REASON", "Block", "ReadText",
    "ShownText", "carries_answer",
]  # fmt: skip

Block = tuple[Cause, str]
"""Why an answer is blocked: the cause and the reason in words."""

CONTENT_MISMATCH_REASON = (
    "the text the provider shows (delta.content) differs from the tokens whose logprobs "
    "it sent (logprobs.content): the guard reads the tokens, so the text shown would be "
    "text it never read"
)
UNSHOWN_REASON = (
    "the answer ended with tokens the provider never showed as text (logprobs.content "
    "runs past delta.content): the text shown is not the text the guard read"
)
AFTER_FINISH_REASON = (
    "the provider sent more after the answer's finish reason (text, tokens or another "
    "finish): the answer was judged up to its finish, and nothing after it is delivered"
)


def carries_answer(parts: tuple[Any, ...]) -> bool:
    """An item's parts (:class:`~._openai_events.ChunkParts`, or a parser's shorter tuple)
    carry something of an answer, as a usage chunk does not."""
    return bool(parts[0] or parts[1] or parts[2] is not None or any(parts[3:]))


class ShownText:
    """Whether the text shown agrees with the tokens read, item by item (pure, no I/O).

    Examples
    --------
        >>> from guardrail import TokenEvent
        >>> shown = ShownText()
        >>> shown.agrees([TokenEvent("Paris", logprob=-0.1)], "Paris")
        True
        >>> partial = TokenEvent("bytes:\\\\xf0\\\\x9f", logprob=-0.1, bytes=b"\\xf0\\x9f")
        >>> shown.agrees([partial], ""), shown.complete  # half a character: not shown yet
        (True, False)
        >>> last = TokenEvent("\\\\x91\\\\x8c", logprob=-0.1, bytes=b"\\x91\\x8c")
        >>> shown.agrees([last], "\\N{OK HAND SIGN}"), shown.complete
        (True, True)
        >>> shown.agrees([TokenEvent(" Lyon", logprob=-0.1)], " Paris")
        False
    """

    __slots__ = ("_ahead",)

    def __init__(self) -> None:
        self._ahead = b""
        """Bytes of the tokens read that no text shown has covered yet."""

    @property
    def complete(self) -> bool:
        """Every token read was shown."""
        return not self._ahead

    def agrees(self, events: list[TokenEvent], shown: str) -> bool:
        """``shown`` (the text an item adds) keeps the text shown a start of the tokens
        read, ``events`` included."""
        if not self._ahead:  # the common case, cheap: this runs per item
            if len(events) == 1:
                if events[0].text == shown:
                    return True
            elif shown == "".join([e.text for e in events]):
                return True
        read = self._ahead + b"".join(
            [
                e.text.encode("utf-8", "surrogatepass") if e.bytes is None else e.bytes
                for e in events
            ]
        )
        text = shown.encode("utf-8", "surrogatepass")  # (JSON may hold a lone surrogate)
        if not read.startswith(text):
            return False
        self._ahead = read[len(text) :]
        return True


class ReadText:
    """The two rules for one answer's items, in order (pure, no I/O): :meth:`check` each
    item's parts (a :class:`~._openai_events.ChunkParts`), :meth:`end` at the end; each
    says why the answer must be blocked, or None.

    Examples
    --------
        >>> from guardrail import TokenEvent
        >>> read = ReadText()
        >>> read.check(([TokenEvent(" Paris", logprob=-0.1)], " Paris", "stop")) is None
        True
        >>> read.check(([], "", "stop"))[0].value  # a second finish
        'after_finish'
    """

    __slots__ = ("_finished", "_shown")

    def __init__(self) -> None:
        self._shown = ShownText()
        self._finished = False

    def check(self, parts: tuple[Any, ...]) -> Block | None:
        """Why the item with ``parts`` blocks the answer (after the finish, or text shown
        that is not its tokens'), or None. A refusal, a tool call or a stray choice is
        left to the step, which blocks it with a cause of its own."""
        if self._finished and carries_answer(parts):
            return Cause.AFTER_FINISH, AFTER_FINISH_REASON
        if parts[2] is not None:
            self._finished = True
        events = parts[0]
        if events and not any(parts[3:]) and not self._shown.agrees(events, parts[1]):
            return Cause.CONTENT_MISMATCH, CONTENT_MISMATCH_REASON
        return None

    def end(self) -> Block | None:
        """Why the answer, ended, is blocked (tokens read that were never shown), or None."""
        return None if self._shown.complete else (Cause.CONTENT_MISMATCH, UNSHOWN_REASON)
