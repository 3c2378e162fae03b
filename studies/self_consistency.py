"""Multi-sample self-consistency on GSM8K beside the single-pass certificate.

Self-consistency (Wang et al., 2023) samples K solutions to a question and trusts an
answer as far as the samples agree with it. It is the standard strong signal for
step-by-step maths, and it costs K more generations; the certificate reads one pass.
This module makes the samples for putting the two side by side on the same questions.

    python -m studies.self_consistency sample \\
        --traces benchmarks/traces/gsm8k_qwen25coder --base-url http://127.0.0.1:8080 \\
        --samples 5 --limit 150 --out gsm8k_qwen25coder_samples.jsonl

asks an OpenAI-compatible server (llama.cpp's ``llama-server`` with K parallel slots,
``-np 5``) for K solutions per question, with the exact prompts of the greedy traces.
``sample`` resumes: questions already in ``--out`` are skipped, and each question's line
is written only once its K samples are in. Samples use temperature 0.7 (the common
self-consistency setting) and seeds ``row * K + j`` (``row``: the
question's GSM8K row), so a rerun asks the same.
Each line holds the greedy answer's final number (:func:`adapters.final_number`) and
token count, and each sample's text, final number and token count: the self-consistency
score of an answer is the share of its K samples whose final number equals the greedy
answer's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SAMPLE_TEMPERATURE = 0.7
MAX_TOKENS = 512
"""At most this many new tokens per sample, as the greedy traces (``--task math``)."""


def trace_files(path: Path) -> list[Path]:
    """The trace file, or a folder's parts in name order."""
    return sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]


def greedy_traces(path: Path) -> Iterator[dict[str, Any]]:
    """The decoded trace objects of a file or a folder of parts (compressed or not)."""
    from adapters.tracefiles import open_trace_objects

    for part in trace_files(path):
        for _line, obj in open_trace_objects(str(part)):
            yield obj


def done_ids(out: Path) -> set[str]:
    """Ids already sampled in ``out`` (a cut-off last line is ignored and rewritten)."""
    if not out.exists():
        return set()
    ids: set[str] = set()
    for line in out.read_text().splitlines():
        try:
            ids.add(json.loads(line)["id"])
        except (ValueError, KeyError, TypeError):
            continue
    return ids


async def _one(client: Any, url: str, prompt: str, seed: int) -> dict[str, Any]:
    body = {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": SAMPLE_TEMPERATURE,
            "seed": seed, "stream": False}  # fmt: skip
    resp = await client.post(f"{url}/v1/completions", json=body)
    resp.raise_for_status()
    data = resp.json()
    choice = data["choices"][0]
    return {"text": choice["text"], "tokens": int(data["usage"]["completion_tokens"]),
            "finish_reason": choice.get("finish_reason")}  # fmt: skip


async def sample(args: argparse.Namespace) -> None:
    import httpx
    from tqdm import tqdm

    from adapters import final_number

    out = Path(args.out)
    seen = done_ids(out)
    todo = [t for t in greedy_traces(Path(args.traces)) if t["id"] not in seen]
    todo = todo[: max(0, args.limit - len(seen))]
    k = args.samples
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0)) as client:
        with out.open("a") as dst, tqdm(total=len(todo), unit="question",
                                        disable=not sys.stderr.isatty()) as bar:  # fmt: skip
            for t in todo:
                row = int(t["id"].rsplit("-", 1)[-1])
                got = await asyncio.gather(*(
                    _one(client, args.base_url.rstrip("/"), t["prompt"], row * k + j)
                    for j in range(k)))  # fmt: skip
                for g in got:
                    g["final"] = final_number(g["text"])
                line = {"id": t["id"], "references": t["references"],
                        "greedy_final": final_number(t["answer"]),
                        "greedy_tokens": len(t["tokens"]), "samples": got}  # fmt: skip
                dst.write(json.dumps(line) + "\n")
                dst.flush()
                bar.update(1)
                bar.set_postfix(tokens=sum(g["tokens"] for g in got))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m studies.self_consistency", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample", help="sample K solutions per question")
    s.add_argument("--traces", required=True, help="greedy GSM8K traces (file or folder of parts)")
    s.add_argument("--base-url", required=True, help="an OpenAI-compatible server")
    s.add_argument("--samples", type=int, default=5)
    s.add_argument("--limit", type=int, default=150, help="questions in all, in trace order")
    s.add_argument("--out", required=True)
    args = p.parse_args(argv)
    if args.cmd == "sample":
        asyncio.run(sample(args))


if __name__ == "__main__":
    main()
