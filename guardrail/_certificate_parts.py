"""The parts of a :class:`~guardrail.Certificate` besides the rule: the model identity,
the generation context and the skeleton spec (frozen, validated on construction, each
error naming the field; the spec lives in :mod:`guardrail._skeleton_spec`), and the
field-checking functions the certificate shares."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, TypedDict

from ._errors import ConfigError
from ._skeleton_spec import SkeletonSpec

__all__ = [
    "ContextMismatchWarning",
    "GenerationContext",
    "ModelIdentity",
    "RequestSettings",
    "SkeletonSpec",
]

LogprobMode = Literal["processed", "raw"]


class RequestSettings(TypedDict, total=False):
    """The Chat Completions settings a :class:`GenerationContext` fixes."""

    temperature: float
    top_p: float
    max_tokens: int
    stop: list[str]


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
    OpenAI reports) or ``"raw"`` (vLLM's raw logprobs).

    Examples
    --------
        >>> model = ModelIdentity("smollm2-135m-instruct-q4_1", vocab_size=49152)
        >>> model.logprob_mode
        'processed'
    """

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
    ``"length"``; see ``StreamPolicy.on_length``).

    Examples
    --------
        >>> ctx = GenerationContext(temperature=0.0, max_tokens=256)
        >>> ctx.request_settings()
        {'temperature': 0.0, 'max_tokens': 256}
    """

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

    def request_settings(self) -> RequestSettings:
        """The Chat Completions settings this context fixes (unrecorded ones left out)."""
        out = RequestSettings()
        if self.temperature is not None:
            out["temperature"] = self.temperature
        if self.top_p is not None:
            out["top_p"] = self.top_p
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
        if self.stop:
            out["stop"] = list(self.stop)
        return out
