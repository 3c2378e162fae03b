"""``docs/results/judge_agreement.md`` is what ``studies/judge_agreement.py`` writes from
its saved JSON; the saved counts are what the saved grades and the shared traces give; the
agreement statistics are right on hand-checked tables."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest
from bench_scripts import SHARED_TRACES, assert_page_current


@pytest.fixture
def script() -> ModuleType:
    return importlib.import_module("studies.judge_agreement")


def test_the_page_is_what_the_saved_run_gives(script: ModuleType) -> None:
    assert_page_current(script, "fitting.md")


def test_agreement_on_a_hand_checked_table(script: ModuleType) -> None:
    # 10 answers: the rule and the judge agree on 8; the rule alone says correct once,
    # the judge alone once; kappa 0.6 (as label_agreement's own check)
    rule = [True] * 5 + [False] * 5
    judge = [True] * 4 + [False] + [True] + [False] * 4
    out = script.agreement(rule, judge)
    assert (out["n"], out["agree"], out["rule_only"], out["judge_only"]) == (10, 8, 1, 1)
    assert out["kappa"] == pytest.approx(0.6)
    low, high = out["agree_ci"]
    assert low <= 0.8 <= high and low >= 0 and high <= 1
    assert script.agreement(rule, judge) == out  # seeded: the same intervals every run


def test_the_sample_is_evenly_spread_and_fixed(script: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rows = [{"id": f"q{i}", "question": "?", "answer": "a", "references": ["a"],
             "correct": True} for i in range(10)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert [r["id"] for r in script.sample(path, 4)] == ["q0", "q3", "q6", "q9"]
    assert len(script.sample(path, 50)) == 10


@pytest.mark.skipif(
    not (SHARED_TRACES / "triviaqa_qwen25coder.jsonl").exists(),
    reason="shared trace data not available",
)
def test_the_saved_counts_are_what_the_saved_grades_give(script: ModuleType) -> None:
    """Recount from the saved grades and the shared traces (no judge needed)."""
    saved = json.loads(script.SAVED.read_text(encoding="utf-8"))
    for model, grades in saved["grades"].items():
        rows = script.sample(SHARED_TRACES / f"triviaqa_{model}.jsonl", saved["per_model"])
        assert [r["id"] for r in rows] == [g["id"] for g in grades]
        for row, grade in zip(rows, grades, strict=True):
            if grade["judge"] is not None:
                row["judge"] = grade["judge"]
            else:
                row["judge_failure"] = grade["failure"]
        assert json.loads(json.dumps(script.measure(rows))) == saved["models"][model]
