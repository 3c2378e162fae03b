"""``liftguard traces generate``: answer questions with a local model, write traces."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["add_traces_parser", "generate_trace"]


def generate_trace(
    model: Any,
    question: str,
    references: list[str],
    *,
    index: int,
    dataset: str,
    model_name: str,
    max_tokens: int = 24,
) -> Any:
    """One trace in the shared format: greedy answer, exact per-token quantities,
    the prompt-free pass and the correctness label."""
    from adapters._local import SMOLLM2_SYSTEM, smollm2_chat_prompt

    from .._labels import is_correct
    from .._traces import Trace

    prompt = smollm2_chat_prompt(question)
    tokens = list(model.generate(prompt, max_tokens=max_tokens))
    ids = [t.token_id for t in tokens]
    prompt_free = smollm2_chat_prompt("", SMOLLM2_SYSTEM)
    pf = model.score(prompt_free, ids) if ids else []
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


def _cmd_generate(args: argparse.Namespace) -> int:
    from adapters._local import LocalModel

    from .._traces import dump_trace_line

    rows = _read_questions(args.questions)
    rows = rows[args.start : args.start + args.limit if args.limit else None]
    model = LocalModel(args.model)
    name = args.model_name or Path(model.path).stem.lower()
    n_ok = 0
    with open(args.out, "w", encoding="utf-8") as out:
        for i, row in enumerate(rows, start=args.start):
            question, refs = row
            trace = generate_trace(
                model,
                question,
                refs,
                index=i,
                dataset=args.dataset,
                model_name=name,
                max_tokens=args.max_tokens,
            )
            n_ok += bool(trace.correct)
            out.write(dump_trace_line(trace) + "\n")
            if getattr(args, "verbose", False):
                print(f"{trace.id}: {trace.answer!r} ({'correct' if trace.correct else 'wrong'})")
    print(f"wrote {len(rows)} traces to {args.out} ({n_ok} correct)", file=sys.stderr)
    return 0


def _read_questions(path: str) -> list[tuple[str, list[str]]]:
    """``(question, references)`` of each non-blank line of a questions JSONL file.

    A line is an object with a string ``"question"`` and the references as
    ``"answer"`` or ``"references"`` (a string or a list of strings). Errors
    raise :class:`~guardrail.cli._common.CommandError` naming ``path:line``.
    """
    from ._common import CommandError

    rows = []
    with open(path, encoding="utf-8-sig") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CommandError(
                    f"{path}:{lineno}: invalid JSON: {exc.msg} (column {exc.colno})"
                ) from exc
            question = row.get("question") if isinstance(row, dict) else None
            if not isinstance(question, str):
                raise CommandError(f'{path}:{lineno}: expected an object with a string "question"')
            refs = row.get("answer") or row.get("references") or []
            if isinstance(refs, str):
                refs = [refs]
            if not (isinstance(refs, list) and all(isinstance(r, str) for r in refs)):
                raise CommandError(
                    f'{path}:{lineno}: "answer" / "references" must be a string or a list '
                    "of strings"
                )
            rows.append((question, refs))
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
        "correctness labels. Uses the SmolLM2 chat template.",
    )
    g.add_argument("--model", default=None, help="GGUF file (default: the bundled SmolLM2)")
    g.add_argument("--questions", required=True, help='JSONL with "question" and "answer"')
    g.add_argument("--out", type=output_file, required=True)
    g.add_argument("--dataset", default="questions")
    g.add_argument("--model-name", default=None)
    g.add_argument("--start", type=integer(0), default=0)
    g.add_argument("--limit", type=integer(0), default=None, help="at most N questions (0: all)")
    g.add_argument("--max-tokens", type=integer(1), default=24)
    # SUPPRESS: left out, it keeps the top-level -v instead of resetting it to False
    g.add_argument(
        "--verbose", action="store_true", default=argparse.SUPPRESS, help="print each answer"
    )
    g.set_defaults(func=_cmd_generate)
