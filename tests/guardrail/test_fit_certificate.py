"""``guardrail.fitting.fit_certificate``: the fit recipe on traces in memory, and a report
of what it measured (the command over it: ``tests/test_cli_fit.py``)."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from guardrail import Certificate, ConfigError, GenerationContext, InsufficientDataError
from guardrail.fitting import FitOptions, fit_certificate
from guardrail.traces import Trace, read_traces

FIXTURES = Path(__file__).parents[1] / "fixtures"
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
