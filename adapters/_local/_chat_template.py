"""A GGUF model's own chat template (``tokenizer.chat_template``), rendered as llama.cpp does.

llama-cpp-python renders the Jinja template stored in the GGUF metadata in a
sandbox (``jinja2.sandbox.ImmutableSandboxedEnvironment`` with ``trim_blocks``,
``lstrip_blocks`` and the ``loopcontrols`` extension; ``tojson`` as Transformers
writes it), with ``messages``, ``bos_token``/``eos_token`` (the texts of the
vocabulary's BOS and EOS tokens), ``add_generation_prompt``,
``raise_exception`` and ``strftime_now``. :class:`ChatTemplate` does the same, so a prompt rendered
here is the prompt a llama.cpp chat completion sends, and the shared Qwen
traces' ``prompt`` field is reproduced byte for byte.

The question prompt is a system message (when the system line is not empty),
the question as the user message, and the assistant generation prompt; the
prompt-free prefix is the same with an empty user message
(``data/traces/README.md``). jinja2 is imported when a template is compiled.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from guardrail import ConfigError

__all__ = ["ChatTemplate"]


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise(message: str) -> None:
    raise ValueError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@dataclass(frozen=True)
class ChatTemplate:
    """A chat template (Jinja source) with the special-token texts it may use.

    ``add_bos``: whether the tokenizer must put BOS in front of a rendered prompt
    (the GGUF's ``tokenizer.ggml.add_bos_token``, unless the template writes
    ``bos_token`` itself). Rendering errors (a syntax error, the template's own
    ``raise_exception``, a sandbox violation) raise :class:`~guardrail.ConfigError`.

    Examples
    --------
        >>> source = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
        >>> template = ChatTemplate(source)
        >>> template.prompt("Capital of France?", system="Be brief.")
        '<system>Be brief.<user>Capital of France?<assistant>'
    """

    source: str
    bos_token: str = ""
    eos_token: str = ""
    add_bos: bool = False
    _compiled: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source.strip():
            raise ConfigError("chat template: expected a non-empty Jinja template string")
        try:
            import jinja2
            import jinja2.ext
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError as exc:  # pragma: no cover - jinja2 comes with llama-cpp-python
            raise ConfigError(
                'rendering a chat template needs jinja2: pip install "liftguard[local]"'
            ) from exc
        env = ImmutableSandboxedEnvironment(
            loader=jinja2.BaseLoader(),
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[jinja2.ext.loopcontrols],
        )
        env.filters["tojson"] = _tojson
        try:
            compiled = env.from_string(self.source)
        except jinja2.TemplateError as exc:
            raise ConfigError(f"chat template: {exc}") from exc
        object.__setattr__(self, "_compiled", compiled)

    @classmethod
    def from_metadata(
        cls, metadata: Mapping[str, str], token_text: Callable[[int], str]
    ) -> ChatTemplate:
        """The template of a GGUF's metadata (as llama.cpp reads it: every value a
        string); ``token_text(id)`` gives a token's text. ConfigError when the model
        has no chat template."""
        source = metadata.get("tokenizer.chat_template")
        if not source:
            name = metadata.get("general.name", "this model")
            raise ConfigError(
                f"{name} has no chat template in its GGUF metadata (tokenizer.chat_template); "
                "a base model needs a prompt template of its own (--template)"
            )

        def special(key: str) -> str:
            value = metadata.get(key)
            return str(token_text(int(value))) if value not in (None, "", "-1") else ""

        bos = special("tokenizer.ggml.bos_token_id")
        add_bos = metadata.get("tokenizer.ggml.add_bos_token", "false").lower() == "true"
        tpl = cls(source, bos, special("tokenizer.ggml.eos_token_id"))
        if add_bos and not (bos and tpl.prompt("", "").startswith(bos)):
            tpl = cls(source, bos, tpl.eos_token, add_bos=True)
        return tpl

    def render(
        self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True
    ) -> str:
        """The template rendered with ``messages`` (``{"role", "content"}`` mappings)."""
        import jinja2

        try:
            text: str = self._compiled.render(
                messages=[dict(m) for m in messages],
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                add_generation_prompt=add_generation_prompt,
                raise_exception=_raise,
                tools=None,
                functions=None,
                function_call=None,
                tool_choice=None,
                strftime_now=_strftime_now,
            )
        except (jinja2.TemplateError, ValueError, TypeError) as exc:
            raise ConfigError(f"chat template: rendering failed: {exc}") from exc
        return text

    def prompt(self, question: str, system: str) -> str:
        """System message (none when ``system`` is empty: the template's default then
        applies), ``question`` as the user message, the assistant generation prompt."""
        messages = [{"role": "system", "content": system}] if system else []
        return self.render([*messages, {"role": "user", "content": question}])

    def prompt_free(self, system: str) -> str:
        """The prompt-free prefix: :meth:`prompt` with an empty user message."""
        return self.prompt("", system)
