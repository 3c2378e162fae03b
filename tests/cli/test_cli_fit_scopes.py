"""``liftguard fit --scopes``: the preset plus the log-likelihood of each scope the fitting
answers use (``auto``, the default), of the scopes named, or of none; refused in one line
where it cannot apply."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from adapters.cli import main
from guardrail import Certificate
from guardrail._scopes import SCOPES, scope_mask
from guardrail.fitting import preset_features
from guardrail.traces import read_traces

FIXTURES = Path(__file__).parents[1] / "fixtures"
GEMMA = str(FIXTURES / "traces_gemma3_sample.jsonl")
PRESET = [f.name for f in preset_features("lift")]


@pytest.fixture
def code_answers(tmp_path: Path) -> Path:
    """24 real code answers (Qwen2.5-Coder's MBPP sample, each repeated under new ids, its
    label kept): long answers inside a fenced code block."""
    lines = (FIXTURES / "traces_qwen_mbpp_sample.jsonl").read_text(encoding="utf-8").splitlines()
    out = tmp_path / "code.jsonl"
    rows = []
    for k in range(6):
        for line in lines:
            row = json.loads(line)
            row["id"] = f"{row['id']}-{k}"
            rows.append(json.dumps(row))
    out.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return out


def _fit(traces: Path | str, out: Path, *extra: str) -> int:
    return main(["fit", "--traces", str(traces), "--out", str(out), "--fit-fraction", "1",
                 "--early-block", "none", *extra])  # fmt: skip


def _features(cert: Path) -> list[str]:
    stat = Certificate.load(cert).statistic
    assert stat is not None
    return [f.name for f in stat.features]


def test_auto_adds_the_log_likelihood_of_each_scope_the_answers_use(
    code_answers: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = list(read_traces(code_answers))
    used = [s for s in SCOPES
            if np.mean([scope_mask(t.token_texts, s).any() for t in traces]) >= 0.1]  # fmt: skip
    assert "code" in used and "final" not in used  # code answers: a code block, no 'Answer:'
    out = tmp_path / "auto.json"
    assert _fit(code_answers, out) == 0
    assert "+ log-likelihood of scopes " + "/".join(used) in capsys.readouterr().out
    assert _features(out) == PRESET + [f"{s}:logprob.sum" for s in used]
    stat = Certificate.load(out).statistic
    assert stat is not None and stat.info["scopes"] == used


def test_none_keeps_the_preset_and_a_list_names_the_scopes(
    code_answers: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    none, named = tmp_path / "none.json", tmp_path / "named.json"
    assert _fit(code_answers, none, "--scopes", "none") == 0
    assert _features(none) == PRESET
    stat = Certificate.load(none).statistic
    assert stat is not None and "scopes" not in stat.info
    assert _fit(code_answers, named, "--scopes", "final, number") == 0
    assert _features(named) == [*PRESET, "final:logprob.sum", "number:logprob.sum"]
    # short factoid answers, 3 of 40 with a digit: auto adds nothing
    gemma = list(read_traces(GEMMA))
    assert sum(bool(scope_mask(t.token_texts, "number").any()) for t in gemma) == 3
    short = tmp_path / "short.json"
    assert _fit(GEMMA, short) == 0
    assert _features(short) == PRESET
    capsys.readouterr()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--scopes", "prose"), "--scopes: expected auto, none or distinct scopes"),
        (("--scopes", "code,code"), "--scopes: expected auto, none or distinct scopes"),
        (("--scopes", ","), "--scopes: expected auto, none or distinct scopes"),
        (("--features", "logprob.min", "--scopes", "auto"), "name scoped features yourself"),
    ],
)
def test_bad_scopes_are_refused_in_one_line(
    code_answers: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
    message: str,
) -> None:
    out = tmp_path / "c.json"
    assert _fit(code_answers, out, *extra) == 2 and not out.exists()
    err = capsys.readouterr().err
    assert err.startswith("liftguard fit: error: ") and message in err
    assert len(err.strip().splitlines()) == 1
