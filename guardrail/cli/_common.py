"""Helpers shared by the command-line commands."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from .._policy import StreamPolicy

__all__ = ["oracle_coverage", "resolve_clip", "split_indices", "stream_policy"]


def resolve_clip(args: argparse.Namespace, vocab_size: int) -> float:
    """``--clip``, or when it is not given: ``support_clip(|V|)`` for the uniform
    skeleton (tokens at probability >= 0.8 fully supported), else 12."""
    from .._lift import DEFAULT_CLIP, support_clip

    if args.clip is None:
        args.clip = support_clip(vocab_size) if args.skeleton == "uniform" else DEFAULT_CLIP
    return float(args.clip)


def stream_policy(args: argparse.Namespace) -> StreamPolicy:
    """The betting-boundary policy the certificate options describe (clip resolved)."""
    from .._policy import StreamPolicy

    return StreamPolicy(
        delta=args.stream_delta,
        clip=args.clip,
        min_tokens=args.min_tokens,
        aggregate=args.aggregate,
        lowest_k=args.lowest_k,
    )


def oracle_coverage(
    scores: npt.ArrayLike, correct: npt.ArrayLike, risk: float
) -> tuple[float, float]:
    """Largest coverage of a threshold rule whose risk on these examples is ``<= risk``.

    Returns ``(coverage, threshold)``; ``(0.0, inf)`` if no threshold qualifies.
    Thresholds are the distinct finite scores (ties answered together).
    """
    s = np.asarray(scores, dtype=np.float64)
    err = ~np.asarray(correct, dtype=bool)
    finite = np.isfinite(s)
    order = np.argsort(-s[finite], kind="stable")
    ss, ee = s[finite][order], err[finite][order]
    if ss.size == 0:
        return 0.0, float("inf")
    last = np.r_[ss[1:] != ss[:-1], True]
    n = (np.flatnonzero(last) + 1).astype(np.float64)
    k = np.cumsum(ee)[last]
    good = np.flatnonzero(k <= risk * n + 1e-12)
    if good.size == 0:
        return 0.0, float("inf")
    j = int(good[-1])
    return float(n[j] / s.size), float(ss[last][j])


def split_indices(
    n: int, fraction: float, seed: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    n_cal = round(n * fraction)
    return np.sort(perm[:n_cal]), np.sort(perm[n_cal:])
