"""Score streamed text with a local model: teacher forcing, token by token as text arrives.

For providers whose API returns no token log-probabilities (Anthropic), the
streamed answer text is re-tokenized with a local scorer model and each token
is scored by teacher forcing after a prompt. The log-probabilities are the
**scorer's own**, not the provider model's: they measure how much evidence a
(usually much smaller) local model sees for the text, and a calibration is
only valid for the scorer, prompt format and skeleton it was made with.

Token boundaries of a growing text are not final: ``"The chem"`` tokenizes as
``["The", " chem"]`` but ``"The chemical"`` as ``["The", " chemical"]``.
:class:`LocalTextScorer` therefore holds back the text's last word and the
whitespace run before it (and keeps holding across a whitespace run that
contains a line break, since some pre-tokenizers attach line breaks to the
preceding punctuation). Byte-level BPE tokenizers with regex pre-tokenization
(GPT-2, SmolLM2, Llama 3, Qwen) never merge across the start of a run of
spaces or tabs, and a chunk before it does not depend on what follows, so the
tokens that end there are final: they are what the whole text will tokenize to.
The held tail is re-tokenized on every delta, and :meth:`LocalTextScorer.finish`
commits it at the end. The committed tokens always spell the streamed text byte
for byte (checked): text the tokenizer cannot round-trip (special-token
text such as ``<|im_end|>``, or a non-byte-level tokenizer) raises
:class:`~guardrail.GuardrailError` instead of being scored approximately.

Cost: every delta that completes a word re-evaluates prompt + answer in one
llama.cpp batch (:meth:`LocalModel.score` resets the KV cache), so the work
grows with the square of the answer length: fine for answers of tens of tokens
(a few ms to tens of ms per word with SmolLM2-135M on 2 cores), not for pages.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from guardrail import ConfigError, GuardrailError, TokenEvent

if TYPE_CHECKING:
    from .._local._model import LocalModel

__all__ = ["LocalTextScorer", "stable_prefix_length"]

log = logging.getLogger(__name__)

_SAFE_SPACE = frozenset(" \t")  # whitespace no pre-tokenizer attaches to the chunk before it


def stable_prefix_length(text: str) -> int:
    """Length of the prefix of ``text`` whose tokens can no longer change as text is appended.

    It ends where the whitespace run before the last word starts; a run that
    holds anything but spaces and tabs (a line break) does not count, and the
    search moves one word further back. ``0`` when there is no such run.
    """
    i = len(text)
    while i > 0:
        while i and not text[i - 1].isspace():
            i -= 1
        end = i
        while i and text[i - 1].isspace():
            i -= 1
        if i == 0:
            return 0
        if _SAFE_SPACE.issuperset(text[i:end]):
            return i
    return 0


class LocalTextScorer:
    """Incrementally tokenize and score one streamed answer with ``model`` after ``prompt``.

    ``prompt`` is the exact text the scorer conditions on (e.g.
    ``smollm2_chat_prompt(question)``, the format of the demo calibration).
    :meth:`feed` takes each text delta and returns a
    :class:`~guardrail.TokenEvent` for every token that became final (see the
    module docstring); :meth:`finish` returns the rest. Concatenated, the events
    are the tokenization of the whole answer, each with its teacher-forced
    log-probability under the scorer (``index`` counts from 0, no top-k).
    One scorer per answer; not thread-safe (nor is the model).

    Examples
    --------
        >>> from adapters.local import LocalModel, smollm2_chat_prompt
        >>> prompt = smollm2_chat_prompt("What is the capital of France?")
        >>> scorer = LocalTextScorer(LocalModel(n_ctx=128), prompt)
        >>> [event.text for event in scorer.feed("The capital is")]  # " is" may still grow
        ['The', ' capital']
        >>> [(event.text, event.index, event.logprob < 0) for event in scorer.finish()]
        [(' is', 2, True)]
    """

    __slots__ = ("_done", "_ids", "_model", "_pending", "_prompt", "_text")

    def __init__(self, model: LocalModel, prompt: str) -> None:
        if not all(callable(getattr(model, a, None)) for a in ("tokenize", "score", "token_bytes")):
            raise ConfigError(
                "model must be a LocalModel (tokenize/score/token_bytes), "
                f"got {type(model).__name__}"
            )
        if not isinstance(prompt, str) or not prompt:
            raise ConfigError(
                "prompt must be a non-empty string: the text the scorer conditions on"
            )
        self._model, self._prompt = model, prompt
        self._ids: list[int] = []
        self._pending, self._text, self._done = "", "", False

    @property
    def model(self) -> LocalModel:
        return self._model

    @property
    def prompt(self) -> str:
        return self._prompt

    @property
    def text(self) -> str:
        """All text fed so far."""
        return self._text

    @property
    def token_ids(self) -> tuple[int, ...]:
        """Token ids scored so far (final)."""
        return tuple(self._ids)

    @property
    def pending(self) -> str:
        """Text received but not yet scored (its token boundaries may still change)."""
        return self._pending

    def feed(self, text: str) -> list[TokenEvent]:
        """Add a text delta; events for the tokens that are now final (often none)."""
        if self._done:
            raise GuardrailError("feed() after finish(): use one LocalTextScorer per answer")
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        self._text += text
        self._pending += text
        cut = stable_prefix_length(self._pending)
        return self._commit(cut) if cut else []

    def finish(self) -> list[TokenEvent]:
        """End of the answer: events for all remaining tokens (idempotent)."""
        if self._done:
            return []
        self._done = True
        return self._commit(len(self._pending)) if self._pending else []

    def _commit(self, cut: int) -> list[TokenEvent]:
        model, pending = self._model, self._pending
        data = pending.encode("utf-8")
        ids = model.tokenize(pending)
        pieces = [model.token_bytes(i) for i in ids]
        if b"".join(pieces) != data:
            raise GuardrailError(
                f"the scorer cannot tokenize the streamed text byte for byte ({pending[:40]!r}): "
                "it contains special-token text, or the tokenizer is not byte-level BPE"
            )
        target, pos, k = len(pending[:cut].encode("utf-8")), 0, 0
        while k < len(pieces) and pos < target:
            pos += len(pieces[k])
            k += 1
        if pos != target:  # a token crosses the cut: this tokenizer merged across whitespace
            log.debug("no token boundary at the stable cut; holding %r", pending)
            return []
        new_ids, new_pieces = ids[:k], pieces[:k]
        start = len(self._ids)
        logprobs = model.score(self._prompt, [*self._ids, *new_ids])[start:]
        self._ids.extend(new_ids)
        self._pending = data[target:].decode("utf-8")
        return [
            TokenEvent(
                text=raw.decode("utf-8", errors="replace"),
                logprob=lp,
                token_id=tid,
                bytes=raw,
                index=start + j,
            )
            for j, (tid, raw, lp) in enumerate(zip(new_ids, new_pieces, logprobs, strict=True))
        ]
