"""How often the two reference rules disagree: the shared TriviaQA traces' labels (the
``contains`` rule, :func:`guardrail.traces.is_correct`) against token F1
(:func:`guardrail.traces.is_correct_f1`) at the default threshold and a few others.

    python -m studies.label_agreement [--traces-dir DIR] [--docs-only]

Reads ``DIR/triviaqa_{smollm2,gemma3,qwen25coder}.jsonl`` (only each line's ``question``,
``answer``, ``references`` and ``correct``; a few seconds), checks that the files' labels
are what the contains rule gives, relabels every answer with token F1 at each threshold
of ``THRESHOLDS`` and counts, per model: answers, correct by each rule, disagreements in
both directions and Cohen's kappa; at the default threshold it keeps five disagreements
each way (spread evenly over the file). Saves everything in
``benchmarks/results/label_agreement.json`` and writes the tables into
``docs/results/label_agreement.md``, included by the labelling section of
``docs/fitting.md``. ``--docs-only`` rewrites the page from the saved JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from guardrail.traces import DEFAULT_F1_THRESHOLD, is_correct, token_f1
from studies.tables import DOCS, RESULTS, header, regenerate

COMMAND = "python -m studies.label_agreement"
SAVED = RESULTS / "label_agreement.json"
OUT = DOCS / "label_agreement.md"
MODELS = {
    "smollm2": "SmolLM2-135M-Instruct",
    "gemma3": "Gemma 3 270M (base)",
    "qwen25coder": "Qwen2.5-Coder-1.5B-Instruct",
}
THRESHOLDS = (DEFAULT_F1_THRESHOLD, 0.5, 0.8, 1.0)
"""The default first; the others are the sensitivity rows."""
EXAMPLES = 5


def _spread(items: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """``k`` items evenly spaced over ``items`` (all of them when there are no more)."""
    if len(items) <= k:
        return items
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)]


def kappa(a: list[bool], b: list[bool]) -> float | None:
    """Cohen's kappa of two binary labellings (None when chance agreement is 1)."""
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    pa, pb = sum(a) / n, sum(b) / n
    chance = pa * pb + (1 - pa) * (1 - pb)
    return None if chance == 1 else (observed - chance) / (1 - chance)


def _example(row: dict[str, Any], f1: float) -> dict[str, Any]:
    best = max(row["references"], key=lambda r: token_f1(row["answer"], [r], row["question"]))
    return {"id": row["id"], "question": row["question"], "answer": row["answer"],
            "best_reference": best, "f1": round(f1, 4)}  # fmt: skip


def measure(path: Path) -> dict[str, Any]:
    """The counts of one trace file (see the module docstring)."""
    rows = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            obj = json.loads(line)
            rows.append({k: obj[k] for k in ("id", "question", "answer", "references", "correct")})
    contains = [bool(r["correct"]) for r in rows]
    mismatch = sum(is_correct(r["answer"], r["references"], r["question"]) != c
                   for r, c in zip(rows, contains, strict=True))  # fmt: skip
    f1s = [token_f1(r["answer"], r["references"], r["question"]) for r in rows]
    out: dict[str, Any] = {"file": path.name, "n": len(rows), "contains_correct": sum(contains),
                           "labels_not_contains": mismatch, "thresholds": []}  # fmt: skip
    for t in THRESHOLDS:
        f1_labels = [f >= t for f in f1s]
        pairs = list(zip(contains, f1_labels, strict=True))
        out["thresholds"].append({
            "threshold": t,
            "f1_correct": sum(f1_labels),
            "f1_only": sum(f and not c for c, f in pairs),
            "contains_only": sum(c and not f for c, f in pairs),
            "kappa": kappa(contains, f1_labels),
        })  # fmt: skip
    default = DEFAULT_F1_THRESHOLD
    f1_only = [_example(r, f) for r, c, f in zip(rows, contains, f1s, strict=True)
               if f >= default and not c]  # fmt: skip
    contains_only = [_example(r, f) for r, c, f in zip(rows, contains, f1s, strict=True)
                     if c and f < default]  # fmt: skip
    out["examples"] = {"f1_only": _spread(f1_only, EXAMPLES),
                       "contains_only": _spread(contains_only, EXAMPLES)}  # fmt: skip
    return out


def run(traces_dir: str) -> dict[str, Any]:
    models = {m: measure(Path(traces_dir) / f"triviaqa_{m}.jsonl") for m in MODELS}
    return {"generated_by": COMMAND, "default_threshold": DEFAULT_F1_THRESHOLD,
            "models": models}  # fmt: skip


def _cell(text: str, limit: int = 70) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _kappa(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def render(saved: dict[str, Any]) -> str:
    """The whole of ``docs/results/label_agreement.md``."""
    default = saved["default_threshold"]
    lines = [header(COMMAND, "(or `--docs-only` from its JSON)"), "",
             f"Token F1 at the default threshold {default:g} against the traces' labels "
             "(the contains rule):", "",
             "| model | answers | correct (contains) | correct (F1) | F1 only | contains only "
             "| Cohen's kappa |",
             "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    models = saved["models"]
    for m, r in models.items():
        d = r["thresholds"][0]
        lines.append(f"| {MODELS[m]} | {r['n']:,} | {r['contains_correct']:,} | "
                     f"{d['f1_correct']:,} | {d['f1_only']} | {d['contains_only']} | "
                     f"{_kappa(d['kappa'])} |")  # fmt: skip
    lines += ["", "Other thresholds (correct by F1; F1 only / contains only; kappa):", "",
              "| model | " + " | ".join(f"F1 >= {t['threshold']:g}"
                                      for t in next(iter(models.values()))["thresholds"]) + " |",
              "|---|" + "---|" * len(THRESHOLDS)]  # fmt: skip
    for m, r in models.items():
        cells = [f"{t['f1_correct']:,}; {t['f1_only']} / {t['contains_only']}; "
                 f"{_kappa(t['kappa'])}" for t in r["thresholds"]]  # fmt: skip
        lines.append(f"| {MODELS[m]} | " + " | ".join(cells) + " |")
    for key, title in (("f1_only", f"correct by F1 >= {default:g} only"),
                       ("contains_only", "correct by contains only")):  # fmt: skip
        lines += ["", f"Examples {title} (five per model, spread over the file; the "
                  "reference shown is the one of best F1):", "",
                  "| model | question | answer | reference | F1 |",
                  "|---|---|---|---|---:|"]  # fmt: skip
        for m, r in models.items():
            for e in r["examples"][key]:
                lines.append(f"| {MODELS[m]} | {_cell(e['question'])} | {_cell(e['answer'])} "
                             f"| {_cell(e['best_reference'], 40)} | {e['f1']:.2f} |")  # fmt: skip
    mismatched = [m for m, r in models.items() if r["labels_not_contains"]]
    if mismatched:
        lines += ["", f"Labels that are not the contains rule's: {', '.join(mismatched)}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    regenerate(__doc__, SAVED, run, lambda saved: {OUT: render(saved)})


if __name__ == "__main__":
    main()
