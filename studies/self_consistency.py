"""Multi-sample self-consistency on GSM8K beside the single-pass certificate.

Self-consistency (Wang et al., 2023) samples K solutions to a question and trusts an
answer as far as the samples agree with it. It is the standard strong signal for
step-by-step maths, and it costs K more generations; the certificate reads one pass.
This module makes the samples for putting the two side by side on the same questions.

    python -m studies.self_consistency sample \\
        --traces benchmarks/traces/gsm8k_qwen25coder --base-url http://127.0.0.1:8080 \\
        --samples 5 --limit 150 --out benchmarks/traces/gsm8k_qwen25coder_samples.jsonl

asks an OpenAI-compatible llama.cpp server (``llama-server`` with K parallel slots,
``-np 5``, or llama-cpp-python's ``python -m llama_cpp.server``) for K solutions per
question, with the exact prompts of the greedy traces.
``sample`` resumes: questions already in ``--out`` are skipped, and each question's line
is written only once its K samples are in. Samples use temperature 0.7 (the common
self-consistency setting) and seeds ``row * K + j`` (``row``: the
question's GSM8K row), so a rerun asks the same.
Each line holds the greedy answer's final number (:func:`adapters.final_number`) and
token count, and each sample's text, final number and token count: the self-consistency
score of an answer is the share of its K samples whose final number equals the greedy
answer's.

    python -m studies.self_consistency report

puts the peers side by side on the sampled questions and writes
``benchmarks/results/self_consistency.json`` and ``docs/results/self_consistency.md``:

- **single pass**: the answer's summed and mean log-probability (``nll``,
  ``mean_logprob``) and a certificate fitted (``guardrail.fitting.fit_certificate``,
  every default, ``fit_fraction=1``) on the GSM8K answers *not* sampled, so no sampled
  question is fitted on; its score is the fitted statistic's final value;
- **self-consistency**: the share of the K samples agreeing with the greedy answer (ties
  broken by ``nll``); it costs the greedy answer plus K samples;
- **escalation**: single pass first; an answer whose certificate score lies in the
  middle half of the fitting answers' scores (cut-offs from the fitting answers, no
  labels) is sampled and ranked by self-consistency between the two bands; only those
  answers pay for samples;
- **escalation around the threshold**, per risk: the band is the quarter of the fitting
  answers' scores centred on where that risk's threshold falls among them (the score
  above which the fitting answers' error rate is at most the risk, read with the
  fitting answers' labels: :func:`threshold_band`), so only the answers whose single
  pass is undecided at that risk pay for samples;
- **escalation between the thresholds**, per risk: the library's band
  (:meth:`guardrail.evaluate.Escalation.band` on the fitting answers), from the lowest
  score a threshold chosen with their labels would show up to the threshold the
  high-probability calibration certifies on them.

Each is scored on the sampled questions: AUROC (95% bootstrap interval over questions),
the in-sample ceiling at risk 0.2 and 0.3, and coverage over 200 random splits into
``--n-cal`` calibration and the rest test, with the default high-probability
calibration (``ltt_threshold``, refusals counted as nothing shown) and with conformal
selection (expected share of wrong among shown, :func:`guardrail.evaluate.conformal_select`),
beside the mean tokens generated per question.
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
SAMPLER = {"top_k": 40, "top_p": 0.95, "min_p": 0.05, "repeat_penalty": 1.0}
"""The rest of the sampler, sent with every request: ``llama-server``'s defaults, written
out so that llama-cpp-python's server (whose defaults differ) samples the same way."""


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
            "seed": seed, "stream": False, **SAMPLER}  # fmt: skip
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


RISKS = (0.2, 0.3)
SPLITS, BOOTSTRAP = 200, 1000
ROOT = Path(__file__).resolve().parents[1]
GSM8K = ROOT / "benchmarks" / "traces" / "gsm8k_qwen25coder"
SAMPLES = ROOT / "benchmarks" / "traces" / "gsm8k_qwen25coder_samples.jsonl"
SAVED = ROOT / "benchmarks" / "results" / "self_consistency.json"
PAGE = ROOT / "docs" / "results" / "self_consistency.md"
REPORT = "python -m studies.self_consistency report"
N_CAL = 100
"""Calibration answers per split by default (fewer where fewer questions are sampled)."""
ESCALATE = (0.25, 0.75)
"""The band of the fitting answers' certificate scores (quantiles) that is escalated."""
ESCALATE_AROUND = 0.25
"""The share of the fitting answers' scores escalated around a risk's threshold."""


def threshold_band(scores: Any, correct: Any, risk: float, width: float) -> tuple[float, float]:
    """The scores bounding the ``width`` share of ``scores`` centred (in rank) on the
    threshold the labelled answers give at ``risk``: the top share whose error rate is at
    most ``risk`` (:func:`guardrail.evaluate.in_sample_ceiling`), the band clipped to the
    scores' range."""
    import numpy as np

    from guardrail.evaluate import in_sample_ceiling

    s = np.asarray(scores, dtype=np.float64)
    at = 1.0 - in_sample_ceiling(s, ~np.asarray(correct, dtype=bool), risk)
    lo, hi = np.quantile(s, [max(0.0, at - width / 2), min(1.0, at + width / 2)])
    return float(lo), float(hi)


def agreement(line: dict[str, Any]) -> float:
    """Share of a question's samples whose final number equals the greedy answer's."""
    from guardrail.evaluate import Escalation

    return Escalation.agreement(line["greedy_final"], [s["final"] for s in line["samples"]])


def _ranked(primary: Any, tie_break: Any) -> Any:
    """``primary`` with ties broken by ``tie_break`` (its rank, scaled below any gap)."""
    import numpy as np
    from scipy import stats

    p = np.asarray(primary, dtype=np.float64)
    r = stats.rankdata(np.asarray(tie_break, dtype=np.float64)) / (p.size + 1.0)
    return p + 1e-6 * r


def escalated(single: Any, consistency: Any, band: tuple[float, float]) -> tuple[Any, Any]:
    """The escalation's score (:meth:`guardrail.evaluate.Escalation.scores`) and which
    answers it sampled: above the band the single pass decides (ranked first), below it
    too (ranked last), inside it self-consistency."""
    import numpy as np

    from guardrail.evaluate import Escalation

    rule = Escalation(low=band[0], high=band[1], tau=np.inf, risk=1.0, delta=1.0)
    s = np.asarray(single, dtype=np.float64)
    return rule.scores(s, consistency), (s >= band[0]) & (s <= band[1])


def _coverage(score: Any, ok: Any, n_cal: int, risk: float, seed: int) -> dict[str, float]:
    """Coverage over random splits: high-probability calibration and conformal selection
    (each as the calibration-power study applies it, delta 0.05)."""
    import numpy as np

    from studies.calibration_power import shown_on

    rng = np.random.default_rng(seed)
    hp, refused, cs, cs_wrong = [], 0, [], []
    for _ in range(SPLITS):
        perm = rng.permutation(score.size)
        cal, test = perm[:n_cal], perm[n_cal:]
        shown, refusal = shown_on(score[cal], ~ok[cal], risk, "fixed-sequence", score[test])
        hp.append(float(shown.mean()))
        refused += refusal
        sel, _ = shown_on(score[cal], ~ok[cal], risk, "conformal selection", score[test])
        cs.append(float(sel.mean()))
        cs_wrong.append(float((~ok[test][sel]).mean()) if sel.any() else 0.0)
    return {"hp_coverage": float(np.mean(hp)), "hp_refused": refused / SPLITS,
            "cs_coverage": float(np.mean(cs)), "cs_wrong": float(np.mean(cs_wrong))}  # fmt: skip


def _auroc_interval(score: Any, ok: Any, seed: int) -> list[float]:
    import numpy as np

    from guardrail.evaluate import auroc

    rng = np.random.default_rng(seed)
    draws = [auroc(score[i], ok[i]) for i in rng.integers(0, score.size, (BOOTSTRAP, score.size))]
    lo, hi = np.nanpercentile(draws, [2.5, 97.5])
    return [float(lo), float(hi)]


def report(args: argparse.Namespace) -> dict[str, Any]:
    """Every peer on the sampled questions (see the module docstring)."""
    import numpy as np

    from guardrail.evaluate import Escalation, auroc, fitted_method
    from guardrail.fitting import FitOptions, fit_certificate
    from guardrail.traces import baseline_score, parse_trace
    from studies.calibration_power import ceiling

    lines = [json.loads(x) for x in Path(args.samples_file).read_text().splitlines() if x]
    by_id = {line["id"]: line for line in lines}
    if not by_id:
        raise SystemExit(f"{args.samples_file}: no sampled questions")
    traces = [parse_trace(obj) for obj in greedy_traces(Path(args.traces))]
    sampled = [t for t in traces if t.id in by_id]
    rest = [t for t in traces if t.id not in by_id]
    cert, _report = fit_certificate(rest, FitOptions(fit_fraction=1.0))
    k = len(lines[0]["samples"])
    ok = np.array([bool(t.correct) for t in sampled])
    cert_score = np.asarray(fitted_method(sampled, cert).final, dtype=np.float64)
    band_scores = np.asarray(fitted_method(rest, cert).final, dtype=np.float64)
    lo, hi = np.quantile(band_scores, ESCALATE)
    nll = np.array([baseline_score(t, "nll") for t in sampled])
    mean_logprob = np.array([baseline_score(t, "mean_logprob") for t in sampled])
    greedy_tokens = np.array([t.n_tokens for t in sampled], dtype=np.float64)
    sampled_tokens = np.array([sum(s["tokens"] for s in by_id[t.id]["samples"]) for t in sampled],
                             dtype=np.float64)  # fmt: skip
    all_tokens = greedy_tokens + sampled_tokens
    consistency = np.array([agreement(by_id[t.id]) for t in sampled])
    esc, inside = escalated(cert_score, consistency, (float(lo), float(hi)))
    methods = {
        "nll (single pass)": (nll, greedy_tokens),
        "mean_logprob (single pass)": (mean_logprob, greedy_tokens),
        "certificate (single pass)": (cert_score, greedy_tokens),
        f"self-consistency ({k} samples)": (_ranked(consistency, nll), all_tokens),
        "escalation (certificate, then samples)": (esc, greedy_tokens + inside * sampled_tokens),
    }  # fmt: skip
    rest_ok = np.array([bool(t.correct) for t in rest])
    around: dict[float, float] = {}
    between: dict[float, float] = {}
    per_risk: dict[str, float] = {}  # the rows that belong to one risk
    for risk in RISKS:  # one row per risk: its band is that risk's
        band = threshold_band(band_scores, rest_ok, risk, ESCALATE_AROUND)
        esc_r, inside_r = escalated(cert_score, consistency, band)
        name = f"escalation around the {risk:g} threshold"
        methods[name], per_risk[name] = (esc_r, greedy_tokens + inside_r * sampled_tokens), risk
        around[risk] = float(inside_r.mean())
        esc_b, inside_b = escalated(
            cert_score, consistency, Escalation.band(band_scores, rest_ok, risk)
        )
        name = f"escalation between the {risk:g} thresholds (`Escalation.band`)"
        methods[name], per_risk[name] = (esc_b, greedy_tokens + inside_b * sampled_tokens), risk
        between[risk] = float(inside_b.mean())
    rows = []
    for name, (score, tokens) in methods.items():
        row: dict[str, Any] = {"method": name, "auroc": auroc(score, ok),
                               "auroc_interval": _auroc_interval(score, ok, 3),
                               "tokens": float(tokens.mean())}  # fmt: skip
        risks = [per_risk[name]] if name in per_risk else RISKS
        if len(risks) == 1:
            row["risk"] = risks[0]
        for risk in risks:
            row[f"ceiling_{risk:g}"] = ceiling(score, (~ok).astype(float), risk)
            row.update({f"{key}_{risk:g}": v for key, v in
                        _coverage(score, ok, args.n_cal, risk, seed=11).items()})  # fmt: skip
        rows.append(row)
    command = REPORT if args.n_cal == N_CAL else f"{REPORT} --n-cal {args.n_cal}"
    return {"generated_by": command, "questions": len(sampled), "samples": k,
            "accuracy": float(ok.mean()), "n_cal": args.n_cal, "splits": SPLITS,
            "escalated": float(inside.mean()),
            "escalated_around": {f"{r:g}": v for r, v in around.items()},
            "escalated_between": {f"{r:g}": v for r, v in between.items()},
            "fitted_on": len(rest), "rows": rows}  # fmt: skip


def render(saved: dict[str, Any]) -> str:
    """The results page of a saved report."""
    head = (f"<!-- generated by `{saved['generated_by']}` (or `--docs-only` from its JSON); "
            "do not edit -->")  # fmt: skip
    lines = [head, "",
             f"{saved['questions']} GSM8K questions, greedy accuracy {saved['accuracy']:.1%}; "
             f"{saved['samples']} samples each; the certificate fitted on the other "
             f"{saved['fitted_on']} answers; coverage over {saved['splits']} splits of "
             f"{saved['n_cal']} calibration answers and the rest test. The escalation "
             f"sampled {saved['escalated']:.0%} of the questions"
             + "".join(f"; around the {r} threshold, {v:.0%}"
                       for r, v in saved.get("escalated_around", {}).items())
             + "".join(f"; between the {r} thresholds, {v:.0%}"
                       for r, v in saved.get("escalated_between", {}).items())
             + ". *Between the thresholds*: the band of `guardrail.evaluate.Escalation.band` "
             "on the fitting answers, from the lowest score a threshold chosen with their labels "
             "would show up to the threshold the high-probability calibration certifies on them "
             f"(with {saved['fitted_on']} fitting answers, narrower than {saved['n_cal']} "
             "calibration labels would call for).", ""]  # fmt: skip
    for risk in RISKS:
        r = f"{risk:g}"
        lines += [f"**Risk {r}**", "",
                  "| method | tokens per question | AUROC (95% bootstrap) | ceiling "
                  "| shown, high probability | refused | shown, in expectation "
                  "| wrong among shown, in expectation |",
                  "|---|---:|---|---:|---:|---:|---:|---:|"]  # fmt: skip
        for row in saved["rows"]:
            if row.get("risk", risk) != risk:
                continue
            lo, hi = row["auroc_interval"]
            lines.append(
                f"| {row['method']} | {row['tokens']:.0f} | {row['auroc']:.3f} [{lo:.3f}, "
                f"{hi:.3f}] | {row['ceiling_' + r]:.1%} | {row['hp_coverage_' + r]:.1%} "
                f"| {row['hp_refused_' + r]:.0%} | {row['cs_coverage_' + r]:.1%} "
                f"| {row['cs_wrong_' + r]:.1%} |"
            )
        lines.append("")
    return "\n".join(lines)


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
    r = sub.add_parser("report", help="the peers side by side on the sampled questions")
    r.add_argument("--samples-file", default=str(SAMPLES), help="the samples (``sample``'s --out)")
    r.add_argument("--traces", default=str(GSM8K), help="greedy GSM8K traces")
    r.add_argument("--n-cal", type=int, default=N_CAL, help="calibration answers per split")
    r.add_argument("--docs-only", action="store_true", help="rewrite the page from the JSON")
    args = p.parse_args(argv)
    if args.cmd == "sample":
        asyncio.run(sample(args))
    elif args.docs_only:
        PAGE.write_text(render(json.loads(SAVED.read_text(encoding="utf-8"))), encoding="utf-8")
    else:
        saved = report(args)
        SAVED.write_text(json.dumps(saved, indent=1) + "\n", encoding="utf-8")
        PAGE.write_text(render(saved), encoding="utf-8")


if __name__ == "__main__":
    main()
