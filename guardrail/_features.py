"""Per-token features of a streamed answer, from what the stream carries.

Each answer token gives a few **base features**, grouped by what the provider
must expose (the certificate records which it needs; see :data:`SOURCES`):

- ``api`` (the token's log-probability and its top-k alternatives):
  ``logprob`` (floored at :data:`LOGPROB_FLOOR`), ``margin`` (top-1 minus
  top-2 probability), ``entropy`` (the top-k entropy with the power-law
  compensation of the missing mass, :mod:`guardrail._topk`'s ``"paper"`` rule),
  ``rank`` (alternatives above the emitted token) and ``temperature_lift`` (the
  lift against the temperature skeleton ``P^(1/T)/Z_T``, ``log Z_T`` compensated
  the same way);
- ``local`` (plus the exact entropy a local model gives): ``exact_entropy``;
- ``lift`` (plus a skeleton's log-probability of the token): ``lift``, the
  information lift ``log P - log S`` against the certificate's skeleton (the
  prompt-free model: pointwise mutual information).

Every value is clamped to its range (:func:`base_range`), so that running
aggregates have known bounds (:mod:`guardrail._aggregates`).

:class:`TokenFeaturizer` computes them one token at a time in pure Python
(O(k) per token); :func:`guardrail._fit._features_batch.base_features_batch` is its
numpy batch twin over a whole recorded answer; the tests compare the two at every
token. The tail sums
of the power law depend only on its slope, so they are tabulated once per
``(k, |V|)`` on a grid of slopes (:class:`TopKTables`) and interpolated: within
1e-6 nats of :func:`guardrail.estimate_entropy` (tested).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from math import exp, log
from operator import mul

import numpy as np
import numpy.typing as npt

from ._errors import ConfigError
from ._topk import DEFAULT_R2_MIN, _tail_sums

__all__ = [
    "BASES",
    "DEFAULT_TEMPERATURE",
    "LIFT_BOUND",
    "LOGPROB_FLOOR",
    "RANK_CAP",
    "SOURCES",
    "TokenFeaturizer",
    "TopKTables",
    "base_range",
]

FloatArray = npt.NDArray[np.float64]

LOGPROB_FLOOR = -20.0
"""Token log-probabilities are floored here (a feature, not a probability model)."""
LIFT_BOUND = 12.0
"""Lifts are clamped to ``[-LIFT_BOUND, LIFT_BOUND]``."""
RANK_CAP = 20
"""Ranks are capped here (the most alternatives an API gives)."""
DEFAULT_TEMPERATURE = 1.5

BASES = ("logprob", "margin", "entropy", "rank", "temperature_lift", "exact_entropy", "lift")
"""Base features, in the order :class:`TokenFeaturizer` computes them."""
SOURCES: Mapping[str, str] = {
    "logprob": "logprob",
    "margin": "alternatives",
    "entropy": "alternatives",
    "rank": "alternatives",
    "temperature_lift": "alternatives",
    "exact_entropy": "exact_entropy",
    "lift": "skeleton",
}
"""What the stream must supply for each base feature."""

_STEP = 1.0 / 64.0  # grid of tail slopes b in [-_B_MIN_ABS, 0]
_B_MIN_ABS = 64.0
_N_GRID = int(_B_MIN_ABS / _STEP) + 1
_MASS_FLOOR = 1e-12
_RANK_TOL = 1e-6


def base_range(base: str, vocab_size: int) -> tuple[float, float]:
    """The interval every value of ``base`` is clamped to."""
    if base == "logprob":
        return LOGPROB_FLOOR, 0.0
    if base == "margin":
        return 0.0, 1.0
    if base in ("entropy", "exact_entropy"):
        return 0.0, math.log(vocab_size)
    if base == "rank":
        return 0.0, float(RANK_CAP)
    if base in ("lift", "temperature_lift"):
        return -LIFT_BOUND, LIFT_BOUND
    raise ConfigError(f"unknown base feature {base!r}; choose one of {', '.join(BASES)}")


class TopKTables:
    """``log S(b)`` and ``G(b)/S(b)`` of the power-law tail over ranks ``k+1..|V|``, on a
    grid of slopes ``b`` in ``[-64, 0]`` (step 1/64), built lazily once per ``k``
    (:func:`guardrail._topk._tail_sums`). Slopes below -64 use the end of the grid."""

    __slots__ = ("_arrays", "_lists", "vocab_size")

    def __init__(self, vocab_size: int) -> None:
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2:
            raise ConfigError(f"vocab_size must be an integer >= 2, got {vocab_size!r}")
        self.vocab_size = vocab_size
        self._arrays: dict[int, tuple[FloatArray, FloatArray]] = {}
        self._lists: dict[int, tuple[list[float], list[float]]] = {}

    def arrays(self, k: int) -> tuple[FloatArray, FloatArray]:
        """``(log S, G / S)`` on the grid ``b_i = -i / 64`` for ``k`` alternatives."""
        got = self._arrays.get(k)
        if got is None:
            if not (0 <= k < self.vocab_size):
                raise ConfigError(f"k must lie in [0, vocab_size), got {k}")
            b = -_STEP * np.arange(_N_GRID, dtype=np.float64)
            big_s, big_g = _tail_sums(b, k, self.vocab_size)
            got = (np.log(big_s), big_g / big_s)
            self._arrays[k] = got
            self._lists[k] = (got[0].tolist(), got[1].tolist())
        return got

    def lists(self, k: int) -> tuple[list[float], list[float]]:
        """:meth:`arrays` as Python lists (for the per-token path)."""
        got = self._lists.get(k)
        if got is None:
            self.arrays(k)
            got = self._lists[k]
        return got


def _interp(table: list[float], b: float) -> float:
    u = -b / _STEP
    if u >= _N_GRID - 1:
        return table[-1]
    i = int(u)
    return table[i] + (u - i) * (table[i + 1] - table[i])


class TokenFeaturizer:
    """The base features ``bases`` of one token, in pure Python (no per-answer state).

    :meth:`values` takes the token's log-probability, its alternatives'
    log-probabilities sorted in descending order (``None`` if not needed), the
    skeleton's log-probability of the token and the exact entropy (each
    ``None`` where not needed), all validated by the caller.

    Examples
    --------
        >>> featurizer = TokenFeaturizer(["logprob", "lift"], vocab_size=1000)
        >>> featurizer.values(-0.5, None, -3.0, None)
        [-0.5, 2.5]
    """

    __slots__ = (
        "_bases",
        "_codes",
        "_entropy_max",
        "_logz_hi",
        "_logz_lo",
        "_need_tail",
        "_per_k",
        "_tables",
        "_temp",
        "_vocab",
    )

    def __init__(
        self,
        bases: Sequence[str],
        vocab_size: int,
        *,
        temperature: float = DEFAULT_TEMPERATURE,
        tables: TopKTables | None = None,
    ) -> None:
        for base in bases:
            base_range(base, 2)  # validates the name
        if not (math.isfinite(temperature) and temperature > 1.0):
            raise ConfigError(f"temperature must be a finite number > 1, got {temperature!r}")
        self._tables = TopKTables(vocab_size) if tables is None else tables
        if self._tables.vocab_size != vocab_size:
            raise ConfigError("tables are for another vocabulary size")
        self._bases, self._vocab, self._temp = tuple(bases), vocab_size, float(temperature)
        self._codes = tuple(BASES.index(b) for b in self._bases)
        self._need_tail = any(b in ("margin", "entropy", "temperature_lift") for b in bases)
        self._entropy_max = math.log(vocab_size)
        bound = (1.0 - 1.0 / self._temp) * math.log(vocab_size)
        self._logz_lo, self._logz_hi = min(0.0, bound), max(0.0, bound)
        self._per_k: dict[int, tuple[list[float], float, list[float], list[float], float]] = {}

    @property
    def bases(self) -> tuple[str, ...]:
        return self._bases

    def _constants(self, k: int) -> tuple[list[float], float, list[float], list[float], float]:
        """Per-``k`` constants: centred log-ranks, their sum of squares, the tail tables and
        ``log(|V| - k)``."""
        got = self._per_k.get(k)
        if got is None:
            x = np.log(np.arange(1, k + 1, dtype=np.float64))
            xc = x - x.mean() if k else x
            log_s, ratio = self._tables.lists(k)
            got = (xc.tolist(), float((xc * xc).sum()), log_s, ratio, math.log(self._vocab - k))
            self._per_k[k] = got
        return got

    def _tail(self, top: Sequence[float]) -> tuple[float, float, bool, float, float]:
        """``(la, b, power, mass, h_top)`` of the compensated tail (as ``_topk._fit``)."""
        k = len(top)
        xcs, sxx, log_s, _, log_n_tail = self._constants(k)
        ps = list(map(exp, top))
        mass = 1.0 - sum(ps)
        if mass < _MASS_FLOOR:
            mass = _MASS_FLOOR
        h_top = -sum(map(mul, ps, top))
        b, power = 0.0, False
        if k >= 2:
            mean = sum(top) / k
            syx = sum(map(mul, top, xcs))  # the centred log-ranks sum to 0
            syy = sum(map(mul, top, top)) - k * mean * mean
            if syy > 0.0:
                slope = syx / sxx
                power = slope * syx / syy > DEFAULT_R2_MIN
                b = slope if slope < 0.0 else 0.0
        cap = top[-1] if k else math.inf
        log_mass = log(mass)
        la = 0.0
        if power:
            u = -b / _STEP  # _interp, inlined
            if u >= _N_GRID - 1:
                la = log_mass - log_s[-1]
            else:
                i = int(u)
                la = log_mass - (log_s[i] + (u - i) * (log_s[i + 1] - log_s[i]))
            power = la <= cap + 1e-12
        if not power:
            b = 0.0
            la = log_mass - log_n_tail
            if la > cap:
                la = cap
                uniform_mass = exp(cap) * (self._vocab - k)
                if mass > uniform_mass:
                    mass = uniform_mass
        return la, b, power, mass, h_top

    def values(
        self,
        logprob: float,
        top: Sequence[float] | None,
        skeleton_logprob: float | None,
        exact_entropy: float | None,
    ) -> list[float]:
        """The base features of one token, in the order of :attr:`bases`."""
        lp = LOGPROB_FLOOR if logprob < LOGPROB_FLOOR else (0.0 if logprob > 0.0 else logprob)
        tail: tuple[float, float, bool, float, float] | None = None
        if self._need_tail and top is not None and self._vocab > len(top):
            tail = self._tail(top)
        out: list[float] = []
        for code in self._codes:
            if code == 0:  # logprob
                out.append(lp)
            elif code == 2:  # entropy
                assert top is not None
                out.append(self._entropy(top, tail))
            elif code == 6:  # lift
                assert skeleton_logprob is not None
                x = logprob - skeleton_logprob
                out.append(
                    -LIFT_BOUND if x < -LIFT_BOUND else (LIFT_BOUND if x > LIFT_BOUND else x)
                )
            elif code == 1:  # margin
                assert top is not None
                out.append(self._margin(logprob, top, tail))
            elif code == 3:  # rank
                assert top is not None
                r = sum(1 for v in top if v > logprob + _RANK_TOL)
                out.append(float(r if r < RANK_CAP else RANK_CAP))
            elif code == 4:  # temperature_lift
                assert top is not None
                lift = logprob - (logprob / self._temp - self._logz(top, tail))
                out.append(_clamp(lift, -LIFT_BOUND, LIFT_BOUND))
            else:  # exact_entropy
                assert exact_entropy is not None
                out.append(_clamp(exact_entropy, 0.0, self._entropy_max))
        return out

    @staticmethod
    def _margin(
        logprob: float, top: Sequence[float], tail: tuple[float, float, bool, float, float] | None
    ) -> float:
        k = len(top)
        if k >= 2:
            return exp(top[0]) - exp(top[1])
        p1 = exp(top[0] if k else logprob)
        p2 = exp(tail[0]) if tail is not None else 0.0
        return p1 - p2 if p1 > p2 else 0.0

    def _entropy(
        self, top: Sequence[float], tail: tuple[float, float, bool, float, float] | None
    ) -> float:
        if tail is None:  # the alternatives are the whole vocabulary
            h = -sum(exp(v) * v for v in top)
        else:
            la, b, power, mass, h = tail
            if power:
                ratio = self._constants(len(top))[3]
                h -= mass * (la + b * _interp(ratio, b))
            else:
                h -= exp(la) * la * (self._vocab - len(top))
        return _clamp(h, 0.0, self._entropy_max)

    def _logz(
        self, top: Sequence[float], tail: tuple[float, float, bool, float, float] | None
    ) -> float:
        t = self._temp
        z = sum(exp(v / t) for v in top)
        if tail is not None:
            la, b, power, _, _ = tail
            if power:
                log_s = self._constants(len(top))[2]
                z += exp(la / t + _interp(log_s, b / t))
            else:
                z += (self._vocab - len(top)) * exp(la / t)
        return _clamp(log(z), self._logz_lo, self._logz_hi)


def _clamp(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else (hi if x > hi else x)
