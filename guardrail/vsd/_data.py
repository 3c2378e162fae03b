"""Building ``P`` for :func:`guardrail.vsd._design.vsd`: next-token distributions from traces
or logits."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import ConfigError
from .._topk import DEFAULT_R2_MIN, TailRule, _check_top, _fit
from .._trace_format import Trace

__all__ = ["distributions_from_logits", "distributions_from_traces"]


def distributions_from_traces(
    traces: Iterable[Trace],
    *,
    rule: TailRule = "anchored",
    max_contexts: int | None = None,
    dtype: npt.DTypeLike = np.float64,
) -> npt.NDArray[Any]:
    """Next-token distributions of every answer step of ``traces``: an ``(N, V)`` array.

    Each step (one context: question plus the answer so far) becomes one row:
    its top-k probabilities at their token ids, the emitted token's probability
    at its id when it is not among them, and the rest of the mass spread
    *uniformly* over the other ids. The rest is the compensated tail mass of
    :func:`guardrail.topk.fit_tail` (``1 - sum(top-k)``, less where ``rule`` caps the
    tail at ``p_k`` per token); rows are renormalised to sum to 1. Uniform,
    because a trace says how much mass lies outside the top k (and the fitted
    law says how it falls with rank) but not *which* ids hold it: spreading it
    evenly is the maximum-entropy choice, and it only affects ids that are in
    no context's top k. ``max_contexts``: keep that many steps, evenly spaced
    over all steps in order (deterministic). ``dtype`` float32 halves memory
    (``N * V`` values).
    """
    items = [t for t in traces if t.n_tokens > 0]
    for t in items:
        t.require("vocab_size", "token_ids", "top_ids", purpose="VSD's next-token distributions")
    if not items:
        raise ConfigError("no trace with at least one token")
    vocab = {t.vocab_size for t in items}
    if len(vocab) != 1:
        raise ConfigError(f"traces have different vocabulary sizes: {sorted(vocab)}")
    n_vocab = vocab.pop()
    total = sum(t.n_tokens for t in items)
    if max_contexts is not None and (
        isinstance(max_contexts, bool) or not isinstance(max_contexts, int) or max_contexts < 1
    ):
        raise ConfigError(f"max_contexts must be an integer >= 1, got {max_contexts!r}")
    if max_contexts is None or max_contexts >= total:
        keep = np.arange(total)
    else:
        keep = np.unique(np.linspace(0, total - 1, max_contexts).round().astype(np.int64))
    out = np.empty((keep.size, n_vocab), dtype=dtype)
    row, offset = 0, 0
    for t in items:
        steps = keep[(keep >= offset) & (keep < offset + t.n_tokens)] - offset
        offset += t.n_tokens
        if steps.size == 0:
            continue
        lp = _check_top(t.top_logprobs[steps], n_vocab, 2)
        k = lp.shape[1]
        mass = _fit(lp, n_vocab, DEFAULT_R2_MIN, rule)[4]
        ids = t.top_ids[steps]
        emitted = t.token_ids[steps]
        extra = ~(ids == emitted[:, None]).any(axis=1)  # emitted token outside the top k
        p_emit = np.where(extra, np.exp(np.minimum(t.logprobs[steps], 0.0)), 0.0)
        others = n_vocab - k - extra
        tail = np.where(others > 0, np.maximum(mass - p_emit, 0.0) / np.maximum(others, 1), 0.0)
        block = out[row : row + steps.size]
        block[:] = tail[:, None]
        r = np.arange(steps.size)
        block[r[extra], emitted[extra]] = p_emit[extra]
        block[r[:, None], ids] = np.exp(lp)
        block /= block.sum(axis=1, keepdims=True, dtype=np.float64)
        row += steps.size
    return out


def distributions_from_logits(
    logits: npt.ArrayLike, *, dtype: npt.DTypeLike = np.float64
) -> npt.NDArray[Any]:
    """Softmax of each row of an ``(N, V)`` array of logits or log-probabilities.

    For a local model that exposes its full output: full-vocabulary rows need
    no tail model. ``-inf`` entries (probability 0) are allowed.
    """
    x = np.array(logits, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 2:
        raise ConfigError(f"logits must be an (N, V) array with V >= 2, got shape {x.shape}")
    if np.isnan(x).any() or (x == np.inf).any():
        raise ConfigError("logits contain NaN or +inf")
    top = x.max(axis=1, keepdims=True)
    if not np.isfinite(top).all():
        raise ConfigError("a row of logits is entirely -inf")
    x -= top
    np.exp(x, out=x)
    x /= x.sum(axis=1, keepdims=True)
    return x.astype(dtype, copy=False)
