"""``docs/results/label_agreement.md`` is what ``studies/label_agreement.py`` writes from
its saved JSON, and the JSON is what the script measures on the shared traces now."""

from __future__ import annotations

import importlib
import json
from types import ModuleType

import pytest
from bench_scripts import SHARED_TRACES, assert_page_current


@pytest.fixture
def script() -> ModuleType:
    return importlib.import_module("studies.label_agreement")


def test_the_page_is_what_the_saved_run_gives(script: ModuleType) -> None:
    saved = assert_page_current(script, "fitting.md")
    for model in saved["models"].values():  # the shared labels are the contains rule's
        assert model["labels_not_contains"] == 0


def test_kappa_on_hand_checked_tables(script: ModuleType) -> None:
    # 10 items: both say yes on 4, both no on 4, one disagreement each way
    a = [True] * 5 + [False] * 5
    b = [True] * 4 + [False] + [True] + [False] * 4
    assert script.kappa(a, b) == pytest.approx(0.6)
    assert script.kappa(a, a) == pytest.approx(1.0)
    assert script.kappa([True] * 3, [True] * 3) is None


@pytest.mark.slow
@pytest.mark.skipif(
    not (SHARED_TRACES / "triviaqa_qwen25coder.jsonl").exists(),
    reason="shared trace data not available",
)
def test_the_saved_run_is_what_the_shared_traces_give_now(script: ModuleType) -> None:
    saved = json.loads(script.SAVED.read_text(encoding="utf-8"))
    assert json.loads(json.dumps(script.run(str(SHARED_TRACES)))) == saved
