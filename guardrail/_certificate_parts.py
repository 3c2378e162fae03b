"""The parts of a :class:`~guardrail.Certificate` besides the rule: the model identity,
the generation context and the skeleton spec (frozen, validated on construction, each
error naming the field), and the field-checking helpers the certificate shares."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from ._errors import ConfigError
from ._monitor import Skeleton, UniformSkeleton

__all__ = [
    "ContextMismatchWarning",
    "GenerationContext",
    "ModelIdentity",
    "SkeletonSpec",
]

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
