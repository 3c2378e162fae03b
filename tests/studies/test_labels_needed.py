"""The "how many labels" study: its page is what its saved run gives, with every cell, and
its curve finds what a perfect and a useless score buy, and the guide quotes what
``liftguard calibrate`` prints when labels cannot buy the target."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest

from studies import labels_needed as study


def test_the_page_is_the_saved_run() -> None:
    saved = json.loads(study.SAVED.read_text(encoding="utf-8"))
    assert saved["generated_by"] == study.COMMAND
    written = study.PAGE.read_text(encoding="utf-8")
    assert study.COMMAND in written.splitlines()[0]
    assert written == study.render(saved), f"stale: run `{study.COMMAND} --docs-only`"
    assert set(saved["data"]) == set(study.REPO_TRACES) | set(study.TRIVIAQA)
    expected = {
        (name, score, risk)
        for name, entry in saved["data"].items()
        for score in entry["scores"]
        for risk in entry["risks"]
    }
    rows = [(r["data"], r["score"], r["risk"]) for r in saved["rows"]]
    left = [(d["data"], d["score"], d["risk"]) for d in saved["dropped"]]
    assert len(set(rows + left)) == len(rows) + len(left) and set(rows + left) == expected
    for entry in saved["data"].values():
        assert set(study.SCORES) <= set(entry["scores"])
        assert entry["risks"] == [r for r in study.RISKS if r < entry["error_rate"]]
    for d in saved["dropped"]:
        assert d["ceiling"] == 0.0 or d["model_ceiling"] == 0.0
    for r in saved["rows"]:
        assert [p["n"] for p in r["points"]] == list(study.SIZES)
        assert r["draws"] == study.DRAWS and r["ceiling"] > 0 and r["model_ceiling"] > 0
        shares = [p["share"] for p in r["points"]]
        assert r["labels_for"] == {f"{t:g}": study.smallest(study.SIZES, shares, t)
                                   for t in study.SHARES}  # fmt: skip


def test_no_cell_breaks_the_guarantee_beyond_noise() -> None:
    """Violations (the population risk at the calibrated threshold above the target):
    the 95% interval of their rate reaches down to delta in every cell."""
    from scipy import stats

    saved = json.loads(study.SAVED.read_text(encoding="utf-8"))
    for r in saved["rows"]:
        for p in r["points"]:
            k = p["violations"]
            lower = 0.0 if k == 0 else stats.beta.ppf(0.025, k, r["draws"] - k + 1)
            assert lower <= saved["delta"], (r["data"], r["score"], r["risk"], p["n"])


def test_a_perfect_score_reaches_its_ceiling_and_a_useless_one_never_does() -> None:
    scores = np.linspace(0.0, 1.0, 1000)
    perfect = (scores < 0.5).astype(np.float64)  # the lower half wrong, the upper right
    out = study.curve(scores, perfect, 0.2, sizes=(100, 300, 1000), draws=20)
    assert out["model_ceiling"] == 0.625  # 500 right and 125 wrong: risk 0.2 exactly
    assert sum(p["violations"] for p in out["points"]) <= 3  # at most delta, give or take
    assert out["points"][-1]["share"] > 0.9
    assert out["labels_for"]["0.8"] is not None and out["labels_for"]["0.8"] <= 1000

    useless = np.full(1000, 0.25)  # every answer wrong with probability 0.25, whatever its score
    out = study.curve(scores, useless, 0.25, sizes=(100, 1000, 10000), draws=20)
    assert out["model_ceiling"] == 1.0  # all of them meet the target, none can be told apart
    assert out["labels_for"] == {"0.5": None, "0.8": None}
    assert max(p["share"] for p in out["points"]) < 0.5
    assert sum(p["violations"] for p in out["points"]) == 0


def test_the_curve_is_seeded() -> None:
    scores = np.linspace(-1.0, 1.0, 300)
    p_err = 1.0 / (1.0 + np.exp(3.0 * scores))
    first = study.curve(scores, p_err, 0.3, sizes=(100, 300), draws=10)
    assert first == study.curve(scores, p_err, 0.3, sizes=(100, 300), draws=10)


def test_the_smallest_size_reaching_a_share() -> None:
    sizes = (100, 300, 1000)
    assert study.smallest(sizes, [0.1, 0.6, 0.9], 0.5) == 300
    assert study.smallest(sizes, [0.1, 0.6, 0.9], 0.8) == 1000
    assert study.smallest(sizes, [None, 0.2, 0.4], 0.5) is None


def test_the_error_model_is_a_monotone_fit_of_the_labels() -> None:
    rng = np.random.default_rng(0)
    scores = rng.normal(size=2000)
    ok = rng.random(2000) < 1.0 / (1.0 + np.exp(-2.0 * scores))
    p_err = study.error_model(scores, ok)
    assert abs(p_err.mean() - (~ok).mean()) < 1e-4  # the intercept matches the error rate
    order = np.argsort(scores)
    assert (np.diff(p_err[order]) <= 0).all()  # a higher score is never more error-prone


def test_the_ranges_of_labels() -> None:
    assert study._span([300, 1000, 300]) == "300 to 1,000"
    assert study._span([3000, None]) == "3,000 to more than 10,000"
    assert study._span([None, None]) == "more than 10,000"
    rows = [{"model_ceiling": c, "labels_for": {"0.5": n, "0.8": None}}
            for c, n in ((0.02, None), (0.6, 300), (1.0, 100))]  # fmt: skip
    assert study.by_ceiling(rows) == [
        "| 0% to 5% | 1 | more than 10,000 | more than 10,000 |",
        "| 50% to 100% | 2 | 100 to 300 | more than 10,000 |",
    ]


def test_the_guide_quotes_what_calibrate_prints(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refusals shown in docs/fitting.md, "How many labels do I need?", are what the
    commands print on the committed MBPP traces."""
    from adapters.cli import main

    text = (study.ROOT / "docs" / "fitting.md").read_text(encoding="utf-8")
    section = text[text.index("## How many labels do I need?") :]
    start = section.index("```console\n") + len("```console\n")
    lines = section[start : section.index("\n```", start)].splitlines()
    assert len(lines) == 4
    monkeypatch.chdir(study.ROOT)
    for command, shown in zip(lines[::2], lines[1::2], strict=True):
        assert command.startswith("$ liftguard calibrate ")
        assert main(shlex.split(command)[2:]) == 1
        assert capsys.readouterr().err.strip() == shown
