"""The proxy's configuration: one frozen value, validated on construction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from guardrail import ConfigError

from .._guard._stream import DEFAULT_MAX_TOKEN_CHARS
from .._serving._certs import CertificateSource
from .._serving._options import (
    DEFAULT_REFUSAL,
    check_context_settings,
    check_fleet_settings,
    check_positive,
    check_risk_settings,
    integer_at_least,
)
from .._serving._prepare import DEFAULT_MAX_ANSWER_TOKENS
from .._tracefiles._files import is_url
from ._recording import check_dataset_name
from ._upstream import DEFAULT_MAX_ANSWER_BYTES

__all__ = [
    "DEFAULT_REFUSAL",
    "OnBlock",
    "OnMismatch",
    "ProxyConfig",
    "ProxyMode",
    "check_positive",
    "check_risk_settings",
]

ProxyMode = Literal["buffered", "passthrough", "observe"]
OnBlock = Literal["error", "refusal"]
OnMismatch = Literal["log", "reject"]
RecordFormat = Literal["jsonl", "parquet"]


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

    ``upstream_timeout_s``: the longest wait for the upstream to connect or send
    the next bytes; a stalled upstream ends the answer (never certified).
    ``upstream_key``: sent to the upstream as ``Authorization: Bearer``; without
    it the client's own ``Authorization`` is passed through, unless
    ``client_key`` is set (then clients must send ``Bearer <client_key>``, and the
    upstream gets ``upstream_key`` or no key at all).
    ``top_logprobs``: alternatives asked of the upstream per token (``None``: 20,
    or the certificate's ``statistic.alternatives`` if larger, when the certificate
    reads them, else 1; at least what the client asks for, and never 0, for which
    llama.cpp's server sends no logprobs at all). A certificate that
    reads more alternatives than this, or exact entropies, is refused when the
    proxy starts (and per request, should a store alias move to one).

    Limits (a request or an answer past one is refused or blocked, never held
    whole): ``max_body_bytes`` of a request body (HTTP 413), read within
    ``body_timeout_s`` (HTTP 408); ``max_concurrent_requests`` chat requests at once,
    from the body's first byte to the answer's last (HTTP 503 ``overloaded`` with
    ``Retry-After`` past it); ``max_answer_tokens`` and ``max_answer_bytes`` of
    one upstream answer (also at most the request's own token limit once the
    certificate's context fills it in; past either, the answer is blocked with
    cause ``over_token_limit`` and the upstream is closed). ``allowed_hosts``: the
    ``Host`` names the proxy answers to (``"*"``: any; the command line allows only
    loopback names when it listens on a loopback address, so that a web page cannot
    reach it through DNS rebinding); another host gets HTTP 400.

    ``record_dir``: write every guarded answer as a trace line there, a local
    directory or an fsspec URL such as ``s3://bucket/prefix`` (opened with
    ``record_storage_options``), in ``record_format`` ``"jsonl"`` or ``"parquet"``
    (files rotated at ``record_max_bytes``; at most ``record_queue`` answers wait to
    be written, more are dropped and counted). A URL or a Parquet recording is
    written to a local spool file and each finished file is published whole, also
    once it is ``record_max_age_s`` old (:mod:`adapters._proxy._recording`); a URL
    recording spools in ``record_spool`` (default: a directory of the destination's
    under ``$XDG_STATE_HOME/liftguard/record-spool``, :mod:`adapters._proxy._spool`),
    and each start publishes the spool files an earlier run left there.
    ``record_dataset``: the lines' dataset name and the files' prefix, a simple name
    (letters, digits, ``_``, ``.``, ``-``; no path). ``refresh_interval_s``: how often
    store aliases are re-read (0: never; :meth:`Proxy.refresh_certificates` on
    demand).

    ``risk_alpha``: the level of the live risk monitor of each calibrated model
    entry (:meth:`~guardrail.Certificate.risk_monitor`; its alarm is false with
    probability at least ``1 - risk_alpha``, over any horizon, while the promise
    holds). ``feedback_ids``: how many of the latest answers ``POST
    /v1/liftguard/feedback`` can still label (their ids are kept in a bounded
    store, the oldest dropped first, about half a kilobyte each: some 27 MB at
    the default 50,000; a label for a dropped answer is refused as unknown).

    ``redis_url``: share the answers, the labels and the risk monitors with every
    replica that names the same Redis or Valkey server and ``fleet_namespace`` (see
    the docs' "Several replicas"): a label is taken once whichever replica receives
    it, and one anytime-valid test per certificate content covers the whole fleet.
    The namespace is by default derived from ``fleet_deployment`` (by default the
    upstream URL): two deployments never share an alarm unless given one namespace
    or deployment name. A command to Redis waits at most ``fleet_timeout_s``, a new
    connection at most ``fleet_connect_timeout_s``; answers are kept for labels
    ``feedback_ttl_s`` seconds (``feedback_ids`` then does not apply). Redis down or
    slow never fails or slows a guarded answer: labels get HTTP 503 and the monitors
    report themselves blind until it answers again.

    Examples
    --------
        >>> from guardrail import Certificate, ModelIdentity, SkeletonSpec, StreamPolicy
        >>> cert = Certificate(StreamPolicy(), tau=2.0, model=ModelIdentity("my-model"),
        ...                    skeleton=SkeletonSpec("uniform", {"vocab_size": 1000}))
        >>> config = ProxyConfig(upstream="http://127.0.0.1:8000/v1",
        ...                      certificate=StaticCertificate(cert), mode="observe")
        >>> config.mode, config.on_block, config.entry_for("any-model")
        ('observe', 'error', '*')
    """

    upstream: str
    certificate: CertificateSource | None = None
    model_certificates: Mapping[str, CertificateSource] = field(default_factory=dict)
    mode: ProxyMode = "buffered"
    on_block: OnBlock = "error"
    refusal_message: str = DEFAULT_REFUSAL
    on_context_mismatch: OnMismatch = "log"
    allow_request_fields: tuple[str, ...] = ()
    upstream_timeout_s: float = 60.0
    upstream_key: str | None = None
    client_key: str | None = None
    top_logprobs: int | None = None
    max_token_chars: int = DEFAULT_MAX_TOKEN_CHARS
    max_upstream_connections: int = 1024
    max_concurrent_requests: int = 1024
    max_body_bytes: int = 4 * 1024 * 1024
    body_timeout_s: float = 30.0
    max_answer_tokens: int = DEFAULT_MAX_ANSWER_TOKENS
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    allowed_hosts: tuple[str, ...] = ("*",)
    record_dir: str | None = None
    record_max_bytes: int = 64 * 1024 * 1024
    record_queue: int = 10_000
    record_dataset: str = "proxy"
    record_format: RecordFormat = "jsonl"
    record_max_age_s: float = 300.0
    record_storage_options: Mapping[str, Any] | None = None
    record_spool: str | None = None
    refresh_interval_s: float = 10.0
    risk_alpha: float = 0.05
    feedback_ids: int = 50_000
    redis_url: str | None = None
    fleet_namespace: str | None = None
    fleet_timeout_s: float = 0.5
    feedback_ttl_s: int = 7 * 24 * 3600
    fleet_deployment: str | None = None
    fleet_connect_timeout_s: float = 5.0

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
        check_positive("upstream_timeout_s", self.upstream_timeout_s)
        check_positive("refresh_interval_s", self.refresh_interval_s, allow_zero=True)
        for key_name in ("upstream_key", "client_key"):
            key = getattr(self, key_name)
            if key is not None and (not isinstance(key, str) or not key.strip()):
                raise ConfigError(f"{key_name} must be a non-empty string or None")
        if self.top_logprobs is not None:
            integer_at_least("top_logprobs", self.top_logprobs, 0)
            if self.top_logprobs > 20:
                raise ConfigError(f"top_logprobs must be <= 20, got {self.top_logprobs}")
        integer_at_least("max_token_chars", self.max_token_chars, 1)
        integer_at_least("max_upstream_connections", self.max_upstream_connections, 1)
        integer_at_least("max_concurrent_requests", self.max_concurrent_requests, 1)
        integer_at_least("max_body_bytes", self.max_body_bytes, 1024)
        check_positive("body_timeout_s", self.body_timeout_s)
        integer_at_least("max_answer_tokens", self.max_answer_tokens, 1)
        integer_at_least("max_answer_bytes", self.max_answer_bytes, 1024)
        fields = check_context_settings(self.on_context_mismatch, self.allow_request_fields)
        object.__setattr__(self, "allow_request_fields", fields)
        hosts = self.allowed_hosts
        if isinstance(hosts, str) or not all(isinstance(h, str) and h for h in hosts) or not hosts:
            raise ConfigError(f"allowed_hosts must be a non-empty list of names, got {hosts!r}")
        object.__setattr__(self, "allowed_hosts", tuple(hosts))
        integer_at_least("record_max_bytes", self.record_max_bytes, 1024)
        integer_at_least("record_queue", self.record_queue, 1)
        if self.record_dir is not None and not isinstance(self.record_dir, str):
            raise ConfigError(f"record_dir must be a path string, got {self.record_dir!r}")
        check_dataset_name(self.record_dataset)
        if self.record_format not in ("jsonl", "parquet"):
            raise ConfigError(f"record_format must be jsonl or parquet; got {self.record_format!r}")
        check_positive("record_max_age_s", self.record_max_age_s)
        if self.record_spool is not None and (
            not isinstance(self.record_spool, str) or not self.record_spool
        ):
            raise ConfigError(f"record_spool must be a path string, got {self.record_spool!r}")
        if self.record_spool is not None and not is_url(self.record_dir or ""):
            raise ConfigError(
                "record_spool is for a URL recording (a local one spools in DIR/.spool)"
            )
        if self.record_storage_options is not None and not isinstance(
            self.record_storage_options, Mapping
        ):
            raise ConfigError("record_storage_options must be a mapping of fsspec options")
        check_risk_settings(self.risk_alpha, self.feedback_ids)
        check_fleet_settings(
            self.redis_url, self.fleet_namespace, self.fleet_timeout_s, self.feedback_ttl_s,
            deployment=self.fleet_deployment, connect_timeout_s=self.fleet_connect_timeout_s,
        )  # fmt: skip

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
