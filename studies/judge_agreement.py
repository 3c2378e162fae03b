"""How often the reference rules disagree with an LLM judge on the shared TriviaQA traces.

    liftguard local-server --model qwen --port 8011 &      # the judge (or any endpoint)
    python -m studies.judge_agreement --judge-url http://127.0.0.1:8011/v1 \\
        [--judge-model NAME] [--per-model 200] [--traces-dir DIR] [--docs-only]

Takes ``--per-model`` answers of each ``DIR/triviaqa_{smollm2,gemma3,qwen25coder}.jsonl``,
evenly spaced over the file (the same answers every run), and asks the judge
(:class:`adapters.Judge`: the prompt ``liftguard traces label --judge`` sends, temperature
0) whether each is correct. Against the judge's grades it counts, per model and per rule
(``contains``, the traces' own labels, and token F1 at the default threshold): answers
graded, agreement, each rule's disagreements both ways and Cohen's kappa, with 95%
bootstrap intervals (2,000 resamples of the answers, seeded). The judge's grades and its
failures are saved in ``benchmarks/results/judge_agreement.json``; the tables go into
``docs/results/judge_agreement.md``, included by the labelling section of
``docs/fitting.md``. ``--docs-only`` rewrites the page from the saved JSON.

A judge is a model too: its grades are a third opinion, not the truth. The page names the
judge that made them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from guardrail.traces import DEFAULT_F1_THRESHOLD, is_correct_f1
from studies.label_agreement import MODELS, kappa
from studies.tables import DEFAULT_TRACES, DOCS, RESULTS, Progress, header, load, save, write_page

COMMAND = "python -m studies.judge_agreement"
SAVED = RESULTS / "judge_agreement.json"
OUT = DOCS / "judge_agreement.md"
RULES = {"contains": "contains", "f1": f"token F1 >= {DEFAULT_F1_THRESHOLD:g}"}
RESAMPLES = 2000
EXAMPLES = 3


def sample(path: Path, k: int) -> list[dict[str, Any]]:
    """``k`` answers of ``path`` evenly spaced over the file (all when it has fewer)."""
    rows = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            obj = json.loads(line)
            rows.append({key: obj[key] for key in ("id", "question", "answer", "references",
                                                    "correct")})  # fmt: skip
    if len(rows) <= k:
        return rows
    return [rows[round(i * (len(rows) - 1) / (k - 1))] for i in range(k)]


def grade(rows: list[dict[str, Any]], url: str, model: str, progress: Progress) -> None:
    """The judge's grade of each row, in place: ``judge`` (True/False) or ``judge_failure``."""
    from adapters import Judge, JudgeFailure

    with Judge(url, model, timeout=120.0) as judge:
        for row in rows:
            progress.show(row["id"])
            try:
                row["judge"] = judge.judge(row["question"], row["answer"], row["references"])
            except JudgeFailure as exc:
                row["judge_failure"] = exc.reason
            progress.advance()


def agreement(rule: list[bool], judge: list[bool], seed: int = 0) -> dict[str, Any]:
    """Counts, agreement and kappa of ``rule`` against ``judge``, with bootstrap intervals."""
    a, b = np.array(rule, dtype=bool), np.array(judge, dtype=bool)
    n = len(a)
    out: dict[str, Any] = {
        "n": n,
        "agree": int((a == b).sum()),
        "rule_only": int((a & ~b).sum()),
        "judge_only": int((~a & b).sum()),
        "kappa": kappa(list(a), list(b)),
    }
    rng = np.random.default_rng(seed)
    agrees, kappas = [], []
    for _ in range(RESAMPLES):
        idx = rng.integers(0, n, n)
        agrees.append(float((a[idx] == b[idx]).mean()))
        k = kappa(list(a[idx]), list(b[idx]))
        if k is not None:
            kappas.append(k)
    out["agree_ci"] = [float(np.quantile(agrees, q)) for q in (0.025, 0.975)]
    out["kappa_ci"] = [float(np.quantile(kappas, q)) for q in (0.025, 0.975)] if kappas else None
    return out


def _labels(row: dict[str, Any]) -> dict[str, bool]:
    return {
        "contains": bool(row["correct"]),
        "f1": is_correct_f1(row["answer"], row["references"], row["question"]),
    }


def measure(rows: list[dict[str, Any]]) -> dict[str, Any]:
    graded = [r for r in rows if "judge" in r]
    failures: dict[str, int] = {}
    for r in rows:
        if "judge_failure" in r:
            failures[r["judge_failure"]] = failures.get(r["judge_failure"], 0) + 1
    judge = [bool(r["judge"]) for r in graded]
    labels = [_labels(r) for r in graded]
    out: dict[str, Any] = {"asked": len(rows), "graded": len(graded), "failures": failures,
                           "judge_correct": sum(judge), "rules": {}}  # fmt: skip
    for rule in RULES:
        out["rules"][rule] = agreement([lab[rule] for lab in labels], judge)
    examples: dict[str, list[dict[str, Any]]] = {"rule_only": [], "judge_only": []}
    for r, lab in zip(graded, labels, strict=True):
        if lab["contains"] != r["judge"]:
            key = "rule_only" if lab["contains"] else "judge_only"
            examples[key].append({k: r[k] for k in ("id", "question", "answer", "references")})
    out["examples"] = {k: v[:: max(1, len(v) // EXAMPLES)][:EXAMPLES] for k, v in examples.items()}
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    samples = {m: sample(Path(args.traces_dir) / f"triviaqa_{m}.jsonl", args.per_model)
               for m in MODELS}  # fmt: skip
    progress = Progress(sum(len(rows) for rows in samples.values()))
    try:
        for rows in samples.values():
            grade(rows, args.judge_url, args.judge_model, progress)
    finally:
        progress.close()
    return {
        "generated_by": COMMAND,
        "judge_model": args.judge_name or args.judge_model,
        "per_model": args.per_model,
        "default_threshold": DEFAULT_F1_THRESHOLD,
        "grades": {m: [{"id": r["id"], "judge": r.get("judge"),
                        "failure": r.get("judge_failure")} for r in rows]
                   for m, rows in samples.items()},
        "models": {m: measure(rows) for m, rows in samples.items()},
    }  # fmt: skip


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _cell(text: str, limit: int = 60) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render(saved: dict[str, Any]) -> str:
    """The whole of ``docs/results/judge_agreement.md``."""
    lines = [header(COMMAND, "(or `--docs-only` from its JSON)"), "",
             f"Judge: {saved['judge_model']}, with the prompt of `liftguard traces label "
             f"--judge`, on {saved['per_model']} answers per model spread evenly over each "
             "file. Intervals are 95% bootstrap intervals over the answers.", "",
             "| model | rule | graded | judge: correct | agreement | rule only | judge only "
             "| Cohen's kappa |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    models = {m: saved["models"][m] for m in MODELS if m in saved["models"]}  # (JSON sorts)
    for m, r in models.items():
        for rule, name in RULES.items():
            d = r["rules"][rule]
            k = "-" if d["kappa"] is None else f"{d['kappa']:.2f}"
            if d["kappa_ci"] is not None and d["kappa"] is not None:
                low, high = (round(x, 2) + 0.0 for x in d["kappa_ci"])  # (no "-0.00")
                k += f" [{low:.2f}, {high:.2f}]"
            lines.append(
                f"| {MODELS[m]} | {name} | {r['graded']} | {r['judge_correct']} | "
                f"{_pct(d['agree'] / d['n'])} [{_pct(d['agree_ci'][0])}, "
                f"{_pct(d['agree_ci'][1])}] | {d['rule_only']} | {d['judge_only']} | {k} |"
            )
    failed = {m: r["failures"] for m, r in models.items() if r["failures"]}
    if failed:
        lines += ["", "Answers the judge gave no grade for (left out above): " + "; ".join(
            f"{MODELS[m]}: " + ", ".join(f"{n} {why}" for why, n in f.items())
            for m, f in failed.items()) + "."]  # fmt: skip
    for key, title in (("rule_only", "correct by contains, incorrect by the judge"),
                       ("judge_only", "incorrect by contains, correct by the judge")):  # fmt: skip
        lines += ["", f"Examples {title} (up to three per model, spread over the sample):", "",
                  "| model | question | answer | references |", "|---|---|---|---|"]
        for m, r in models.items():
            for e in r["examples"][key]:
                refs = "; ".join(e["references"][:3])
                lines.append(f"| {MODELS[m]} | {_cell(e['question'])} | {_cell(e['answer'])} "
                             f"| {_cell(refs, 40)} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--traces-dir", default=DEFAULT_TRACES)
    parser.add_argument("--judge-url", help="the judge's OpenAI-compatible base URL (.../v1)")
    parser.add_argument("--judge-model", default="judge", help="the model name sent to it")
    parser.add_argument("--judge-name", default=None,
                        help="how the page names the judge (default: --judge-model)")
    parser.add_argument("--per-model", type=int, default=200)
    parser.add_argument("--docs-only", action="store_true",
                        help="rewrite the page from the saved results, running nothing")
    args = parser.parse_args()
    if args.docs_only:
        saved = load(SAVED)
    else:
        if not args.judge_url:
            parser.error("--judge-url is required (or --docs-only)")
        if args.per_model < 2:
            parser.error("--per-model must be at least 2")
        saved = run(args)
        save(SAVED, saved)
    write_page(OUT, render(saved))


if __name__ == "__main__":
    sys.exit(main())
