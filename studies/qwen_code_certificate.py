"""The certificate ``liftguard demo --task code`` runs, and the MBPP tasks it shows.

``python -m studies.qwen_code_certificate`` (``--docs-only`` rewrites the page from
``benchmarks/results/qwen_code_certificate.json``) splits the committed Qwen2.5-Coder-1.5B
MBPP traces (``benchmarks/traces/mbpp_qwen25coder.jsonl.xz``, labelled by running the
tests) by a seeded permutation into 220 answers to fit on, 220 to calibrate on and 60 held
out, then runs the project's own commands:

- ``liftguard fit --fit-fraction 1`` on the first part (every default: the ``lift`` group,
  early-block margins), with the code task's context and the prompt-free skeleton named:
  Qwen itself, scoring each answer token after the code task's system line and an empty
  user message, as ``traces generate --task code`` scored the traces;
- ``liftguard calibrate --certificate`` on the second part at risk 0.3, delta 0.05,
  which writes ``guardrail/data/qwen_code_certificate.json``.

The certificate then replays the 60 held-out answers, and the same model's answers to
HumanEval's 164 tasks (``benchmarks/traces/humaneval_qwen25coder/``: another task source,
where the MBPP calibration promises nothing), as it would stream them (how many it
certifies, how many of those fail their tests, where it blocks the others), and the demo's
tasks are taken from the held-out MBPP answers by a fixed rule: the first three (in MBPP
order) it certifies that pass their tests, the first three it blocks before half their
tokens that fail, and the first it blocks that would have passed, so the demo shows what a
block costs too.
Those rows (the task, its tests and its setup, from the MBPP test split, CC BY 4.0) go to
``guardrail/data/demo_code_tasks.jsonl``.
"""

from __future__ import annotations

import json
import lzma
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from studies.tables import DOCS, RESULTS, ROOT, header, plain_traces, regenerate, run_liftguard

COMMAND = "python -m studies.qwen_code_certificate"
TRACES = ROOT / "benchmarks" / "traces" / "mbpp_qwen25coder.jsonl.xz"
MBPP = ROOT.parent / "shared" / "data" / "longform" / "mbpp_test500.jsonl"
DATA = ROOT / "guardrail" / "data"
CERTIFICATE = DATA / "qwen_code_certificate.json"
CONTEXT = DATA / "qwen_code_context.json"
TASKS = DATA / "demo_code_tasks.jsonl"
OTHER_CODE = ROOT / "benchmarks" / "traces" / "humaneval_qwen25coder"
"""The same model's answers to HumanEval's 164 tasks: code from another task source."""
SAVED = RESULTS / "qwen_code_certificate.json"
OUT = DOCS / "qwen_code_certificate.md"
SEED, N_HELD, N_FIT, RISK, DELTA = 7, 60, 220, 0.3, 0.05
TASK_FIELDS = ("id", "text", "test_list", "test_setup_code")


def _prefix(prompt: str) -> str:
    """The prompt-free prefix of a ChatML prompt: its user message emptied."""
    start = prompt.index("<|im_start|>user\n") + len("<|im_start|>user\n")
    return prompt[:start] + prompt[prompt.index("<|im_end|>", start) :]


def _replay(cert_path: Path, traces_path: Path) -> list[dict[str, Any]]:
    """Each answer of ``traces_path`` as the certificate streams it: certified or not, and
    the tokens read before the verdict."""
    from guardrail import Certificate
    from guardrail.evaluate import fitted_method
    from guardrail.fitting import stop_at
    from guardrail.traces import read_traces

    cert = Certificate.load(cert_path)
    assert cert.calibration is not None
    tau = cert.calibration.tau
    traces = read_traces(traces_path)
    method = fitted_method(traces, cert)
    assert method.paths is not None and method.policy is not None
    return [
        {"id": t.id, "correct": bool(t.correct), "certified": bool(d >= tau),
         "read": int(stop_at(p, method.policy, tau)), "tokens": t.n_tokens,
         "score": float(p.final)}
        for t, d, p in zip(traces, method.decision, method.paths, strict=True)
    ]  # fmt: skip


def _demo_ids(rows: list[dict[str, Any]]) -> list[str]:
    right = [r["id"] for r in rows if r["certified"] and r["correct"]][:3]
    early = [r["id"] for r in rows if not r["certified"] and not r["correct"]
             and r["read"] < r["tokens"] / 2][:3]  # fmt: skip
    lost = [r["id"] for r in rows if not r["certified"] and r["correct"]][:1]
    order = [r["id"] for r in rows]
    return sorted(right + early + lost, key=order.index)


def run(_traces_dir: str) -> dict[str, Any]:
    lines = lzma.decompress(TRACES.read_bytes()).decode("utf-8").splitlines()
    perm = np.random.default_rng(SEED).permutation(len(lines))
    parts = {"held": perm[:N_HELD], "fit": perm[N_HELD : N_HELD + N_FIT],
             "calibrate": perm[N_HELD + N_FIT :]}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for name, idx in parts.items():
            paths[name] = Path(tmp) / f"mbpp_qwen25coder_{name}.jsonl"
            paths[name].write_text("".join(lines[i] + "\n" for i in sorted(idx)), "utf-8")
        spec = Path(tmp) / "prompt_free_spec.json"
        prefix = _prefix(json.loads(lines[0])["prompt"])
        spec.write_text(json.dumps({"kind": "prompt_free",
                                    "params": {"model": "qwen", "prefix": prefix}}))  # fmt: skip
        fitted, calibrated = Path(tmp) / "fitted.json", Path(tmp) / "calibrated.json"
        run_liftguard(["fit", "--traces", str(paths["fit"]), "--fit-fraction", "1",
                       "--context", str(CONTEXT), "--skeleton-spec", str(spec),
                       "--out", str(fitted)])  # fmt: skip
        run_liftguard(["calibrate", "--certificate", str(fitted), "--traces",
                                 str(paths["calibrate"]), "--risk", f"{RISK:g}", "--delta",
                                 f"{DELTA:g}", "--out", str(calibrated)])  # fmt: skip
        cert = json.loads(calibrated.read_text("utf-8"))  # paths in its provenance: relative
        for key, value in cert["provenance"].items():
            if isinstance(value, str):
                cert["provenance"][key] = value.replace(f"{tmp}/", "").replace(f"{ROOT}/", "")
        CERTIFICATE.write_text(json.dumps(cert, indent=2) + "\n", "utf-8")
        held = _replay(CERTIFICATE, paths["held"])
        humaneval = _replay(CERTIFICATE, plain_traces(OTHER_CODE, Path(tmp)))
    ids = _demo_ids(held)
    rows = {r["id"]: r for r in map(json.loads, MBPP.read_text("utf-8").splitlines())}
    TASKS.write_text("".join(json.dumps({k: rows[i][k] for k in TASK_FIELDS}) + "\n"
                             for i in ids), "utf-8")  # fmt: skip
    cal = json.loads(CERTIFICATE.read_text("utf-8"))["calibration"]
    return {"generated_by": COMMAND, "seed": SEED, "risk": RISK, "delta": DELTA,
            "sizes": {k: len(v) for k, v in parts.items()},
            "calibration": {k: cal.get(k) for k in ("tau", "coverage", "n")},
            "held": held, "humaneval": humaneval, "demo": ids}  # fmt: skip


def _row(name: str, rows: list[dict[str, Any]]) -> str:
    """One line of the replay table: how the certificate streams these answers."""
    from guardrail.evaluate import auroc

    shown = [r for r in rows if r["certified"]]
    blocked = [r for r in rows if not r["certified"]]
    read = sum(r["read"] for r in blocked) / max(1, sum(r["tokens"] for r in blocked))
    ranking = auroc([r["score"] for r in rows], [r["correct"] for r in rows])
    return (
        f"| {name} | {len(rows)} | {sum(r['correct'] for r in rows)} | {ranking:.3f} | "
        f"{len(shown)} ({100 * len(shown) / len(rows):.0f}%) | "
        f"{sum(not r['correct'] for r in shown)} | {len(blocked)} | {100 * read:.0f}% |"
    )


def render(saved: dict[str, Any]) -> str:
    held = saved["held"]
    sizes, cal = saved["sizes"], saved["calibration"]
    out = [
        header(COMMAND, "from the committed MBPP traces"),
        "",
        f"Fitted on {sizes['fit']} MBPP answers of Qwen2.5-Coder-1.5B-Instruct, calibrated on "
        f"{sizes['calibrate']} others at risk {saved['risk']:g} (delta {saved['delta']:g}; "
        f"tau {cal['tau']:.4f}, coverage on the calibration answers "
        f"{100 * cal['coverage']:.1f}%), replayed on {sizes['held']} answers held out of both, "
        "and on the same model's answers to HumanEval's tasks (another task source, answers "
        "a few times as long: tau was calibrated on MBPP's, so the promise does not reach "
        "them; AUROC of the final score against the tests; tokens read before a block, "
        "pooled over the blocked answers):",
        "",
        "| answers | count | pass their tests | AUROC | certified | of those failing | blocked "
        "| tokens read before a block |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        _row("MBPP, held out", held),
        _row("HumanEval", saved["humaneval"]),
        "",
        "The demo's tasks (held out):",
        "",
        "| task | verdict | tokens read | answer's tokens | tests |",
        "|---|---|---:|---:|---|",
    ]
    by_id = {r["id"]: r for r in held}
    for i in saved["demo"]:
        r = by_id[i]
        verdict = "certified" if r["certified"] else "blocked"
        out.append(f"| {i} | {verdict} | {r['read']} | {r['tokens']} | "
                   f"{'pass' if r['correct'] else 'fail'} |")  # fmt: skip
    return "\n".join(out) + "\n"


def main() -> None:
    regenerate(__doc__, SAVED, run, lambda saved: {OUT: render(saved)})


if __name__ == "__main__":
    main()
