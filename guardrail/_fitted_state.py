"""The per-answer state of a fitted statistic, and reading its features from token events.

:class:`FittedState` keeps the running aggregates of one answer, the score and its
bounds over the continuations the token limit allows; :class:`EventReader` turns a
:class:`~guardrail.TokenEvent` into the base features the statistic reads (or says
what is missing). The fitted rule and the replay of recorded answers
(:mod:`guardrail._rules`, :mod:`guardrail._fitted_replay`) share both, so their
arithmetic is the same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ._aggregates import RunningAggregates
from ._errors import ConfigError
from ._features import TokenFeaturizer
from ._fitted import FittedStatistic
from ._reads import LOGPROB_SLACK, Reads, Skeleton, usable_logprob
from ._traces import CENSORED_LOGPROB, Trace
from ._verdict import TokenEvent

__all__ = ["EventReader", "FittedState", "RecordedSkeleton", "plan_of", "trace_events"]


_KINDS = ("mean", "sum", "min", "max", "first", "lowest2", "count_below", "frac_below")


class _Plan:
    """What every answer's state of one statistic shares, compiled once: the bases, their
    clamp ranges and count levels, the terms (kind, base index or -1 for the length,
    level index, coefficient, level) grouped by kind, the terms each bound visits, and
    the featurizer (its tail tables)."""

    __slots__ = ("b0", "bases", "by_kind", "down", "featurizer", "levels", "ranges",
                 "requires", "terms", "up")  # fmt: skip

    def __init__(self, statistic: FittedStatistic) -> None:
        b0, coefs = statistic.coefficients()
        self.b0, self.bases, self.requires = b0, statistic.bases, statistic.requires
        levels: dict[str, list[float]] = {b: [] for b in self.bases}
        for f in statistic.features:
            if f.level is not None and f.level not in levels[f.base]:
                levels[f.base].append(f.level)
        self.levels = [tuple(levels[b]) for b in self.bases]
        self.ranges = [statistic.range_of(b) for b in self.bases]
        self.terms: list[tuple[int, int, int, float, float]] = []
        for f, c in zip(statistic.features, coefs, strict=True):
            if c == 0.0:
                continue
            if f.base == "length":
                self.terms.append((8 if f.aggregate == "count" else 9, -1, -1, c, 0.0))
                continue
            bi = self.bases.index(f.base)
            li = -1 if f.level is None else levels[f.base].index(f.level)
            lvl = 0.0 if f.level is None else f.level
            self.terms.append((_KINDS.index(f.aggregate), bi, li, c, lvl))
        self.by_kind: list[list[tuple[int, int, float, int]]] = [[] for _ in range(10)]
        for j, (kind, bi, li, c, _) in enumerate(self.terms):
            self.by_kind[kind].append((j, bi, c, li))
        self.up, self.down = self._moving(True), self._moving(False)
        self.featurizer = TokenFeaturizer(
            self.bases, statistic.vocab_size, temperature=statistic.temperature,
            tables=statistic.tables,
        )  # fmt: skip

    def _moving(self, up: bool) -> list[tuple[int, int, int, int, float, float, bool]]:
        """Terms that can move the score ``up`` (or down), with the side they move to
        (``True``: the aggregate's top)."""
        out = []
        for j, (kind, bi, li, c, lvl) in enumerate(self.terms):
            to_top = (c > 0) == up
            lo, hi = self.ranges[bi] if bi >= 0 else (0.0, 0.0)
            if kind == 4 or (kind in (2, 5) and to_top) or (kind in (3, 6, 8, 9) and not to_top):
                continue  # first; a min / lowest2 that cannot rise; a max / count / length fall
            if kind == 1 and ((to_top and hi <= 0.0) or (not to_top and lo >= 0.0)):
                continue  # a sum that cannot move that way
            if kind == 6 and not lo < lvl:
                continue  # no value can fall below the level
            out.append((j, kind, bi, li, c, lvl, to_top))
        return out


def plan_of(statistic: FittedStatistic) -> _Plan:
    """The statistic's compiled plan (built on first use, kept with the statistic)."""
    plan = statistic.cache.get("plan")
    if plan is None:
        plan = statistic.cache["plan"] = _Plan(statistic)
    assert isinstance(plan, _Plan)
    return plan


class FittedState:
    """Running aggregates of one answer and the fitted score with its bounds (no tau).

    The terms are compiled by kind once per statistic (:func:`plan_of`); a bound
    visits only the terms that can move its way (e.g. a minimum with a positive
    weight never raises the upper bound)."""

    __slots__ = ("_aggs", "_b0", "_by_kind", "_clamp", "_down", "_limit", "_up", "_values",
                 "score", "t")  # fmt: skip

    def __init__(self, statistic: FittedStatistic, max_tokens: int | None = None) -> None:
        if max_tokens is not None and (isinstance(max_tokens, bool) or max_tokens < 1):
            raise ConfigError(f"max_tokens must be an integer >= 1 or None, got {max_tokens!r}")
        plan = plan_of(statistic)
        aggs = [RunningAggregates(lo, hi, lv) for (lo, hi), lv in zip(plan.ranges, plan.levels,
                                                                        strict=True)]  # fmt: skip
        self._aggs, self._clamp = aggs, plan.ranges
        by_kind: list[list[Any]] = []
        for kind, rows in enumerate(plan.by_kind):
            if kind >= 8:
                by_kind.append([(j, c) for j, _, c, _ in rows])
            elif kind >= 6:
                by_kind.append([(j, aggs[bi], c, li) for j, bi, c, li in rows])
            else:
                by_kind.append([(j, aggs[bi], c) for j, bi, c, _ in rows])
        self._by_kind = tuple(by_kind)
        self._up = [(j, k, aggs[bi] if bi >= 0 else None, li, c, lvl, top)
                    for j, k, bi, li, c, lvl, top in plan.up]  # fmt: skip
        self._down = [(j, k, aggs[bi] if bi >= 0 else None, li, c, lvl, top)
                      for j, k, bi, li, c, lvl, top in plan.down]  # fmt: skip
        self._b0, self._limit = plan.b0, max_tokens
        self._values = [0.0] * len(plan.terms)
        self.t = 0
        self.score = math.nan

    def update(self, values: Sequence[float]) -> float:
        """Add one token's base features (in ``statistic.bases`` order); the score."""
        for agg, (lo, hi), x in zip(self._aggs, self._clamp, values, strict=True):
            agg.update(lo if x < lo else (hi if x > hi else x))
        self.t = t = self.t + 1
        s, vals = self._b0, self._values
        mean, total, low, high, first, low2, count, frac, length, log_len = self._by_kind
        for j, agg, c in mean:
            vals[j] = v = agg.total / t
            s += c * v
        for j, agg, c in total:
            vals[j] = v = agg.total
            s += c * v
        for j, agg, c in low:
            vals[j] = v = agg.low
            s += c * v
        for j, agg, c in high:
            vals[j] = v = agg.high
            s += c * v
        for j, agg, c in first:
            vals[j] = v = agg.first
            s += c * v
        for j, agg, c in low2:
            vals[j] = v = (agg.low1 + agg.low2) / 2.0
            s += c * v
        for j, agg, c, li in count:
            vals[j] = v = float(agg.counts[li])
            s += c * v
        for j, agg, c, li in frac:
            vals[j] = v = agg.counts[li] / t
            s += c * v
        for j, c in length:
            vals[j] = v = float(t)
            s += c * v
        for j, c in log_len:
            vals[j] = v = math.log1p(t)
            s += c * v
        self.score = s
        return s

    @property
    def limit(self) -> int | None:
        """The token limit the bounds assume (``None``: none)."""
        return self._limit

    def _remaining(self) -> float:
        limit = self._limit
        if limit is None:
            return math.inf
        m = limit - self.t
        return float(m) if m > 0 else 0.0

    def upper(self) -> float:
        """The largest score any continuation within the token limit can end with."""
        return self._bound(self._up)

    def lower(self) -> float:
        """The smallest score any continuation within the token limit can end with."""
        return self._bound(self._down)

    def _bound(self, terms: list[tuple[int, int, RunningAggregates | None, int, float, float,
                                        bool]]) -> float:  # fmt: skip
        m, s = self._remaining(), self.score
        if m == 0.0:
            return s
        t, vals, inf = self.t, self._values, m == math.inf
        for j, kind, agg, li, c, lvl, top in terms:
            v = vals[j]
            if agg is None:  # the length: it can only rise
                e = t + m if kind == 8 else (math.inf if inf else math.log1p(t + m))
            else:
                bound = agg.hi if top else agg.lo
                if kind == 0:  # mean: the end value moves monotonically with the added count
                    e = bound if inf else (agg.total + m * bound) / (t + m)
                    e = (e if e > v else v) if top else (e if e < v else v)
                elif kind == 1:
                    e = v + m * bound
                elif kind == 2 or kind == 3:
                    e = bound
                elif kind == 5:
                    e = bound if m >= 2 else (bound + agg.low1) / 2.0
                elif kind == 6:
                    e = v + m
                else:  # frac_below: all further tokens below the level (top) or not
                    c_n = agg.counts[li]
                    if top:
                        e = 1.0 if inf else (c_n + m) / (t + m)
                    else:
                        e = (0.0 if inf else c_n / (t + m)) if agg.hi >= lvl else v
                    e = (e if e > v else v) if top else (e if e < v else v)
            s += c * (e - v)
        return s


class RecordedSkeleton:
    """A skeleton that reads recorded log-probabilities by token index (trace replay)."""

    __slots__ = ("_values",)
    reads = Reads()

    def __init__(self, values: npt.ArrayLike) -> None:
        self._values = np.asarray(values, dtype=np.float64).tolist()

    def log_prob(self, event: TokenEvent) -> float:
        if event.index is None:
            raise ConfigError("a recorded skeleton needs events with an index")
        return float(self._values[event.index])


class EventReader:
    """A token event's base features for ``statistic`` (shared by monitor and replay).

    :meth:`read` returns the feature values, or ``(what, value)`` when the event
    lacks something the statistic needs (``"logprob"``, ``"alternatives"``,
    ``"entropy"``)."""

    __slots__ = ("_feat", "_k", "_need_alt", "_need_ent", "_skel")

    def __init__(self, statistic: FittedStatistic, skeleton: Skeleton | None) -> None:
        plan = plan_of(statistic)
        req = plan.requires
        if "skeleton" in req and skeleton is None:
            raise ConfigError(
                "this certificate's statistic reads skeleton lifts (group "
                f"{statistic.group!r}): pass skeleton=... (e.g. adapters.PromptFreeSkeleton() "
                "for the prompt-free skeleton)"
            )
        self._skel = skeleton if "skeleton" in req else None
        self._need_alt, self._need_ent = "alternatives" in req, "exact_entropy" in req
        self._k = statistic.alternatives
        self._feat = plan.featurizer

    def read(self, event: TokenEvent) -> list[float] | tuple[str, float | None]:
        lp = event.logprob
        if lp is None or not usable_logprob(lp):
            return "logprob", lp
        top: list[float] | None = None
        if self._need_alt:
            top = [v for _, v in event.top_logprobs]
            total = sum(top)
            if not top or total != total or total == -math.inf:
                return "alternatives", (total if top else None)
            top.sort(reverse=True)
            if top[0] > LOGPROB_SLACK or top[-1] <= CENSORED_LOGPROB:
                return "alternatives", (top[0] if top[0] > LOGPROB_SLACK else top[-1])
            del top[self._k :]
        entropy = event.entropy
        if self._need_ent and (entropy is None or not math.isfinite(entropy)):
            return "entropy", entropy
        ls = None
        if self._skel is not None:
            ls = self._skel.log_prob(event)
            if not (ls <= LOGPROB_SLACK):  # NaN or > 0: a broken skeleton, not bad provider data
                raise ConfigError(f"skeleton returned an invalid log-probability {ls!r}")
        return self._feat.values(lp, top, ls, entropy)


def trace_events(trace: Trace) -> list[TokenEvent]:
    """The token events a stream of ``trace``'s answer would carry (ids, logprobs, alternatives,
    exact entropies as a local model's stream; no token id, and alternatives keyed by ``""``,
    where the trace lacks the ids)."""
    ids: list[list[Any]] = trace.top_ids.tolist()
    lps, lp = trace.top_logprobs.tolist(), trace.logprobs.tolist()
    tok: list[Any] = trace.token_ids.tolist()
    if "token_ids" in trace.missing:
        tok = [None] * len(tok)
    if "top_ids" in trace.missing:
        ids = [[""] * len(row) for row in ids]
    ent: list[Any] = trace.entropy.tolist()
    if "entropy" in trace.missing:
        ent = [None] * len(ent)
    rows = zip(trace.token_texts, lp, tok, ids, lps, ent, strict=True)
    return [
        TokenEvent(text, lp, tid, None, tuple(zip(ti, tl, strict=True)), i, h)
        for i, (text, lp, tid, ti, tl, h) in enumerate(rows)
    ]
