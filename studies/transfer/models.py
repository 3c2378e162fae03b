"""The models of the transfer benchmark and what it runs for each of them.

``run.py`` runs, and ``table.py`` and ``summary.py`` render, exactly these models, in
this order. The models answer very different shares of the questions correctly
(TriviaQA: SmolLM2 9%, Gemma 3 16%, Qwen2.5-Coder 22%; NQ-Open: 3-4%, 3-4%, 8%), so a
target risk that is demanding for one is trivial or unreachable for another: each
model has its own risks per direction.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DIRECTIONS = {"nq2tq": "NQ-Open -> TriviaQA", "tq2nq": "TriviaQA -> NQ-Open"}
"""Fit on the first dataset, evaluate on the second. ``nq2tq_clean`` (features chosen on
NQ-Open alone) is also evaluated at the ``nq2tq`` risks."""


@dataclass(frozen=True)
class Model:
    key: str
    """Prefix of the result files: ``{key}_tq.json``, ``{key}_nq2tq_r0.8.json``, ..."""
    name: str
    """How the docs name the model."""
    triviaqa: str
    """TriviaQA traces: file name in the shared traces directory."""
    nq_open: str
    """NQ-Open traces: file name in the NQ-Open traces directory."""
    context: str
    """Generation context for ``liftguard fit --context``, relative to the repository root."""
    risks: dict[str, tuple[str, ...]]
    """Target risks evaluated per direction (the summary's coverage at each risk)."""
    table: dict[str, str]
    """The risk per direction of the per-method tables' coverage column: one where some
    answers are certified and not nearly all of them."""
    intervals: dict[str, tuple[str, ...]]
    """Risks per direction evaluated with ``--bootstrap`` (the intervals table)."""


MODELS = (
    Model(
        key="smollm2",
        name="SmolLM2",
        triviaqa="triviaqa_smollm2.jsonl",
        nq_open="nq_open_smollm2.jsonl",
        context="guardrail/data/smollm2_context.json",
        risks={"nq2tq": ("0.8", "0.7"), "tq2nq": ("0.95", "0.9", "0.8", "0.7")},
        table={"nq2tq": "0.8", "tq2nq": "0.95"},
        intervals={"nq2tq": ("0.8", "0.7"), "tq2nq": ("0.95", "0.9")},
    ),
    Model(
        key="gemma3",
        name="Gemma 3",
        triviaqa="triviaqa_gemma3.jsonl",
        nq_open="nq_open_gemma3.jsonl",
        context="studies/transfer/gemma3_context.json",
        risks={"nq2tq": ("0.8", "0.7"), "tq2nq": ("0.95", "0.9", "0.8", "0.7")},
        table={"nq2tq": "0.8", "tq2nq": "0.95"},
        intervals={"nq2tq": ("0.8", "0.7"), "tq2nq": ("0.95", "0.9")},
    ),
    Model(
        key="qwen25coder",
        name="Qwen",
        triviaqa="triviaqa_qwen25coder.jsonl",
        nq_open="nq_open_qwen25coder.jsonl",
        context="guardrail/data/qwen_context.json",
        risks={"nq2tq": ("0.7", "0.5"), "tq2nq": ("0.95", "0.9", "0.8")},
        table={"nq2tq": "0.5", "tq2nq": "0.9"},  # at 0.95 nearly every NQ-Open answer passes
        intervals={"nq2tq": ("0.7", "0.5"), "tq2nq": ("0.95", "0.9", "0.8")},
    ),
)
BY_KEY = {m.key: m for m in MODELS}
for _m in MODELS:
    assert set(_m.risks) == set(DIRECTIONS), _m.key
    assert all(_m.table[d] in _m.risks[d] for d in DIRECTIONS), _m.key
    assert all(set(_m.intervals[d]) <= set(_m.risks[d]) for d in DIRECTIONS), _m.key


def select(keys: str | None) -> tuple[Model, ...]:
    """The models named by a comma-separated list of keys (all of them for None or "")."""
    if not keys:
        return MODELS
    unknown = [k for k in keys.split(",") if k not in BY_KEY]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(BY_KEY)}")
    return tuple(BY_KEY[k] for k in keys.split(","))


def load(results: Path, model: Model, tag: str, risk: str) -> dict[str, Any]:
    """The ``liftguard eval --json`` output of ``model`` for ``tag`` (``nq2tq``,
    ``nq2tq_clean``, ``tq2nq``) at ``risk``, saved by ``run.py`` in ``results``."""
    data: dict[str, Any] = json.loads(
        read_result(results, f"{model.key}_{tag}_r{risk}.json", f" for {model.name} ({model.key})")
    )
    return data


@dataclass(frozen=True)
class Setting:
    """One row of the held-out pages: a model, a direction and a risk at which some method
    certifies something, with ``run.py``'s eval results there."""

    model: Model
    tag: str
    risk: str
    methods: dict[str, dict[str, Any]]

    @property
    def best(self) -> str:
        """The best baseline's name (:func:`best_baseline`)."""
        return best_baseline(self.methods)

    @property
    def best_coverage(self) -> float:
        return float(self.methods[self.best]["coverage_mean"])

    @property
    def label(self) -> str:
        """The row's first two cells: ``model, fit -> test | risk``."""
        return f"{self.model.name}, {DIRECTIONS[self.tag]} | {self.risk}"


def settings(results: Path, models: tuple[Model, ...]) -> Iterator[Setting]:
    """Every model, direction and risk of ``run.py`` where some method certifies something
    (the rest are left out of the pages: nothing certifies there, whatever the rule)."""
    for model in models:
        for tag in DIRECTIONS:
            for risk in model.risks[tag]:
                methods = load(results, model, tag, risk)["methods"]
                if any(m["coverage_mean"] > 0 for m in methods.values()):
                    yield Setting(model, tag, risk, methods)


def method_name(method: str) -> str:
    """How the pages name a method: the certificates of the project in code type, a peer's
    score in words (``max_entropy`` -> ``max entropy``)."""
    return f"`{method}`" if method.startswith("lift") else method.replace("_", " ")


def best_baseline(methods: dict[str, dict[str, Any]]) -> str:
    """The method other than the certificate with the largest mean coverage."""
    return max((n for n in methods if n != "certificate"),
               key=lambda n: methods[n]["coverage_mean"])  # fmt: skip


def cell(m: dict[str, Any], best: float) -> str:
    """A page's cell for one method's eval results: coverage (bold when at least ``best``),
    refused splits, and the share of a blocked answer read before the block (mean /
    median)."""
    cov = m["coverage_mean"]
    text = f"{100 * cov:.1f}%" if cov else "0%"
    if cov >= best:
        text = f"**{text}**"
    mean, median = m.get("blocked_read_mean"), m.get("blocked_read_median")
    read = "-" if mean is None else f"{mean:.0%} / {median:.0%}"
    return f"{text}, {m['refused']}, {read}"


def read_result(results: Path, name: str, which: str = "") -> str:
    """The text of the results file ``name`` that ``run.py`` saved in ``results``; a missing
    one is a FileNotFoundError naming the command that makes it (``which``: for what)."""
    path = results / name
    if not path.is_file():
        raise FileNotFoundError(
            f"missing results file {path}: run `python -m studies.transfer.run`{which}"
        )
    return path.read_text(encoding="utf-8")


def page_main(
    argv: list[str] | None,
    doc: str,
    run: Callable[[Path, Path, Path, tuple[Model, ...]], None],
    render: Callable[[Path, tuple[Model, ...]], str],
    out: Path,
    results: Path,
    *,
    needs_nq: bool = True,
) -> int:
    """The command line of a script that runs ``liftguard`` over both datasets' traces and
    writes one page from the saved results: ``SHARED_TRACES_DIR NQ_TRACES_DIR [--results
    DIR] [--models KEY,...] [--render-only]`` (``needs_nq=False``: a script that reads
    only the TriviaQA traces, ``SHARED_TRACES_DIR`` alone)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("tq_dir", type=Path, nargs="?", help="the shared TriviaQA traces")
    if needs_nq:
        parser.add_argument("nq_dir", type=Path, nargs="?", help="the NQ-Open traces")
    parser.add_argument("--results", type=Path, default=results)
    parser.add_argument("--models", help="comma-separated keys of models.py (default: all)")
    parser.add_argument("--render-only", action="store_true", help="only rewrite the page")
    args = parser.parse_args(argv)
    models = select(args.models)
    if not args.render_only:
        nq_dir = args.nq_dir if needs_nq else Path()
        if args.tq_dir is None or nq_dir is None:
            parser.error("give SHARED_TRACES_DIR and NQ_TRACES_DIR (or --render-only)"
                         if needs_nq else "give SHARED_TRACES_DIR (or --render-only)")  # fmt: skip
        args.results.mkdir(parents=True, exist_ok=True)
        run(args.tq_dir, nq_dir, args.results, models)
    try:
        text = render(args.results, models)
    except FileNotFoundError as exc:
        print(f"{Path(sys.argv[0]).name}: {exc}", file=sys.stderr)
        return 1
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}")
    return 0
