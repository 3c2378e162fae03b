"""The certificate ``liftguard calibrate --out`` writes: the calibrated rule plus the model,
the generation context and the provenance of the traces it was calibrated on."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from adapters._tracefiles._digest import trace_identity
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

__all__ = ["add_skeleton_spec_option", "build_certificate", "read_context", "skeleton_spec"]


SKELETON_SPEC_HELP = (
    'a JSON file with the certificate\'s skeleton spec ({"kind": ..., "params": {...}}) '
    "instead of the one --skeleton stands for; with --skeleton prompt-free, name the model "
    'and prefix that scored the traces\' prompt-free pass, e.g. {"kind": "prompt_free", '
    '"params": {"model": "qwen", "prefix": "..."}} (default: the bundled SmolLM2)'
)


def add_skeleton_spec_option(parser: argparse.ArgumentParser) -> None:
    """``--skeleton-spec FILE`` (``calibrate`` and ``fit``)."""
    parser.add_argument("--skeleton-spec", metavar="FILE", default=None, help=SKELETON_SPEC_HELP)


def skeleton_spec(name: str, vocab_size: int, spec_file: str | None = None) -> SkeletonSpec:
    """The streaming skeleton that the trace skeleton ``name`` stands for: ``spec_file``'s
    spec where given (its kind must be ``name``'s, and its vocabulary the traces'), else
    the default spec of ``name``, recording the traces' vocabulary size (a ``prompt_free``
    spec without a model is the bundled SmolLM2 with its default prefix; one loaded
    against another model's vocabulary is refused)."""
    try:
        default = SkeletonSpec.of_trace_skeleton(name, vocab_size)
    except ConfigError:
        raise CommandError(f"no streaming skeleton for --skeleton {name}", status=2) from None
    if spec_file is not None:
        return _spec_from_file(spec_file, name, default.kind, vocab_size)
    return default


def _spec_from_file(path: str, name: str, kind: str, vocab_size: int) -> SkeletonSpec:
    try:
        spec = SkeletonSpec.from_dict(json.loads(Path(path).read_text(encoding="utf-8-sig")))
    except OSError as exc:
        raise CommandError(f"--skeleton-spec: cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise CommandError(f"--skeleton-spec: {path}: not valid JSON ({exc})") from exc
    except ConfigError as exc:
        raise CommandError(f"--skeleton-spec: {path}: {exc}") from exc
    if spec.kind != kind:
        raise CommandError(
            f"--skeleton-spec: {path} is a {spec.kind!r} spec; --skeleton {name} needs {kind!r}"
        )
    try:
        return spec.with_vocab_size(vocab_size)
    except ConfigError as exc:
        raise CommandError(f"--skeleton-spec: {path} {exc}") from None


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
        skeleton=skeleton_spec(args.skeleton, vocab_size, getattr(args, "skeleton_spec", None)),
        model=ModelIdentity(
            args.model_id or model_id, api_model=args.api_model, vocab_size=vocab_size
        ),
        context=read_context(args.context),
        calibration=result,
        provenance=provenance,
    )
