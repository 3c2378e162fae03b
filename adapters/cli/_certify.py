"""The certificate ``liftguard calibrate --out`` writes: the calibrated rule plus the model,
the generation context and the provenance of the traces it was calibrated on."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from adapters.tracefiles import trace_identity
from guardrail import (
    Calibration,
    Certificate,
    ConfigError,
    GenerationContext,
    ModelIdentity,
    SkeletonSpec,
    StreamPolicy,
)

from ._common import CommandError

__all__ = ["build_certificate", "read_context", "skeleton_spec"]


def skeleton_spec(name: str, vocab_size: int) -> SkeletonSpec:
    """The streaming skeleton that the trace skeleton ``name`` stands for."""
    if name == "uniform":
        return SkeletonSpec("uniform", {"vocab_size": vocab_size})
    if name.startswith("temperature"):
        temperature = float(name.partition("-")[2] or 1.5)
        params = {"vocab_size": vocab_size, "temperature": temperature, "rule": "anchored"}
        return SkeletonSpec("temperature", params)
    if name == "prompt-free":
        return SkeletonSpec("prompt_free", {})
    raise CommandError(f"no streaming skeleton for --skeleton {name}", status=2)


def read_context(path: str | None) -> GenerationContext:
    """``--context FILE``: a JSON object with GenerationContext's fields (empty if none)."""
    if path is None:
        return GenerationContext()
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8-sig"))
        return GenerationContext.from_dict(data)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{path}: not valid JSON ({exc})") from exc
    except ConfigError as exc:
        raise CommandError(f"{path}: {exc}") from exc


def build_certificate(
    args: argparse.Namespace,
    model_id: str,
    vocab_size: int,
    result: Calibration,
    *,
    digest: str | None = None,
) -> Certificate:
    """The certificate of one ``calibrate`` run (lift score; the policy it replayed;
    ``digest``: the traces digest of ``args.traces``, computed as they were read)."""
    if result.policy is None:
        raise CommandError("the calibration records no streaming policy")
    provenance: dict[str, Any] = {
        "traces": Path(args.traces).name,
        **trace_identity(args.traces, digest=digest),
        "command": getattr(args, "command_line", ""),
    }
    return Certificate(
        policy=StreamPolicy.from_dict(dict(result.policy)),
        tau=result.tau,
        skeleton=skeleton_spec(args.skeleton, vocab_size),
        model=ModelIdentity(
            args.model_id or model_id, api_model=args.api_model, vocab_size=vocab_size
        ),
        context=read_context(args.context),
        calibration=result,
        provenance=provenance,
    )
