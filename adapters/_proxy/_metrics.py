"""The Prometheus metrics of one proxy (its own registry: no global state).

- ``liftguard_verdicts_total{state, cause}``: final verdicts of guarded answers.
- ``liftguard_verdict_tokens`` (histogram): tokens read before the verdict.
- ``liftguard_tokens_read_total``: tokens read from the upstream.
- ``liftguard_added_latency_seconds_per_token`` (histogram): the proxy's own
  processing time per token of an answer (decode, guard, encode).
- ``liftguard_upstream_errors_total{kind}``: upstream failures (``status``,
  ``upstream_timeout``, ``upstream_transport``, ``upstream_error``,
  ``malformed_chunk``, ``unreachable``).
- ``liftguard_active_streams`` (gauge): answers in progress.
- ``liftguard_context_mismatches_total{field}``: requests that changed a setting
  the certificate was calibrated with.
- ``liftguard_client_disconnects_total``: clients that closed before the end.
- ``liftguard_records_written_total``, ``liftguard_records_dropped_total{reason}``
  (``queue_full``, ``disk``): trace lines of ``--record``.
- ``liftguard_certificate_refreshes_total{result}`` (``unchanged``, ``changed``,
  ``failed``): store alias re-reads.
- ``liftguard_certificate_info{model, certificate}`` (gauge): 1 for the
  certificate version in force per model entry (``*``: the default).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["ProxyMetrics"]

_TOKEN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
_LATENCY_BUCKETS = (1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1)


class ProxyMetrics:
    """Every metric of one proxy, registered in ``registry`` (a new one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = registry if registry is not None else CollectorRegistry()
        self.registry = reg
        self.verdicts = Counter(
            "liftguard_verdicts", "Final verdicts of guarded answers", ["state", "cause"],
            registry=reg,
        )  # fmt: skip
        self.verdict_tokens = Histogram(
            "liftguard_verdict_tokens", "Tokens read before the verdict",
            buckets=_TOKEN_BUCKETS, registry=reg,
        )  # fmt: skip
        self.tokens_read = Counter(
            "liftguard_tokens_read", "Tokens read from the upstream", registry=reg
        )
        self.latency_per_token = Histogram(
            "liftguard_added_latency_seconds_per_token",
            "The proxy's own processing time per token of an answer (seconds)",
            buckets=_LATENCY_BUCKETS, registry=reg,
        )  # fmt: skip
        self.upstream_errors = Counter(
            "liftguard_upstream_errors", "Upstream failures", ["kind"], registry=reg
        )
        self.active_streams = Gauge("liftguard_active_streams", "Answers in progress", registry=reg)
        self.context_mismatches = Counter(
            "liftguard_context_mismatches",
            "Requests that changed a setting the certificate was calibrated with",
            ["field"], registry=reg,
        )  # fmt: skip
        self.client_disconnects = Counter(
            "liftguard_client_disconnects", "Clients that closed before the end", registry=reg
        )
        self.records_written = Counter(
            "liftguard_records_written", "Trace lines written", registry=reg
        )
        self.records_dropped = Counter(
            "liftguard_records_dropped", "Trace lines dropped", ["reason"], registry=reg
        )
        self.refreshes = Counter(
            "liftguard_certificate_refreshes", "Store alias re-reads", ["result"], registry=reg
        )
        self.certificate_info = Gauge(
            "liftguard_certificate_info",
            "1 for the certificate version in force per model entry",
            ["model", "certificate"], registry=reg,
        )  # fmt: skip
