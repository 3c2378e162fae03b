"""Top-k compensation: full-vocabulary quantities estimated from the top-k log-probabilities.

APIs expose only the ``k <= 20`` largest log-probabilities per step; the
missing mass ``M = 1 - sum(top-k probs)`` is spread over ranks ``k+1..V`` by a
non-increasing tail ``p_r = exp(a + b log r)`` that sums to ``M`` and never
exceeds ``p_k`` (:func:`fit_tail`: the paper's rule, or the more accurate
``"anchored"`` one). Entropy, ``log Z_T`` and the log-probability of a censored
token follow in closed form: tail sums of ``r^s`` and ``r^s log r`` are a direct
sum over the first 32 tail ranks plus Euler-Maclaurin for the rest (relative
error < 1e-12), O(k) work per token whatever ``V``. The ``*_batch`` functions
take ``(T, k)`` arrays (about 10 us per token; a scalar call is dominated by
numpy's per-call overhead). Natural logarithms throughout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from ._errors import ConfigError
from ._reads import LOGPROB_SLACK
from ._trace_format import CENSORED_LOGPROB

__all__ = [
    "DEFAULT_R2_MIN",
    "TailModel",
    "TailRule",
    "censored_logprob",
    "censored_logprob_batch",
    "estimate_entropy",
    "estimate_entropy_batch",
    "estimate_logz",
    "estimate_logz_batch",
    "fit_tail",
    "topk_compensated_lift",
]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
TailRule = Literal["paper", "anchored"]

DEFAULT_R2_MIN = 0.8
"""The paper's acceptance threshold for the power-law fit."""

_MASS_FLOOR = 1e-12  # missing mass used when rounding makes 1 - sum(top-k) <= 0
_SUM_TOL = 1e-4  # top-k probabilities may sum to 1 + _SUM_TOL (rounding)
_HEAD = 32  # tail ranks summed directly before Euler-Maclaurin takes over
_EM = {1: 1 / 12, 3: -1 / 720, 5: 1 / 30240}  # Euler-Maclaurin B_{2j} / (2j)!


@dataclass(frozen=True)
class TailModel:
    """The tail ``p_r = exp(a + b log r)`` on ranks ``r = k+1..V`` (``b <= 0``).

    ``kind``: ``"power"`` or ``"uniform"`` (``b = 0``); ``a`` is the intercept
    after renormalisation (a fit only chooses ``b``); ``r2``: least-squares
    ``R^2`` on the top-k (NaN if ``k < 2`` or all top-k equal; a diagnostic
    only under ``rule="anchored"``). ``missing_mass``: what the tail carries,
    ``1 - sum(top-k)`` floored at ``1e-12``; less only for inconsistent inputs
    where even ``p_k`` on every tail rank cannot hold it (0 when ``V == k``).

    Examples
    --------
        >>> tail = fit_tail([-0.5, -1.5, -2.5], vocab_size=100)
        >>> tail.kind, tail.k, round(tail.missing_mass, 3)
        ('power', 3, 0.088)
    """

    kind: Literal["power", "uniform"]
    a: float
    b: float
    r2: float
    k: int
    vocab_size: int
    missing_mass: float

    def probabilities(self) -> FloatArray:
        """The explicit tail ``p_{k+1}, ..., p_V`` (``V - k`` floats, for checks)."""
        r = np.arange(self.k + 1, self.vocab_size + 1, dtype=np.float64)
        return np.exp(self.a + self.b * np.log(r))


def _check_top(top_logprobs: npt.ArrayLike, vocab_size: int, ndim: int) -> FloatArray:
    """Validated float64 copy of the top-k log-probabilities (``ndim`` 1 or 2)."""
    lp = np.array(top_logprobs, dtype=np.float64)
    if ndim == 2 and lp.shape == (0,):
        lp = lp.reshape(0, 0)
    if lp.ndim != ndim:
        raise ConfigError(f"top_logprobs must be {ndim}-dimensional, got shape {lp.shape}")
    k = lp.shape[-1]
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)):
        raise ConfigError(f"vocab_size must be an integer, got {vocab_size!r}")
    if vocab_size < max(k, 1):
        raise ConfigError(f"vocab_size must be >= max(k, 1) = {max(k, 1)}, got {vocab_size}")
    if not np.isfinite(lp).all():
        raise ConfigError("top_logprobs contains NaN or infinite values")
    if (lp == CENSORED_LOGPROB).any():
        raise ConfigError(f"top_logprobs contains the censored sentinel {CENSORED_LOGPROB}")
    if (lp > LOGPROB_SLACK).any():
        raise ConfigError("top_logprobs contains log-probabilities > 0")
    if k > 1 and (np.diff(lp, axis=-1) > 0).any():
        raise ConfigError("top_logprobs must be sorted in descending order")
    if (np.exp(lp).sum(axis=-1) > 1.0 + _SUM_TOL).any():
        raise ConfigError("top-k probabilities sum to more than 1")
    return np.minimum(lp, 0.0)


def _phi1(z: FloatArray) -> FloatArray:
    """``expm1(z) / z`` (1 at 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out: FloatArray = np.expm1(z) / z
    small = np.abs(z) < 1e-8
    if small.any():
        out[small] = 1.0 + z[small] / 2
    return out


def _psi(z: FloatArray) -> FloatArray:
    """``int_0^1 w e^{zw} dw = (e^z (z - 1) + 1) / z^2``, by its series for small ``|z|``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out: FloatArray = (np.exp(z) * (z - 1.0) + 1.0) / (z * z)
    small = np.abs(z) < 1e-2
    if small.any():
        x = z[small]
        out[small] = 0.5 + x / 3 + x**2 / 8 + x**3 / 30 + x**4 / 144 + x**5 / 840
    return out


def _tail_sums(s: FloatArray, k: int, vocab_size: int) -> tuple[FloatArray, FloatArray]:
    """``S = sum e^{s w_r}`` and ``G = sum w_r e^{s w_r}``, ``w_r = log(r/(k+1))``, r = k+1..V.

    Ranks ``k+1..k+32`` directly; the rest by Euler-Maclaurin with the
    ``B2, B4, B6`` terms (``s <= 0``). ``G = dS/ds``.
    """
    l0 = math.log(k + 1)
    last = min(k + _HEAD, vocab_size)
    w = np.log(np.arange(k + 1, last + 1, dtype=np.float64)) - l0
    e = np.exp(s[..., None] * w)
    big_s, big_g = e.sum(axis=-1), (e * w).sum(axis=-1)
    if last == vocab_size:
        return big_s, big_g
    m, n = last + 1, vocab_size
    wm, wn = math.log(m) - l0, math.log(n) - l0
    d, u = wn - wm, s + 1.0
    em = (k + 1) * np.exp(u * wm)  # integral of f from m to n is em * d * phi1(u d)
    big_s = big_s + em * d * _phi1(u * d)
    big_g = big_g + em * (wm * d * _phi1(u * d) + d * d * _psi(u * d))
    fm, fn = np.exp(s * wm), np.exp(s * wn)
    big_s = big_s + (fm + fn) / 2
    big_g = big_g + (fm * wm + fn * wn) / 2
    # f = e^{s w(x)}: f^(j) = (s)_j f x^-j (falling factorial); g = f w: g^(j) = d/ds f^(j)
    poly, dpoly = np.ones_like(s), np.zeros_like(s)
    for j in range(1, 6):
        poly, dpoly = poly * (s - j + 1), dpoly * (s - j + 1) + poly
        if j in _EM:  # + B_{j+1}/(j+1)! (f^(j)(n) - f^(j)(m))
            an, am = fn * float(n) ** -j, fm * float(m) ** -j
            big_s = big_s + _EM[j] * poly * (an - am)
            big_g = big_g + _EM[j] * ((dpoly + poly * wn) * an - (dpoly + poly * wm) * am)
    return big_s, big_g


def _anchored_slope(lp: FloatArray, vocab_size: int, mass: FloatArray) -> FloatArray:
    """Slope ``s <= 0`` of ``p_r = p_k (r/k)^s`` with tail mass ``M`` (Newton; 0 if none)."""
    k = lp.shape[1]
    c, target = math.log((k + 1) / k), np.log(mass) - lp[:, -1]
    s = np.zeros(lp.shape[0])
    for _ in range(100):  # f(s) = s c + log S(s) - target is convex increasing: monotone
        big_s, big_g = _tail_sums(s, k, vocab_size)
        f = s * c + np.log(big_s) - target
        if ((np.abs(f) < 1e-11) | ((s == 0) & (f < 0))).all():
            break
        s = np.minimum(s - f / (c + big_g / big_s), 0.0)
    return s


def _fit(
    lp: FloatArray, vocab_size: int, r2_min: float, rule: TailRule
) -> tuple[BoolArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """Vectorised fit of validated ``(T, k)`` rows: ``power``, ``la``, ``b``, ``r2``, mass.

    The tail is ``p_r = exp(la + b log(r / (k+1)))``.
    """
    if rule not in ("paper", "anchored"):
        raise ConfigError(f"rule must be 'paper' or 'anchored', got {rule!r}")
    n_rows, k = lp.shape
    n_tail = vocab_size - k
    mass: FloatArray = np.maximum(1.0 - np.exp(lp).sum(axis=1), _MASS_FLOOR)
    b: FloatArray = np.zeros(n_rows)
    r2: FloatArray = np.full(n_rows, np.nan)
    if k >= 2:
        x = np.log(np.arange(1, k + 1, dtype=np.float64))
        xc = x - x.mean()
        yc = lp - lp.mean(axis=1, keepdims=True)
        slope = (yc * xc).sum(axis=1) / (xc * xc).sum()  # not BLAS: one order on every CPU
        ss_tot = (yc * yc).sum(axis=1)
        ok = ss_tot > 0
        r2[ok] = 1.0 - ((yc - slope[:, None] * xc) ** 2).sum(axis=1)[ok] / ss_tot[ok]
        b = np.where(ok, np.minimum(slope, 0.0), 0.0)
    power: BoolArray = r2 > r2_min
    if n_tail == 0:
        return np.zeros(n_rows, np.bool_), np.full(n_rows, -np.inf), 0 * b, r2, 0 * mass
    cap = lp[:, -1] if k else np.full(n_rows, np.inf)
    if rule == "anchored" and k:
        b = _anchored_slope(lp, vocab_size, mass)
        power = b < 0
    la = np.log(mass) - np.log(_tail_sums(np.where(power, b, 0.0), k, vocab_size)[0])
    power &= la <= cap + 1e-12  # a law above p_k falls back to the uniform tail
    uni = np.minimum(np.log(mass) - math.log(n_tail), cap)
    la, b = np.where(power, la, uni), np.where(power, b, 0.0)
    return power, la, b, r2, np.where(power, mass, np.minimum(mass, np.exp(cap) * n_tail))


def fit_tail(
    top_logprobs: npt.ArrayLike,
    vocab_size: int,
    *,
    r2_min: float = DEFAULT_R2_MIN,
    rule: TailRule = "paper",
) -> TailModel:
    """Fit the tail of one step from its ``k`` top log-probabilities (descending).

    ``rule="paper"`` (the paper's appendix): least-squares ``log p_r = a + b log r``
    on ``r = 1..k``, kept if ``R^2 > r2_min`` (and ``k >= 2``), else a uniform
    tail; renormalised over ranks ``k+1..V`` to sum to ``M = 1 - sum(top-k)``
    (floored at ``1e-12`` when rounding makes it ``<= 0``). If the renormalised
    law would put more than ``p_k`` on rank ``k+1`` (the top-k fall too fast
    for the mass left), the tail becomes uniform: ``min(M/(V-k), p_k)`` per rank.
    ``rule="anchored"`` ignores the fit: the power law through ``(k, p_k)``,
    ``p_r = p_k (r/k)^b``, with the slope that makes it sum to ``M`` (uniform
    capped at ``p_k`` if none does). It is several times more accurate on real
    traces (``studies/topk_accuracy.py``). ``k = 0``: uniform over ``V``.

    Raises :class:`~guardrail._errors.ConfigError` for NaN/inf or the
    ``-9999.0`` sentinel, log-probabilities > 0, an unsorted top-k, top-k
    probabilities summing to more than 1, or ``vocab_size < k``.
    """
    if not (0.0 <= r2_min <= 1.0):
        raise ConfigError(f"r2_min must lie in [0, 1], got {r2_min!r}")
    lp = _check_top(top_logprobs, vocab_size, 1)[None, :]
    k = lp.shape[1]
    power, la, b, r2, mass = _fit(lp, vocab_size, r2_min, rule)
    return TailModel(
        kind="power" if power[0] else "uniform",
        a=float(la[0] - b[0] * math.log(k + 1)),
        b=float(b[0]),
        r2=float(r2[0]),
        k=k,
        vocab_size=int(vocab_size),
        missing_mass=float(mass[0]),
    )


def _params(
    top_logprobs: npt.ArrayLike, vocab_size: int, tail: TailModel | None, rule: TailRule, ndim: int
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Validated 2-d ``lp``, ``la``, ``b`` and tail mass for the estimators."""
    lp = _check_top(top_logprobs, vocab_size, ndim)
    lp = lp[None, :] if ndim == 1 else lp
    k = lp.shape[1]
    if tail is None:
        _, la, b, _, mass = _fit(lp, vocab_size, DEFAULT_R2_MIN, rule)
        return lp, la, b, mass
    if tail.k != k or tail.vocab_size != vocab_size:
        raise ConfigError(f"tail is for k={tail.k}, V={tail.vocab_size}; got {k}, {vocab_size}")
    la = np.array([tail.a + tail.b * math.log(k + 1)])
    return lp, la, np.array([tail.b]), np.array([tail.missing_mass])


def _entropy(lp: FloatArray, la: FloatArray, b: FloatArray, vocab_size: int) -> FloatArray:
    h = -(np.exp(lp) * lp).sum(axis=1)
    if vocab_size > lp.shape[1]:  # -sum p log p with log p_r = la + b w_r
        big_s, big_g = _tail_sums(b, lp.shape[1], vocab_size)
        h = h - np.exp(la) * (la * big_s + b * big_g)
    return np.asarray(np.clip(h, 0.0, math.log(vocab_size)), dtype=np.float64)


def _logz(lp: FloatArray, la: FloatArray, b: FloatArray, vocab_size: int, t: float) -> FloatArray:
    if not (math.isfinite(t) and t > 0):
        raise ConfigError(f"temperature must be a finite number > 0, got {t!r}")
    z = np.exp(lp / t).sum(axis=1)
    if vocab_size > lp.shape[1]:
        z = z + np.exp(la / t) * _tail_sums(b / t, lp.shape[1], vocab_size)[0]
    bound = (1.0 - 1.0 / t) * math.log(vocab_size)
    return np.asarray(np.clip(np.log(z), min(0.0, bound), max(0.0, bound)), dtype=np.float64)


def _censored(lp: FloatArray, la: FloatArray, b: FloatArray, vocab_size: int) -> FloatArray:
    if vocab_size == lp.shape[1]:
        raise ConfigError("no token lies outside the top k when vocab_size == k")
    big_s, big_g = _tail_sums(b, lp.shape[1], vocab_size)
    return la + b * big_g / big_s  # sum_r (p_r / M) log p_r, log p_r = la + b w_r


def estimate_entropy(
    top_logprobs: npt.ArrayLike,
    vocab_size: int,
    *,
    tail: TailModel | None = None,
    rule: TailRule = "paper",
) -> float:
    """Entropy ``-sum P log P`` (nats): exact top-k part plus the tail's, in ``[0, log V]``.

    ``tail`` reuses a :func:`fit_tail` result (same ``k`` and ``V``; ``rule``
    is then ignored); without it the tail is fitted with ``rule``.
    """
    lp, la, b, _ = _params(top_logprobs, vocab_size, tail, rule, 1)
    return float(_entropy(lp, la, b, vocab_size)[0])


def estimate_logz(
    top_logprobs: npt.ArrayLike,
    vocab_size: int,
    temperature: float,
    *,
    tail: TailModel | None = None,
    rule: TailRule = "paper",
) -> float:
    """``log Z_T = log sum_y P(y)^(1/T)``, clipped to ``[0, (1 - 1/T) log V]`` (for T >= 1)."""
    lp, la, b, _ = _params(top_logprobs, vocab_size, tail, rule, 1)
    return float(_logz(lp, la, b, vocab_size, float(temperature))[0])


def censored_logprob(
    top_logprobs: npt.ArrayLike,
    vocab_size: int,
    *,
    tail: TailModel | None = None,
    rule: TailRule = "paper",
) -> float:
    """Estimated log-probability of a sampled token known to lie outside the top k.

    For a censored token (OpenAI's ``-9999.0``): the expected log-probability
    of a token drawn from the tail, ``sum_r (p_r / M) log p_r``. Lifts are
    linear in it, so the expected lift is kept (``log(sum p_r^2 / sum p_r)``,
    the log of the mean probability, is larger by Jensen and would bias lifts
    down), and traces check it exactly: the truth is ``-(H - H_topk) / M``.
    """
    lp, la, b, _ = _params(top_logprobs, vocab_size, tail, rule, 1)
    return float(_censored(lp, la, b, vocab_size)[0])


def estimate_entropy_batch(
    top_logprobs: npt.ArrayLike, vocab_size: int, *, rule: TailRule = "paper"
) -> FloatArray:
    """:func:`estimate_entropy` of each row of a ``(T, k)`` array; shape ``(T,)``."""
    lp, la, b, _ = _params(top_logprobs, vocab_size, None, rule, 2)
    return _entropy(lp, la, b, vocab_size)


def estimate_logz_batch(
    top_logprobs: npt.ArrayLike, vocab_size: int, temperature: float, *, rule: TailRule = "paper"
) -> FloatArray:
    """:func:`estimate_logz` of each row of a ``(T, k)`` array; shape ``(T,)``."""
    lp, la, b, _ = _params(top_logprobs, vocab_size, None, rule, 2)
    return _logz(lp, la, b, vocab_size, float(temperature))


def censored_logprob_batch(
    top_logprobs: npt.ArrayLike, vocab_size: int, *, rule: TailRule = "paper"
) -> FloatArray:
    """:func:`censored_logprob` of each row of a ``(T, k)`` array; shape ``(T,)``."""
    lp, la, b, _ = _params(top_logprobs, vocab_size, None, rule, 2)
    return _censored(lp, la, b, vocab_size)


def topk_compensated_lift(lift: float, missing_mass: float, s_typical: float) -> float:
    """The paper's top-k compensated lift ``L_comp = L + log(1 + M / S_typical)`` (appendix
    "Top-k Compensation"), for a lift ``L`` whose token's alternatives miss mass ``M``.

    Ill-defined as printed: one appendix sets ``S_typical = M / (|V| - k)``,
    making the correction the constant ``log(1 + |V| - k)`` (~ log V, at or
    above the clip bound); the other calls it "the skeleton probability for
    out-of-top-k tokens". So ``s_typical`` is explicit; the value we use (and
    recommend) is the skeleton probability of the emitted token. A heuristic
    with no derivation: judge it only by how close budgets and decisions come
    to the full-vocabulary ones (``studies/topk_accuracy.py``).
    """
    if not (math.isfinite(missing_mass) and missing_mass >= 0):
        raise ConfigError(f"missing_mass must be finite and >= 0, got {missing_mass!r}")
    if not (math.isfinite(s_typical) and s_typical > 0):
        raise ConfigError(f"s_typical must be finite and > 0, got {s_typical!r}")
    return float(lift + math.log1p(missing_mass / s_typical))
