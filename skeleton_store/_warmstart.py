"""VSD skeletons in the store: build one, and warm-start it when the model changes.

:func:`build_vsd_version` fits a skeleton with :func:`guardrail.vsd.vsd` on the
next-token distributions of a set of traces, optionally calibrates the
certification threshold against it (:func:`guardrail.calibrate_policy` on
``lift = logprob - log S[token id]``, clipped at the policy's bound), and
publishes the vector with its VSD trace (objective per iteration, iterations,
seconds, stop reason) and calibration as a new version.

:func:`warm_start` is the maintenance step of the paper's appendix "Practical
Maintenance: Warm-Start VSD": after a model update, re-fit starting from the
stored version's vector instead of the uniform distribution, recalibrate on
the new model's traces, and publish the result as a child version (``parent``
= the version it started from), so that the change can be diffed, promoted
and rolled back like any other. VSD settings and the calibration target
(policy, risk, delta, method) default to the stored version's.

Calibration data: by default the calibration replays the same traces the
skeleton was fitted on. The fit uses their next-token distributions, never
their labels, but the skeleton then depends on the calibration inputs, which
the exchangeability argument behind the risk guarantee does not cover; pass
``calibration_traces`` (held out from the fit) for a clean guarantee. Which
data was used is recorded in the manifest (``extra["calibration_data"]``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from guardrail import Calibration, StreamPolicy, calibrate_policy
from guardrail._lift import DEFAULT_CLIP, clipped_lifts
from guardrail.topk import TailRule
from guardrail.traces import Trace
from guardrail.vsd import Geometry, distributions_from_traces, vsd
from guardrail.vsd._design import DEFAULT_FLOOR

from ._errors import InvalidRequest
from ._names import LATEST
from ._store import SkeletonStore
from ._version import SkeletonVersion

__all__ = ["DEFAULT_MAX_CONTEXTS", "CalibrationTarget", "build_vsd_version", "warm_start"]

logger = logging.getLogger(__name__)

CalibrationTarget = tuple[StreamPolicy, float, float]
"""``(policy, risk, delta)``: what :func:`guardrail.calibrate_policy` certifies."""

CalibrationMethod = Literal["ltt", "paper"]

DEFAULT_MAX_CONTEXTS = 256
"""Answer steps (contexts) VSD fits on by default: ``N x V`` floats in memory."""


def _vocab_size(traces: Sequence[Trace], what: str) -> int:
    sizes = {t.vocab_size for t in traces}
    if len(sizes) != 1:
        raise InvalidRequest(f"{what} must share one vocabulary size, got {sorted(sizes)}")
    return sizes.pop()


def _calibrate(
    log_s: npt.NDArray[np.float64],
    traces: Sequence[Trace],
    target: CalibrationTarget,
    method: CalibrationMethod,
) -> Calibration:
    if not (isinstance(target, tuple) and len(target) == 3):
        raise InvalidRequest("calibrate_with must be a tuple (policy, risk, delta)")
    policy, risk, delta = target
    if not isinstance(policy, StreamPolicy):
        raise InvalidRequest(f"calibrate_with[0] must be a StreamPolicy, got {type(policy)}")
    if any(t.correct is None for t in traces):
        raise InvalidRequest("calibration needs a correctness label on every trace")
    if _vocab_size(traces, "calibration traces") != log_s.size:
        raise InvalidRequest(f"calibration traces do not use the skeleton's {log_s.size} tokens")
    lifts = [clipped_lifts(t.logprobs, log_s[t.token_ids], policy.clip) for t in traces]
    correct = np.array([bool(t.correct) for t in traces])
    return calibrate_policy(
        policy, lifts, correct, risk=float(risk), delta=float(delta), method=method
    )


def build_vsd_version(
    store: SkeletonStore,
    name: str,
    traces: Sequence[Trace],
    *,
    lam: float = 0.5,
    clip: float = DEFAULT_CLIP,
    calibrate_with: CalibrationTarget | None = None,
    calibration_traces: Sequence[Trace] | None = None,
    calibration_method: CalibrationMethod = "ltt",
    parent: int | str | None = None,
    init: npt.ArrayLike | None = None,
    max_contexts: int | None = DEFAULT_MAX_CONTEXTS,
    rule: TailRule = "anchored",
    tol: float = 0.01,
    max_iter: int = 200,
    geometry: Geometry = "scaled",
    floor: float = DEFAULT_FLOOR,
    device: object = "cpu",
    dtype: npt.DTypeLike = np.float32,
    model_id: str | None = None,
    model_revision: str | None = None,
    tokenizer: str | None = None,
    logprob_mode: str | None = None,
    extra: Mapping[str, object] | None = None,
) -> SkeletonVersion:
    """Fit a VSD skeleton on ``traces``, calibrate it, and publish it as a new version of ``name``.

    ``traces``: the model's answer traces; their steps (at most
    ``max_contexts``, evenly spaced) become the rows of ``P``
    (:func:`guardrail.vsd.distributions_from_traces` with tail ``rule``, in
    ``dtype``). ``lam``, ``clip``, ``tol``, ``max_iter``, ``geometry``,
    ``floor``, ``device``: as in :func:`guardrail.vsd.vsd`; ``init`` a warm
    start vector (``None``: uniform). ``calibrate_with=(policy, risk, delta)``
    calibrates ``tau`` with ``calibration_method`` on ``calibration_traces``
    (default: ``traces``; see the module docstring). ``parent``: the version
    this one derives from (lineage only). ``model_id`` defaults to the traces'
    model. Returns the published version; ``version.vsd_trace`` holds the VSD
    record (objective trace, iterations, seconds, stop reason, ...).
    """
    traces = list(traces)
    if not traces:
        raise InvalidRequest("no traces to fit the skeleton on")
    vocab = _vocab_size(traces, "traces")
    P = distributions_from_traces(traces, rule=rule, max_contexts=max_contexts, dtype=dtype)
    result = vsd(
        P,
        lam=lam,
        clip=clip,
        tol=tol,
        max_iter=max_iter,
        init=init,
        device=device,
        floor=floor,
        geometry=geometry,
    )
    del P
    calibration = None
    cal_traces = traces if calibration_traces is None else list(calibration_traces)
    if calibrate_with is not None:
        calibration = _calibrate(
            result.log_skeleton(), cal_traces, calibrate_with, calibration_method
        )
    models = {t.model for t in traces}
    params = {
        "lambda": result.lam,
        "clip": result.clip,
        "floor": result.floor,
        "tol": tol,
        "max_iter": max_iter,
        "geometry": geometry,
        "tail_rule": rule,
        "max_contexts": max_contexts,
        "n_contexts": result.n_contexts,
        "n_traces": len(traces),
        "init": "uniform" if init is None else "warm",
    }
    info: dict[str, Any] = dict(extra or {})
    if calibration is not None:
        info["calibration_data"] = {
            "traces": "vsd traces" if calibration_traces is None else "separate traces",
            "n": len(cal_traces),
        }
    version = store.put(
        name,
        {"probs": result.skeleton},
        kind="vsd",
        parent=parent,
        model_id=model_id if model_id is not None else (models.pop() if len(models) == 1 else None),
        model_revision=model_revision,
        tokenizer=tokenizer,
        vocab_size=vocab,
        logprob_mode=logprob_mode,
        params=params,
        vsd_trace=result.to_dict(),
        calibration=calibration,
        extra=info,
    )
    logger.info(
        "%s %s: VSD %s in %d iterations (%.3g s)",
        name,
        version.tag,
        "converged" if result.converged else f"stopped ({result.stop_reason})",
        result.iterations,
        result.seconds,
    )
    return version


def _stored_target(old: SkeletonVersion) -> tuple[CalibrationTarget, CalibrationMethod] | None:
    cal = old.calibration
    if cal is None:
        return None
    pol = cal.get("policy")
    policy = StreamPolicy.from_dict(dict(pol)) if pol else StreamPolicy()
    method: CalibrationMethod = "paper" if cal.get("method") == "paper" else "ltt"
    return (policy, float(cal["risk"]), float(cal["delta"])), method


def warm_start(
    store: SkeletonStore,
    name: str,
    new_traces: Sequence[Trace],
    *,
    alias: int | str = LATEST,
    lam: float | None = None,
    clip: float | None = None,
    calibrate_with: CalibrationTarget | None = None,
    calibration_traces: Sequence[Trace] | None = None,
    calibration_method: CalibrationMethod | None = None,
    max_contexts: int | None = None,
    rule: TailRule | None = None,
    tol: float | None = None,
    max_iter: int | None = None,
    geometry: Geometry | None = None,
    device: object = "cpu",
    dtype: npt.DTypeLike = np.float32,
    model_id: str | None = None,
    model_revision: str | None = None,
    tokenizer: str | None = None,
    logprob_mode: str | None = None,
    extra: Mapping[str, object] | None = None,
) -> SkeletonVersion:
    """Re-fit ``name`` on a changed model's traces, starting from a stored version.

    Loads the version ``alias`` points to (``latest``, ``production``, a
    number...), runs VSD on ``new_traces`` initialised from its vector,
    recalibrates, and publishes a child version (``parent`` = the loaded
    version; ``extra["warm_start"]`` names it). Every setting left ``None``
    is taken from the loaded version: the VSD parameters from its ``params``
    and the calibration target (policy, risk, delta, method) from its
    calibration (no calibration if it has none and ``calibrate_with`` is not
    given). ``model_id`` defaults to the new traces' model, the tokenizer and
    logprob mode to the loaded version's.
    """
    old = store.get(name, alias)
    init = old.probs()
    traces = list(new_traces)
    if traces and _vocab_size(traces, "new traces") != init.size:
        raise InvalidRequest(
            f"{name} {old.tag} has {init.size} tokens, the new traces {traces[0].vocab_size}"
        )
    p = old.params

    def pick(value: Any, key: str, default: Any) -> Any:
        return value if value is not None else p.get(key, default)

    target = None
    method: CalibrationMethod = calibration_method or "ltt"
    if calibrate_with is not None:
        target = calibrate_with
    else:
        stored = _stored_target(old)
        if stored is not None:
            target = stored[0]
            method = calibration_method or stored[1]
    info = {**(extra or {}), "warm_start": {"from": old.version, "ref": str(alias)}}
    return build_vsd_version(
        store,
        name,
        traces,
        lam=float(pick(lam, "lambda", 0.5)),
        clip=float(pick(clip, "clip", DEFAULT_CLIP)),
        calibrate_with=target,
        calibration_traces=calibration_traces,
        calibration_method=method,
        parent=old.version,
        init=init,
        max_contexts=pick(max_contexts, "max_contexts", DEFAULT_MAX_CONTEXTS),
        rule=pick(rule, "tail_rule", "anchored"),
        tol=float(pick(tol, "tol", 0.01)),
        max_iter=int(pick(max_iter, "max_iter", 200)),
        geometry=pick(geometry, "geometry", "scaled"),
        floor=float(p.get("floor", DEFAULT_FLOOR)),
        device=device,
        dtype=dtype,
        model_id=model_id,
        model_revision=model_revision,
        tokenizer=tokenizer if tokenizer is not None else old.tokenizer,
        logprob_mode=logprob_mode if logprob_mode is not None else old.logprob_mode,
        extra=info,
    )
