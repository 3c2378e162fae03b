"""Certificates on long answers: code (MBPP) and step-by-step maths (GSM8K), against every
baseline, in-domain and transferred, with what an early block saves.

    python -m studies.longform --mbpp MBPP_TRACES.jsonl [--gsm8k GSM8K_TRACES.jsonl]
    python -m studies.longform --docs-only

The traces are Qwen2.5-Coder-1.5B-Instruct's answers, made and labelled by checking as
``docs/guarding-code-and-reasoning.md`` says (too large for git: rebuild them there).
Writes ``benchmarks/results/longform.json`` and ``docs/results/longform.md``;
``--docs-only`` rewrites the page from the saved JSON, running nothing.

In-domain, per task: the answers are split in halves by a seeded permutation (seed 0,
as every held-out benchmark here); on half A, ``liftguard fit --fit-fraction 1`` fits the
default certificate (every default: group ``lift`` plus the log-likelihood of each
scope the answers use, the prompt-free skeleton, early block 0.99 widened to a 0.9
share) and, per target risk, ``liftguard fit --select coverage --risk R``; on half
B, ``liftguard eval --certificate CERT --risk R --splits 50 --seed 7 --bootstrap 200``
(R: the target risks 0.1, 0.2 and 0.3, and 0.4 and 0.5 to tell methods apart where all
refuse the targets)
calibrates tau anew on one half of each split, for the certificate and every baseline
alike, and tests on the other half; the bootstrap intervals are paired (each resample
of answers reruns every split for every method). Transfer (with both files): the same
two fits on all of one task's answers, evaluated on all of the other's.

Early blocks: each blocked test answer of the default certificate is replayed through
the monitor's own objects (:func:`guardrail.fitting.replay_fitted`) at the split's
calibrated tau (the splits are ``eval``'s: the script checks that it gets ``eval``'s
coverage), giving the tokens generated before the block and those a closed upstream
never generates. The trace format carries no per-token timing, so tokens are the unit
of the generation time saved (llama.cpp decodes these answers at a steady rate on
CPU, about 30 tokens/s on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from guardrail import Certificate, InsufficientDataError
from guardrail.evaluate import fitted_method, ltt_threshold
from guardrail.fitting import stop_at
from guardrail.traces import BASELINES, read_traces
from studies.tables import halves, header, load, pct, plain_traces, save, write_page

ROOT = Path(__file__).resolve().parents[1]

COMMAND = "python -m studies.longform --mbpp MBPP.jsonl --gsm8k GSM8K.jsonl"
SAVED = ROOT / "benchmarks" / "results" / "longform.json"
PAGE = ROOT / "docs" / "results" / "longform.md"
TASKS = {"mbpp": "MBPP (code)", "gsm8k": "GSM8K (maths)"}
RISKS = (0.1, 0.2, 0.3, 0.4, 0.5)
TARGETS = ("0.1", "0.2", "0.3")
"""The risks the certificate is held to; 0.4 and 0.5 show the methods apart where few
answers are at hand and every method refuses the targets."""
EXPECTED = ("0.2", "0.3")
"""The risks at which the in-expectation promise (``eval --procedure conformal``) is shown
beside the default one."""
SPLITS, SEED, DELTA, BOOTSTRAP = 50, 7, 0.05, 200
METHODS = ("lift", "lift_paper", *BASELINES)
"""What ``eval`` reports besides the certificate (the shipped lift rules, the baselines)."""
CERTS = ("default", "selected")
"""``liftguard fit`` with every default, and with ``--select coverage --risk R``."""


def _liftguard(*args: str) -> str:
    """``liftguard ARGS`` of this checkout (``python -m adapters.cli``); its stdout."""
    proc = subprocess.run([sys.executable, "-m", "adapters.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"`liftguard {' '.join(args)}` failed:\n{proc.stderr}")
    return proc.stdout


def _fit(traces: Path, out: Path, risk: float | None) -> None:
    select = ["--select", "coverage", "--risk", f"{risk:g}"] if risk is not None else []
    _liftguard("fit", "--traces", str(traces), "--fit-fraction", "1", "--out", str(out), *select)


def _eval(
    traces: Path, cert: Path, risk: float, bootstrap: int, procedure: str = "fixed-sequence"
) -> dict[str, Any]:
    out = _liftguard("eval", "--traces", str(traces), "--certificate", str(cert), "--risk",
                     f"{risk:g}", "--splits", str(SPLITS), "--seed", str(SEED), "--bootstrap",
                     str(bootstrap), "--procedure", procedure, "--json")  # fmt: skip
    result: dict[str, Any] = json.loads(out)
    result["certificate"]["path"] = cert.name  # a temporary file: its name says which
    for m in result["methods"].values():
        m.pop("refusal_reason", None)  # a sentence; `all_refused` says it
    return result


def early_blocks(
    cert_path: Path, traces_path: Path, risk: float, coverage: float
) -> dict[str, Any]:
    """What the certificate's blocks read and save on ``traces_path`` at ``risk``, over
    ``eval``'s splits (``coverage``: the certificate's coverage ``eval`` reported, which
    these splits must reproduce)."""
    cert = Certificate.load(str(cert_path))
    traces = read_traces(traces_path)
    limit = cert.context.max_tokens
    longest = max(t.n_tokens for t in traces)
    if limit is not None and longest > limit:  # as eval replays answers longer than the limit
        limit = longest
    method = fitted_method(traces, cert, max_tokens=limit)
    assert method.paths is not None
    ok = np.array([bool(t.correct) for t in traces])
    n = ok.size
    rng = np.random.default_rng(SEED)  # eval's splits: guardrail.evaluate's permutations
    perms = [rng.permutation(n) for _ in range(SPLITS)]
    n_cal = round(n * 0.5)
    covs, read, saved_share, saved_tokens = [], [], [], []
    for perm in perms:
        cal, test = perm[:n_cal], perm[n_cal:]
        try:
            tau = ltt_threshold(method.decision[cal], ~ok[cal], risk, DELTA).tau
        except InsufficientDataError:
            covs.append(0.0)
            continue
        shown = method.decision[test] >= tau
        covs.append(float(shown.mean()))
        total = unread = 0
        for i, s in zip(test, shown, strict=True):
            path = method.paths[i]
            size = path.scores.size
            total += size
            if s or size == 0:
                continue
            stop = min(stop_at(path, cert.policy, tau), size)
            read.append(stop / size)
            unread += size - stop
            saved_tokens.append(size - stop)
        saved_share.append(unread / total if total else 0.0)
    if not math.isclose(float(np.mean(covs)), coverage, abs_tol=1e-9):
        raise SystemExit(f"{traces_path.name} at risk {risk:g}: the replayed splits give "
                         f"coverage {np.mean(covs):.4f}, eval reported {coverage:.4f}")  # fmt: skip
    return {
        "blocked": len(read),
        "blocked_read_mean": float(np.mean(read)) if read else None,
        "blocked_read_median": float(np.median(read)) if read else None,
        "tokens_saved_share": float(np.mean(saved_share)) if saved_share else None,
        "tokens_saved_per_blocked": float(np.mean(saved_tokens)) if saved_tokens else None,
        "answer_tokens_mean": float(np.mean([t.n_tokens for t in traces])),
    }


def _summary(path: Path) -> dict[str, Any]:
    traces = read_traces(path)
    lengths = np.array([t.n_tokens for t in traces])
    return {"file": path.name, "n": len(traces), "n_correct": int(sum(bool(t.correct)
            for t in traces)), "median_tokens": float(np.median(lengths)),
            "mean_tokens": float(lengths.mean()), "max_tokens": int(lengths.max())}  # fmt: skip


def _evaluate(
    fit_on: Path, test_on: Path, tmp: Path, tag: str, bootstrap: int, jobs: int = 1
) -> dict[str, Any]:
    """Both certificates fitted on ``fit_on``, evaluated on ``test_on`` at every risk (the
    risks ``jobs`` at a time: each is its own ``fit`` and ``eval`` processes)."""
    default = tmp / f"{tag}_default.json"
    _fit(fit_on, default, None)

    def at(risk: float) -> dict[str, Any]:
        selected = tmp / f"{tag}_selected_{risk:g}.json"
        _fit(fit_on, selected, risk)
        run = _eval(test_on, default, risk, bootstrap)
        sel = _eval(test_on, selected, risk, bootstrap)
        run["methods"]["selected"] = sel["methods"]["certificate"]
        run["selected"] = sel["certificate"]
        cert = run["methods"]["certificate"]
        run["early_blocks"] = early_blocks(default, test_on, risk, cert["coverage_mean"])
        sys.stderr.write(f"{tag} risk {risk:g}: certificate {pct(cert['coverage_mean'])}\n")
        return run

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        runs = list(pool.map(at, RISKS))
    return {f"{risk:g}": run for risk, run in zip(RISKS, runs, strict=True)}


def _in_expectation(
    fit_on: Path, test_on: Path, tmp: Path, tag: str, bootstrap: int
) -> dict[str, Any]:
    """The default certificate fitted on ``fit_on`` and every baseline, evaluated on
    ``test_on`` with the conformal threshold (the in-expectation promise) at ``EXPECTED``."""
    default = tmp / f"{tag}_default.json"
    if not default.exists():
        _fit(fit_on, default, None)
    return {r: _eval(test_on, default, float(r), bootstrap, "conformal") for r in EXPECTED}


def in_expectation(paths: dict[str, Path], bootstrap: int) -> dict[str, Any]:
    """``saved["in_expectation"]``: per task, the in-domain halves under the conformal
    threshold (what ``--in-expectation-only`` adds to a saved run)."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for task, path in paths.items():
            a, b = halves(plain_traces(path, tmp), tmp)
            out[task] = _in_expectation(a, b, tmp, f"{task}_in", bootstrap)
            sys.stderr.write(f"{task}: in expectation done\n")
    return out


def run(paths: dict[str, Path], bootstrap: int, jobs: int = 1) -> dict[str, Any]:
    saved: dict[str, Any] = {"generated_by": COMMAND, "splits": SPLITS, "seed": SEED,
                             "delta": DELTA, "bootstrap": bootstrap, "tasks": {},
                             "in_domain": {}, "transfer": {}}  # fmt: skip
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        paths = {task: plain_traces(path, tmp) for task, path in paths.items()}
        for task, path in paths.items():
            saved["tasks"][task] = _summary(path)
            a, b = halves(path, tmp)
            saved["tasks"][task]["halves"] = {"fit": _summary(a)["n"], "test": _summary(b)["n"]}
            saved["in_domain"][task] = _evaluate(a, b, tmp, f"{task}_in", bootstrap, jobs)
            saved.setdefault("in_expectation", {})[task] = _in_expectation(
                a, b, tmp, f"{task}_in", bootstrap
            )
        if len(paths) == 2:
            for src, dst in (("mbpp", "gsm8k"), ("gsm8k", "mbpp")):
                saved["transfer"][f"{src}->{dst}"] = _evaluate(
                    paths[src], paths[dst], tmp, f"{src}_to_{dst}", bootstrap, jobs
                )
    return saved


# --------------------------------------------------------------------------- #
# The page
# --------------------------------------------------------------------------- #


def _best_baseline(methods: dict[str, Any]) -> str:
    """The method of ``METHODS`` with the largest coverage (ties: the first listed)."""
    return max((n for n in METHODS if n in methods), key=lambda n: methods[n]["coverage_mean"])


def _interval(entry: dict[str, Any] | None, reference: str = "certificate") -> str:
    diff = (entry or {}).get("bootstrap", {}).get(f"{reference}_minus")
    if not diff or diff["coverage_mean"][0] is None:
        return "-"
    lo, hi = diff["coverage_mean"]
    return f"[{100 * lo:+.1f}, {100 * hi:+.1f}]"


def _row(name: str, m: dict[str, Any]) -> str:
    auroc = "-" if m["auroc"] is None else f"{m['auroc']:.3f}"
    if m["all_refused"]:
        return f"| {name} | refused | {m['refused']} | - | - | {auroc} | - | - |"
    risk = "-" if m["risk_mean"] is None else f"{m['risk_mean']:.3f}"
    blocked = pct(m["blocked_read_mean"], 0)
    return (f"| {name} | {pct(m['coverage_mean'])} | {m['refused']} | {risk} | "
            f"{pct(m['risk_violation_rate'], 0)} | {auroc} | {blocked} | "
            f"{_interval(m)} |")  # fmt: skip


def _method_table(run: dict[str, Any]) -> list[str]:
    methods = run["methods"]
    lines = ["| method | coverage | refused | test risk | violations | AUROC | "
             "blocked answers read | certificate minus it (95%) |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    feats = ", ".join(f"`{f}`" for f in run["certificate"]["features"])
    sel = ", ".join(f"`{f}`" for f in run["selected"]["features"])
    lines.append(_row("**certificate** (`fit`, defaults)", methods["certificate"]))
    lines.append(_row("`fit --select coverage`", methods["selected"]))
    lines += [_row(f"`{n}`", methods[n]) for n in METHODS if n in methods]
    lines += ["", f"Default certificate's features: {feats}. Selected: {sel}."]
    return lines


def _verdicts(runs: dict[str, Any]) -> tuple[list[str], int, int]:
    """The summary rows of ``runs`` (task -> risk -> run), and how many cells are within
    a point of the best baseline and strictly above it."""
    lines = ["| task | risk | certificate | selected | best baseline | certificate minus best "
             "(95%) | violations | blocked read | tokens saved |",
             "|---|---:|---:|---:|---|---|---:|---:|---:|"]  # fmt: skip
    within = above = 0
    for task, by_risk in runs.items():
        for risk, run in by_risk.items():
            methods = run["methods"]
            cert, sel = methods["certificate"], methods["selected"]
            best = _best_baseline(methods)
            diff = cert["coverage_mean"] - methods[best]["coverage_mean"]
            if risk in TARGETS:
                within += diff >= -0.01
                above += diff > 0
            early = run["early_blocks"]
            lines.append(
                f"| {TASKS.get(task, task)} | {risk} | {pct(cert['coverage_mean'])} | "
                f"{pct(sel['coverage_mean'])} | `{best}` {pct(methods[best]['coverage_mean'])} | "
                f"{100 * diff:+.1f} {_interval(methods[best])} | "
                f"{pct(cert['risk_violation_rate'], 0)} | {pct(early['blocked_read_mean'], 0)} | "
                f"{pct(early['tokens_saved_share'], 1)} |"
            )
    return lines, within, above


def _expectation_rows(runs: dict[str, Any]) -> list[str]:
    lines = ["| task | risk | certificate | test risk | best baseline | certificate minus "
             "best (95%) | baselines (coverage) |",
             "|---|---:|---:|---:|---|---|---|"]  # fmt: skip
    for task, by_risk in runs.items():
        for risk, run in by_risk.items():
            methods = run["methods"]
            cert = methods["certificate"]
            best = _best_baseline(methods)
            diff = cert["coverage_mean"] - methods[best]["coverage_mean"]
            rest = ", ".join(f"`{n}` {pct(methods[n]['coverage_mean'])}"
                             for n in METHODS if n in methods)  # fmt: skip
            test_risk = "-" if cert["risk_mean"] is None else f"{cert['risk_mean']:.3f}"
            lines.append(
                f"| {TASKS.get(task, task)} | {risk} | {pct(cert['coverage_mean'])} | "
                f"{test_risk} | `{best}` {pct(methods[best]['coverage_mean'])} | "
                f"{100 * diff:+.1f} {_interval(methods[best])} | {rest} |"
            )
    return lines


def render(saved: dict[str, Any]) -> str:
    """The whole of ``docs/results/longform.md``."""
    lines = [header(COMMAND, "(or `--docs-only` from its JSON)"), ""]
    for task, t in saved["tasks"].items():
        lines.append(
            f"- {TASKS.get(task, task)}: `{t['file']}`, {t['n']} answers, {t['n_correct']} "
            f"correct ({pct(t['n_correct'] / t['n'])}); {t['median_tokens']:g} tokens median, "
            f"{t['mean_tokens']:.0f} mean, {t['max_tokens']} at most; halves of "
            f"{t['halves']['fit']} (fit) and {t['halves']['test']} (test)."
        )
    n_cells = sum(r in TARGETS for v in saved["in_domain"].values() for r in v)
    rows, within, above = _verdicts(saved["in_domain"])
    cells = [r for v in saved["in_domain"].values() for k, r in v.items() if k in TARGETS]
    worst = max((r["methods"]["certificate"]["risk_violation_rate"] for r in cells), default=0.0)
    lines += ["", "### In-domain summary", "",
              f"{saved['splits']} splits of the test half, tau recalibrated on each; bootstrap "
              f"over {saved['bootstrap']} resamples. The certificate is within a point of the "
              f"best baseline in {within} of {n_cells} cells at the target risks (0.1, 0.2, 0.3) "
              f"and strictly above it in {above}; its risk is violated in at most "
              f"{pct(worst, 0)} of the splits of any of them.",
              "", *rows, ""]  # fmt: skip
    if saved.get("in_expectation"):
        lines += ["### In-domain, in expectation", "",
                  "The same halves and splits, every method calibrated instead by the conformal "
                  "threshold (`eval --procedure conformal`): the error rate among shown answers "
                  "is at most the target averaged over calibration draws, not with probability "
                  "1 - delta (see *Two promises* in the fitting guide). *test risk*: the mean over "
                  "splits of the test answers' error rate among those shown (splits that "
                  "show nothing left out).",
                  "", *_expectation_rows(saved["in_expectation"]), ""]  # fmt: skip
    if saved["transfer"]:
        rows, within, above = _verdicts(saved["transfer"])
        lines += ["### Transfer summary", "",
                  "Fitted on all of one task's answers, evaluated on all of the other's.",
                  "", *rows, ""]  # fmt: skip
    for kind, runs in (("In-domain", saved["in_domain"]), ("Transfer", saved["transfer"])):
        for task, by_risk in runs.items():
            for risk, run in by_risk.items():
                lines += [f"### {kind}: {TASKS.get(task, task)}, risk {risk}", "",
                          *_method_table(run), ""]  # fmt: skip
    lines += [
        "*coverage*: share of test answers shown (a refused split counts 0); *refused*: "
        "splits whose calibration passed no threshold; *violations*: splits whose test risk's "
        "95% Clopper-Pearson lower bound exceeds the target; *blocked answers read*: mean "
        "share of a blocked answer's tokens generated before the block; *certificate minus "
        "it*: the default certificate's coverage minus the method's, 95% paired bootstrap "
        "interval in points; *tokens saved*: share of all test answers' tokens that the "
        "blocks spare (the upstream is closed at the block).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--mbpp", type=Path, help="MBPP traces labelled with --check code")
    parser.add_argument(
        "--gsm8k",
        type=Path,
        help="GSM8K traces labelled with --check number "
        "(a file, or a folder of parts joined in name order)",
    )
    parser.add_argument("--bootstrap", type=int, default=BOOTSTRAP, help="resamples (0: none)")
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1,
        help="risk levels evaluated at once (default: one per CPU)",
    )  # fmt: skip
    parser.add_argument(
        "--docs-only", action="store_true", help="rewrite the page from the saved results"
    )
    parser.add_argument(
        "--in-expectation-only", action="store_true",
        help="add (or redo) only the in-expectation section of the saved results",
    )  # fmt: skip
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.docs_only:
        saved = load(SAVED)
    elif args.in_expectation_only:
        paths = {k: p for k, p in (("mbpp", args.mbpp), ("gsm8k", args.gsm8k)) if p is not None}
        if not paths:
            parser.error("give the traces: --mbpp FILE and/or --gsm8k FILE")
        saved = load(SAVED)
        saved["in_expectation"] = {**saved.get("in_expectation", {}),
                                   **in_expectation(paths, args.bootstrap)}  # fmt: skip
        save(SAVED, saved)
        saved = load(SAVED)
    else:
        paths = {k: p for k, p in (("mbpp", args.mbpp), ("gsm8k", args.gsm8k)) if p is not None}
        if not paths:
            parser.error("give the traces: --mbpp FILE and/or --gsm8k FILE (or --docs-only)")
        missing = [str(p) for p in paths.values() if not (p.is_file() or p.is_dir())]
        if missing:
            parser.error(f"no such traces: {', '.join(missing)} (make them as "
                         "docs/guarding-code-and-reasoning.md says)")  # fmt: skip
        save(SAVED, run({k: p.resolve() for k, p in paths.items()}, args.bootstrap, args.jobs))
        saved = load(SAVED)  # (the page is what --docs-only writes: the JSON's key order)
    write_page(PAGE, render(saved))


if __name__ == "__main__":
    main()
