"""The rule that is deployed, as one value: a :class:`Certificate`.

A certificate holds everything a guarded stream needs and everything an
auditor needs to check it: the streaming policy (statistic, boundary,
missing-logprob and cut-off handling), the threshold ``tau``, the skeleton as a
spec, the identity of the model it was calibrated for, the **generation
context** of the calibration answers (system prompt, decoding settings, token
limit, stops) and the calibration record (risk, delta, sizes, coverage, the
Clopper-Pearson bound, the traces' hash and the command that made it).

Its guarantee holds only for answers generated the way the calibration's were:
adapters that make the request apply :attr:`Certificate.context` and warn
(:class:`ContextMismatchWarning`) when a caller changes a setting that moves the
answer distribution. ``certificate.monitor()`` gives a fresh per-answer
:class:`~guardrail.CertificateMonitor`.

The JSON form (``to_dict`` / ``from_dict`` / ``save`` / ``load``) round-trips
exactly; unknown or invalid fields are a :class:`~guardrail.ConfigError` naming
the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from ._calibration import Calibration
from ._errors import ConfigError
from ._monitor import CertificateMonitor, Skeleton, UniformSkeleton
from ._policy import StreamPolicy

__all__ = [
    "FORMAT",
    "Certificate",
    "ContextMismatchWarning",
    "GenerationContext",
    "ModelIdentity",
    "SkeletonSpec",
]

FORMAT = "liftguard.certificate/1"
"""The ``format`` field of a certificate file."""
LogprobMode = Literal["processed", "raw"]
_CORE_KINDS = ("uniform", "temperature")


class ContextMismatchWarning(UserWarning):
    """A request differs from the generation context its certificate was calibrated on:
    the risk guarantee does not cover its answers."""


def _check_fields(cls: type, data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a JSON object, got {type(data).__name__}")
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}")
    return dict(data)


def _opt_str(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"{where}: expected a string or null, got {type(value).__name__}")


def _opt_number(value: Any, where: str, *, low: float = -math.inf) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number or null, got {value!r}")
    if value < low:
        raise ConfigError(f"{where}: must be >= {low}, got {value!r}")
    return float(value)


def _opt_int(value: Any, where: str, *, low: int = 1) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{where}: expected an integer >= {low} or null, got {value!r}")
    return value


@dataclass(frozen=True)
class ModelIdentity:
    """The model a certificate was calibrated for (certificates do not transfer across
    models). ``model_id``: a stable name (e.g. ``"smollm2-135m-instruct-q4_1"``);
    ``api_model``: the name requests use (``model=`` of the API, if it differs);
    ``tokenizer``: e.g. ``"gguf:SmolLM2-135M-Instruct"``, ``"tiktoken:o200k_base"``;
    ``logprob_mode``: ``"processed"`` (after the sampler's logit processing, as
    OpenAI reports) or ``"raw"`` (vLLM's raw logprobs)."""

    model_id: str
    api_model: str | None = None
    tokenizer: str | None = None
    vocab_size: int | None = None
    logprob_mode: LogprobMode = "processed"

    def __post_init__(self) -> None:
        if not isinstance(self.model_id, str) or not self.model_id:
            raise ConfigError(f"model.model_id: expected a non-empty string, got {self.model_id!r}")
        _opt_str(self.api_model, "model.api_model")
        _opt_str(self.tokenizer, "model.tokenizer")
        _opt_int(self.vocab_size, "model.vocab_size")
        if self.logprob_mode not in ("processed", "raw"):
            raise ConfigError(
                f"model.logprob_mode: expected 'processed' or 'raw', got {self.logprob_mode!r}"
            )

    @classmethod
    def from_dict(cls, data: Any) -> ModelIdentity:
        return cls(**_check_fields(cls, data, "model"))


@dataclass(frozen=True)
class GenerationContext:
    """How the calibration answers were generated; ``None`` = not recorded (not checked).

    ``temperature=0`` means greedy decoding. ``repeat_penalty`` is llama.cpp's
    (1.0 = none; its server applies 1.1 unless told otherwise). ``max_tokens``
    is the token limit (an answer cut there ends with finish reason
    ``"length"``; see ``StreamPolicy.on_length``)."""

    system_prompt: str | None = None
    prompt_template: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    repeat_penalty: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _opt_str(self.system_prompt, "context.system_prompt")
        _opt_str(self.prompt_template, "context.prompt_template")
        _opt_number(self.temperature, "context.temperature", low=0.0)
        top_p = _opt_number(self.top_p, "context.top_p", low=0.0)
        if top_p is not None and top_p > 1.0:
            raise ConfigError(f"context.top_p: must be <= 1, got {top_p!r}")
        _opt_number(self.repeat_penalty, "context.repeat_penalty", low=0.0)
        _opt_int(self.max_tokens, "context.max_tokens")
        stop = self.stop
        if isinstance(stop, str) or not all(isinstance(s, str) for s in stop):
            raise ConfigError(f"context.stop: expected a list of strings, got {stop!r}")
        object.__setattr__(self, "stop", tuple(stop))

    @classmethod
    def from_dict(cls, data: Any) -> GenerationContext:
        out = _check_fields(cls, data, "context")
        stop = out.get("stop", ())
        if not isinstance(stop, list | tuple):
            raise ConfigError(f"context.stop: expected a list of strings, got {stop!r}")
        out["stop"] = tuple(stop)
        return cls(**out)

    def request_settings(self) -> dict[str, Any]:
        """The Chat Completions settings this context fixes (unrecorded ones left out)."""
        out: dict[str, Any] = {}
        for key in ("temperature", "top_p", "max_tokens"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.stop:
            out["stop"] = list(self.stop)
        return out


@dataclass(frozen=True)
class SkeletonSpec:
    """A skeleton by name and parameters. ``uniform`` (``vocab_size``) and
    ``temperature`` (``vocab_size``, ``temperature``, ``rule``) are built by
    :meth:`build`; other kinds (``ngram``, ``unigram``, a stored ``vector``,
    ``prompt_free``) name a skeleton the caller supplies (``monitor(skeleton=...)``:
    ``skeleton_store.open_skeleton(...)``, ``adapters.PromptFreeSkeleton()``)."""

    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not self.kind:
            raise ConfigError(f"skeleton.kind: expected a non-empty string, got {self.kind!r}")
        if not isinstance(self.params, Mapping):
            raise ConfigError(f"skeleton.params: expected an object, got {self.params!r}")
        object.__setattr__(self, "params", dict(self.params))
        if self.kind in _CORE_KINDS:
            self.build()  # validates the parameters now

    @classmethod
    def from_dict(cls, data: Any) -> SkeletonSpec:
        out = _check_fields(cls, data, "skeleton")
        if "kind" not in out:
            raise ConfigError("skeleton.kind: missing")
        return cls(**out)

    @classmethod
    def of(cls, skeleton: object) -> SkeletonSpec:
        """The spec of a skeleton object (``kind`` from its class for the others)."""
        from ._skeletons import TemperatureSkeleton

        if isinstance(skeleton, UniformSkeleton):
            return cls("uniform", {"vocab_size": skeleton.vocab_size})
        if isinstance(skeleton, TemperatureSkeleton):
            params = {"vocab_size": skeleton.vocab_size, "temperature": skeleton.temperature}
            return cls("temperature", {**params, "rule": skeleton.rule})
        return cls(type(skeleton).__name__)

    def build(self) -> Skeleton:
        """The skeleton object for a core kind; a ConfigError naming what to pass otherwise."""
        params = dict(self.params)
        try:
            if self.kind == "uniform":
                return UniformSkeleton(**params)
            if self.kind == "temperature":
                from ._skeletons import TemperatureSkeleton

                return TemperatureSkeleton(**params)
        except TypeError as exc:
            raise ConfigError(f"skeleton.params for {self.kind!r}: {exc}") from exc
        raise ConfigError(
            f"skeleton kind {self.kind!r} is not built from its spec: pass skeleton=... "
            "(e.g. skeleton_store.open_skeleton(url, name) for a stored vector, "
            "adapters.PromptFreeSkeleton() for the prompt-free skeleton)"
        )


@dataclass(frozen=True)
class Certificate:
    """The deployed rule: policy, threshold, skeleton, model, generation context and
    the calibration that backs it (frozen; validated on construction).

    ``calibration`` is ``None`` for a hand-made rule, which carries no
    guarantee. ``provenance`` records where it came from (``traces``,
    ``traces_sha256``, ``command``, ``fit``: the data a fitted statistic used, ...)."""

    policy: StreamPolicy
    tau: float
    skeleton: SkeletonSpec
    model: ModelIdentity
    context: GenerationContext = field(default_factory=GenerationContext)
    calibration: Calibration | None = None
    provenance: Mapping[str, Any] = field(default_factory=dict)
    bound_skeleton: Skeleton | None = field(default=None, compare=False, repr=False)
    """A skeleton object that comes with the certificate (e.g. the vector of the store
    version that holds it): used by :meth:`monitor`; not part of the JSON form."""

    def __post_init__(self) -> None:
        if self.bound_skeleton is not None and not isinstance(self.bound_skeleton, Skeleton):
            raise ConfigError("bound_skeleton: expected an object with log_prob(event)")
        for name, kind in (
            ("policy", StreamPolicy), ("skeleton", SkeletonSpec), ("model", ModelIdentity),
            ("context", GenerationContext),
        ):  # fmt: skip
            if not isinstance(getattr(self, name), kind):
                raise ConfigError(f"{name}: expected a {kind.__name__}")
        if self.calibration is not None and not isinstance(self.calibration, Calibration):
            raise ConfigError("calibration: expected a Calibration or None")
        tau, clip = self.tau, self.policy.clip
        if isinstance(tau, bool) or not isinstance(tau, int | float) or not (0.0 < tau < clip):
            raise ConfigError(f"tau: must lie strictly inside (0, {clip}), got {tau!r}")
        object.__setattr__(self, "tau", float(tau))
        if self.calibration is not None and self.calibration.tau != self.tau:
            raise ConfigError(
                f"tau: {self.tau!r} differs from the calibration's {self.calibration.tau!r}"
            )
        if not isinstance(self.provenance, Mapping):
            raise ConfigError("provenance: expected an object")
        object.__setattr__(self, "provenance", dict(self.provenance))

    @property
    def calibrated(self) -> bool:
        """A calibration backs ``tau`` (else the rule carries no risk guarantee)."""
        return self.calibration is not None

    def monitor(
        self, *, skeleton: Skeleton | None = None, track_bounds: bool = False
    ) -> CertificateMonitor:
        """A fresh monitor for one answer. ``skeleton`` overrides the spec (needed for
        kinds that are not built from it, unless a skeleton is bound); a skeleton with
        per-answer state gets a stream of its own (``for_stream()``)."""
        skel: Any = skeleton if skeleton is not None else self.bound_skeleton
        if skel is None:
            skel = self.skeleton.build()
        for_stream = getattr(skel, "for_stream", None)
        if callable(for_stream):
            skel = for_stream()
        return CertificateMonitor(self.policy, self.tau, skeleton=skel, track_bounds=track_bounds)

    def with_skeleton(self, skeleton: Skeleton | None) -> Certificate:
        """The same certificate with ``skeleton`` bound to it (see :attr:`bound_skeleton`)."""
        return replace(self, bound_skeleton=skeleton)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``format``, then every field but :attr:`bound_skeleton`)."""
        return {
            "format": FORMAT,
            "policy": self.policy.to_dict(),
            "tau": self.tau,
            "skeleton": {"kind": self.skeleton.kind, "params": dict(self.skeleton.params)},
            "model": _as_dict(self.model),
            "context": {**_as_dict(self.context), "stop": list(self.context.stop)},
            "calibration": None if self.calibration is None else self.calibration.to_dict(),
            "provenance": dict(self.provenance),
        }

    @classmethod
    def from_dict(cls, data: Any) -> Certificate:
        """The certificate of :meth:`to_dict`; a ConfigError naming any bad field."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"a certificate is a JSON object, got {type(data).__name__}")
        if data.get("format") != FORMAT:
            hint = (
                " (this looks like a calibration record: make a certificate with "
                "'liftguard calibrate ... --out CERT.json')"
                if "method" in data and "risk" in data
                else ""
            )
            raise ConfigError(f"format: expected {FORMAT!r}, got {data.get('format')!r}{hint}")
        body = {k: v for k, v in data.items() if k != "format"}
        out = _check_fields(cls, body, "certificate")
        if "bound_skeleton" in out:  # a runtime object, never read from JSON
            raise ConfigError("certificate: unknown field(s) 'bound_skeleton'")
        for key in ("policy", "tau", "skeleton", "model"):
            if key not in out:
                raise ConfigError(f"{key}: missing")
        cal = out.get("calibration")
        if cal is not None and not isinstance(cal, Mapping):
            raise ConfigError("calibration: expected an object or null")
        return cls(
            policy=_policy(out["policy"]),
            tau=out["tau"],
            skeleton=SkeletonSpec.from_dict(out["skeleton"]),
            model=ModelIdentity.from_dict(out["model"]),
            context=GenerationContext.from_dict(out.get("context", {})),
            calibration=None if cal is None else _calibration(cal),
            provenance=out.get("provenance", {}),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Certificate:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"not valid JSON ({exc})") from exc
        return cls.from_dict(data)

    def save(self, path: str | Path) -> None:
        """Write the JSON form to ``path`` (temporary file + rename: never half-written)."""
        target = Path(path)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(self.to_json(), encoding="utf-8")
        tmp.replace(target)

    @classmethod
    def load(cls, path: str | Path) -> Certificate:
        """Read a certificate file; errors name the file."""
        text = Path(path).read_text(encoding="utf-8-sig")
        try:
            return cls.from_json(text)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from exc


def _as_dict(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _policy(data: Any) -> StreamPolicy:
    try:
        return StreamPolicy.from_dict(dict(data) if isinstance(data, Mapping) else data)
    except ConfigError as exc:
        raise ConfigError(f"policy: {exc}") from exc
    except TypeError as exc:
        raise ConfigError(f"policy: {exc}") from exc


def _calibration(data: Mapping[str, Any]) -> Calibration:
    _check_fields(Calibration, data, "calibration")
    return Calibration.from_dict(dict(data))
