"""What a stream carries and what the monitor says: token events, verdicts and their causes.

A :class:`Verdict` carries a machine-readable :class:`Cause` beside its
human-readable ``reason``. The end of a stream is judged by how it ended
(:func:`end_cause`): only the provider's documented clean finish lets the final
rule certify. An answer cut at the token limit (``"length"``) is an answer only
when the policy was calibrated on answers cut the same way
(``StreamPolicy.on_length="answer"``); anything else (no finish at all, a content
filter, a refusal, a tool call) is never certified.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = ["CLEAN_FINISH", "Cause", "State", "TokenEvent", "Verdict", "end_cause"]


class State(str, Enum):
    """Where a verdict stands: ``CONTINUE`` until decided, then ``CERTIFIED`` or ``BLOCKED``.

    Examples
    --------
        >>> State.CERTIFIED.value
        'certified'
        >>> [s.value for s in State]
        ['continue', 'certified', 'blocked']
    """

    CONTINUE = "continue"
    CERTIFIED = "certified"
    BLOCKED = "blocked"


class Cause(str, Enum):
    """Why a verdict is what it is (stable strings for logs and metrics).

    Examples
    --------
        >>> Cause.CERTIFIED.value
        'certified'
        >>> Cause("below_threshold") is Cause.BELOW_THRESHOLD
        True
    """

    UNDECIDED = "undecided"
    """No verdict yet."""
    CERTIFIED = "certified"
    """The evidence reached ``tau`` (early, or by the final rule after a clean finish)."""
    BELOW_THRESHOLD = "below_threshold"
    """The evidence fell below ``tau`` (early block, or the final rule)."""
    NO_VERDICT = "no_verdict"
    """Undecided at the end and the policy fails closed (``final_rule="block"``)."""
    EMPTY_ANSWER = "empty_answer"
    """The stream finished without a token that carried evidence."""
    MISSING_LOGPROBS = "missing_logprobs"
    """A token came without a usable log-probability (``on_missing_logprobs="block"``)."""
    TRUNCATED = "truncated"
    """The stream ended without the provider's documented finish (cut off)."""
    EMPTY_STREAM = "empty_stream"
    """The provider sent no chunk at all (e.g. a server started without logits)."""
    LENGTH = "length"
    """Cut at the token limit, and the policy does not count such answers (``on_length``)."""
    CONTENT_FILTER = "content_filter"
    """The provider's content filter stopped the answer."""
    REFUSAL = "refusal"
    """The model refused (refusal text, or a refusal stop reason)."""
    OTHER_FINISH = "other_finish"
    """The stream finished for another reason (tool calls, a function call, unknown)."""
    UNREADABLE_TEXT = "unreadable_text"
    """A token's text could not be reconstructed (empty text and no bytes)."""
    NOT_OBSERVED = "not_observed"
    """No language-model run with text was seen, or one did not finish (LangChain)."""
    TOOL_CALL = "tool_call"
    """The answer carries a tool (function) call or other content that is not text with
    token log-probabilities: nothing the certificate reads backs it."""
    UNGUARDED_CHOICE = "unguarded_choice"
    """The provider sent a choice besides the one guarded (a second choice, a duplicate or
    missing index): content the guard did not read, so none of it is delivered."""
    OVER_TOKEN_LIMIT = "over_token_limit"
    """The answer ran past the token limit a fitted monitor's early verdicts assume (the
    certificate's ``context.max_tokens``, or the ``max_tokens`` it was given)."""
    CONTENT_MISMATCH = "content_mismatch"
    """The text the provider shows (``delta.content``, a whole answer's ``content``) differs
    from the tokens whose logprobs were read: text the guard did not read."""
    AFTER_FINISH = "after_finish"
    """The provider sent more after the answer's finish (text, another finish, a malformed
    event): nothing after the finish was judged with the answer."""


CLEAN_FINISH = "stop"
"""The finish reason of a complete answer (OpenAI Chat Completions and compatible servers)."""

_FINISH_CAUSES = {
    "content_filter": Cause.CONTENT_FILTER,
    "refusal": Cause.REFUSAL,
}


def end_cause(finish_reason: str | None, on_length: str) -> Cause | None:
    """``None`` when a stream that ended with ``finish_reason`` is a finished answer, else why not.

    ``"stop"`` is a finished answer; ``"length"`` is one iff ``on_length ==
    "answer"``; ``None`` (no finish seen) is a truncated stream; every other
    reason is not an answer to certify.
    """
    if finish_reason == CLEAN_FINISH:
        return None
    if finish_reason is None:
        return Cause.TRUNCATED
    if finish_reason == "length":
        return None if on_length == "answer" else Cause.LENGTH
    return _FINISH_CAUSES.get(finish_reason, Cause.OTHER_FINISH)


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One streamed token, provider-neutral; ``logprob`` in nats (None if not given),
    ``top_logprobs`` as ``(token or id, logprob)``, ``index`` 0-based if the provider says,
    ``entropy`` the exact entropy (nats) of the token's full distribution where the
    stream carries it (a local model's does; an API's never).

    Examples
    --------
        >>> event = TokenEvent("Paris", logprob=-0.05,
        ...                    top_logprobs=(("Paris", -0.05), ("Lyon", -3.2)))
        >>> event.text, event.logprob
        ('Paris', -0.05)
    """

    text: str
    logprob: float | None
    token_id: int | None = None
    bytes: bytes | None = None
    top_logprobs: tuple[tuple[str | int, float], ...] = ()
    index: int | None = None
    entropy: float | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """State after a token: ``t`` tokens of evidence; ``mean``/``lower``/``upper`` and ``tau``
    in the rule's units (nats of lift for the lift rule, ``boundary`` ``"betting"`` or
    ``"paper"``; log-odds for a fitted statistic, ``boundary`` ``"fitted"``); ``final``
    once it can no longer change (decided early, or finished); ``cause`` says why,
    machine-readably (``reason`` in words).

    Examples
    --------
        >>> monitor = Monitor.lift(StreamPolicy(), tau=2.0, skeleton=UniformSkeleton(1000))
        >>> verdict = monitor.update(TokenEvent("a", logprob=-0.1))
        >>> verdict.state.value, verdict.t, verdict.decided, round(verdict.mean, 3)
        ('continue', 1, False, 6.808)
    """

    state: State
    t: int
    mean: float
    lower: float
    upper: float
    tau: float
    boundary: str
    reason: str
    final: bool
    cause: Cause = Cause.UNDECIDED

    @property
    def decided(self) -> bool:
        return self.state is not State.CONTINUE


_FIELDS = ("state", "t", "mean", "lower", "upper", "tau", "boundary", "reason", "final", "cause")
_SLOT_SET: tuple[Any, ...] = tuple(Verdict.__dict__[f].__set__ for f in _FIELDS)


def make_verdict(
    state: State,
    t: int,
    mean: float,
    lo: float,
    up: float,
    tau: float,
    b: str,
    why: str,
    fin: bool,
    cause: Cause,
) -> Verdict:
    """``Verdict(...)`` via the slot descriptors, skipping the slower frozen ``__init__``."""
    v = object.__new__(Verdict)
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9 = _SLOT_SET
    s0(v, state)
    s1(v, t)
    s2(v, mean)
    s3(v, lo)
    s4(v, up)
    s5(v, tau)
    s6(v, b)
    s7(v, why)
    s8(v, fin)
    s9(v, cause)
    return v


_EVENT_SET: tuple[Any, ...] = tuple(
    TokenEvent.__dict__[f].__set__
    for f in ("text", "logprob", "token_id", "bytes", "top_logprobs", "index", "entropy")
)


def make_event(
    text: str,
    logprob: float | None,
    raw: bytes | None = None,
    top: tuple[tuple[str | int, float], ...] = (),
) -> TokenEvent:
    """``TokenEvent(text, logprob, bytes=raw, top_logprobs=top)`` via the slot descriptors,
    skipping the slower frozen ``__init__`` (a stream reader builds one per token)."""
    e = object.__new__(TokenEvent)
    s0, s1, s2, s3, s4, s5, s6 = _EVENT_SET
    s0(e, text)
    s1(e, logprob)
    s2(e, None)
    s3(e, raw)
    s4(e, top)
    s5(e, None)
    s6(e, None)
    return e
