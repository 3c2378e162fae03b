"""``liftguard stress``: the skeleton-corruption study (paper, Sec. "Robustness to
Skeleton Misspecification").

A unigram skeleton is built from the calibration half's tokens and the
certificate calibrated with it; the skeleton is then corrupted with strength
``s`` (25/50/75%) as ``S' = (1 - s) S + s C`` for a corruption distribution
``C``, and the test half is decided with ``S'`` at the same ``tau``. Reported
next to the changes in risk and coverage: ``eta = TV(S, S')`` and the
eta-robustness bound on the budget shift, ``min(B, 2 eta / alpha)`` with
``alpha`` the smallest probability of ``S`` or ``S'`` on the emitted tokens.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["CORRUPTIONS", "cmd_stress", "corrupt"]

CORRUPTIONS = ("noise", "vocab-shift", "uniform", "adversarial")
FloatArray = npt.NDArray[np.float64]


def corrupt(
    probs: FloatArray,
    kind: str,
    strength: float,
    rng: np.random.Generator,
    adversary: FloatArray | None = None,
) -> FloatArray:
    """``(1 - strength) S + strength C`` for the corruption ``kind``.

    ``noise``: C = S times log-normal noise (sigma 1), renormalised;
    ``vocab-shift``: C = S with token ids randomly permuted; ``uniform``: C =
    1/V; ``adversarial``: C = ``adversary`` (the study passes the token
    distribution of the correct test answers, which lowers their lifts most).
    """
    v = probs.size
    if kind == "noise":
        c = probs * np.exp(rng.normal(0.0, 1.0, v))
    elif kind == "vocab-shift":
        c = probs[rng.permutation(v)]
    elif kind == "uniform":
        c = np.full(v, 1.0 / v)
    elif kind == "adversarial":
        if adversary is None:
            raise ValueError("the adversarial corruption needs a target distribution")
        c = adversary
    else:
        raise ValueError(f"unknown corruption {kind!r}")
    c = c / c.sum()
    out = (1.0 - strength) * probs + strength * c
    return np.asarray(out / out.sum(), dtype=np.float64)


def _decide(traces: list[Any], idx: Any, log_s: FloatArray, policy: Any, tau: float) -> Any:
    from guardrail._policy import shown_at
    from guardrail.traces import vector_clipped_lifts

    lifts = [vector_clipped_lifts(traces[i], log_s, policy.clip) for i in idx]
    return shown_at(policy, lifts, [tau])[:, 0]


def cmd_stress(args: argparse.Namespace) -> int:
    from guardrail import StreamPolicy, calibrate_policy
    from guardrail._bounds import eta_budget_shift_bound, tv_distance
    from guardrail._scores import unigram_log_probs
    from guardrail.traces import read_traces, vector_clipped_lifts

    from ._common import CommandError, no_traces, split_indices

    traces = read_traces(args.traces)
    if not traces:
        raise no_traces(args.traces)
    if len(traces) < 2:
        raise CommandError(
            f"{args.traces}: stress needs at least 2 traces (a calibration "
            "and a test half), it holds 1"
        )
    correct = np.array([bool(t.correct) for t in traces])
    vocab = traces[0].vocab_size
    cal, test = split_indices(len(traces), 0.5, args.seed)
    ids = np.concatenate([traces[i].token_ids for i in cal])
    log_s = unigram_log_probs(ids, vocab, smoothing=args.smoothing)
    probs = np.exp(log_s)
    policy = StreamPolicy(aggregate=args.aggregate, lowest_k=args.lowest_k)
    lifts = [vector_clipped_lifts(traces[i], log_s, policy.clip) for i in cal]
    cal_result = calibrate_policy(policy, lifts, correct[cal], risk=args.risk, delta=args.delta)
    tau = cal_result.tau
    base = _decide(traces, test, log_s, policy, tau)

    def summary(shown: Any) -> tuple[float, float]:
        n = int(shown.sum())
        return n / test.size, float((shown & ~correct[test]).sum() / n) if n else 0.0

    cov0, risk0 = summary(base)
    good = np.concatenate(
        [np.zeros(0, np.int64), *(traces[i].token_ids for i in test if correct[i])]
    )
    adversary = np.bincount(good, minlength=vocab).astype(np.float64) + 1e-12
    emitted = np.unique(np.concatenate([traces[i].token_ids for i in test]))
    rng = np.random.default_rng(args.seed)
    rows: list[dict[str, Any]] = []
    for kind in CORRUPTIONS:
        for strength in (0.25, 0.5, 0.75):
            p2 = corrupt(probs, kind, strength, rng, adversary)
            eta = tv_distance(probs, p2)
            alpha = float(np.minimum(probs[emitted], p2[emitted]).min())
            cov, risk = summary(_decide(traces, test, np.log(p2), policy, tau))
            rows.append(
                {
                    "corruption": kind,
                    "strength": strength,
                    "eta": eta,
                    "budget_shift_bound": eta_budget_shift_bound(eta, alpha, policy.clip),
                    "coverage": cov,
                    "coverage_change": cov - cov0,
                    "risk": risk,
                    "risk_change": risk - risk0,
                }
            )
    report = {
        "traces": str(args.traces),
        "risk_target": args.risk,
        "tau": tau,
        "clean": {"coverage": cov0, "risk": risk0},
        "rows": rows,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"liftguard stress: {args.traces}  unigram skeleton (smoothing {args.smoothing:g}), "
        f"{args.aggregate} aggregate, "
        f"tau {tau:.3f} (target risk {args.risk:g})\n"
        f"  clean skeleton: coverage {cov0:.1%}, risk {risk0:.3f}\n"
    )
    print("| corruption | strength | eta (TV) | budget-shift bound | coverage (change) ", end="")
    print("| risk (change) |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['corruption']} | {r['strength']:.0%} | {r['eta']:.3f} | "
            f"{r['budget_shift_bound']:.2f} | {r['coverage']:.1%} ({r['coverage_change']:+.1%}) | "
            f"{r['risk']:.3f} ({r['risk_change']:+.3f}) |"
        )
    return 0
