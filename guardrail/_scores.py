"""Per-answer scores computed from recorded traces: lifts and baselines.

The skeletons here are the ones a trace can express on its own
(temperature prior via the recorded ``log Z_T``, the prompt-free model, a
uniform distribution over the vocabulary). Baselines are the single-pass
sequence-confidence scores peers use, oriented so that higher means more
confident:

================  =====================================================  ==============
name              score                                                  used by
================  =====================================================  ==============
``nll``           sequence log-likelihood ``sum_t log P(y_t)``           (classic)
``mean_logprob``  mean token log-probability                             (classic)
``min_logprob``   smallest token log-probability                         (classic)
``entropy``       minus the mean token entropy                           (classic)
``max_entropy``   minus the largest token entropy                        LLM-Check
``mean_margin``   mean top-1 minus top-2 probability                     UQLM
``min_margin``    smallest top-1 minus top-2 probability                 UQLM
``pmi``           mean pointwise mutual information                      lm-polygraph
                  ``log P(y_t|x, y_<t) - log P(y_t|y_<t)`` (prompt-free)
``final_mean``    mean log-probability of the final number's tokens      (maths)
``final_min``     smallest log-probability among them                    (maths)
================  =====================================================  ==============

``final_mean`` and ``final_min`` read the tokens that spell a worked answer's final
number (``Answer: 42`` or ``\\boxed{42}``; the rule is
:func:`guardrail._answer_span.final_number_span`'s), the answer-confidence baseline of
step-by-step maths (GSM8K); an answer with no number scores ``-inf``. They are defined
on any answer with a number, but mean something only where the last number is the
answer.

Entropies are the traces' exact ones, or with ``exact=False`` the top-k
compensated estimates (:mod:`guardrail._topk`); margins read the top two
alternatives (with fewer than two, the second comes from the compensated tail).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ._answer_span import final_number_span
from ._errors import ConfigError
from ._lift import DEFAULT_CLIP, clipped_lifts
from ._topk import TailRule, estimate_entropy_batch, estimate_logz_batch, fit_tail
from ._trace_format import Trace

__all__ = [
    "BASELINES",
    "TRACE_SKELETONS",
    "baseline_score",
    "token_entropies",
    "token_margins",
    "trace_clipped_lifts",
    "trace_skeleton_logprobs",
    "unigram_log_probs",
    "vector_clipped_lifts",
]

FloatArray = npt.NDArray[np.float64]

TRACE_SKELETONS = ("temperature", "temperature-2.0", "prompt-free", "uniform")
"""Skeleton kinds that can be evaluated from a trace alone."""

BASELINES = (
    "min_logprob",
    "mean_logprob",
    "nll",
    "entropy",
    "max_entropy",
    "mean_margin",
    "min_margin",
    "pmi",
    "final_mean",
    "final_min",
)
"""Baseline scores (higher = more confident)."""


def trace_skeleton_logprobs(
    trace: Trace, skeleton: str, *, exact: bool = True, rule: TailRule = "paper"
) -> FloatArray:
    """``log S(y_t)`` of each emitted token under a skeleton the trace can express.

    ``temperature`` is ``S = P^(1/T)/Z_T`` with T=1.5 (``temperature-2.0``:
    T=2.0), using the exact ``log Z_T`` recorded in the trace, or with
    ``exact=False`` the top-k compensated estimate from the trace's
    alternatives (what an API stream allows); ``prompt-free`` is the model
    without the question; ``uniform`` is ``1/|V|``.
    """
    if skeleton in ("temperature", "temperature-1.5", "temperature-2.0"):
        temp = 2.0 if skeleton.endswith("2.0") else 1.5
        if not exact:
            trace.require("vocab_size", purpose=f"the top-k estimate of log Z_{temp:g}")
            logz = estimate_logz_batch(trace.top_logprobs, trace.vocab_size, temp, rule=rule)
            return np.asarray(trace.logprobs / temp - logz, dtype=np.float64)
        if temp not in trace.logz:
            raise ConfigError(f"trace {trace.id} has no log Z for T={temp}")
        return np.asarray(trace.logprobs / temp - trace.logz[temp], dtype=np.float64)
    if skeleton == "prompt-free":
        trace.require("prompt_free_logprobs", purpose="the prompt-free skeleton")
        return np.asarray(trace.prompt_free_logprobs, dtype=np.float64)
    if skeleton == "uniform":
        trace.require("vocab_size", purpose="the uniform skeleton")
        return np.full(trace.n_tokens, -math.log(trace.vocab_size))
    raise ConfigError(f"unknown skeleton {skeleton!r}; choose one of {', '.join(TRACE_SKELETONS)}")


def trace_clipped_lifts(
    trace: Trace, skeleton: str, clip: float = DEFAULT_CLIP, *, exact: bool = True
) -> FloatArray:
    """Clipped lifts of every answer token of ``trace`` against ``skeleton``."""
    log_s = trace_skeleton_logprobs(trace, skeleton, exact=exact)
    return clipped_lifts(trace.logprobs, log_s, clip)


def token_entropies(trace: Trace, *, exact: bool = True) -> FloatArray:
    """Each answer token's next-token entropy (nats): the trace's exact value, or with
    ``exact=False`` the top-k compensated estimate from its alternatives."""
    if exact:
        trace.require("entropy", purpose="an exact-entropy score")
        return np.asarray(trace.entropy, dtype=np.float64)
    if trace.n_tokens == 0:
        return np.zeros(0, dtype=np.float64)
    trace.require("vocab_size", purpose="the top-k estimate of the entropy")
    return estimate_entropy_batch(trace.top_logprobs, trace.vocab_size)


def token_margins(trace: Trace) -> FloatArray:
    """Each answer token's top-1 minus top-2 probability, from the trace's alternatives.

    With one alternative the second probability is the compensated tail's first
    rank (:func:`guardrail.topk.fit_tail`); with none, the emitted token stands for the
    top one. The recorded top-20 are the true top-20, so with two or more
    alternatives the margin is exact.
    """
    top = trace.top_logprobs
    n, k = top.shape
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    if k >= 2:
        return np.asarray(np.exp(top[:, 0]) - np.exp(top[:, 1]), dtype=np.float64)
    p1 = np.exp(top[:, 0] if k else trace.logprobs)
    p2 = np.empty(n)
    trace.require("vocab_size", purpose="the margin with fewer than two alternatives")
    for i in range(n):
        tail = fit_tail(top[i], trace.vocab_size)
        p2[i] = math.exp(tail.a + tail.b * math.log(k + 1))
    return np.asarray(np.maximum(p1 - p2, 0.0), dtype=np.float64)


def baseline_score(trace: Trace, name: str, *, exact: bool = True) -> float:
    """A baseline confidence score of one answer (``-inf`` for an empty answer); see the
    module docstring for the names. ``exact=False`` estimates entropies from the
    top-k alternatives (what an API stream allows)."""
    if name not in BASELINES:
        raise ConfigError(f"unknown baseline {name!r}; choose one of {', '.join(BASELINES)}")
    if trace.n_tokens == 0:
        return -math.inf
    if name == "min_logprob":
        return float(trace.logprobs.min())
    if name == "mean_logprob":
        return float(trace.logprobs.mean())
    if name == "nll":
        return float(trace.logprobs.sum())
    if name in ("final_mean", "final_min"):
        span = final_number_span(trace.token_texts)
        if span is None:
            return -math.inf
        lp = trace.logprobs[span.start : span.stop]
        return float(lp.mean() if name == "final_mean" else lp.min())
    if name == "pmi":
        trace.require("prompt_free_logprobs", purpose="the pmi score")
        return float((trace.logprobs - trace.prompt_free_logprobs).mean())
    if name in ("mean_margin", "min_margin"):
        margin = token_margins(trace)
        return float(margin.mean() if name == "mean_margin" else margin.min())
    ent = token_entropies(trace, exact=exact)
    return -float(ent.max() if name == "max_entropy" else ent.mean())


def vector_clipped_lifts(
    trace: Trace, log_probs: npt.ArrayLike, clip: float = DEFAULT_CLIP
) -> FloatArray:
    """Clipped lifts against a fixed skeleton vector ``log S`` indexed by token id."""
    log_s = np.asarray(log_probs, dtype=np.float64)
    trace.require("token_ids", "vocab_size", purpose="a skeleton vector indexed by token id")
    if log_s.shape != (trace.vocab_size,):
        raise ConfigError(
            f"skeleton vector has shape {log_s.shape}, the trace's vocabulary is {trace.vocab_size}"
        )
    return clipped_lifts(trace.logprobs, log_s[trace.token_ids], clip)


def unigram_log_probs(
    token_ids: npt.ArrayLike, vocab_size: int, *, smoothing: float = 1.0, floor: float = 1e-3
) -> FloatArray:
    """Unigram skeleton over the model's vocabulary from token counts of a corpus.

    Add-``smoothing`` counts, then mixed with the uniform distribution,
    ``S <- (1 - floor) S + floor / V``, so every token keeps some mass.
    """
    if vocab_size < 1 or smoothing < 0 or not (0.0 <= floor < 1.0):
        raise ConfigError("unigram needs vocab_size >= 1, smoothing >= 0 and 0 <= floor < 1")
    ids = np.asarray(token_ids, dtype=np.int64).ravel()
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ConfigError("token ids must lie in [0, vocab_size)")
    counts = np.bincount(ids, minlength=vocab_size).astype(np.float64) + smoothing
    probs = counts / counts.sum()
    probs = (1.0 - floor) * probs + floor / vocab_size
    return np.asarray(np.log(probs), dtype=np.float64)
