"""Every streaming statistic keeps the one contract of :mod:`guardrail._streaming`:
``update(x)`` returns the statistic's value after ``x``, and ``value`` reads that same value
(before any update: the initial value its docstring gives).

The classes are listed in :data:`CASES`; :func:`test_every_class_with_an_update_is_listed`
finds every class in ``guardrail`` with an ``update`` method, so a new one must be listed
there or in :data:`EXCLUDED` with the reason.
"""

from __future__ import annotations

import importlib
import inspect
import math
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest

import guardrail
from guardrail._aggregate_kinds import (
    Count,
    CountBelow,
    First,
    FracBelow,
    LogCount,
    Lowest2,
    Max,
    Mean,
    Min,
    Sum,
)
from guardrail._confidence_sequence import BettingConfidenceSequence
from guardrail._fit._state import FittedState
from guardrail._risk_monitor import RiskMonitor, _Detector, _rates
from guardrail._scopes import CodeScope, FinalAnswerScope, NumberScope
from guardrail._statistics import ABOVE, BELOW, BettingMean, LowestK, PaperMean
from guardrail._streaming import StreamingStatistic
from guardrail.fitting import Feature, FittedStatistic

Rng = np.random.Generator
CLIP = 12.0
LO, HI = -6.0, 0.0  # the aggregates' range of base values
PIECES = ("Answer", ":", " 4", "\\boxed{", "```", "python\n", "x = 1", "\n", "  ```\n", " 16",
          " eggs", "The answer", " is", "2,", "a", "\n\n", "  ", "`", "3.")  # fmt: skip


def _lift(rng: Rng) -> float:
    """A clipped lift, of mean 7.5 nats."""
    return float(CLIP * rng.beta(5.0, 3.0))


def _base(rng: Rng) -> float:
    return float(rng.uniform(LO, HI))


def _text(rng: Rng) -> str:
    return str(PIECES[rng.integers(len(PIECES))])


def _fitted() -> FittedState:
    names = ("logprob.mean", "logprob.min", "logprob.lowest2", "logprob.first", "length.count",
             "length.log", "logprob.count_below@-1", "logprob.frac_below@-1",
             "final:logprob.min", "code:logprob.max", "number:logprob.sum")  # fmt: skip
    k = len(names)
    statistic = FittedStatistic(
        features=tuple(Feature.parse(n) for n in names),
        weights=tuple(np.random.default_rng(7).normal(size=k).tolist()),
        intercept=0.1,
        center=(0.0,) * k,
        scale=(1.0,) * k,
        vocab_size=1000,
    )
    return FittedState(statistic, max_tokens=1000)


def _risk_monitor() -> RiskMonitor:
    return RiskMonitor(target=0.2, alpha=0.05, coverage=0.9, spacing=20)


def _feed_risk(monitor: Any, x: tuple[bool, bool]) -> Any:
    """Take one answer's verdict (``update_shown`` returns ``coverage_warning``), then
    its label; ``update``'s return."""
    shown, wrong = x
    assert monitor.update_shown(shown) == monitor.coverage_warning
    return monitor.update(correct=not wrong)


@dataclass(frozen=True)
class Case:
    """One streaming class: a fresh object, one random observation, the documented
    initial ``value``, and how an observation is fed (``update(x)`` unless given)."""

    make: Callable[[], Any]
    draw: Callable[[Rng], Any]
    initial: Any
    feed: Callable[[Any, Any], Any] = lambda obj, x: obj.update(x)


CASES: dict[type, Case] = {
    BettingMean: Case(lambda: BettingMean(tau=6.0, clip=CLIP), _lift, 0),
    PaperMean: Case(lambda: PaperMean(v=4.0, c=2.0, clip=CLIP), _lift, (0.0, CLIP)),
    LowestK: Case(lambda: LowestK(k=3, clip=CLIP), _lift, CLIP),
    BettingConfidenceSequence: Case(lambda: BettingConfidenceSequence(CLIP), _lift, (0.0, CLIP)),
    Mean: Case(lambda: Mean(LO, HI), _base, math.nan),
    Sum: Case(lambda: Sum(LO, HI), _base, 0.0),
    Min: Case(lambda: Min(LO, HI), _base, math.inf),
    Max: Case(lambda: Max(LO, HI), _base, -math.inf),
    First: Case(lambda: First(LO, HI), _base, math.nan),
    Lowest2: Case(lambda: Lowest2(LO, HI), _base, math.nan),
    CountBelow: Case(lambda: CountBelow(LO, HI, -1.0), _base, 0.0),
    FracBelow: Case(lambda: FracBelow(LO, HI, -1.0), _base, math.nan),
    Count: Case(Count, _base, 0.0),
    LogCount: Case(LogCount, _base, 0.0),
    FinalAnswerScope: Case(FinalAnswerScope, _text, False),
    CodeScope: Case(CodeScope, _text, False),
    NumberScope: Case(NumberScope, _text, False),
    FittedState: Case(
        _fitted, lambda rng: ([_base(rng)], _text(rng)), math.nan, lambda s, x: s.update(*x)
    ),
    _Detector: Case(
        lambda: _Detector(0.2, 20, _rates((25.0, 50.0)), (0.1, 0.5)),
        lambda rng: bool(rng.random() < 0.4),
        np.zeros(3),
    ),
    RiskMonitor: Case(
        _risk_monitor,
        lambda rng: (bool(rng.random() < 0.8), bool(rng.random() < 0.4)),
        False,
        _feed_risk,
    ),
}
"""Every class that keeps the contract, with the initial value its docstring gives."""

EXCLUDED: dict[str, str] = {
    # the contract itself
    "guardrail._streaming.StreamingStatistic": "the protocol",
    # the aggregates' base class: update raises NotImplementedError; each subclass is listed
    "guardrail._aggregate_kinds.Aggregate": "abstract",
    # public API kept as it is: update(event) returns the Verdict (read again as .verdict),
    # and .value is the rule's statistic compared with tau, not the verdict
    "guardrail._monitor.Monitor": "returns a Verdict; value is the rule's statistic",
}
"""Classes with an ``update`` method that are not streaming statistics of the contract."""


def _same(a: Any, b: Any) -> bool:
    """``a == b``; arrays element-wise, NaN equal to NaN (only initial values are NaN)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b) and type(a) is type(b)


def _check(case: Case, seed: int, steps: int = 300) -> list[Any]:
    """Feed ``steps`` seeded observations to a fresh object; assert the contract at each.
    Returns the values seen (the initial one first)."""
    rng = np.random.default_rng(seed)
    obj = case.make()
    assert isinstance(obj, StreamingStatistic)
    assert _same(obj.value, case.initial), (obj.value, case.initial)
    seen = [obj.value]
    for i in range(steps):
        out = case.feed(obj, case.draw(rng))
        value = obj.value
        if isinstance(out, np.ndarray):
            assert np.array_equal(out, value), (i, out, value)
        else:
            assert out == value and type(out) is type(value), (i, out, value)
        seen.append(value)
    return seen


def _key(value: Any) -> Any:
    return tuple(value.tolist()) if isinstance(value, np.ndarray) else repr(value)


@pytest.mark.parametrize("cls", list(CASES), ids=lambda c: c.__name__)
def test_update_returns_the_value_that_value_reads(cls: type) -> None:
    for seed in range(3):
        seen = _check(CASES[cls], seed)
        assert len({_key(v) for v in seen}) > 1  # the stream moved the statistic


@pytest.mark.parametrize(("tau", "shown"), [(3.0, ABOVE), (10.0, BELOW)])
def test_the_betting_test_value_is_the_side_shown(tau: float, shown: int) -> None:
    """Its value is 0 until the wealth of one side reaches ``2/delta``, then that side."""
    case = replace(CASES[BettingMean], make=lambda: BettingMean(tau, CLIP))
    seen = _check(case, 0)
    assert seen[0] == 0 and seen[-1] == shown


def test_the_risk_monitor_value_is_its_alarm() -> None:
    seen = _check(CASES[RiskMonitor], 0)
    assert seen[0] is False and seen[-1] is True  # the alarm fires on a 40% error rate


def test_a_drifting_class_fails_the_check() -> None:
    """A class whose update returns something other than its value is caught."""

    class Drifting:
        def __init__(self) -> None:
            self.total = 0.0

        def update(self, x: float) -> float:
            self.total += x
            return x  # the last observation, not the statistic

        @property
        def value(self) -> float:
            return self.total

    with pytest.raises(AssertionError):
        _check(Case(Drifting, lambda rng: float(rng.uniform(1.0, 2.0)), 0.0), 0)
    with pytest.raises(AssertionError):  # the wrong initial value
        _check(Case(LowestK, _lift, 0.0), 0)
    assert not isinstance(object(), StreamingStatistic)


def _classes_with_update() -> set[str]:
    out: set[str] = set()
    for info in pkgutil.walk_packages(guardrail.__path__, "guardrail."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if not inspect.isclass(obj) or obj.__module__ != module.__name__:
                continue
            own = (k for k in obj.__mro__ if k.__module__.startswith("guardrail."))
            if any("update" in vars(k) for k in own):
                out.add(f"{obj.__module__}.{obj.__qualname__}")
    return out


def test_every_class_with_an_update_is_listed() -> None:
    listed = {f"{c.__module__}.{c.__qualname__}" for c in CASES}
    assert not listed & set(EXCLUDED)
    assert _classes_with_update() == listed | set(EXCLUDED)
