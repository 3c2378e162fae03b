"""The margin-rules study: its page is what its saved run gives, its rules give what their
docstrings say, and its lossless floor is the least any margins keeping the shown correct
answers could read."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from bench_scripts import assert_page_current

from guardrail import StreamPolicy
from guardrail.fitting import FittedPath, critical_score, margins_from_scores, with_margins
from studies import margin_rules as study
from studies import shift


def _saved() -> dict[str, Any]:
    saved: dict[str, Any] = json.loads(study.SAVED.read_text(encoding="utf-8"))
    return saved


def test_the_page_is_the_saved_run() -> None:
    saved = assert_page_current(study, "fitting.md")
    assert saved["rules"] == list(study.RULES) and saved["reference"] == study.REFERENCE
    assert len(saved["shifts"]) == 8
    for s in saved["shifts"]:
        assert list(s["risks"]) == [f"{r:g}" for r in shift.RISKS[s["target_task"]]]
        for cell in s["risks"].values():
            assert set(cell["rules"]) == set(study.RULES)
            for entry in cell["rules"].values():
                read = entry["blocked_read"]
                assert read is None or 0.0 < read <= 1.0
                assert 0.0 <= entry["coverage"] <= 1.0
            if cell["floor"] is not None and cell["lossless_floor"] is not None:
                assert cell["floor"] <= cell["lossless_floor"] + 1e-12


def _random_scores(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    return [np.cumsum(rng.normal(0.0, 0.3, int(rng.integers(5, 60)))) for _ in range(n)]


def test_the_tails_and_envelopes_are_what_they_say() -> None:
    right = _random_scores(np.random.default_rng(0), 200)
    flat = study.RULES[study.REFERENCE](right)
    sqrt = study.RULES["per position, sqrt tail"](right)
    lib = margins_from_scores(right, study.QUANTILE, share=study.SHARE, positions=study.LIMIT,
                              tail="sqrt")  # fmt: skip
    assert sqrt == lib and len(flat) == len(sqrt) == study.LIMIT
    for name in ("envelope c/sqrt(t)", "envelope c/t"):
        m = np.asarray(study.RULES[name](right))
        assert (np.diff(m) <= 0.0).all()
        risen = [bool((s[-1] - s > m[: s.size] + 1e-12).any()) for s in right]
        assert sum(risen) <= (1.0 - study.SHARE) * len(right) + 1e-9  # the share never rises
    assert len(set(study.RULES["constant"](right))) == 1
    assert study.RULES["exact only"](right) == ()


def test_the_lossless_margins_keep_every_shown_correct_answer_and_no_less_would() -> None:
    rng = np.random.default_rng(1)
    scores = _random_scores(rng, 80)
    paths = [FittedPath(s, np.full(s.size, -np.inf), np.full(s.size, np.inf)) for s in scores]
    correct = rng.random(len(paths)) < 0.5
    policy = StreamPolicy(on_length="answer")
    tau = float(np.median([p.final for p in paths]))
    least = study.lossless_margins(paths, correct, policy, tau)
    shown = [critical_score(p, policy) >= tau for p in paths]
    for p, right, was in zip(paths, correct, shown, strict=True):
        if right and was:
            assert critical_score(with_margins(p, least), policy) >= tau
    t = int(np.argmax(least))  # lowering the largest margin blocks a shown correct answer
    lower = tuple(m - 1e-9 if i == t else m for i, m in enumerate(least))
    kept = [p for p, right, was in zip(paths, correct, shown, strict=True) if right and was]
    assert any(critical_score(with_margins(p, lower), policy) < tau for p in kept)
    floor = study.lossless_floor(paths, correct, policy, tau)
    assert floor is not None and 0.0 < floor <= 1.0
