"""The prompt templates of ``liftguard traces generate`` (see :mod:`._traces_cmd`): how a
question becomes a prompt, and the prefix of the prompt-free pass, as the shared trace
files were made (``data/traces/README.md``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CHAT_TEMPLATES",
    "TEMPLATES",
    "PromptTemplate",
    "default_template",
    "get_template",
]

CHAT_TEMPLATES = ("smollm2-chat", "gguf-chat")
"""The templates with a system line (``--system``)."""


@dataclass(frozen=True)
class PromptTemplate:
    """How a question becomes a prompt, and the prefix of the prompt-free pass."""

    name: str
    build: Callable[[str], str]
    prompt_free: str
    add_bos: bool

    def prompt(self, question: str) -> str:
        """The full prompt text of ``question`` (without a BOS the tokenizer adds)."""
        return self.build(question)


def _smollm2_chat(system: str | None, chat: Any) -> PromptTemplate:
    from adapters._local._model import SMOLLM2_SYSTEM
    from adapters.local import smollm2_chat_prompt

    line = SMOLLM2_SYSTEM if system is None else system
    return PromptTemplate(
        name="smollm2-chat",
        build=lambda question: smollm2_chat_prompt(question, line),
        prompt_free=smollm2_chat_prompt("", line),
        add_bos=False,
    )


def _gemma3_5shot(system: str | None, chat: Any) -> PromptTemplate:
    from adapters._local._gemma import GEMMA3_PROMPT_FREE, gemma3_fewshot_prompt

    if system is not None:
        raise ValueError("--system: the gemma3-5shot template has no system line")
    return PromptTemplate(
        name="gemma3-5shot",
        build=gemma3_fewshot_prompt,
        prompt_free=GEMMA3_PROMPT_FREE,
        add_bos=True,
    )


def _gguf_chat(system: str | None, chat: Any) -> PromptTemplate:
    from adapters.local import QWEN_SYSTEM

    if chat is None:
        raise ValueError("the gguf-chat template needs the model's chat template")
    line = QWEN_SYSTEM if system is None else system
    return PromptTemplate(
        name="gguf-chat",
        build=lambda question: str(chat.prompt(question, line)),
        prompt_free=chat.prompt_free(line),
        add_bos=chat.add_bos,
    )


_TEMPLATE_FACTORIES: dict[str, Callable[[str | None, Any], PromptTemplate]] = {
    "smollm2-chat": _smollm2_chat,
    "gemma3-5shot": _gemma3_5shot,
    "gguf-chat": _gguf_chat,
}
TEMPLATES = tuple(_TEMPLATE_FACTORIES)
"""Names accepted by ``--template``."""


def get_template(
    name: str, *, system: str | None = None, chat_template: Any = None
) -> PromptTemplate:
    """The template called ``name`` (one of :data:`TEMPLATES`). ``system``: the system
    line of a chat template (None: the shared traces' line). ``chat_template``: the
    model's :class:`~adapters._local._chat_template.ChatTemplate`, which ``gguf-chat`` renders."""
    try:
        factory = _TEMPLATE_FACTORIES[name]
    except KeyError:
        choices = ", ".join(TEMPLATES)
        raise ValueError(f"unknown template {name!r}; expected one of {choices}") from None
    return factory(system, chat_template)


def default_template(
    model: str | None, architecture: str | None, has_chat_template: bool = False
) -> str:
    """The template of a model: ``gguf-chat`` for ``--model qwen`` or a GGUF file with a
    chat template in its metadata, ``gemma3-5shot`` for ``--model gemma3`` or a GGUF
    whose ``general.architecture`` is a Gemma one, else ``smollm2-chat`` (the bundled
    SmolLM2, and what the command always used before)."""
    if model == "qwen":
        return "gguf-chat"
    if model == "gemma3" or (architecture or "").startswith("gemma"):
        return "gemma3-5shot"
    if model not in (None, "smollm2") and has_chat_template:
        return "gguf-chat"
    return "smollm2-chat"
