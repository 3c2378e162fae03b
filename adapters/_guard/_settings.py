"""The one settings check: does a request generate answers the way a certificate's calibration
answers were generated?

Every front end asks it: the SDK adapters and the LangChain handler (which warn), the guard
proxy and the LiteLLM guardrail (which report ``covered: false``, or refuse). A request is read
as the upstream will read it: a literal ``extra_body`` (what the OpenAI SDK merges into the
JSON body, and what a client can put in a request's JSON) is merged in first, its keys
winning (:func:`flatten_request`), so nothing a caller smuggles in escapes the check.

:func:`context_mismatches` decides; :func:`apply_context` fills the certificate's context in
where the request leaves a setting unset, then asks :func:`context_mismatches` about the
result. What counts as a change:

- the model (unless the request's model is a routing name, as LiteLLM's is), temperature,
  top_p, the token limit (``max_tokens``, ``max_completion_tokens`` or llama.cpp's
  ``n_predict``), stop sequences, and llama.cpp's ``repeat_penalty`` (vLLM's name:
  ``repetition_penalty``), where the certificate records them;
- the system prompt the certificate records: a first system (or developer) message with
  other content, or any further system or developer message;
- an assistant prefill (the last message is the assistant's own start);
- any setting that moves the answer distribution and that no certificate records, set to
  anything but its neutral value (:data:`DISTRIBUTION_SETTINGS`: penalties, logit bias,
  top-k, min-p, grammars and guided decoding, response formats, tools, ...);
- any field that is not on the allowlist (:data:`REQUEST_FIELDS`; a message's own fields:
  :data:`MESSAGE_FIELDS`), whatever its value: a chat template, ``echo``, beam search, a
  server's sampler chain or LoRA, a reasoning effort. An allowlist fails closed where a list of
  known-bad names fails open on the next name a server invents; a front end extends it with
  its own names (``allowed``: those it consumes itself, and those its operator allows).
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

from guardrail import Certificate, ContextMismatchWarning

__all__ = [
    "DISTRIBUTION_SETTINGS",
    "MESSAGE_FIELDS",
    "REQUEST_FIELDS",
    "Mismatch",
    "apply_context",
    "context_mismatches",
    "filled_limit",
    "flatten_request",
    "mismatch_kind",
    "mismatch_param",
    "pack_extra_body",
    "request_limit",
    "warn_mismatch",
]

DISTRIBUTION_SETTINGS: dict[str, tuple[Any, ...]] = {
    # OpenAI Chat Completions
    "logit_bias": (None, {}),
    "frequency_penalty": (None, 0, 0.0),
    "presence_penalty": (None, 0, 0.0),
    "response_format": (None, {"type": "text"}),
    "prediction": (None,),
    # vLLM, SGLang, TGI
    "top_k": (None, 0, -1),
    "min_p": (None, 0, 0.0),
    "min_tokens": (None, 0),
    "ignore_eos": (None, False),
    "bad_words": (None, []),
    "allowed_token_ids": (None,),
    "stop_token_ids": (None, []),
    "logits_processors": (None, []),
    "guided_json": (None,),
    "guided_regex": (None,),
    "guided_choice": (None,),
    "guided_grammar": (None,),
    "structured_outputs": (None,),
    "length_penalty": (None, 1, 1.0),
    # llama.cpp
    "typical_p": (None, 1, 1.0),
    "tfs_z": (None, 1, 1.0),
    "mirostat": (None, 0),
    "mirostat_mode": (None, 0),
    "grammar": (None, ""),
    "json_schema": (None,),
    "dry_multiplier": (None, 0, 0.0),
    "xtc_probability": (None, 0, 0.0),
    "dynatemp_range": (None, 0, 0.0),
    "top_n_sigma": (None, -1, -1.0),
    # text-generation-webui, koboldcpp
    "top_a": (None, 0, 0.0),
    # tools are written into the prompt (and a tool call is never certified)
    "tools": (None, []),
    "functions": (None, []),
}
"""Settings that move the answer distribution and that no certificate records, with the values
that leave it as it is: any other value is a change."""

REPEAT_PENALTY_NAMES = ("repeat_penalty", "repetition_penalty")
"""llama.cpp's name, and vLLM's, of the one setting the certificate records as
``context.repeat_penalty``."""
LIMIT_NAMES = ("max_completion_tokens", "max_tokens", "n_predict")
"""The names of a request's token limit, first found first used."""
_SYSTEM_ROLES = ("system", "developer")
GUARD_FIELDS = ("model", "messages", "stream", "stream_options", "logprobs", "top_logprobs", "n")
"""The fields the guard reads itself, asks the upstream for, or refuses (``n`` other than 1)."""
NEUTRAL_FIELDS = ("seed", "user", "tool_choice", "parallel_tool_calls", "function_call")
"""Fields forwarded as they are: they pick one sample, name the caller, or say how to use
tools (which :data:`DISTRIBUTION_SETTINGS` checks), and leave the answer distribution as it
is."""
REQUEST_FIELDS: frozenset[str] = frozenset(
    {
        *GUARD_FIELDS,
        "temperature",
        "top_p",
        "stop",
        *LIMIT_NAMES,
        *REPEAT_PENALTY_NAMES,
        *DISTRIBUTION_SETTINGS,
        *NEUTRAL_FIELDS,
    }
)
"""The request fields a front end forwards upstream: those the guard reads, those the
certificate records, those checked against their neutral value, and the neutral ones. Any
other field (``null`` aside) is a change (the answer is not covered, or the request is
refused)."""
MESSAGE_FIELDS: dict[str, frozenset[str]] = {
    "system": frozenset({"role", "content"}),
    "developer": frozenset({"role", "content"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "tool_calls", "function_call", "refusal"}),
    "tool": frozenset({"role", "content", "tool_call_id", "name"}),
    "function": frozenset({"role", "content", "name"}),
}
"""The fields a message of each role may carry (a ``name`` on a system message is a change of
the system prompt the certificate records)."""
_MESSAGE_CHANGES = ("system prompt", "assistant_prefill")


class Mismatch(NamedTuple):
    """A setting a request changed from the certificate's generation context."""

    setting: str
    requested: object
    calibrated: object


def flatten_request(request: Mapping[str, Any]) -> dict[str, Any]:
    """``request`` as its upstream reads it: a literal ``extra_body`` merged in, its keys
    winning (the OpenAI SDK sends ``extra_body``'s keys as body keys, after the others). A
    ``extra_body`` that is not an object, or that holds another ``extra_body`` (which a
    client library would send on as a literal body field, unchecked), is a ``ValueError``.

    >>> flatten_request({"n": 1, "extra_body": {"n": 3}})
    {'n': 3}
    """
    out = dict(request)
    extra = out.pop("extra_body", None)
    if extra is None:
        return out
    if not isinstance(extra, Mapping):
        raise ValueError(f"extra_body must be an object, got {type(extra).__name__}")
    if extra.get("extra_body") is not None:
        raise ValueError("extra_body must not hold another extra_body")
    out.update(extra)
    return out


def pack_extra_body(request: Mapping[str, Any], keys: set[str]) -> dict[str, Any]:
    """``request`` with ``keys`` (those a client library does not take as arguments, such as
    ``repeat_penalty``) moved into its ``extra_body``: the inverse of :func:`flatten_request`
    for a caller that sends through the OpenAI SDK or LiteLLM."""
    out = dict(request)
    extra = {key: out.pop(key) for key in sorted(keys) if key in out}
    if extra:
        out["extra_body"] = extra
    return out


def request_limit(settings: Mapping[str, Any]) -> int | None:
    """The token limit a Chat Completions request (or a LangChain run's invocation parameters)
    holds its answer to: the smallest of the limits it gives (:data:`LIMIT_NAMES`, also inside
    a literal ``extra_body``, whose keys win as the upstream reads them), since an upstream
    may honour any of them; ``None`` when it sets none (the provider's own limit is not
    known).

    >>> request_limit({"max_tokens": 64, "extra_body": {"max_tokens": 8}})
    8
    >>> request_limit({"max_completion_tokens": 64, "extra_body": {"max_tokens": 8}})
    8
    """
    extra = settings.get("extra_body")
    if isinstance(extra, Mapping):
        settings = {**settings, **extra}
    limits = [
        value
        for value in (settings.get(key) for key in LIMIT_NAMES)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1
    ]
    return min(limits, default=None)


def top_logprobs_problem(settings: Mapping[str, Any]) -> str | None:
    """Why ``settings`` (a request read as the upstream reads it, or a LangChain run's
    invocation parameters) cannot be served: ``top_logprobs`` without ``logprobs: true``,
    which OpenAI refuses (HTTP 400) and a compatible server may answer with no logprobs at
    all; ``None`` when they can. Every front end refuses such a request alike.

    >>> top_logprobs_problem({"logprobs": False, "top_logprobs": 2})
    'top_logprobs needs logprobs: true'
    >>> top_logprobs_problem({"logprobs": True, "top_logprobs": 2}) is None
    True
    """
    if settings.get("top_logprobs") is not None and settings.get("logprobs") is not True:
        return "top_logprobs needs logprobs: true"
    return None


def filled_limit(certificate: Certificate, settings: Mapping[str, Any]) -> int | None:
    """The token limit of a request once :func:`apply_context` has filled it in: the
    request's own (:func:`request_limit`), else the certificate's context's."""
    limit = request_limit(flatten_request(settings))
    return certificate.context.max_tokens if limit is None else limit


def _given_limit(request: Mapping[str, Any]) -> Any:
    return next((request[k] for k in LIMIT_NAMES if request.get(k) is not None), None)


def _given_penalty(request: Mapping[str, Any]) -> Any:
    return next((request[k] for k in REPEAT_PENALTY_NAMES if request.get(k) is not None), None)


def _stops(value: Any) -> Any:
    """A stop setting as a list (a single string is one stop sequence)."""
    if isinstance(value, str):
        return [value]
    return list(value) if isinstance(value, list | tuple) else value


def context_mismatches(
    certificate: Certificate,
    request: Mapping[str, Any],
    *,
    routed_model: bool = False,
    as_sent: bool = False,
    allowed: Collection[str] = (),
) -> list[Mismatch]:
    """Each way ``request`` (Chat Completions settings and ``messages``; a literal
    ``extra_body`` is merged in first) generates answers otherwise than the certificate's
    calibration answers were generated (see the module docstring).

    ``routed_model``: the request's ``model`` is a routing name (LiteLLM's), not checked.
    ``as_sent``: the request goes out as it is, nothing filled in (the LangChain handler
    watches a request it does not make): a setting the certificate records and the request
    leaves unset is a change too (the provider's default applies). ``allowed``: fields
    besides :data:`REQUEST_FIELDS` that are not a change (a front end's own, which it does
    not forward, and those its operator allows).

    >>> from guardrail import Certificate, ModelIdentity, SkeletonSpec, StreamPolicy
    >>> spec = SkeletonSpec("uniform", {"vocab_size": 9})
    >>> cert = Certificate(StreamPolicy(), 2.0, spec, ModelIdentity("m"))
    >>> context_mismatches(cert, {"echo": True, "messages": [{"role": "user", "content": "hi"}]})
    [Mismatch(setting='echo', requested=True, calibrated=None)]
    """
    req = flatten_request(request)
    ctx = certificate.context
    found: list[Mismatch] = []
    api_model = certificate.model.api_model
    model = req.get("model")
    if api_model is not None and not routed_model and model is not None and model != api_model:
        found.append(Mismatch("model", model, api_model))
    given_of = {"max_tokens": _given_limit(req)}
    for key, value in ctx.request_settings().items():
        given = given_of.get(key, req.get(key))
        if key == "stop":
            given, value = _stops(given), _stops(value)
        if given is None:
            if as_sent:
                found.append(Mismatch(key, None, value))
        elif given != value:
            found.append(Mismatch(key, given, value))
    penalty = _given_penalty(req)
    if ctx.repeat_penalty is not None:
        if penalty is not None and penalty != ctx.repeat_penalty:
            found.append(Mismatch("repeat_penalty", penalty, ctx.repeat_penalty))
    elif penalty not in (None, 1, 1.0):
        found.append(Mismatch("repeat_penalty", penalty, None))
    for name, neutral in DISTRIBUTION_SETTINGS.items():
        value = req.get(name)
        if value is not None and not _is_neutral(value, neutral):
            found.append(Mismatch(name, value, neutral[-1]))
    found += [
        Mismatch(name, value, None)
        for name, value in req.items()
        if value is not None and name not in REQUEST_FIELDS and name not in allowed
    ]
    found += _message_changes(ctx.system_prompt, req.get("messages"), as_sent)
    return found


def mismatch_kind(setting: str) -> str:
    """The name a count of changes keeps ``setting`` (a :class:`Mismatch`'s) under: the
    setting itself, or ``unlisted`` for a field off the allowlist, whose name the client
    chose (a metric labelled by it would grow with every name a client invents).

    >>> mismatch_kind("temperature"), mismatch_kind("x-1"), mismatch_kind("messages.name")
    ('temperature', 'unlisted', 'unlisted')
    """
    return setting if setting in REQUEST_FIELDS or setting in _MESSAGE_CHANGES else "unlisted"


def mismatch_param(setting: str) -> str:
    """The request parameter a change (a :class:`Mismatch`'s ``setting``) is written in, as
    an HTTP front end's refusal names it (``error.param``).

    >>> mismatch_param("chat_template"), mismatch_param("system prompt")
    ('chat_template', 'messages')
    """
    return "messages" if setting in _MESSAGE_CHANGES or setting.startswith("messages.") else setting


def _is_neutral(value: Any, neutral: tuple[Any, ...]) -> bool:
    """``value`` is one of ``neutral`` (``True`` is not ``1``, nor ``False`` ``0``)."""
    return any(value == n and isinstance(value, bool) == isinstance(n, bool) for n in neutral)


def _message_changes(system: str | None, messages: Any, as_sent: bool) -> list[Mismatch]:
    """The system prompt changed (a first system message with other content, a system
    message that is not first, or a further system or developer message; with ``as_sent``,
    none at all), an assistant prefill, and each message field not in
    :data:`MESSAGE_FIELDS` (``messages.<field>``)."""
    if not isinstance(messages, list | tuple) or not messages:
        return []
    roles = [m.get("role") if isinstance(m, Mapping) else None for m in messages]
    found: list[Mismatch] = []
    for message, role in zip(messages, roles, strict=True):
        known = MESSAGE_FIELDS.get(role, frozenset()) if isinstance(role, str) else frozenset()
        if isinstance(message, Mapping):
            found += [
                Mismatch(f"messages.{key}", value, None)
                for key, value in message.items()
                if value is not None and key not in known
            ]
    if system is not None:
        contents = [
            m.get("content") for m, r in zip(messages, roles, strict=True) if r in _SYSTEM_ROLES
        ]
        changed = (
            roles[0] not in _SYSTEM_ROLES or contents[0] != system or len(contents) > 1
            if contents
            else as_sent
        )
        if changed:
            shown: object = contents[0] if len(contents) == 1 else (contents or None)
            found.append(Mismatch("system prompt", shown, system))
    if roles[-1] == "assistant":
        found.append(Mismatch("assistant_prefill", messages[-1].get("content"), None))
    return found


def apply_context(
    certificate: Certificate,
    request: Mapping[str, Any],
    *,
    routed_model: bool = False,
    allowed: Collection[str] = (),
) -> tuple[dict[str, Any], list[Mismatch]]:
    """``request`` (a literal ``extra_body`` merged in: :func:`flatten_request`) with the
    certificate's generation context filled in where it leaves a setting unset (the model
    too, unless ``routed_model``; the system prompt as a first message), and each change
    :func:`context_mismatches` finds in the result (``allowed`` as it takes it): the caller
    warns (:func:`warn_mismatch`), reports or refuses."""
    out = flatten_request(request)
    ctx = certificate.context
    api_model = certificate.model.api_model
    if api_model is not None and not routed_model and "model" not in out:
        out["model"] = api_model
    for key, value in ctx.request_settings().items():
        if (_given_limit(out) if key == "max_tokens" else out.get(key)) is None:
            out[key] = value
    if ctx.repeat_penalty is not None and _given_penalty(out) is None:
        out["repeat_penalty"] = ctx.repeat_penalty
    messages = out.get("messages")
    if (
        ctx.system_prompt is not None
        and isinstance(messages, list | tuple)
        and not any(isinstance(m, Mapping) and m.get("role") in _SYSTEM_ROLES for m in messages)
    ):
        out["messages"] = [{"role": "system", "content": ctx.system_prompt}, *messages]
    return out, context_mismatches(certificate, out, routed_model=routed_model, allowed=allowed)


def warn_mismatch(field: str, requested: object, calibrated: object, stacklevel: int = 4) -> None:
    """Warn that a request changes a setting the certificate was calibrated with."""
    sets = (
        f"leaves {field} unset (the provider's default applies)"
        if requested is None
        else f"sets {field}={requested!r}"
    )
    warnings.warn(
        f"the request {sets} but the certificate was calibrated with "
        f"{field}={calibrated!r}: its risk guarantee does not cover these answers",
        ContextMismatchWarning,
        stacklevel=stacklevel,
    )
