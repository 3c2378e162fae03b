"""``guardrail.fitting.fit_certificate``: the fit recipe on traces in memory, and a report
of what it measured (the command over it: ``tests/cli/test_cli_fit.py``); it remakes each
shipped fitted certificate byte for byte from the options ``guardrail/data/README.md``
gives (the shared TriviaQA traces: skipped where they are absent; the committed MBPP
traces: everywhere)."""

from __future__ import annotations

import hashlib
import json
import lzma
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from reference_cpu import same_file

from guardrail import (
    Certificate,
    ConfigError,
    GenerationContext,
    InsufficientDataError,
    SkeletonSpec,
)
from guardrail.fitting import Feature, FitOptions, fit_certificate
from guardrail.traces import Trace, parse_trace_lines, read_traces

ROOT = Path(__file__).parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
DATA = ROOT / "guardrail" / "data"
SHARED = ROOT.parent / "shared" / "data" / "traces"
GEMMA = str(FIXTURES / "traces_gemma3_sample.jsonl")
OPTIONS = FitOptions(risk=0.95, delta=0.2)


def test_the_report_says_what_the_fit_measured() -> None:
    traces = read_traces(GEMMA)
    cert, report = fit_certificate(traces, OPTIONS)
    assert (report.n_fit, report.n_calibration, report.max_tokens) == (20, 20, 6)
    assert report.calibrated and not report.certifies_nothing and report.refusal == ""
    assert cert.calibration is not None and cert.calibration.extra["split"]["n_fit"] == 20
    assert report.tokens_read_fraction == cert.calibration.extra["tokens_read_fraction"]
    assert report.calibration_auroc == cert.calibration.extra["calibration_auroc"]
    held = _calibration_ids(cert, traces)
    assert report.n_calibration_correct == sum(bool(t.correct) for t in traces if t.id in held)
    assert report.notes and report.notes[0].startswith("token limit 6")
    assert cert.provenance["note"] == "; ".join(report.notes)
    assert cert.statistic is not None and "traces" not in cert.statistic.info
    assert "traces" not in cert.provenance  # no file named: none recorded
    # the context's token limit is the one the rule replays and records
    limited, report = fit_certificate(traces, OPTIONS, context=GenerationContext(max_tokens=24))
    assert limited.context.max_tokens == 24 and report.max_tokens == 24
    assert not any(n.startswith("token limit") for n in report.notes)


def _calibration_ids(cert: Certificate, traces: list[Trace]) -> set[str]:
    """The ids of the calibration answers (the split's seeded permutation, as recorded)."""
    perm = np.random.default_rng(0).permutation(len(traces))
    ids = {traces[i].id for i in perm[round(len(traces) * 0.5) :]}
    digest = hashlib.sha256("\n".join(sorted(ids)).encode("utf-8")).hexdigest()
    assert cert.calibration is not None
    assert cert.calibration.extra["split"]["calibration_ids_sha256"] == digest
    return ids


def test_a_target_no_threshold_meets_certifies_nothing() -> None:
    cert, report = fit_certificate(read_traces(GEMMA), FitOptions(risk=0.05))
    assert report.certifies_nothing and report.calibrated and report.refusal
    assert report.margins_blocked is None
    assert cert.statistic is not None and cert.calibration is not None
    assert cert.tau > cert.statistic.score_bounds(report.max_tokens)[1]
    assert cert.calibration.extra["certifies_nothing"] is True
    # fitted on all of them: nothing calibrated, nothing refused
    cert, report = fit_certificate(read_traces(GEMMA), FitOptions(fit_fraction=1.0))
    assert report.certifies_nothing and not report.calibrated and report.refusal == ""
    assert (report.n_fit, report.n_calibration, report.calibration_auroc) == (40, 0, None)


def test_bad_options_and_traces_are_refused() -> None:
    with pytest.raises(ConfigError, match="range_quantile"):
        FitOptions(range_quantile=0.5)
    with pytest.raises(ConfigError, match="fit_fraction"):
        FitOptions(fit_fraction=0.0)
    traces = read_traces(GEMMA)
    with pytest.raises(ConfigError, match="name scoped features"):
        FitOptions(features=(), scopes=("code",))
    with pytest.raises(ConfigError, match="distinct scopes"):
        fit_certificate(traces, FitOptions(scopes=("prose",)))
    with pytest.raises(InsufficientDataError, match="19 traces: the fit needs >= 20"):
        fit_certificate(traces[:19], FitOptions(fit_fraction=1.0))
    other = [replace(t, model="another") for t in traces[:20]]
    with pytest.raises(ConfigError, match=r"x\.jsonl: a certificate is for one model"):
        fit_certificate([*traces[:20], *other], source="x.jsonl")
    other = SkeletonSpec("uniform", {"vocab_size": 7})
    with pytest.raises(ConfigError, match="skeleton_spec records vocab_size 7; the traces have"):
        fit_certificate(traces, skeleton_spec=other)
    with pytest.raises(ConfigError, match="a feature is named twice"):
        FitOptions(features=(Feature.parse("logprob.min"),) * 2)
    with pytest.raises(ConfigError, match=r"logprob\.mean can move either way"):
        FitOptions(features=(Feature.parse("logprob.mean"),), form="monotone")


TRIVIAQA = {
    # certificate: (traces, context, the options of its command in guardrail/data/README.md)
    "smollm2_fitted_certificate.json": (
        "triviaqa_smollm2.jsonl",
        "smollm2_context.json",
        FitOptions(
            early_block_share=None,
            early_block_tail="flat",
            clamp_features=False,
            scopes=(),
            model_id="smollm2-135m-instruct-q4_1",
        ),
    ),
    "qwen_fitted_certificate.json": (
        "triviaqa_qwen25coder.jsonl",
        "qwen_context.json",
        FitOptions(
            group="api", skeleton="uniform", risk=0.5, model_id="qwen2.5-coder-1.5b-instruct-q4_k_m"
        ),
    ),
}


def _context(name: str) -> GenerationContext:
    return GenerationContext.from_dict(json.loads((DATA / name).read_text(encoding="utf-8")))


@pytest.mark.parametrize("name", sorted(TRIVIAQA))
def test_the_shipped_triviaqa_certificates_are_refitted_byte_for_byte(name: str) -> None:
    traces, context, options = TRIVIAQA[name]
    if not (SHARED / traces).exists():
        pytest.skip(f"needs the shared traces ({SHARED / traces})")
    shipped = (DATA / name).read_text(encoding="utf-8")
    # what the command passes besides the traces: the file's identity and its command line
    given = {k: json.loads(shipped)["provenance"][k]
             for k in ("command", "traces_digest", "traces_sha256")}  # fmt: skip
    cert, report = fit_certificate(read_traces(SHARED / traces), options,
                                   context=_context(context), source=str(SHARED / traces),
                                   provenance=given)  # fmt: skip
    assert (report.n_fit, report.n_calibration) == (1000, 1000)
    same_file(cert.to_json(), shipped, name)


def test_the_shipped_code_certificate_statistic_is_refitted_byte_for_byte() -> None:
    """``qwen_code_certificate.json`` (``python -m studies.qwen_code_certificate``): fitted on
    220 of the committed MBPP traces with ``fit_fraction=1``, its tau calibrated on 220
    others by ``liftguard calibrate --certificate`` (the whole file:
    ``tests/cli/test_cli_fit.py``). All but the calibration is the fit's, byte for byte."""
    raw = lzma.decompress((ROOT / "benchmarks" / "traces" / "mbpp_qwen25coder.jsonl.xz")
                          .read_bytes()).decode("utf-8").splitlines()  # fmt: skip
    perm = np.random.default_rng(7).permutation(len(raw))  # the study's split: 60, 220, 220
    fit_part = [raw[i] for i in sorted(perm[60:280])]
    traces = list(parse_trace_lines(fit_part))
    prompt = traces[0].prompt  # the skeleton: Qwen after the system line, no user message
    start = prompt.index("<|im_start|>user\n") + len("<|im_start|>user\n")
    prefix = prompt[:start] + prompt[prompt.index("<|im_end|>", start) :]
    spec = SkeletonSpec("prompt_free", {"model": "qwen", "prefix": prefix})  # + the vocabulary
    options = FitOptions(fit_fraction=1.0)  # every default
    cert, report = fit_certificate(traces, options, context=_context("qwen_code_context.json"),
                                   skeleton_spec=spec,
                                   source="mbpp_qwen25coder_fit.jsonl")  # fmt: skip
    assert report.n_fit == 220 and not report.calibrated
    made = json.loads(cert.to_json())
    shipped = json.loads((DATA / "qwen_code_certificate.json").read_text(encoding="utf-8"))
    for part in ("statistic", "skeleton", "context", "model", "policy", "format"):
        text = [json.dumps(d[part], indent=2, sort_keys=True) for d in (made, shipped)]
        same_file(*text, f"qwen_code_certificate.json {part}")
    assert made["provenance"]["fit"] == shipped["provenance"]["fit"]


_REFIT = """
import hashlib, json, lzma, sys
from guardrail.fitting import FitOptions, fit_certificate
from guardrail.traces import parse_trace_lines
raw = lzma.decompress(open(sys.argv[1], "rb").read()).decode().splitlines()[:160]
cert, _ = fit_certificate(list(parse_trace_lines(raw)), FitOptions(group="api", risk=0.9))
print(hashlib.sha256(cert.to_json().encode()).hexdigest())
"""


def test_the_fit_adds_its_products_in_one_order_whatever_the_blas_kernels() -> None:
    """The fit reads no BLAS: under each of OpenBLAS's kernel families (AVX-512, AVX2, SSE3)
    the same traces give the same certificate, byte for byte (a matrix product through
    BLAS sums in the kernel's order and moves the last digits)."""
    import os
    import subprocess
    import sys

    traces = ROOT / "benchmarks" / "traces" / "mbpp_qwen25coder.jsonl.xz"
    made = set()
    for kernels in ("SkylakeX", "Haswell", "Prescott"):
        env = {**os.environ, "OPENBLAS_CORETYPE": kernels}
        out = subprocess.run([sys.executable, "-c", _REFIT, str(traces)], env=env, cwd=ROOT,
                             capture_output=True, text=True, check=True, timeout=600)  # fmt: skip
        made.add(out.stdout.strip())
    assert len(made) == 1, made
