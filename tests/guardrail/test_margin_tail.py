"""Early-block margins past the fitted positions (``margins_from_scores(tail=...)``): the
largest margin of the last half carried flat, or a tail falling as ``c / sqrt(t)`` read on
the answers' own rises, so that margins fitted on short answers do not hold a long
answer's block back to its end."""

from __future__ import annotations

import lzma
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from guardrail import ConfigError, Monitor, StreamPolicy
from guardrail.fitting import (
    FitOptions,
    RecordedSkeleton,
    block_margins,
    critical_score,
    fit_certificate,
    margins_from_scores,
    replay_fitted,
    stop_at,
    trace_events,
)
from guardrail.traces import Trace, parse_trace_lines, read_traces

FIXTURES = Path(__file__).parents[1] / "fixtures"
MBPP = Path(__file__).parents[2] / "benchmarks" / "traces" / "mbpp_qwen25coder.jsonl.xz"


def _running_means(rng: np.random.Generator, n: int, lo: int, hi: int) -> list[np.ndarray]:
    """Scores that are running means of independent tokens, of lengths ``lo`` to ``hi``."""
    out = []
    for _ in range(n):
        k = int(rng.integers(lo, hi + 1))
        out.append(np.cumsum(rng.normal(0.0, 1.0, k)) / np.arange(1, k + 1))
    return out


def _envelope(scores: list[np.ndarray], level: float) -> float:
    """The ``level`` quantile over the answers of their largest ``rise(j) * sqrt(j)`` over
    the first half of their positions (``j`` from 1)."""
    worst = []
    for s in scores:
        half = s.size // 2
        if half:
            j = np.arange(1, half + 1)
            worst.append(float(np.max((s[-1] - s[:half]) * np.sqrt(j))))
    return max(0.0, float(np.quantile(worst, level)))


@pytest.mark.parametrize("share", [None, 0.9])
def test_the_sqrt_tail_keeps_the_fitted_margins_and_falls_past_them(share: float | None) -> None:
    fit = _running_means(np.random.default_rng(0), 300, 20, 80)
    fitted = margins_from_scores(fit, 0.99, share=share)
    flat = margins_from_scores(fit, 0.99, share=share, positions=512)
    tail = margins_from_scores(fit, 0.99, share=share, positions=512, tail="sqrt")
    n = len(fitted)
    assert 20 < n < 512 and len(tail) == 512
    assert tail[:n] == fitted  # the fitted positions, the widening included, as they were
    past = np.asarray(tail[n:])
    assert (np.diff(past) <= 0.0).all() and past[-1] < past[0]  # non-increasing, and falls
    assert (past <= np.asarray(flat[n:])).all()  # never wider than the flat tail
    c = _envelope(fit, 0.99 if share is None else share)
    want = np.minimum(max(fitted[n // 2 :]), c / np.sqrt(np.arange(n + 1, 513)))
    np.testing.assert_allclose(past, want, rtol=1e-12)
    assert margins_from_scores(fit, 0.99, share=share, tail="sqrt") == fitted  # no positions
    assert margins_from_scores(fit, 0.99, share=share, positions=10, tail="sqrt") == fitted
    assert margins_from_scores([], 0.99, positions=512, tail="sqrt") == ()


def test_the_tail_s_envelope_covers_the_share_of_the_answers_it_was_read_on() -> None:
    """The tail's ``c / sqrt(j)`` is risen past, over the first half of an answer's
    positions, by at most ``1 - share`` of the fitting answers (the quantile's definition),
    and on new answers of the kind by not many more (the quantile of 400 answers is itself
    uncertain: here it is risen past by 14% of the new answers)."""
    rng = np.random.default_rng(1)
    fit = _running_means(rng, 400, 20, 80)
    share, far = 0.9, 10**6
    c = margins_from_scores(fit, 0.99, share=share, positions=far, tail="sqrt")[-1] * far**0.5
    assert c == pytest.approx(_envelope(fit, share), rel=1e-9)

    def rose(s: np.ndarray) -> bool:
        half = s.size // 2
        j = np.arange(1, half + 1)
        return bool((s[-1] - s[:half] > c / np.sqrt(j)).any())

    assert sum(rose(s) for s in fit) <= (1 - share) * len(fit) + 1e-9
    new = _running_means(rng, 2000, 20, 80)
    assert sum(rose(s) for s in new) <= 2 * (1 - share) * 2000


def test_longer_answers_rise_past_the_sqrt_tail_about_as_rarely_as_the_quantile_says() -> None:
    """Running means fitted on answers of 20 to 80 tokens (quantile 0.99, share 0.9, as
    ``fit``), new answers of the kind 200 to 400 long: from twice the fitted positions on the
    sqrt tail is far below the flat one, and yet at each position about as few of the new
    answers rise past it as the quantile's 1% (twice that just past the fitted ones)."""
    rng = np.random.default_rng(0)
    fit = _running_means(rng, 300, 20, 80)
    last = len(margins_from_scores(fit, 0.99))
    flat = margins_from_scores(fit, 0.99, share=0.9, positions=400)
    tail = margins_from_scores(fit, 0.99, share=0.9, positions=400, tail="sqrt")
    new = _running_means(rng, 2000, 200, 400)
    slack = 3 * (0.01 * 0.99 / 2000) ** 0.5  # three binomial standard deviations
    for t, level in ((last, 0.02), (2 * last, 0.01), (150, 0.01), (199, 0.01)):  # 0-based
        rose = sum(bool(s[-1] - s[t] > tail[t]) for s in new)
        assert rose <= (level + slack) * 2000, t
        assert tail[t] <= flat[t]
    assert tail[2 * last] < 0.7 * flat[2 * last] and tail[199] < 0.6 * flat[199]


def test_a_bad_tail_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="tail must be"):
        margins_from_scores([np.zeros(3)] * 30, 0.9, positions=8, tail="linear")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="early_block_tail"):
        FitOptions(early_block_tail="linear")  # type: ignore[arg-type]


def _traces() -> list[Trace]:
    return list(read_traces(FIXTURES / "traces_smollm2_sample.jsonl"))


def test_fit_certificate_takes_the_tail_and_records_it() -> None:
    """On 200 of the committed MBPP answers (generated with a 512-token limit)."""
    with lzma.open(MBPP, "rt", encoding="utf-8") as src:
        traces = list(parse_trace_lines(src, source=MBPP.name))[:200]
    limit = 512
    base = FitOptions(fit_fraction=1.0, max_tokens=limit)
    flat, flat_report = fit_certificate(traces, replace(base, early_block_tail="flat"))
    sqrt, report = fit_certificate(traces, base)  # the default
    assert flat.statistic is not None and sqrt.statistic is not None
    m_flat, m_sqrt = flat.statistic.block_margins, sqrt.statistic.block_margins
    assert len(m_flat) == len(m_sqrt) == limit
    fitted = flat_report.early_block
    assert fitted is not None and "tail" not in fitted  # the flat tail records none
    assert report.early_block is not None and report.early_block["tail"] == "sqrt"
    n = next(i for i in range(limit) if m_sqrt[i] != m_flat[i])  # where the tails part
    assert 20 < n < limit / 4 and m_sqrt[:n] == m_flat[:n]
    assert all(s <= f for s, f in zip(m_sqrt, m_flat, strict=True))
    assert (np.diff(m_sqrt[n:]) <= 0.0).all()  # falls past the fitted positions
    assert m_sqrt[-1] < 0.5 * m_flat[-1]
    assert replace(sqrt.statistic, block_margins=m_flat, info=flat.statistic.info) == (
        flat.statistic
    )  # the statistic itself is the same


def _taus(crit: list[float]) -> list[float]:
    finite = sorted({c for c in crit if math.isfinite(c)})
    out = [*finite, *np.linspace(min(finite) - 1, max(finite) + 1, 9).tolist()]
    return out + [math.nextafter(c, -math.inf) for c in finite[::4]]


def test_the_monitor_blocks_where_the_replay_does_with_the_sqrt_tail() -> None:
    """Margins with a sqrt tail (fitted where 30 of the 40 sample answers reach, to the
    longest answer's length, as ``calibrate --margins-from`` reads unlabelled answers):
    calibration's replay and the
    streaming monitor stop every answer at the same token with the same verdict, at many
    thresholds, and some blocks fall on the tail."""
    traces = _traces()
    options = FitOptions(fit_fraction=1.0, scopes=(), early_block=None,
                         model_id="smollm2-135m-instruct-q4_1")  # fmt: skip
    cert, _ = fit_certificate(traces, options)
    stat = cert.statistic
    assert stat is not None
    limit = max(t.n_tokens for t in traces)
    kw: dict[str, Any] = {"skeleton": "prompt-free", "min_answers": 30, "answers": "all"}
    margins = block_margins(stat, traces, 0.5, max_tokens=limit, positions=limit, tail="sqrt",
                            **kw)  # fmt: skip
    fitted = len(block_margins(stat, traces, 0.5, **kw))
    assert fitted < len(margins) == limit
    gated = replace(stat, block_margins=margins)
    policy = StreamPolicy(on_length="answer")
    paths = [replay_fitted(gated, t, skeleton="prompt-free", max_tokens=limit) for t in traces]
    crit = [critical_score(p, policy) for p in paths]
    on_tail = 0
    for tau in _taus(crit):
        for t, path, c in zip(traces, paths, crit, strict=True):
            if not t.n_tokens:
                continue
            mon = Monitor.fitted(gated, policy, tau, max_tokens=limit,
                                 skeleton=RecordedSkeleton(t.prompt_free_logprobs))  # fmt: skip
            decided: Any = None
            for i, event in enumerate(trace_events(t)):
                v = mon.update(event)
                if v.final and decided is None:
                    decided = (i + 1, v.state)
            final = mon.finish("stop")
            read = stop_at(path, policy, tau)
            assert (final.state.name == "CERTIFIED") == (c >= tau)
            assert (decided[0] if decided else t.n_tokens) == read
            on_tail += read < t.n_tokens and read > fitted and final.state.name == "BLOCKED"
    assert on_tail > 0
