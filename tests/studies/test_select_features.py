"""``studies/transfer/select_features.py``: backward elimination by cross-validation
on the given traces only, deterministic, its output ready for ``fit --features``."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

from adapters.cli import main
from guardrail import Certificate

FIXTURES = Path(__file__).parents[1] / "fixtures"
SAMPLES = [str(FIXTURES / f"traces_{m}_sample.jsonl") for m in ("smollm2", "gemma3")]


def _module() -> ModuleType:
    return importlib.import_module("studies.transfer.select_features")


def test_selection_keeps_a_subset_deterministically_and_fit_accepts_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mod = _module()
    names, score = mod.select(SAMPLES)
    assert names and set(names) <= set(mod.CANDIDATES) and len(names) < len(mod.CANDIDATES)
    assert 0.5 < score <= 1.0
    assert mod.main(SAMPLES) == 0  # a rerun chooses the same, printed for --features
    printed = capsys.readouterr().out.strip().splitlines()
    line = printed[-1]
    assert line.split(",") == names and f"{score:.4f}" in printed[0]
    out = tmp_path / "c.json"
    args = ["fit", "--traces", SAMPLES[1], "--out", str(out), "--features", line, "--risk",
            "0.95", "--delta", "0.2"]  # fmt: skip
    assert main(args) == 0
    stat = Certificate.load(out).statistic
    assert stat is not None and [f.name for f in stat.features] == names


def test_selection_without_files_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert _module().main([]) == 2
    assert "usage" in capsys.readouterr().err


def test_cv_mode_scores_a_named_set_on_each_file(capsys: pytest.CaptureFixture[str]) -> None:
    mod = _module()
    names = ["logprob.min", "lift.sum", "length.count"]
    mean, sd = mod.cross_validate(names, SAMPLES[0])
    assert 0.5 < mean <= 1.0 and 0.0 <= sd < 0.2
    assert mod.cross_validate(names, SAMPLES[0]) == (mean, sd)  # seeded folds
    # the same out-of-fold AUROC the selection's criterion uses for these columns
    data = mod._Data(SAMPLES[0])
    cols = [mod.CANDIDATES.index(n) for n in names]
    assert data.cv_auroc(cols) == pytest.approx(mean, abs=1e-12)
    assert mod.main(["--cv", ",".join(names), *SAMPLES]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(SAMPLES[0]) and f"{mean:.4f}" in lines[0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--cv"], "usage"), (["--cv", "logprob.min"], "usage"),
     (["--cv", "logprob.min,nope.max", SAMPLES[0]], "unknown base feature 'nope'"),
     (["--bogus", SAMPLES[0]], "usage")],
)  # fmt: skip
def test_cv_mode_bad_arguments_are_one_line_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _module().main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
