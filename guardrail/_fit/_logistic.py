"""Fitting a :class:`~guardrail._fit._statistic.FittedStatistic` on labelled traces.

:func:`answer_features` computes each trace's answer-level features with the batch
twins (:mod:`guardrail._fit._features_batch`, :func:`~guardrail._aggregates.aggregate_path`);
:func:`token_ranges` picks clamp ranges for the base features from the training
tokens; :func:`fit_statistic` fits an L2-regularised logistic regression on the
standardised features by Newton's method (``form="monotone"``: sign-constrained,
L-BFGS-B). Fitting never sees the answers that calibrate ``tau``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .._aggregates import Feature, aggregate_path, scoped_path
from .._errors import ConfigError
from .._features import BASES, DEFAULT_TEMPERATURE, TopKTables, base_range
from .._scopes import scope_mask
from .._trace_format import Trace
from ._features_batch import base_features_batch
from ._statistic import DEFAULT_ALTERNATIVES, DEFAULT_L2, FittedStatistic, Form

__all__ = ["answer_features", "fit_statistic", "token_ranges", "trace_base_features"]

FloatArray = npt.NDArray[np.float64]


def trace_base_features(
    trace: Trace,
    bases: Sequence[str],
    *,
    skeleton: Any = None,
    alternatives: int = DEFAULT_ALTERNATIVES,
    temperature: float = DEFAULT_TEMPERATURE,
    tables: TopKTables | None = None,
) -> dict[str, FloatArray]:
    """Each base feature of every token of a recorded answer (batch twin of the stream).

    ``skeleton`` (for ``lift``): ``"prompt-free"`` reads the trace's recorded
    prompt-free log-probabilities; a skeleton object is asked for each token's event.
    """
    skel = None
    trace.require("vocab_size", purpose="the fitted statistic's features")
    if "exact_entropy" in bases:
        trace.require("entropy", purpose="the exact-entropy features (group 'local')")
    if "lift" in bases:
        if skeleton == "prompt-free":
            trace.require("prompt_free_logprobs", purpose="the prompt-free lift features")
            skel = trace.prompt_free_logprobs
        elif skeleton is None or isinstance(skeleton, str):
            raise ConfigError(
                f"the lift feature needs 'prompt-free' or a skeleton, got {skeleton!r}"
            )
        else:
            from ._state import trace_events

            skel = np.array([skeleton.log_prob(e) for e in trace_events(trace)], dtype=np.float64)
    return base_features_batch(
        bases,
        trace.vocab_size,
        trace.logprobs,
        trace.top_logprobs[:, :alternatives],
        skeleton_logprobs=skel,
        exact_entropy=trace.entropy,
        temperature=temperature,
        tables=tables,
    )


def answer_features(
    traces: Sequence[Trace],
    features: Sequence[Feature],
    *,
    skeleton: Any = None,
    ranges: Mapping[str, tuple[float, float]] | None = None,
    alternatives: int = DEFAULT_ALTERNATIVES,
    temperature: float = DEFAULT_TEMPERATURE,
    tables: TopKTables | None = None,
) -> FloatArray:
    """Final answer-level features of each trace, shape ``(n, features)`` (NaN rows for
    empty answers, which the deployed rule never shows); ``skeleton`` as in
    :func:`trace_base_features`; ``ranges``: narrower clamps per base feature."""
    used = {f.base for f in features}
    bases = [b for b in BASES if b in used]
    out = np.full((len(traces), len(features)), np.nan)
    each = _base_values(traces, bases, skeleton, alternatives, temperature, tables)
    scopes = {f.scope for f in features if f.scope is not None}
    for i, trace, vals in each:
        ends = {}
        for base in bases:
            lo, hi = (ranges or {}).get(base) or base_range(base, trace.vocab_size)
            vals[base], ends[base] = np.clip(vals[base], lo, hi), (lo, hi)
        masks = {s: scope_mask(trace.token_texts, s) for s in scopes}
        for j, f in enumerate(features):
            x = vals.get(f.base, trace.logprobs)
            lo, hi = ends.get(f.base, (0.0, 0.0))
            if f.scope is None:
                out[i, j] = aggregate_path(x, f, hi)[-1]
            else:
                out[i, j] = scoped_path(x, masks[f.scope], f, lo, hi)[-1]
    return out


def _base_values(
    traces: Sequence[Trace],
    bases: Sequence[str],
    skeleton: Any,
    alternatives: int,
    temperature: float,
    tables: TopKTables | None,
) -> Iterator[tuple[int, Trace, dict[str, FloatArray]]]:
    """``(index, trace, base features)`` of each non-empty trace (:func:`trace_base_features`),
    the top-k tables remade only when the vocabulary size changes."""
    for i, trace in enumerate(traces):
        if trace.n_tokens == 0:
            continue
        if tables is None or tables.vocab_size != trace.vocab_size:
            tables = TopKTables(trace.vocab_size)
        yield (
            i,
            trace,
            trace_base_features(
                trace,
                bases,
                skeleton=skeleton,
                alternatives=alternatives,
                temperature=temperature,
                tables=tables,
            ),
        )


def token_ranges(
    traces: Sequence[Trace],
    bases: Sequence[str],
    *,
    skeleton: Any = None,
    quantile: float = 0.01,
    alternatives: int = DEFAULT_ALTERNATIVES,
    temperature: float = DEFAULT_TEMPERATURE,
) -> dict[str, tuple[float, float]]:
    """Per base feature, the ``quantile`` and ``1 - quantile`` quantiles of its token values
    over ``traces``: clamp ranges that keep almost every value and bound what a
    continuation can do tightly (the early verdicts depend on them)."""
    if not (0.0 <= quantile < 0.5):
        raise ConfigError(f"quantile must lie in [0, 0.5), got {quantile!r}")
    bases = [b for b in BASES if b in bases]
    pooled: dict[str, list[FloatArray]] = {b: [] for b in bases}
    for _, _, vals in _base_values(traces, bases, skeleton, alternatives, temperature, None):
        for b in bases:
            pooled[b].append(vals[b])
    out: dict[str, tuple[float, float]] = {}
    for b in bases:
        if not pooled[b]:
            continue
        x = np.concatenate(pooled[b])
        lo, hi = (float(v) for v in np.quantile(x, [quantile, 1.0 - quantile]))
        if hi > lo:
            out[b] = (lo, hi)
    return out


# The fit adds its products without BLAS: a BLAS library picks its kernels by CPU, and
# another CPU family adds the same products in another order, so a fitted number would
# differ in its last digits from one machine to the next. numpy's elementwise products
# and its own reductions add in one order everywhere (tests/guardrail/test_fit_certificate.py
# refits under several kernels); what still moves with the CPU is numpy's exp and log,
# which take AVX-512 paths where the CPU has them (tests/reference_cpu.py).


def _rows_dot(a: FloatArray, w: FloatArray) -> FloatArray:
    """``a @ w``, each row's products added in one order on every CPU."""
    return np.asarray(np.add.reduce(a * w, axis=1), dtype=np.float64)


def _cols_dot(a: FloatArray, v: FloatArray) -> FloatArray:
    """``a.T @ v``, added in one order on every CPU."""
    return np.asarray(np.add.reduce(a * v[:, None], axis=0), dtype=np.float64)


def _gram(a: FloatArray, weights: FloatArray) -> FloatArray:
    """``a.T @ diag(weights) @ a``, added in one order on every CPU."""
    b = a * weights[:, None]
    return np.stack([_cols_dot(b, a[:, j]) for j in range(a.shape[1])])


def _solve(h: FloatArray, g: FloatArray) -> FloatArray:
    """``h^-1 g`` by Gaussian elimination with partial pivoting in Python floats (the
    systems are at most a few dozen unknowns; LAPACK would bring BLAS back)."""
    n = len(g)
    m = [[float(v) for v in row] + [float(gi)] for row, gi in zip(h, g, strict=True)]
    for c in range(n):
        pivot = max(range(c, n), key=lambda r: abs(m[r][c]))
        if m[pivot][c] == 0.0:
            raise np.linalg.LinAlgError("singular matrix")
        m[c], m[pivot] = m[pivot], m[c]
        for r in range(c + 1, n):
            f = m[r][c] / m[c][c]
            if f:
                m[r] = [x - f * y for x, y in zip(m[r], m[c], strict=True)]
    out = [0.0] * n
    for r in range(n - 1, -1, -1):
        out[r] = (m[r][n] - math.fsum(m[r][j] * out[j] for j in range(r + 1, n))) / m[r][r]
    return np.asarray(out, dtype=np.float64)


def _logistic_newton(z: FloatArray, y: FloatArray, l2: float) -> FloatArray:
    n, d = z.shape
    a = np.c_[np.ones(n), z]
    pen = np.r_[0.0, np.full(d, l2)]
    w = np.zeros(d + 1)
    w[0] = math.log((y.mean() + 1e-9) / (1.0 - y.mean() + 1e-9))
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-_rows_dot(a, w)))
        grad = _cols_dot(a, p - y) + pen * w
        hess = _gram(a, p * (1.0 - p)) + np.diag(pen)
        step = _solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return w


def _logistic_signed(z: FloatArray, y: FloatArray, l2: float, signs: Sequence[int]) -> FloatArray:
    from scipy.optimize import minimize

    n, d = z.shape
    a = np.c_[np.ones(n), z]
    pen = np.r_[0.0, np.full(d, l2)]

    def loss(w: FloatArray) -> tuple[float, FloatArray]:
        s = _rows_dot(a, w)
        val = float(np.logaddexp(0.0, s).sum() - (y * s).sum() + 0.5 * (pen * w * w).sum())
        p = 1.0 / (1.0 + np.exp(-s))
        return val, _cols_dot(a, p - y) + pen * w

    bounds = [(None, None)] + [
        (0.0, None) if sg > 0 else ((None, 0.0) if sg < 0 else (None, None)) for sg in signs
    ]
    res = minimize(
        loss,
        np.zeros(d + 1),
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"maxiter": 2000, "ftol": 1e-12, "gtol": 1e-9},
    )
    w = np.asarray(res.x, dtype=np.float64)
    w[1:] = np.where(np.asarray(signs) > 0, np.maximum(w[1:], 0.0), w[1:])
    w[1:] = np.where(np.asarray(signs) < 0, np.minimum(w[1:], 0.0), w[1:])
    return w


def fit_statistic(
    x: npt.ArrayLike,
    correct: npt.ArrayLike,
    features: Sequence[Feature],
    *,
    vocab_size: int,
    form: Form = "answer",
    l2: float = DEFAULT_L2,
    temperature: float = DEFAULT_TEMPERATURE,
    ranges: Mapping[str, tuple[float, float]] | None = None,
    alternatives: int = DEFAULT_ALTERNATIVES,
    info: Mapping[str, Any] | None = None,
    clamp: bool = True,
) -> FittedStatistic:
    """Fit the logistic statistic on answer-level features ``x`` (rows of
    :func:`answer_features`; empty answers are left out) and labels ``correct``.

    With ``clamp`` (the default), the statistic holds each feature to the range it spans
    on these answers (:attr:`~guardrail.fitting.FittedStatistic.clamps`), so that it never
    extrapolates its terms to answers unlike them.

    ``form="monotone"`` constrains each weight's sign so that its term can only fall
    as tokens arrive (features that move either way get weight 0). Of ``ranges``, the
    statistic keeps those of the bases its features read."""
    xs = np.asarray(x, dtype=np.float64)
    ok = np.asarray(correct, dtype=bool)
    feats = tuple(features)
    if xs.ndim != 2 or xs.shape != (ok.size, len(feats)):
        raise ConfigError("x must have one row per answer and one column per feature")
    if not (math.isfinite(l2) and l2 > 0):
        raise ConfigError(f"l2 must be a finite number > 0, got {l2!r}")
    keep = np.isfinite(xs).all(axis=1)
    xs, y = xs[keep], ok[keep].astype(np.float64)
    if y.size < 10 or y.min() == y.max():
        raise ConfigError(
            f"fitting needs labelled answers of both kinds: got {int(y.sum())} correct and "
            f"{int(y.size - y.sum())} wrong non-empty answers"
        )
    center = xs.mean(axis=0)
    scale = xs.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)
    z = (xs - center) / scale
    if form == "monotone":
        rng = dict(ranges or {})
        dirs = [
            1
            if f.base == "length"
            else f.direction(*(rng.get(f.base) or base_range(f.base, vocab_size)))
            for f in feats
        ]
        signs = [0 if d == 0 else (-1 if d == 1 else 1) for d in dirs]
        keep_cols = [d is not None for d in dirs]
        w = _logistic_signed(
            z[:, keep_cols], y, l2, [s for s, k in zip(signs, keep_cols, strict=True) if k]
        )
        full = np.zeros(len(feats) + 1)
        full[0] = w[0]
        full[1:][np.asarray(keep_cols)] = w[1:]
        w = full
    elif form == "answer":
        w = _logistic_newton(z, y, l2)
    else:
        raise ConfigError(f"form must be 'answer' or 'monotone', got {form!r}")
    meta = {"model": "logistic", "l2": l2, "n": int(y.size), "n_correct": int(y.sum())}
    lows, highs = xs.min(axis=0).tolist(), xs.max(axis=0).tolist()
    return FittedStatistic(
        features=feats,
        weights=tuple(float(v) for v in w[1:]),
        intercept=float(w[0]),
        center=tuple(float(v) for v in center),
        scale=tuple(float(v) for v in scale),
        vocab_size=vocab_size,
        temperature=temperature,
        form=form,
        alternatives=alternatives,
        ranges={b: r for b, r in (ranges or {}).items() if b in {f.base for f in feats}},
        info={**meta, **dict(info or {})},
        clamps=tuple(zip(lows, highs, strict=True)) if clamp else (),
    )
