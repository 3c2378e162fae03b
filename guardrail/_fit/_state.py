"""The per-answer state of a fitted statistic, and reading its features from token events.

:class:`FittedState` keeps the running aggregates of one answer, the score and its
bounds over the continuations the token limit allows; :class:`EventReader` turns a
:class:`~guardrail.TokenEvent` into the base features the statistic reads (or says
what is missing). The fitted rule and the replay of recorded answers
(:mod:`guardrail._rules`, :mod:`guardrail._fit._replay`) share both, so their
arithmetic is the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .._aggregate_kinds import AGGREGATE_CLASSES, Aggregate, aggregate_of
from .._errors import ConfigError
from .._features import TokenFeaturizer
from .._reads import LOGPROB_SLACK, Reads, Skeleton, usable_logprob
from .._scopes import scope_tracker
from .._trace_format import CENSORED_LOGPROB, Trace
from .._verdict import TokenEvent
from ._statistic import FittedStatistic

__all__ = ["EventReader", "FittedState", "RecordedSkeleton", "plan_of", "trace_events"]


class _Plan:
    """What every answer's state of one statistic shares, compiled once: the bases and
    their clamp ranges, how to build each nonzero term's aggregate (in feature order) and
    the interval it is held to, the order the score sums them in, the terms each bound
    visits, and the featurizer (its tail tables)."""

    __slots__ = (
        "b0",
        "bases",
        "clamps",
        "down",
        "featurizer",
        "lengths",
        "makers",
        "ranges",
        "requires",
        "scoped",
        "scopes",
        "summed",
        "up",
    )

    def __init__(self, statistic: FittedStatistic) -> None:
        b0, coefs = statistic.coefficients()
        self.b0, self.bases, self.requires = b0, statistic.bases, statistic.requires
        self.ranges = [statistic.range_of(b) for b in self.bases]
        self.makers: list[tuple[type[Aggregate], tuple[float, ...], float]] = []
        self.clamps: list[tuple[float, float]] = []  # per maker
        every: list[tuple[int, Aggregate, float, int]] = []  # (term index, proto, c, base)
        self.scopes = tuple(dict.fromkeys(f.scope for f in statistic.features if f.scope))
        self.scoped: list[tuple[int, float, int, int]] = []  # (term index, c, base, scope)
        for j, (f, c) in enumerate(zip(statistic.features, coefs, strict=True)):
            if c == 0.0:
                continue
            bi = -1 if f.base == "length" else self.bases.index(f.base)
            lo, hi = self.ranges[bi] if bi >= 0 else (0.0, 0.0)
            proto = aggregate_of(f, lo, hi)
            args = (lo, hi) if f.level is None else (lo, hi, f.level)
            if f.scope is not None:  # summed after the whole-answer terms, in feature order
                self.scoped.append((len(self.makers), c, bi, self.scopes.index(f.scope)))
            every.append((len(self.makers), proto, c, bi))
            self.makers.append((type(proto), args, proto.value))
            self.clamps.append(statistic.clamp_of(j))
        scoped = {j for j, *_ in self.scoped}
        terms = [term for term in every if term[0] not in scoped]
        # the score sums the terms class by class (AGGREGATE_CLASSES), each in feature order
        order = sorted(terms, key=lambda term: AGGREGATE_CLASSES.index(type(term[1])))
        self.summed = [(j, c, bi) for j, _, c, bi in order if bi >= 0]
        self.lengths = [(j, c) for j, _, c, bi in order if bi < 0]
        # a bound visits only the terms that can move its way, in feature order
        self.up = [(j, c, c > 0) for j, a, c, _ in every if (a.rises if c > 0 else a.falls)]
        self.down = [(j, c, c < 0) for j, a, c, _ in every if (a.rises if c < 0 else a.falls)]
        self.featurizer = TokenFeaturizer(
            self.bases,
            statistic.vocab_size,
            temperature=statistic.temperature,
            tables=statistic.tables,
        )


def plan_of(statistic: FittedStatistic) -> _Plan:
    """The statistic's compiled plan (built on first use, kept with the statistic)."""
    plan = statistic.cache.get("plan")
    if plan is None:
        plan = statistic.cache["plan"] = _Plan(statistic)
    assert isinstance(plan, _Plan)
    return plan


_Ends = list[tuple[float, Callable[[float], float], Aggregate, float, float]]


def _held(v: float, clamp: tuple[float, float]) -> float:
    """``v`` held to the interval ``clamp``."""
    lo, hi = clamp
    return lo if v < lo else (hi if v > hi else v)


class FittedState:
    """The running aggregates of one answer and the fitted score with its bounds (no tau).

    One aggregate object per nonzero term (:mod:`guardrail._aggregate_kinds`); the
    per-token loop calls their bound ``update`` methods, collected once per answer
    from the statistic's plan (:func:`plan_of`); a bound visits only the terms that
    can move its way (e.g. a minimum with a positive weight never raises the upper
    bound), through their ``upper_end`` / ``lower_end``.

    Examples
    --------
        >>> stat = FittedStatistic(features=(Feature.parse("logprob.mean"),), weights=(1.0,),
        ...                        intercept=0.0, center=(0.0,), scale=(1.0,), vocab_size=1000)
        >>> state = FittedState(stat, max_tokens=10)
        >>> [state.update([x]) for x in [-0.5, -1.5]]
        [-0.5, -1.0]
        >>> state.t, round(state.lower(), 2), round(state.upper(), 2)
        (2, -16.2, -0.2)
    """

    __slots__ = (
        "_b0",
        "_clamp",
        "_down",
        "_held",
        "_held_terms",
        "_lengths",
        "_limit",
        "_margins",
        "_scoped",
        "_terms",
        "_trackers",
        "_up",
        "aggregates",
        "score",
        "t",
    )

    def __init__(self, statistic: FittedStatistic, max_tokens: int | None = None) -> None:
        if max_tokens is not None and (isinstance(max_tokens, bool) or max_tokens < 1):
            raise ConfigError(f"max_tokens must be an integer >= 1 or None, got {max_tokens!r}")
        plan = plan_of(statistic)
        aggs = [cls(*args) for cls, args, _ in plan.makers]
        for agg, (_, _, start) in zip(aggs, plan.makers, strict=True):
            agg.value = start  # a scoped aggregate starts at its empty value
        self.aggregates: tuple[Aggregate, ...] = tuple(aggs)
        """The nonzero terms' aggregates, in the statistic's feature order."""
        self._clamp = plan.ranges
        # A statistic with clamps holds every term to its interval; one without sums the
        # raw aggregates (its own loops: no comparisons against infinities per token).
        self._held = bool(statistic.clamps)
        held = plan.clamps  # each term's (lo, hi): unbounded where the statistic has none
        terms = [(c, aggs[j].update, bi, *held[j]) for j, c, bi in plan.summed]
        self._terms = [term[:3] for term in terms] if not self._held else []
        self._held_terms = terms if self._held else []
        self._lengths = [(c, aggs[j].update, held[j]) for j, c in plan.lengths]
        self._scoped = [(c, aggs[j], bi, si, held[j]) for j, c, bi, si in plan.scoped]
        self._trackers = [scope_tracker(name) for name in plan.scopes]
        self._up: _Ends = [
            (c, aggs[j].upper_end if top else aggs[j].lower_end, aggs[j], *held[j])
            for j, c, top in plan.up
        ]
        self._down: _Ends = [
            (c, aggs[j].upper_end if top else aggs[j].lower_end, aggs[j], *held[j])
            for j, c, top in plan.down
        ]
        self._b0, self._limit = plan.b0, max_tokens
        self._margins = statistic.block_margins
        self.t = 0
        self.score = math.nan

    def update(self, values: Sequence[float], text: str = "") -> float:
        """Add one token's base features (in ``statistic.bases`` order) and its ``text``
        (read by scoped features only); :attr:`value`, the score."""
        xs = [
            lo if x < lo else (hi if x > hi else x)
            for (lo, hi), x in zip(self._clamp, values, strict=True)
        ]
        self.t += 1
        s = self._b0
        for c, update, i in self._terms:  # (a statistic without clamps)
            s += c * update(xs[i])
        for c, update, i, lo, hi in self._held_terms:  # each aggregate held to its clamp
            v = update(xs[i])
            s += c * (lo if v < lo else (hi if v > hi else v))
        if self._held:
            for c, update_length, clamp in self._lengths:
                s += c * _held(update_length(0.0), clamp)
        else:
            for c, update_length, _ in self._lengths:
                s += c * update_length(0.0)
        if self._trackers:
            inside = [tracker.update(text) for tracker in self._trackers]
            for c, agg, i, si, clamp in self._scoped:
                v = agg.update(xs[i] if i >= 0 else 0.0) if inside[si] else agg.value
                s += c * _held(v, clamp)
        self.score = s
        return s

    @property
    def value(self) -> float:
        """The fitted score after the tokens so far, :attr:`score` (NaN before any)."""
        return self.score

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

    def ceiling(self) -> float:
        """What the rule blocks below: :meth:`upper`, or the score plus the statistic's
        early-block margin after this many tokens where that is lower."""
        up, t, margins = self._bound(self._up), self.t, self._margins
        if 0 < t <= len(margins):
            gated = self.score + margins[t - 1]
            return gated if gated < up else up
        return up

    def _bound(self, terms: _Ends) -> float:
        m, s = self._remaining(), self.score
        if m == 0.0:
            return s
        if not self._held:
            for c, end, agg, _, _ in terms:
                s += c * (end(m) - agg.value)
            return s
        for c, end, agg, lo, hi in terms:  # a clamp is monotone: the ends map to its ends
            e, v = end(m), agg.value
            s += c * (
                (lo if e < lo else (hi if e > hi else e))
                - (lo if v < lo else (hi if v > hi else v))
            )
        return s


class RecordedSkeleton:
    """A skeleton that reads recorded log-probabilities by token index (trace replay).

    Examples
    --------
        >>> from guardrail import TokenEvent
        >>> skeleton = RecordedSkeleton([-3.0, -4.5])
        >>> skeleton.log_prob(TokenEvent("b", logprob=-0.2, index=1))
        -4.5
    """

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
    ``"entropy"``).

    Examples
    --------
        >>> from guardrail import TokenEvent
        >>> stat = FittedStatistic(features=(Feature.parse("logprob.mean"),), weights=(1.0,),
        ...                        intercept=0.0, center=(0.0,), scale=(1.0,), vocab_size=1000)
        >>> reader = EventReader(stat, skeleton=None)
        >>> reader.read(TokenEvent("a", logprob=-0.25))
        [-0.25]
        >>> reader.read(TokenEvent("a", logprob=None))
        ('logprob', None)
    """

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
