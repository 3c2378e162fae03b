"""The shift study: its page is what its saved run gives, with every cell, and its splits
are what the page says they are."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from bench_scripts import assert_page_current

from guardrail import StreamPolicy
from guardrail.evaluate import MethodScores, evaluate_methods
from guardrail.fitting import FittedPath
from guardrail.traces import BASELINES
from studies import shift as study


def _saved() -> dict[str, Any]:
    saved: dict[str, Any] = json.loads(study.SAVED.read_text(encoding="utf-8"))
    return saved


def test_the_page_is_the_saved_run() -> None:
    saved = assert_page_current(study, "results/index.md")
    written = study.PAGE.read_text(encoding="utf-8")
    assert list(saved["variants"]) == list(study.VARIANTS)
    assert saved["margin_variants"] == study.MARGIN_VARIANTS
    assert saved["blocked_read_limit"] == study.BLOCKED_READ_LIMIT
    assert saved["baselines"] == list(BASELINES)
    kinds = {s["kind"] for s in saved["shifts"]}
    assert kinds == {
        "in-domain",
        "answer length",
        "task family",
        "short answers to long",
        "prompt style",
        "task source",
    }
    assert len(saved["shifts"]) == 13
    for s in saved["shifts"]:
        assert s["risks"] == [f"{r:g}" for r in study.RISKS[s["target_task"]]]
        assert set(s["methods"]) == set(study.VARIANTS) | set(study.MARGIN_VARIANTS) | set(
            BASELINES
        )
        for v in study.MARGIN_VARIANTS:  # the certificate's statistic: its AUROC, its own reads
            entry = s["methods"][v]
            assert entry["auroc"] == s["methods"][study.CERTIFICATE]["auroc"]
            for r in s["risks"]:
                mean, floor = entry["blocked_read"][r], entry["blocked_read_floor"][r]
                assert (floor is None) == (entry["coverage"][r] == 0.0)
                if mean is not None:
                    calibrated = saved["splits"] - entry["refused"][r]
                    assert f"{100 * mean:.0f}% (" in written and calibrated >= 1
        best = s["methods"][s["best_auroc"]]["auroc"]
        assert best == max(s["methods"][b]["auroc"] for b in BASELINES)
        for name, m in s["methods"].items():
            assert set(m["coverage"]) == set(s["risks"]) == set(m["refused"])
            lo, hi = m["auroc_interval"]
            assert lo <= hi and f"{m['auroc']:.3f}" in written, (s["name"], name)
        for v in study.VARIANTS:
            entry = s["methods"][v]
            assert entry["meets"]["auroc"] == (entry["auroc"] >= best - study.AUROC_SLACK)
            covered = all(
                entry["coverage"][r]
                >= s["methods"][s["best_coverage"][r]]["coverage"][r] - study.COVERAGE_SLACK
                for r in s["risks"]
            )
            assert entry["meets"]["coverage"] == covered
            for r in s["risks"]:  # the share of a blocked answer read: none where all refused
                mean, median = entry["blocked_read"][r], entry["blocked_read_median"][r]
                assert (mean is None) == (median is None)
                if entry["refused"][r] == saved["splits"]:
                    assert mean is None
                floor = entry["blocked_read_floor"][r]
                assert (floor is None) == (entry["coverage"][r] == 0.0)
                assert floor is None or 0.0 < floor <= 1.0
                if mean is not None:
                    assert 0.0 < mean <= 1.0 and 0.0 < median <= 1.0
                    calibrated = saved["splits"] - entry["refused"][r]
                    assert f"{100 * mean:.0f}% ({100 * median:.0f}%), {calibrated} split" in written
            row = f"| {s['name']} | {s['n_target']} "
            assert written.count(f"| {s['kind']} {row}") == len(study.VARIANTS)


def test_the_length_split_puts_every_longer_answer_at_or_above_the_shorter_half() -> None:
    rng = np.random.default_rng(3)
    lengths = rng.integers(5, 40, size=101).tolist()  # many ties, an odd count
    short, long = study.length_halves(lengths)
    assert len(short) == 50 and len(long) == 51
    assert sorted([*short.tolist(), *long.tolist()]) == list(range(101))
    assert min(lengths[i] for i in long) >= max(lengths[i] for i in short)
    again = study.length_halves(lengths)
    assert (again[0] == short).all() and (again[1] == long).all()
    assert (np.diff(short) > 0).all() and (np.diff(long) > 0).all()


def test_the_random_halves_are_disjoint_and_seeded() -> None:
    a, b = study.random_halves(11)
    assert len(a) == 5 and len(b) == 6 and not set(a.tolist()) & set(b.tolist())
    assert (study.random_halves(11)[0] == a).all()


def test_the_floor_reads_each_blocked_answer_to_its_first_score_below_tau() -> None:
    shown = FittedPath(np.ones(4), np.ones(4), np.ones(4))
    late = FittedPath(np.array([1.0, 0.5, -1.0, -1.0]), np.full(4, -2.0), np.full(4, 2.0))
    early = FittedPath(np.full(4, -1.0), np.full(4, -2.0), np.full(4, 2.0))
    decision = np.array([1.0, -1.0, -1.0])  # tau at a third shown: between -1 and 1
    for min_tokens, want in ((1, (3 / 4 + 1 / 4) / 2), (2, (3 / 4 + 2 / 4) / 2)):
        method = MethodScores("fitted", decision, decision, policy=StreamPolicy(
            min_tokens=min_tokens), paths=[shown, late, early])  # fmt: skip
        assert study.read_floor(method, 1 / 3) == pytest.approx(want)
        assert study.read_floor(method, 0.0) is None  # nothing shown: no tau to read at
    assert study.read_floor(MethodScores("nll", decision, decision), 1 / 3) is None


def test_the_traffic_rows_set_margins_as_calibrate_does() -> None:
    """The traffic-margin rows use ``calibrate --margins-from``'s default quantile, and each
    shift's two halves cover its target once, every method with every risk."""
    from adapters.cli._fit_args import TRAFFIC_EARLY_BLOCK

    assert study.TRAFFIC_QUANTILE == TRAFFIC_EARLY_BLOCK
    saved = _saved()
    assert saved["traffic_quantile"] == study.TRAFFIC_QUANTILE
    for s in saved["shifts"]:
        halves = s["traffic"]
        assert set(halves) == {"A", "B"}
        assert sum(h["n"] for h in halves.values()) == s["n_target"]
        for h in halves.values():
            assert set(h["methods"]) == {study.CERTIFICATE, study.TRAFFIC}
            assert h["positions"] >= 1
            for m in h["methods"].values():
                assert set(m["coverage"]) == set(s["risks"])


def test_the_prompt_style_shifts_fit_on_the_other_items_only() -> None:
    """The documented code and the concise GSM8K answers are each tested against a
    certificate fitted on the usual answers to the items they do not answer: no item is
    on both sides, and every usual answer to another item is in the source."""
    data = {task: study.read(path) for task, path in study.TRACES.items()}
    styled = {task: study.read(style.folder) for task, style in study.STYLES.items()}
    entries = [s for s in study.shifts(data, None, styled) if s[0] == "prompt style"]
    assert [e[2] for e in entries] == ["MBPP, documented", "GSM8K, concise"]
    for (task, answers), (_, _, _, source, target) in zip(styled.items(), entries, strict=True):
        dataset = task.lower()
        assert answers and all(t.dataset == dataset and t.correct is not None for t in answers)
        assert target == answers
        asked = {t.id for t in answers}
        assert not asked & {t.id for t in source}
        assert len(source) == len(data[task]) - len(asked & {t.id for t in data[task]})
    assert [s for s in study.shifts(data, None, None) if s[0] == "prompt style"] == []


def test_the_task_source_shift_fits_on_every_mbpp_answer() -> None:
    """HumanEval's answers are tested against the certificate fitted on all 500 MBPP
    answers; they are code, labelled by running HumanEval's own tests."""
    other = study.read(study.OTHER_CODE)
    assert len(other) == 164 and all(t.dataset == "humaneval" for t in other)
    assert all(t.correct is not None for t in other)
    assert all(t.references[-1].splitlines()[-1].startswith("check(") for t in other)
    plain = study.read(study.TRACES["MBPP"])
    data = {"MBPP": plain, "GSM8K": plain[:10]}
    (entry,) = [s for s in study.shifts(data, None, None, other) if s[0] == "task source"]
    assert entry[1:3] == ("MBPP -> HumanEval", "HumanEval")
    assert entry[3] is plain and entry[4] is other
    assert [s for s in study.shifts(data) if s[0] == "task source"] == []


def test_the_ranking_warning_rows_count_the_halves_that_warned() -> None:
    saved, written = _saved(), study.PAGE.read_text(encoding="utf-8")
    assert saved["warning_seed"] == study.WARNING_SEED
    for s in saved["shifts"]:
        assert s["warning"]["splits"] == saved["splits"]
        for rule in ("interval", "point"):
            w = s["warning"][rule]
            assert saved["splits"] >= w["warned"] + w["quiet"]
            assert 0 <= w["right"] <= w["warned"]
            assert (w["gap_warned"] is None) == (w["warned"] == 0)
        w = s["warning"]["interval"]
        assert f"| {s['name']} | {w['warned']} of {w['warned'] + w['quiet']} |" in written


def test_a_statistic_that_ranks_backwards_is_warned_of_and_rightly() -> None:
    traces = study.read(study.TRACES["MBPP"])[:120]
    nll = np.array([t.logprobs.sum() for t in traces])
    backwards = study.warnings_on_halves(-nll, traces)
    for rule in ("interval", "point"):
        w = backwards[rule]
        assert w["warned"] == w["right"] == study.SPLITS
        assert w["gap_warned"] < -0.2 and w["gap_quiet"] is None


def test_the_calibration_pick_calibrates_as_evaluate_does() -> None:
    traces = study.read(study.TRACES["GSM8K"])[:160]
    ok = np.array([bool(t.correct) for t in traces])
    (nll,) = [m for m in study.single_scores(traces) if m.name == "nll"]
    alone = study.calibration_pick([nll], [nll], ok, (0.3, 0.4))
    assert alone["picked"] == {"nll": study.SPLITS}
    assert alone["auroc"] == alone["fitted_auroc"]["nll"]
    same = evaluate_methods([nll], ok, risk=0.3, delta=study.DELTA, splits=study.SPLITS,
                            seed=study.SPLIT_SEED)["nll"]  # fmt: skip
    assert alone["coverage"]["0.3"] == pytest.approx(same["coverage_mean"])
    assert alone["refused"]["0.3"] == same["refused"]
    assert alone["coverage"]["0.4"] > alone["coverage"]["0.3"]
    expect = evaluate_methods([nll], ok, risk=0.3, delta=study.DELTA, splits=study.SPLITS,
                              seed=study.SPLIT_SEED, procedure="conformal")["nll"]  # fmt: skip
    assert alone["expectation"]["coverage"]["0.3"] == pytest.approx(expect["coverage_mean"])
    assert alone["expectation"]["refused"]["0.3"] == expect["refused"]
    assert alone["expectation"]["coverage"]["0.3"] > alone["coverage"]["0.3"]
    every = study.calibration_pick(study.single_scores(traces), [nll], ok, (0.3,))
    assert sum(every["picked"].values()) == study.SPLITS and len(every["picked"]) > 1


def test_the_pick_rows_are_the_saved_run() -> None:
    saved, written = _saved(), study.PAGE.read_text(encoding="utf-8")
    for s in saved["shifts"]:
        pick = s["calibration_pick"]
        assert s["source_pick"] in BASELINES and set(pick["picked"]) <= set(BASELINES)
        assert sum(pick["picked"].values()) == saved["splits"]
        assert set(pick["coverage"]) == set(s["risks"]) == set(pick["refused"])
        for v in study.VARIANTS:
            entry = s["methods"][v]
            auc_ok = pick["fitted_auroc"][v] >= pick["auroc"] - study.AUROC_SLACK
            cov_ok = all(entry["coverage"][r] >= pick["coverage"][r] - study.COVERAGE_SLACK
                         for r in s["risks"])  # fmt: skip
            assert entry["meets_pick"] == {"auroc": auc_ok, "coverage": cov_ok}
        assert f"| {s['name']} | `{s['source_pick']}` |" in written


def test_the_expectation_rows_are_the_saved_run() -> None:
    saved, written = _saved(), study.PAGE.read_text(encoding="utf-8")
    for s in saved["shifts"]:
        best = s["best_expectation"]
        for r in s["risks"]:
            shown = {b: s["methods"][b]["expectation"]["coverage"][r] for b in BASELINES}
            assert shown[best[r]] == max(shown.values())
        for v in study.VARIANTS:
            e = s["methods"][v]["expectation"]
            assert all(0.0 <= e["wrong_among_shown"][r] <= 1.0 for r in s["risks"])
            top = {r: s["methods"][best[r]]["expectation"]["coverage"][r] for r in s["risks"]}
            meets = all(e["coverage"][r] >= top[r] - study.COVERAGE_SLACK for r in s["risks"])
            assert s["methods"][v]["meets_expectation"] == meets
            pick = s["calibration_pick"]["expectation"]["coverage"]
            meets = all(e["coverage"][r] >= pick[r] - study.COVERAGE_SLACK for r in s["risks"])
            assert s["methods"][v]["meets_pick_expectation"] == meets
        cert = s["methods"][study.CERTIFICATE]["expectation"]
        r = s["risks"][0]
        assert f"| {s['name']} | {r} | {100 * cert['coverage'][r]:.1f}% (" in written
