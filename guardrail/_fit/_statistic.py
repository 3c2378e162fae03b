"""A fitted streaming statistic: weights over answer-level features, fitted on labelled traces.

:class:`FittedStatistic` is the log-odds that an answer is correct under an
L2-regularised logistic regression on standardised running aggregates of
per-token features (:mod:`guardrail._features`, :mod:`guardrail._aggregates`):
``score = intercept + sum_j w_j (a_j - center_j) / scale_j``. It is stored in
a :class:`~guardrail.Certificate` as JSON (feature names, weights,
normalisation; never pickle) and costs O(number of features) per token.

Each feature is first held to the range it spanned on the fitting answers
(``clamps``): a linear score read far outside that range extrapolates, and the
sums and counts of answers ten or a hundred times longer than the fitting ones
would outweigh every other term (a statistic fitted on two-token answers ranked
300-token ones at chance). Held at the edge, such a feature stops moving and the
others rank. A clamp is monotone, so each term's reachable interval maps to its
clamped interval and the early verdicts below stay exact.

Two forms (``form``), both streamed by :class:`~guardrail.FittedRule`
with an **exact** early verdict: after each token the monitor bounds the score
over every continuation the token limit allows (each aggregate's reachable
interval, term by term) and blocks when even the upper bound is below ``tau``,
certifies when even the lower bound reaches it. Neither can differ from the
end-of-stream decision ``score_T >= tau`` for an answer within the limit.

- ``"answer"``: any features, any signs (the answer-level fit). Early verdicts
  come when the remaining tokens cannot move the score enough.
- ``"monotone"``: only aggregates that move one way as tokens arrive, with
  weights signed so that every term can only fall (running-minimum style): the
  upper bound is the current score, so it blocks as soon as the score is below
  ``tau``, at the cost of the features that move either way.

:func:`guardrail._fit._logistic.fit_statistic` fits either form on answer-level features
computed by the batch twins (:func:`guardrail._fit._logistic.answer_features`); the
calibration that sets ``tau`` uses other answers (``liftguard fit``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .._aggregates import Feature
from .._errors import ConfigError
from .._features import (
    BASES,
    DEFAULT_TEMPERATURE,
    SOURCES,
    TopKTables,
    base_range,
)
from .._reads import Reads

__all__ = [
    "DEFAULT_ALTERNATIVES",
    "DEFAULT_L2",
    "FEATURE_PRESETS",
    "FittedStatistic",
    "Form",
    "moves_one_way",
    "preset_features",
]

FloatArray = npt.NDArray[np.float64]
Form = Literal["answer", "monotone"]
DEFAULT_ALTERNATIVES = 5
"""Alternatives per token the features read (the first ones, most likely first): the same
statistic then gives the same scores on any stream that sends at least this many
(APIs send up to 20; many deployments ask for 5), and the per-token cost stays low.
Measured on the TriviaQA traces: reading 20 instead changes AUROC by -0.007 to +0.002
and coverage by less than a point."""
DEFAULT_L2 = 10.0
"""L2 penalty ``(l2/2) |w|^2`` on the standardised weights (chosen by cross-validation on
the TriviaQA traces of both models; flat between 3 and 30)."""

_HALF, _NINE = repr(math.log(0.5)), repr(math.log(0.9))
_API = (
    "logprob.min",
    "logprob.lowest2",
    f"logprob.count_below@{_HALF}",
    f"logprob.count_below@{_NINE}",
    "length.count",
    "length.log",
    "margin.min",
    "margin.first",
    "entropy.mean",
    "entropy.sum",
    "entropy.first",
)
_LIFT = (
    "logprob.min",
    f"logprob.count_below@{_NINE}",
    "length.count",
    "entropy.mean",
    "entropy.sum",
    "lift.min",
    "lift.max",
    "lift.sum",
)
_LOCAL = ("exact_entropy.mean", "exact_entropy.sum", "exact_entropy.max")
FEATURE_PRESETS: Mapping[str, tuple[str, ...]] = {
    "api": _API,
    "local": _API + _LOCAL,
    "lift": _LIFT,
}
"""Feature sets by what the stream supplies: ``api`` (logprobs and alternatives),
``local`` (plus exact entropies), ``lift`` (plus the skeleton's log-probability of each
token). ``api`` and ``lift`` were chosen by backward elimination from 17 and 23
candidates (means, sums, minima, maxima, first values, two lowest, counts below
log 0.5 and log 0.9, length; margins, entropies, lifts), cross-validated on the
TriviaQA traces of both models only (AUROC 0.762 / 0.808 for ``api``, 0.788 /
0.816 for ``lift``, SmolLM2 / Gemma; the full candidate sets: 0.763 / 0.805 and
0.781 / 0.810)."""


def preset_features(group: str, form: Form = "answer") -> tuple[Feature, ...]:
    """The features of a preset group; for ``form="monotone"`` only those that move one way
    whatever the values' signs (a sum only over a base of one sign)."""
    if group not in FEATURE_PRESETS:
        raise ConfigError(f"unknown feature group {group!r}; choose one of api, local, lift")
    feats = tuple(Feature.parse(n) for n in FEATURE_PRESETS[group])
    if form == "monotone":
        feats = tuple(f for f in feats if moves_one_way(f))
    return feats


def moves_one_way(f: Feature) -> bool:
    """Whether feature ``f`` moves only one way as tokens arrive (only rises, only falls, or
    is fixed after the first token) over its base's whole range: a maximum, minimum, count,
    first value or the length, a sum only over a base of one sign, never a mean. The
    features a ``form="monotone"`` statistic may read."""
    if f.base == "length":
        return True
    lo, hi = base_range(f.base, 2)
    return f.direction(lo, hi) is not None


def _finite_list(values: Any, where: str, n: int | None = None) -> tuple[float, ...]:
    if not isinstance(values, list | tuple):
        raise ConfigError(f"{where}: expected a list of numbers")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ConfigError(f"{where}: expected finite numbers, got {v!r}")
        out.append(float(v))
    if n is not None and len(out) != n:
        raise ConfigError(f"{where}: expected {n} numbers (one per feature), got {len(out)}")
    return tuple(out)


def _checked_clamps(values: Any, n: int) -> tuple[tuple[float, float], ...]:
    where = "statistic.clamps"
    if not isinstance(values, list | tuple):
        raise ConfigError(f"{where}: expected a list of [lo, hi] pairs")
    if not values:
        return ()
    if len(values) != n:
        raise ConfigError(f"{where}: expected {n} pairs (one per feature), got {len(values)}")
    out = []
    for j, pair in enumerate(values):
        lo, hi = _finite_list(pair, f"{where}[{j}]", 2)
        if lo > hi:
            raise ConfigError(f"{where}[{j}]: expected lo <= hi, got [{lo:g}, {hi:g}]")
        out.append((lo, hi))
    return tuple(out)


@dataclass(frozen=True)
class FittedStatistic:
    """Log-odds of a correct answer from answer-level features (frozen; validated).

    ``features``: the aggregates, by name (:class:`~guardrail._aggregates.Feature`);
    ``weights``: one per feature, on the standardised scale; ``center`` and
    ``scale``: the normalisation; ``vocab_size``: the model's (ranges of the
    entropies); ``temperature``: of ``temperature_lift``; ``form``: see the
    module docstring; ``info``: how it was fitted (JSON-serialisable).

    Examples
    --------
        >>> from guardrail.fitting import Feature
        >>> stat = FittedStatistic(features=(Feature("logprob", "mean"),), weights=(2.0,),
        ...                        intercept=0.5, center=(-1.0,), scale=(0.5,), vocab_size=1000)
        >>> stat.group, stat.bases
        ('api', ('logprob',))
        >>> stat.score([[-0.5], [-2.0]]).round(2)
        array([ 2.5, -3.5])
    """

    features: tuple[Feature, ...]
    weights: tuple[float, ...]
    intercept: float
    center: tuple[float, ...]
    scale: tuple[float, ...]
    vocab_size: int
    temperature: float = DEFAULT_TEMPERATURE
    form: Form = "answer"
    alternatives: int = DEFAULT_ALTERNATIVES
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    info: Mapping[str, Any] = field(default_factory=dict)
    clamps: tuple[tuple[float, float], ...] = ()
    """One ``(lo, hi)`` per feature: the range its values spanned on the fitting answers,
    to which it is held before it is weighted (none: ``()``, as in a statistic fitted
    before clamps were)."""
    block_margins: tuple[float, ...] = ()
    """Early blocks by position: after ``t`` tokens the rule also blocks when the score
    plus ``block_margins[t - 1]`` (>= 0) is below tau (none past the end; see
    :func:`~guardrail.fitting.block_margins`)."""
    tables: TopKTables | None = field(default=None, compare=False, repr=False)
    """Tail tables shared by every monitor of this statistic (built on construction)."""
    cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """What the monitors of this statistic compile once (derived from the fields above)."""

    def __post_init__(self) -> None:
        feats = tuple(self.features)
        if not feats or not all(isinstance(f, Feature) for f in feats):
            raise ConfigError("statistic.features: expected a non-empty list of features")
        if len({f.name for f in feats}) != len(feats):
            raise ConfigError("statistic.features: a feature is listed twice")
        n = len(feats)
        put = object.__setattr__
        put(self, "features", feats)
        put(self, "weights", _finite_list(self.weights, "statistic.weights", n))
        put(self, "center", _finite_list(self.center, "statistic.center", n))
        put(self, "scale", _finite_list(self.scale, "statistic.scale", n))
        if any(s <= 0 for s in self.scale):
            raise ConfigError("statistic.scale: every scale must be > 0")
        put(self, "intercept", _finite_list([self.intercept], "statistic.intercept")[0])
        v = self.vocab_size
        if isinstance(v, bool) or not isinstance(v, int) or v < 2:
            raise ConfigError(f"statistic.vocab_size: expected an integer >= 2, got {v!r}")
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, int | float) or not (1.0 < t < math.inf):
            raise ConfigError(f"statistic.temperature: expected a number > 1, got {t!r}")
        a = self.alternatives
        if isinstance(a, bool) or not isinstance(a, int) or a < 1:
            raise ConfigError(f"statistic.alternatives: expected an integer >= 1, got {a!r}")
        if self.form not in ("answer", "monotone"):
            raise ConfigError(f"statistic.form: expected 'answer' or 'monotone', got {self.form!r}")
        put(self, "ranges", self._checked_ranges(feats))
        if self.form == "monotone":
            for f, w in zip(feats, self.weights, strict=True):
                d = f.direction(*self.range_of(f.base)) if f.base != "length" else 1
                if w != 0.0 and (d is None or d * w > 0):
                    raise ConfigError(
                        f"statistic: feature {f.name!r} with weight {w:g} can rise as tokens "
                        "arrive, which the 'monotone' form excludes"
                    )
        if not isinstance(self.info, Mapping):
            raise ConfigError("statistic.info: expected an object")
        put(self, "info", dict(self.info))
        put(self, "clamps", _checked_clamps(self.clamps, n))
        put(self, "block_margins", _finite_list(self.block_margins, "statistic.block_margins"))
        if any(m < 0.0 for m in self.block_margins):
            raise ConfigError("statistic.block_margins: every margin must be >= 0")
        if self.tables is None or self.tables.vocab_size != v:
            put(self, "tables", TopKTables(v))
        put(self, "cache", {})

    def _checked_ranges(self, feats: tuple[Feature, ...]) -> dict[str, tuple[float, float]]:
        if not isinstance(self.ranges, Mapping):
            raise ConfigError("statistic.ranges: expected an object")
        used = {f.base for f in feats}
        out: dict[str, tuple[float, float]] = {}
        for base, pair in self.ranges.items():
            if base not in used:
                raise ConfigError(f"statistic.ranges: {base!r} is not a base feature it reads")
            lo, hi = _finite_list(pair, f"statistic.ranges.{base}", 2)
            wide_lo, wide_hi = base_range(base, self.vocab_size)
            if not (wide_lo <= lo < hi <= wide_hi):
                raise ConfigError(
                    f"statistic.ranges.{base}: expected lo < hi inside [{wide_lo:g}, {wide_hi:g}]"
                )
            out[base] = (lo, hi)
        return out

    def range_of(self, base: str) -> tuple[float, float]:
        """The interval ``base``'s values are clamped to (its full range unless narrowed)."""
        got = self.ranges.get(base)
        return got if got is not None else base_range(base, self.vocab_size)

    @property
    def bases(self) -> tuple[str, ...]:
        """The base features read per token (in :data:`~guardrail._features.BASES` order)."""
        used = {f.base for f in self.features if f.base != "length"}
        return tuple(b for b in BASES if b in used)

    @property
    def requires(self) -> frozenset[str]:
        """What the stream must supply: ``logprob``, ``alternatives``, ``exact_entropy``,
        ``skeleton``."""
        return frozenset({"logprob", *(SOURCES[b] for b in self.bases)})

    @property
    def reads(self) -> Reads:
        """What the statistic reads of each token besides its logprob (the skeleton's own
        needs come on top, once a skeleton is given)."""
        reads = self.cache.get("reads")
        if not isinstance(reads, Reads):
            req = self.requires
            reads = self.cache["reads"] = Reads(
                alternatives=self.alternatives if "alternatives" in req else 0,
                exact_entropy="exact_entropy" in req,
                skeleton="skeleton" in req,
                group=self.group,
            )
        return reads

    @property
    def group(self) -> str:
        """``api``, ``local``, ``lift`` or ``local+lift``: what the provider must expose."""
        req = self.requires
        name = "+".join(
            g for g, s in (("local", "exact_entropy"), ("lift", "skeleton")) if s in req
        )
        return name or "api"

    def clamp_of(self, j: int) -> tuple[float, float]:
        """The interval feature ``j`` is held to (unbounded where the statistic has no
        clamps)."""
        return self.clamps[j] if self.clamps else (-math.inf, math.inf)

    def coefficients(self) -> tuple[float, tuple[float, ...]]:
        """``(b0, c)`` with ``score = b0 + sum_j c_j a_j`` on the raw aggregates."""
        c = tuple(w / s for w, s in zip(self.weights, self.scale, strict=True))
        b0 = self.intercept - math.fsum(ci * m for ci, m in zip(c, self.center, strict=True))
        return b0, c

    def score_bounds(self, max_tokens: int) -> tuple[float, float]:
        """The smallest and largest score any answer of 1 to ``max_tokens`` tokens can have
        (each aggregate over its reachable interval, term by term). A ``tau`` above the
        upper end certifies nothing."""
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ConfigError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
        b0, coefs = self.coefficients()
        lo_s = hi_s = b0
        n = float(max_tokens)
        for j, (f, c) in enumerate(zip(self.features, coefs, strict=True)):
            if f.base == "length":
                a, b = (1.0, n) if f.aggregate == "count" else (math.log(2.0), math.log1p(n))
            elif f.aggregate == "sum":
                lo, hi = self.range_of(f.base)
                a, b = min(lo, n * lo), max(hi, n * hi)
            elif f.aggregate == "count_below":
                a, b = 0.0, n
            elif f.aggregate == "frac_below":
                a, b = 0.0, 1.0
            else:
                a, b = self.range_of(f.base)
            if f.scope is not None:  # an empty scope reads its empty value
                e = 0.0 if f.base == "length" else f.empty(*self.range_of(f.base))
                a, b = min(a, e), max(b, e)
            lo_c, hi_c = self.clamp_of(j)
            a, b = min(max(a, lo_c), hi_c), min(max(b, lo_c), hi_c)
            lo_s += min(c * a, c * b)
            hi_s += max(c * a, c * b)
        return lo_s, hi_s

    def score(self, features: npt.ArrayLike) -> FloatArray:
        """The log-odds of answer-level feature rows ``(n, features)`` (batch; for fitting
        and AUROC; the streaming path is :class:`~guardrail.fitting.FittedState`)."""
        x = np.atleast_2d(np.asarray(features, dtype=np.float64))
        if self.clamps:
            lo, hi = np.asarray(self.clamps).T
            x = np.minimum(np.maximum(x, lo), hi)  # (NaN rows stay NaN)
        z = (x - np.asarray(self.center)) / np.asarray(self.scale)
        w = np.asarray(self.weights)  # products added without BLAS: one order on every CPU
        return np.asarray(self.intercept + (z * w).sum(axis=1), dtype=np.float64)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "logistic",
            "features": [f.name for f in self.features],
            "weights": list(self.weights),
            "intercept": self.intercept,
            "center": list(self.center),
            "scale": list(self.scale),
            "vocab_size": self.vocab_size,
            "temperature": self.temperature,
            "form": self.form,
            "alternatives": self.alternatives,
            "ranges": {b: list(r) for b, r in self.ranges.items()},
            "group": self.group,
            "info": dict(self.info),
        }
        if self.clamps:  # (none: the JSON of a statistic fitted before clamps, unchanged)
            out["clamps"] = [list(r) for r in self.clamps]
        if self.block_margins:
            out["block_margins"] = list(self.block_margins)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> FittedStatistic:
        """The statistic of :meth:`to_dict`; a ConfigError naming any bad field."""
        if not isinstance(data, Mapping):
            raise ConfigError("statistic: expected a JSON object")
        known = {
            "kind",
            "features",
            "weights",
            "intercept",
            "center",
            "scale",
            "vocab_size",
            "temperature",
            "form",
            "alternatives",
            "ranges",
            "group",
            "info",
            "clamps",
            "block_margins",
        }
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"statistic: unknown field(s) {', '.join(map(repr, unknown))}")
        if data.get("kind") != "logistic":
            raise ConfigError(f"statistic.kind: expected 'logistic', got {data.get('kind')!r}")
        for key in ("features", "weights", "intercept", "center", "scale", "vocab_size"):
            if key not in data:
                raise ConfigError(f"statistic.{key}: missing")
        names = data["features"]
        if not isinstance(names, list):
            raise ConfigError("statistic.features: expected a list of names")
        out = cls(
            features=tuple(Feature.parse(n) for n in names),
            weights=data["weights"],
            intercept=data["intercept"],
            center=data["center"],
            scale=data["scale"],
            vocab_size=data["vocab_size"],
            temperature=data.get("temperature", DEFAULT_TEMPERATURE),
            form=data.get("form", "answer"),
            alternatives=data.get("alternatives", DEFAULT_ALTERNATIVES),
            ranges=data.get("ranges", {}),
            info=data.get("info", {}),
            clamps=data.get("clamps", ()),
            block_margins=data.get("block_margins", ()),
        )
        if "group" in data and data["group"] != out.group:
            raise ConfigError(
                f"statistic.group: {data['group']!r} differs from the features' {out.group!r}"
            )
        return out
