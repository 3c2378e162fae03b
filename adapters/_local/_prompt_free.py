"""Prompt-free skeleton: a local model scores the answer without the question.

``log S(y_t) = log P_local(y_t | prefix, y_<t)`` where ``prefix`` is a
question-free prompt (for SmolLM2-Instruct: the chat template with the system
line and an **empty** user message, :func:`smollm2_prompt_free_prefix`, the
prefix of the shared traces' ``prompt_free_logprob``). The lift
``log P(y_t | x, y_<t) - log S(y_t)`` is then the pointwise mutual information
between the question and each answer token.

:class:`PromptFreeSkeleton` is incremental: each :meth:`~PromptFreeSkeleton.log_prob`
call evaluates one token with llama.cpp's KV cache (the previous answer token;
the prefix once per stream), never the whole answer again.

State, streams and models:

- One :class:`PromptFreeSkeleton` object scores **one answer**: it remembers the
  tokens it has seen. :meth:`~PromptFreeSkeleton.for_stream` returns a fresh
  per-answer object that shares the model (loaded once) and the prefix, as
  :meth:`guardrail.NGramSkeleton.for_stream` does. Streams may interleave; the KV
  cache is then rebuilt from the shared prefix, which costs time; the scores may
  differ by about 1e-3 nats from an uninterrupted stream's (llama.cpp's results
  depend slightly on what its cache held before).
  Events that carry ``index`` are checked: a skipped or repeated token, or an
  object reused for a second answer, raises :class:`~guardrail.GuardrailError`.
  :meth:`~PromptFreeSkeleton.close` ends a stream; ``log_prob`` after it raises.
  Build each answer's monitor with ``skeleton.for_stream()``;
  :class:`~adapters.LiftGuardCallbackHandler` (and so :func:`~adapters.guard_runnable`
  and :func:`~adapters.guard_tool`) does that for every run it sees. Events without
  ``index`` (OpenAI and LangChain chunks) cannot reveal reuse, so a monitor built by
  hand for :func:`~adapters.guard_chat_stream` must get a stream of its own.
- The skeleton evaluates text with **its own** :class:`~adapters._local._model.LocalModel`
  (loaded by default): llama.cpp keeps one KV cache per model, and a model that is
  generating the answer at the same time would be corrupted by scoring on it. A
  model handed in must not be used by anything else; the skeleton checks the
  model's cache before every evaluation and refuses (GuardrailError) when other
  code has evaluated text on it, before touching it.
- The emitted token is ``event.token_id`` (checked against ``event.bytes`` when
  both are given); without an id, ``event.bytes`` (or ``event.text``) must be
  exactly one token of the local vocabulary. So the stream's tokenizer must be the
  local model's (e.g. the same model served by vLLM or llama.cpp, or SmolLM2
  scoring its own answers).

Spec: :meth:`~PromptFreeSkeleton.to_spec` gives the certificate's ``prompt_free``
spec (the model by packaged name or path, its sha256 and vocabulary size, the prefix,
``n_ctx``); :meth:`~PromptFreeSkeleton.from_spec` loads it back, and
:meth:`~PromptFreeSkeleton.resolve` is the resolver for
``Certificate.load(path, resolver=...)`` (see :mod:`adapters._local._prompt_free_spec`).

Cost: one single-token llama.cpp evaluation plus a float64 log-softmax over the
vocabulary per token: about 13 ms with SmolLM2-135M on 2 CPU cores (0.5 ms of it
the log-softmax), about as much as generating a token with the same model.
"""

from __future__ import annotations

import os
import threading
from types import TracebackType
from typing import Any

import numpy as np

from guardrail import ConfigError, GuardrailError, SkeletonSpec, TokenEvent
from guardrail._reads import Reads

from ._model import SMOLLM2_SYSTEM, LocalModel, bundled_smollm2_path, smollm2_chat_prompt
from ._prompt_free_spec import file_sha256, model_name, spec_settings

__all__ = ["PromptFreeSkeleton", "smollm2_prompt_free_prefix"]


def smollm2_prompt_free_prefix(system: str = SMOLLM2_SYSTEM) -> str:
    """The SmolLM2-Instruct prompt without the question: system line, empty user turn,
    assistant generation prompt (the prefix of the traces' ``prompt_free_logprob``)::

        <|im_start|>system\\n{system}<|im_end|>\\n<|im_start|>user\\n<|im_end|>\\n<|im_start|>assistant\\n
    """
    return smollm2_chat_prompt("", system)


_SHARED_MODEL_HINT = (
    "give PromptFreeSkeleton a LocalModel of its own (PromptFreeSkeleton() loads one): "
    "scoring on a model that generates or scores other text would corrupt its KV cache"
)


class _Backend:
    """The model, the tokenized prefix and a record of the model's KV cache; shared
    by every stream of one skeleton, used under ``lock``."""

    __slots__ = (
        "evaluated",
        "last_stream",
        "llm",
        "lock",
        "model",
        "model_sha256",
        "n_ctx",
        "prefix",
        "prefix_ids",
    )

    def __init__(self, model: LocalModel, prefix: str) -> None:
        self.model, self.prefix = model, prefix
        self.llm: Any = model._llm
        # llama.cpp may pad its context; llama-cpp-python's arrays have the size asked for
        self.n_ctx = min(int(self.llm.n_ctx()), len(self.llm.input_ids))
        self.prefix_ids = tuple(model.tokenize(prefix))
        if not self.prefix_ids:
            raise ConfigError("prefix must tokenize to at least one token")
        if len(self.prefix_ids) >= self.n_ctx:
            raise ConfigError(
                f"prefix has {len(self.prefix_ids)} tokens: no room in the model's "
                f"context (n_ctx={self.n_ctx})"
            )
        self.lock = threading.Lock()
        self.evaluated: list[int] = []  # the token ids in the model's KV cache (all evaluated)
        self.last_stream: object = None  # the stream whose context the cache holds
        self.model_sha256: str | None = None  # of the model file, once to_spec needs it
        if self.llm.n_tokens != 0:
            raise ConfigError(
                "this LocalModel has already evaluated text (it may be generating an answer); "
                + _SHARED_MODEL_HINT
            )

    def log_prob_after(self, stream: object, context: list[int], token: int) -> float:
        """``log P(token | context)``: the log-softmax of the logits at the last position of
        ``context``. ``context[:-1]`` is usually in the KV cache already (the stream's earlier
        tokens), so only ``context[-1]`` is evaluated."""
        llm, done = self.llm, self.evaluated
        n = int(llm.n_tokens)
        if n != len(done) or (n and not np.array_equal(llm.input_ids[:n], done)):
            raise GuardrailError(
                "the skeleton's LocalModel was evaluated by other code since the last token; "
                + _SHARED_MODEL_HINT
            )
        size = len(context)
        if size > self.n_ctx:
            raise GuardrailError(
                f"answer too long for the prompt-free skeleton: prefix + answer = {size} "
                f"tokens > n_ctx={self.n_ctx} of its model (load it with a larger n_ctx)"
            )
        if stream is self.last_stream and n == size - 1:
            keep = n  # the same stream, one token further: the usual case
        else:
            limit, keep = min(n, size - 1), 0
            while keep < limit and done[keep] == context[keep]:
                keep += 1
        if keep == 0:
            llm.reset()
        else:
            llm.n_tokens = keep  # eval() drops the cache from here on
        del done[keep:]
        self.last_stream = None  # until the evaluation has succeeded
        try:
            llm.eval(context[keep:])
        except BaseException:
            llm.reset()  # a half-done evaluation: start from an empty cache next time
            done.clear()
            raise
        done.extend(context[keep:])
        self.last_stream = stream
        # = adapters._local._model._log_softmax(row)[token], bit for bit, without the full array
        z = np.asarray(llm.scores[size - 1], dtype=np.float64)
        z -= z.max()
        return float(z[token] - np.log(np.exp(z).sum()))


class PromptFreeSkeleton:
    """The prompt-free skeleton ``S(y_t) = P_local(y_t | prefix, y_<t)`` for one answer stream.

    ``model``: a :class:`~adapters._local._model.LocalModel` reserved for this skeleton,
    a GGUF path, or ``None`` for the bundled SmolLM2-135M-Instruct (``n_ctx`` and
    ``n_threads`` apply when the skeleton loads the model itself). ``prefix``: the
    question-free text the answer is scored after, tokenized with special tokens
    parsed and no BOS added (so write Gemma's ``<bos>`` into the text); it defaults
    to :func:`smollm2_prompt_free_prefix` and is required for any other model.

    Use the object for one answer, or keep it as a factory and call
    :meth:`for_stream` per answer (one model for all streams). Not safe to call
    from several threads at once for the same stream; different streams may run in
    different threads (evaluations are serialized by a lock).

    Examples
    --------
        >>> from guardrail import TokenEvent
        >>> skeleton = PromptFreeSkeleton(n_ctx=64)  # the bundled SmolLM2 and its prefix
        >>> stream = skeleton.for_stream()  # one per answer
        >>> [round(stream.log_prob(TokenEvent(text, logprob=None, index=i)))
        ...  for i, text in enumerate(["Paris", "."])]
        [-10, -3]
        >>> stream.token_ids, skeleton.to_spec().params["model"]
        ((38634, 30), 'smollm2')
    """

    __slots__ = ("_backend", "_closed", "_context", "_n_prefix")
    evaluates_model = True
    """Each ``log_prob`` evaluates a model (milliseconds): a server scores it off its
    event loop (see the guard proxy)."""

    reads = Reads()
    """Scores need only the emitted token: stream adapters skip the alternatives."""

    def __init__(
        self,
        model: LocalModel | str | os.PathLike[str] | None = None,
        *,
        prefix: str | None = None,
        n_ctx: int | None = None,
        n_threads: int | None = None,
    ) -> None:
        if prefix is not None and (not isinstance(prefix, str) or not prefix):
            raise ConfigError("prefix must be a non-empty string (the question-free prompt)")
        if isinstance(model, LocalModel):
            if n_ctx is not None or n_threads is not None:
                raise ConfigError(
                    "n_ctx and n_threads apply only when the skeleton loads the model"
                )
            local = model
        elif model is None or isinstance(model, str | os.PathLike):
            local = LocalModel(model, n_ctx=1024 if n_ctx is None else n_ctx, n_threads=n_threads)
        else:
            raise ConfigError(
                f"model must be a LocalModel, a GGUF path or None, got {type(model).__name__}"
            )
        if prefix is None:
            if local.path.resolve() != bundled_smollm2_path().resolve():
                raise ConfigError(
                    "pass prefix= (the question-free prompt) for a model other than the bundled "
                    "SmolLM2; e.g. '<bos>Answer:' for the Gemma 3 traces"
                )
            prefix = smollm2_prompt_free_prefix()
        self._attach(_Backend(local, prefix))

    def _attach(self, backend: _Backend) -> None:
        self._backend = backend
        self._context = list(backend.prefix_ids)
        self._n_prefix = len(backend.prefix_ids)
        self._closed = False

    @property
    def model(self) -> LocalModel:
        """The local model that scores (shared by all streams of this skeleton)."""
        return self._backend.model

    @property
    def prefix(self) -> str:
        """The question-free text the answer is scored after."""
        return self._backend.prefix

    @property
    def vocab_size(self) -> int:
        return self._backend.model.vocab_size

    @property
    def token_ids(self) -> tuple[int, ...]:
        """The answer tokens this stream has scored, in order."""
        return tuple(self._context[self._n_prefix :])

    @property
    def closed(self) -> bool:
        return self._closed

    def to_spec(self) -> SkeletonSpec:
        """The ``prompt_free`` spec: the model (``"smollm2"`` for the bundled one, else the
        GGUF's absolute path), its sha256 (hashed once per model) and vocabulary size,
        the prefix and ``n_ctx``."""
        backend = self._backend
        if backend.model_sha256 is None:
            backend.model_sha256 = file_sha256(backend.model.path)
        return SkeletonSpec(
            "prompt_free",
            {
                "model": model_name(backend.model.path),
                "model_sha256": backend.model_sha256,
                "vocab_size": backend.model.vocab_size,
                "prefix": backend.prefix,
                "n_ctx": backend.n_ctx,
            },
        )

    @classmethod
    def from_spec(cls, spec: SkeletonSpec, *, n_threads: int | None = None) -> PromptFreeSkeleton:
        """Load the skeleton a ``prompt_free`` spec names (its model file checked against
        ``model_sha256`` first, its vocabulary against ``vocab_size`` after); a spec with
        no parameters is the bundled SmolLM2 with its default prefix. ConfigErrors name
        the field."""
        path, prefix, n_ctx, vocab = spec_settings(spec)
        try:
            out = cls(path, prefix=prefix, n_ctx=n_ctx, n_threads=n_threads)
        except ConfigError as exc:
            raise ConfigError(f"skeleton.params: {exc}") from exc
        if vocab is not None and out.vocab_size != vocab:
            raise ConfigError(
                f"skeleton.params.vocab_size: the model {path} has {out.vocab_size} tokens, "
                f"the spec records {vocab}"
            )
        sha = spec.params.get("model_sha256")  # checked against the file by spec_settings
        out._backend.model_sha256 = sha if isinstance(sha, str) else None
        return out

    @classmethod
    def resolve(cls, spec: SkeletonSpec) -> PromptFreeSkeleton | None:
        """The resolver of ``prompt_free`` specs (:meth:`from_spec`); None for other kinds."""
        return cls.from_spec(spec) if spec.kind == "prompt_free" else None

    def for_stream(self) -> PromptFreeSkeleton:
        """A fresh skeleton for a new answer, sharing this one's model and prefix."""
        fresh = PromptFreeSkeleton.__new__(PromptFreeSkeleton)
        fresh._attach(self._backend)
        return fresh

    def close(self) -> None:
        """End this stream: ``log_prob`` raises afterwards (idempotent)."""
        self._closed = True

    def __enter__(self) -> PromptFreeSkeleton:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def log_prob(self, event: TokenEvent) -> float:
        """``log P_local(token | prefix, earlier answer tokens)`` of the event's token
        (natural log), which then joins the history of this stream."""
        if self._closed:
            raise GuardrailError(
                "this prompt-free skeleton stream was closed: use for_stream() for the next answer"
            )
        seen = len(self._context) - self._n_prefix
        if event.index is not None and event.index != seen:
            raise GuardrailError(
                f"token index {event.index}, but this prompt-free skeleton stream has scored "
                f"{seen} tokens: every answer token must reach log_prob in order (with "
                "on_missing_logprobs='pass' a skipped token breaks this), and each answer "
                "needs its own stream (for_stream())"
            )
        token = self._token_id(event)
        backend = self._backend
        with backend.lock:  # the logits after prefix + earlier tokens; the token waits
            value = backend.log_prob_after(self, self._context, token)
        self._context.append(token)  # evaluated lazily, by the next call
        return value

    def _token_id(self, event: TokenEvent) -> int:
        model = self._backend.model
        tid, raw = event.token_id, event.bytes
        if tid is not None:
            if isinstance(tid, bool) or not isinstance(tid, int | np.integer):
                raise GuardrailError(f"token_id must be an integer, got {tid!r}")
            tid = int(tid)
            if not 0 <= tid < model.vocab_size:
                raise GuardrailError(
                    f"token_id {tid} is outside the skeleton model's vocabulary "
                    f"[0, {model.vocab_size}): the stream's tokenizer differs from the local "
                    "model's"
                )
            if raw is not None and model.token_bytes(tid) != raw:
                raise GuardrailError(
                    f"token_id {tid} is {model.token_bytes(tid)!r} in the skeleton model's "
                    f"vocabulary, but the event's bytes are {raw!r}: the stream's tokenizer "
                    "differs from the local model's"
                )
            return tid
        if raw is None:
            if "\ufffd" in event.text:
                raise GuardrailError(
                    f"token text {event.text!r} holds a replacement character (part of a UTF-8 "
                    "character): the prompt-free skeleton needs the token's id or bytes"
                )
            raw = event.text.encode("utf-8")
        ids = list(model._llm.tokenize(raw, add_bos=False, special=False)) if raw else []
        if len(ids) != 1 or model.token_bytes(ids[0]) != raw:
            raise GuardrailError(
                f"token {raw!r} is not one token of the skeleton model's vocabulary (it "
                f"tokenizes as {len(ids)} tokens): the stream's tokenizer differs from the "
                "local model's; send token ids, or use a local model with the same tokenizer"
            )
        return int(ids[0])
