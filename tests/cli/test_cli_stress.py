from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from adapters.cli import main
from adapters.cli._stress import CORRUPTIONS, corrupt
from guardrail._bounds import tv_distance

FIXTURE = str(Path(__file__).parents[1] / "fixtures" / "traces_gemma3_sample.jsonl")


@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_corruptions_are_distributions_with_the_stated_strength(kind: str) -> None:
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(50))
    adversary = rng.dirichlet(np.ones(50))
    q = corrupt(p, kind, 0.5, rng, adversary)
    assert q.min() > 0 and q.sum() == pytest.approx(1.0)
    if kind == "uniform":  # a mixture moves exactly s * TV(S, U)
        assert tv_distance(p, q) == pytest.approx(0.5 * tv_distance(p, np.full(50, 1 / 50)))
    if kind == "adversarial":
        assert tv_distance(p, q) == pytest.approx(0.5 * tv_distance(p, adversary))
    assert tv_distance(p, corrupt(p, kind, 0.0, rng, adversary)) == pytest.approx(0.0)


def test_stress_command_reports_every_corruption(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["stress", "--traces", FIXTURE, "--risk", "0.95", "--delta", "0.2", "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert {r["corruption"] for r in report["rows"]} == set(CORRUPTIONS)
    assert len(report["rows"]) == 12
    for r in report["rows"]:
        assert 0 <= r["eta"] <= 1 and 0 <= r["coverage"] <= 1
        assert 0 <= r["budget_shift_bound"] <= 12
