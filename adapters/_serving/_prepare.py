"""A client's Chat Completions request as the guarded upstream request, sans I/O.

:func:`prepare_upstream` is every server front end's request preparation: a literal
``extra_body`` merged in (:func:`~adapters._guard._settings.flatten_request`), the requests
the guard cannot serve refused with the parameter named (:class:`RequestError`), the certificate's
generation context filled in and the changes reported by the one settings check
(:func:`~adapters._guard._settings.apply_context`), and the upstream asked for the logprobs and
alternatives the certificate reads. A certificate the upstream cannot feed is a
:class:`~guardrail.ConfigError` (:func:`check_upstream`): the server is misconfigured, not the
request.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from guardrail import Certificate, Monitor
from guardrail._reads import Reads

from .._guard._context import Supplies, check_supplies
from .._guard._settings import (
    REPEAT_PENALTY_NAMES,
    Mismatch,
    apply_context,
    filled_limit,
    flatten_request,
    mismatch_param,
    top_logprobs_problem,
)

__all__ = [
    "DEFAULT_MAX_ANSWER_BYTES",
    "DEFAULT_MAX_ANSWER_TOKENS",
    "DEFAULT_UPSTREAM_TOP",
    "LITELLM_FIX",
    "PROXY_FIX",
    "TOO_LARGE",
    "GuardedRequest",
    "RequestError",
    "UpstreamRequest",
    "check_upstream",
    "context_refusal",
    "prepare_upstream",
]

DEFAULT_UPSTREAM_TOP = 20
"""Alternatives asked of the upstream per token when the server's ``top_logprobs`` is unset
(and the rule reads them)."""
DEFAULT_MAX_ANSWER_TOKENS = 16_384
"""Most tokens a server front end reads of one answer (less when the request's own limit is
lower): an upstream that ignores the limit has its answer blocked past it."""
DEFAULT_MAX_ANSWER_BYTES = 8 * 1024 * 1024
"""Most bytes a server front end reads of one upstream answer (its events or its whole body,
logprobs included)."""
TOO_LARGE = "upstream_too_large"
"""The failure of an answer that sent more bytes than a server front end reads of one answer
(a byte cap only: the token limit is the monitor's)."""
_ASKED_BY_THE_GUARD = ("stream", "stream_options", "logprobs", "top_logprobs", "n")


class RequestError(ValueError):
    """A request the guard cannot serve, with the parameter at fault (``param``): a server
    front end answers it with HTTP 400 naming ``param``."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class UpstreamRequest:
    """A client's request prepared for the upstream."""

    body: dict[str, Any]
    """The settings sent upstream (``extra_body`` merged in, the context filled in, logprobs
    and ``top_logprobs`` asked; ``stream`` and ``stream_options`` are the front end's)."""
    mismatches: list[Mismatch]
    """How the request generates answers otherwise than the calibration answers were."""
    extra_keys: frozenset[str]
    """The keys of :attr:`body` that a client library sends in ``extra_body`` (those the
    client sent there, and llama.cpp's ``repeat_penalty``)."""
    want_logprobs: bool
    """The client asked for logprobs."""
    top_k: int
    """Alternatives per token the client asked for (0 without logprobs)."""
    upstream_top: int
    """Alternatives per token asked of the upstream."""
    limit: int | None
    """The answer's token limit once the context is filled in (``None``: not known)."""

    def cap(self, max_answer_tokens: int) -> int:
        """The most tokens read of the answer: its limit, at most ``max_answer_tokens``."""
        return max_answer_tokens if self.limit is None else min(self.limit, max_answer_tokens)

    @property
    def changed(self) -> list[str]:
        """The settings the request changed, by name."""
        return [m.setting for m in self.mismatches]


PROXY_FIX = "start the proxy with top_logprobs={k} or more (or leave it unset)"
LITELLM_FIX = "set the guardrail's top_logprobs to {k} or more (or leave it unset)"


_G = TypeVar("_G", bound="GuardedRequest")


@dataclass
class GuardedRequest:
    """What one request asked for and which rule applies to it, as every server front end
    keeps it from the request to the end of its answer (the proxy's adds what it records)."""

    request_id: str
    certificate: Certificate
    label: str
    mode: str
    want_logprobs: bool = False
    top_k: int = 0
    upstream_top: int = 1
    limit: int | None = None
    """The answer's token limit once the context is filled in (``None``: not known)."""
    mismatches: list[str] = field(default_factory=list)
    max_tokens: int = DEFAULT_MAX_ANSWER_TOKENS
    """The most tokens read of the answer (its limit, capped by the front end's)."""

    @classmethod
    def of(
        cls: type[_G],
        ask: UpstreamRequest,
        certificate: Certificate,
        label: str,
        *,
        request_id: str,
        mode: str,
        max_answer_tokens: int,
        **more: Any,
    ) -> _G:
        """The request ``ask`` prepared (``more``: a subclass's own fields)."""
        return cls(
            request_id=request_id,
            certificate=certificate,
            label=label,
            mode=mode,
            want_logprobs=ask.want_logprobs,
            top_k=ask.top_k,
            upstream_top=ask.upstream_top,
            limit=ask.limit,
            mismatches=ask.changed,
            max_tokens=ask.cap(max_answer_tokens),
            **more,
        )

    @property
    def covered(self) -> bool:
        """The certificate's guarantee applies: calibrated, and the context kept."""
        return self.certificate.calibrated and not self.mismatches

    def monitor(self) -> Monitor:
        """A fresh monitor of the certificate for this answer."""
        return self.certificate.monitor(max_tokens=self.limit)


def context_refusal(mismatches: list[str]) -> RequestError:
    """The refusal of a request that changes the settings ``mismatches`` (a server front end
    that rejects such requests answers it with HTTP 400), naming the first one's parameter.

    >>> refused = context_refusal(["chat_template"])
    >>> refused.param
    'chat_template'
    """
    return RequestError(
        "the request changes settings the certificate was calibrated with "
        f"({', '.join(mismatches)}): its guarantee would not cover the answer",
        mismatch_param(mismatches[0]),
    )


def check_upstream(
    certificate: Certificate, top_logprobs: int | None, fix: str = PROXY_FIX
) -> Reads:
    """What ``certificate`` reads per token, after checking that an OpenAI-compatible
    upstream asked for ``top_logprobs`` alternatives (the server's setting; ``None``: 20,
    or more if the rule reads more) can feed it: a :class:`~guardrail.ConfigError`
    naming the fix otherwise (``fix``: the front end's, ``{k}`` filled in). For a server's
    start and every request."""
    key = (id(certificate), top_logprobs, fix)
    checked = _CHECKED.get(key)
    if checked is not None and checked[0] is certificate:
        return checked[1]
    asked = top_logprobs
    if asked is None:
        asked = max(DEFAULT_UPSTREAM_TOP, certificate.reads.alternatives)
    source = f"the upstream's Chat Completions stream (the guard asks for top_logprobs={asked})"
    reads = check_supplies(certificate, Supplies(source, alternatives=asked, fix=fix))
    if len(_CHECKED) >= _CHECKED_MAX:
        _CHECKED.clear()
    _CHECKED[key] = (certificate, reads)
    return reads


_CHECKED: dict[tuple[int, int | None, str], tuple[Certificate, Reads]] = {}
"""The certificates :func:`check_upstream` passed, by identity (a certificate is frozen, so
its check holds for as long as it is served; a refreshed one is a new object): the check
runs once per certificate, not once per request. A failed check is not kept."""
_CHECKED_MAX = 64


def prepare_upstream(
    certificate: Certificate,
    request: Mapping[str, Any],
    *,
    top_logprobs: int | None,
    routed_model: bool = False,
    fix: str = PROXY_FIX,
    allowed: Collection[str] = (),
) -> UpstreamRequest:
    """The upstream request for ``request`` (a client's Chat Completions request).

    ``top_logprobs``: the server's setting (alternatives asked of the upstream; ``None``: 20,
    or more if the rule reads more). ``routed_model``: the request's ``model`` is a routing
    name (LiteLLM's), neither filled in nor checked; ``fix``: as :func:`check_upstream`
    takes it; ``allowed``: request fields besides the allowlist
    (:data:`~adapters._guard._settings.REQUEST_FIELDS`) that are no change, as
    :func:`~adapters._guard._settings.context_mismatches` takes them. Raises
    :class:`RequestError` for a request the guard cannot serve (several answers,
    ``top_logprobs`` without logprobs, an ``extra_body`` that is not an object or holds
    another) and :class:`~guardrail.ConfigError` for a certificate the upstream cannot feed."""
    try:
        flat = flatten_request(request)
    except ValueError as exc:
        raise RequestError(str(exc), "extra_body") from None
    if flat.get("n") not in (None, 1):
        raise RequestError("the guard certifies one answer per request: n must be 1", "n")
    want = flat.get("logprobs")
    problem = top_logprobs_problem(flat)
    if problem is not None:
        raise RequestError(problem, "top_logprobs")
    reads = check_upstream(certificate, top_logprobs, fix)
    top_k = int(flat.get("top_logprobs") or 0) if want else 0
    default = max(DEFAULT_UPSTREAM_TOP, reads.alternatives) if reads.uses_alternatives else 1
    # at least one alternative: llama.cpp's server sends no logprobs at all for 0
    upstream_top = max(top_logprobs if top_logprobs is not None else default, top_k, 1)
    settings = {k: v for k, v in flat.items() if k not in _ASKED_BY_THE_GUARD}
    body, mismatches = apply_context(
        certificate, settings, routed_model=routed_model, allowed=allowed
    )
    body.update(logprobs=True, top_logprobs=upstream_top)
    extra = request.get("extra_body")
    extra_keys = set(extra) if isinstance(extra, Mapping) else set()
    extra_keys.update(k for k in REPEAT_PENALTY_NAMES if k in body)
    return UpstreamRequest(
        body=body,
        mismatches=mismatches,
        extra_keys=frozenset(extra_keys - set(_ASKED_BY_THE_GUARD)),
        want_logprobs=bool(want),
        top_k=top_k,
        upstream_top=upstream_top,
        limit=filled_limit(certificate, body),
    )
