"""The proxy's configuration: one frozen value, validated on construction, made of a few
small groups (:class:`Limits`, :class:`Recording`, and the fleet's
:class:`~adapters._risk._fleet_watch.FleetSettings`), each validated on its own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from guardrail import ConfigError

from .._guard._stream import DEFAULT_MAX_TOKEN_CHARS
from .._risk._fleet_watch import FleetSettings
from .._serving._certs import CertificateSource
from .._serving._options import (
    DEFAULT_REFUSAL,
    check_context_settings,
    check_positive,
    check_risk_settings,
    integer_at_least,
)
from .._serving._prepare import DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_ANSWER_TOKENS
from .._serving._request import MAX_CONTAINERS, MAX_VALUES
from .._tracefiles._files import is_url
from ._recording import check_dataset_name

__all__ = [
    "DEFAULT_REFUSAL",
    "FleetSettings",
    "Limits",
    "OnBlock",
    "OnMismatch",
    "ProxyConfig",
    "ProxyMode",
    "Recording",
    "check_positive",
    "check_risk_settings",
]

ProxyMode = Literal["buffered", "passthrough", "observe"]
OnBlock = Literal["error", "refusal"]
OnMismatch = Literal["log", "reject"]
RecordFormat = Literal["jsonl", "parquet"]


@dataclass(frozen=True)
class Limits:
    """How much and how long one request or answer may take (frozen; a bad value is a
    :class:`~guardrail.ConfigError` naming the field, ``limits.<name>``): past a limit it
    is refused or blocked, never held whole.

    ``upstream_timeout_s``: the longest wait for the upstream to connect or send the next
    bytes; a stalled upstream ends the answer (never certified). ``max_body_bytes`` of a
    request body (HTTP 413), read within ``body_timeout_s`` (HTTP 408), holding at most
    ``max_json_values`` values and ``max_json_containers`` objects and lists (counted
    before it is decoded as its separators and brackets, those inside strings too; HTTP
    413: decoding holds the GIL for the whole body, and these bound how long the event
    loop can wait behind one);
    ``max_concurrent_requests`` chat requests at once, from the body's first byte to the
    answer's last (HTTP 503 ``overloaded`` with ``Retry-After`` past it);
    ``max_upstream_connections`` open to the upstream at once; ``max_answer_tokens`` and
    ``max_answer_bytes`` of one upstream answer (also at most the request's own token limit
    once the certificate's context fills it in; past either, the answer is blocked with
    cause ``over_token_limit`` and the upstream is closed); ``max_token_chars`` of one
    token's text (``malformed_chunk`` past it).

    Examples
    --------
        >>> Limits(max_body_bytes=1024 * 1024).max_answer_tokens
        16384
    """

    upstream_timeout_s: float = 60.0
    max_body_bytes: int = 4 * 1024 * 1024
    body_timeout_s: float = 30.0
    max_concurrent_requests: int = 1024
    max_upstream_connections: int = 1024
    max_answer_tokens: int = DEFAULT_MAX_ANSWER_TOKENS
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    max_token_chars: int = DEFAULT_MAX_TOKEN_CHARS
    max_json_values: int = MAX_VALUES
    max_json_containers: int = MAX_CONTAINERS

    def __post_init__(self) -> None:
        check_positive("limits.upstream_timeout_s", self.upstream_timeout_s)
        integer_at_least("limits.max_body_bytes", self.max_body_bytes, 1024)
        check_positive("limits.body_timeout_s", self.body_timeout_s)
        integer_at_least("limits.max_concurrent_requests", self.max_concurrent_requests, 1)
        integer_at_least("limits.max_upstream_connections", self.max_upstream_connections, 1)
        integer_at_least("limits.max_answer_tokens", self.max_answer_tokens, 1)
        integer_at_least("limits.max_answer_bytes", self.max_answer_bytes, 1024)
        integer_at_least("limits.max_token_chars", self.max_token_chars, 1)
        integer_at_least("limits.max_json_values", self.max_json_values, 1)
        integer_at_least("limits.max_json_containers", self.max_json_containers, 1)


@dataclass(frozen=True)
class Recording:
    """Where and how the proxy writes every guarded answer as a trace line (frozen; a bad
    value is a :class:`~guardrail.ConfigError` naming the field, ``recording.<name>``).

    ``destination``: a local directory or an fsspec URL such as ``s3://bucket/prefix``
    (opened with ``storage_options``), written in ``format`` ``"jsonl"`` or ``"parquet"``
    (files rotated at ``max_bytes``; at most ``queue`` answers wait to be written, more are
    dropped and counted). A URL or a Parquet recording is written to a local spool file and
    each finished file is published whole, also once it is ``max_age_s`` old
    (:mod:`adapters._proxy._recording`); a URL recording spools in ``spool`` (default: a
    directory of the destination's under ``$XDG_STATE_HOME/liftguard/record-spool``,
    :mod:`adapters._proxy._spool`), and each start publishes the spool files an earlier run
    left there. ``dataset``: the lines' dataset name and the files' prefix, a simple name
    (letters, digits, ``_``, ``.``, ``-``; no path).

    Examples
    --------
        >>> Recording("traces/", dataset="chat").format
        'jsonl'
    """

    destination: str
    format: RecordFormat = "jsonl"
    dataset: str = "proxy"
    max_bytes: int = 64 * 1024 * 1024
    max_age_s: float = 300.0
    queue: int = 10_000
    storage_options: Mapping[str, Any] | None = None
    spool: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.destination, str) or not self.destination:
            raise ConfigError(
                f"recording.destination must be a path or URL string, got {self.destination!r}"
            )
        if self.format not in ("jsonl", "parquet"):
            raise ConfigError(f"recording.format must be jsonl or parquet; got {self.format!r}")
        check_dataset_name(self.dataset, "recording.dataset")
        integer_at_least("recording.max_bytes", self.max_bytes, 1024)
        check_positive("recording.max_age_s", self.max_age_s)
        integer_at_least("recording.queue", self.queue, 1)
        if self.storage_options is not None and not isinstance(self.storage_options, Mapping):
            raise ConfigError("recording.storage_options must be a mapping of fsspec options")
        if self.spool is not None and (not isinstance(self.spool, str) or not self.spool):
            raise ConfigError(f"recording.spool must be a path string, got {self.spool!r}")
        if self.spool is not None and not is_url(self.destination):
            raise ConfigError(
                "recording.spool is for a URL recording (a local one spools in DIR/.spool)"
            )


@dataclass(frozen=True)
class ProxyConfig:
    """How one guard proxy runs (frozen; a bad value is a :class:`~guardrail.ConfigError`).

    ``upstream``: the OpenAI-compatible base URL the proxy forwards to (as the
    openai SDK's ``base_url``, e.g. ``http://127.0.0.1:8000/v1``).
    ``certificate``: the rule for requests whose model has no entry in
    ``model_certificates`` (a map from the requested ``model`` name to its rule);
    with neither, a request is refused (HTTP 404, ``model_not_found``).

    ``mode``: ``buffered`` (nothing is sent before the answer is certified),
    ``passthrough`` (tokens flow at once; a block ends the stream) or ``observe``
    (nothing is blocked: every verdict is logged, counted and recorded; for a
    shadow deployment and for recording complete answers to calibrate on).
    ``on_block``: ``error`` (the stream ends with an in-stream error event; a
    non-streamed request gets HTTP 422) or ``refusal`` (``refusal_message`` as
    the answer's text, with ``finish_reason`` ``"content_filter"``).
    ``on_context_mismatch``: a request that changes a setting the certificate
    was calibrated with is forwarded and counted (``log``) or refused with
    HTTP 400 naming the setting (``reject``); a field that is not on the
    allowlist of request fields is such a change.
    ``allow_request_fields``: field names added to that allowlist (forwarded as
    they are and trusted not to move the answer distribution).

    ``upstream_key``: sent to the upstream as ``Authorization: Bearer``; without
    it the client's own ``Authorization`` is passed through, unless
    ``client_key`` is set (then clients must send ``Bearer <client_key>``, and the
    upstream gets ``upstream_key`` or no key at all). ``allowed_hosts``: the ``Host``
    names the proxy answers to (``"*"``: any; the command line allows only loopback names
    when it listens on a loopback address, so that a web page cannot reach it through DNS
    rebinding); another host gets HTTP 400.
    ``top_logprobs``: alternatives asked of the upstream per token (``None``: 20,
    or the certificate's ``statistic.alternatives`` if larger, when the certificate
    reads them, else 1; at least what the client asks for, and never 0, for which
    llama.cpp's server sends no logprobs at all). A certificate that
    reads more alternatives than this, or exact entropies, is refused when the
    proxy starts (and per request, should a store alias move to one).
    ``refresh_interval_s``: how often store aliases are re-read (0: never;
    :meth:`Proxy.refresh_certificates` on demand).

    ``risk_alpha``: the level of the live risk monitor of each calibrated model
    entry (:meth:`~guardrail.Certificate.risk_monitor`; its alarm is false with
    probability at least ``1 - risk_alpha``, over any horizon, while the promise
    holds). ``feedback_ids``: how many of the latest answers ``POST
    /v1/liftguard/feedback`` can still label (their ids are kept in a bounded
    store, the oldest dropped first, about half a kilobyte each: some 27 MB at
    the default 50,000; a label for a dropped answer is refused as unknown).

    The groups: ``limits`` (:class:`Limits`: what a request or an answer may take),
    ``recording`` (:class:`Recording`: where every guarded answer is written; ``None``:
    nowhere) and ``fleet`` (:class:`FleetSettings`: the Redis or Valkey server whose
    replicas share the answers, the labels and the risk monitors; ``None``: this process
    keeps its own).

    Examples
    --------
        >>> from guardrail import Certificate, ModelIdentity, SkeletonSpec, StreamPolicy
        >>> cert = Certificate(StreamPolicy(), tau=2.0, model=ModelIdentity("my-model"),
        ...                    skeleton=SkeletonSpec("uniform", {"vocab_size": 1000}))
        >>> config = ProxyConfig(upstream="http://127.0.0.1:8000/v1",
        ...                      certificate=StaticCertificate(cert), mode="observe",
        ...                      limits=Limits(max_answer_tokens=4096))
        >>> config.mode, config.on_block, config.entry_for("any-model")
        ('observe', 'error', '*')
        >>> config.limits.max_answer_tokens, config.recording, config.fleet
        (4096, None, None)
    """

    upstream: str
    certificate: CertificateSource | None = None
    model_certificates: Mapping[str, CertificateSource] = field(default_factory=dict)
    mode: ProxyMode = "buffered"
    on_block: OnBlock = "error"
    refusal_message: str = DEFAULT_REFUSAL
    on_context_mismatch: OnMismatch = "log"
    allow_request_fields: tuple[str, ...] = ()
    upstream_key: str | None = None
    client_key: str | None = None
    allowed_hosts: tuple[str, ...] = ("*",)
    top_logprobs: int | None = None
    refresh_interval_s: float = 10.0
    risk_alpha: float = 0.05
    feedback_ids: int = 50_000
    limits: Limits = field(default_factory=Limits)
    recording: Recording | None = None
    fleet: FleetSettings | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.upstream) if isinstance(self.upstream, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"upstream must be an http(s) URL, got {self.upstream!r}")
        object.__setattr__(self, "upstream", self.upstream.rstrip("/"))
        if not isinstance(self.model_certificates, Mapping):
            raise ConfigError("model_certificates must map model names to certificate sources")
        object.__setattr__(self, "model_certificates", dict(self.model_certificates))
        sources = [self.certificate, *self.model_certificates.values()]
        if all(s is None for s in sources):
            raise ConfigError("give a certificate (or model_certificates)")
        for name, source in self.model_certificates.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"model names must be non-empty strings, got {name!r}")
            if not isinstance(source, CertificateSource):
                raise ConfigError(f"model_certificates[{name!r}] is not a CertificateSource")
        if self.certificate is not None and not isinstance(self.certificate, CertificateSource):
            raise ConfigError("certificate must be a CertificateSource (see certificate_source)")
        for name, value, allowed in (
            ("mode", self.mode, ("buffered", "passthrough", "observe")),
            ("on_block", self.on_block, ("error", "refusal")),
        ):
            if value not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
        if not isinstance(self.refusal_message, str) or not self.refusal_message:
            raise ConfigError("refusal_message must be a non-empty string")
        fields = check_context_settings(self.on_context_mismatch, self.allow_request_fields)
        object.__setattr__(self, "allow_request_fields", fields)
        for key_name in ("upstream_key", "client_key"):
            key = getattr(self, key_name)
            if key is not None and (not isinstance(key, str) or not key.strip()):
                raise ConfigError(f"{key_name} must be a non-empty string or None")
        hosts = self.allowed_hosts
        if isinstance(hosts, str) or not all(isinstance(h, str) and h for h in hosts) or not hosts:
            raise ConfigError(f"allowed_hosts must be a non-empty list of names, got {hosts!r}")
        object.__setattr__(self, "allowed_hosts", tuple(hosts))
        if self.top_logprobs is not None:
            integer_at_least("top_logprobs", self.top_logprobs, 0)
            if self.top_logprobs > 20:
                raise ConfigError(f"top_logprobs must be <= 20, got {self.top_logprobs}")
        check_positive("refresh_interval_s", self.refresh_interval_s, allow_zero=True)
        check_risk_settings(self.risk_alpha, self.feedback_ids)
        groups: tuple[tuple[str, object, type], ...] = (
            ("limits", self.limits, Limits),
            ("recording", self.recording, Recording),
            ("fleet", self.fleet, FleetSettings),
        )
        for group, given, kind in groups:
            if not isinstance(given, kind) and (group == "limits" or given is not None):
                none = "" if group == "limits" else " or None"
                raise ConfigError(f"{group} must be a {kind.__name__}{none}, got {given!r:.80}")

    def entry_for(self, model: object) -> str | None:
        """The model entry serving a requested model name: the name itself if it has a
        certificate of its own, else ``"*"`` (the default), or None without a default."""
        if isinstance(model, str) and model in self.model_certificates:
            return model
        return "*" if self.certificate is not None else None

    def source_for(self, model: object) -> CertificateSource | None:
        """The certificate source of a requested model name (the default if unmapped)."""
        if isinstance(model, str) and model in self.model_certificates:
            return self.model_certificates[model]
        return self.certificate
