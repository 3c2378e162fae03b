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
  the certificate was calibrated with (``unlisted``: a field off the allowlist).
- ``liftguard_client_disconnects_total``: clients that closed before the end.
- ``liftguard_records_written_total``, ``liftguard_records_dropped_total{reason}``
  (``queue_full``, ``disk``): trace lines of ``--record``.
- ``liftguard_record_objects_total{result}``: recording files ``published`` whole
  (uploaded to ``--record URL``, or a Parquet recording renamed into place),
  ``kept_locally`` in the spool directory after every try failed, ``recovered``
  (published later: left in the spool by an earlier run, or kept and published once
  the store answered again) or ``set_aside`` (a spool file that cannot be published,
  moved to the spool's ``set-aside/``); ``liftguard_record_lines_kept_locally_total``
  and ``liftguard_record_lines_recovered_total``: the lines of the kept and of the
  recovered files.
- ``liftguard_certificate_refreshes_total{result}`` (``unchanged``, ``changed``,
  ``failed``): store alias re-reads.
- ``liftguard_certificate_info{model, certificate}`` (gauge): 1 for the
  certificate version in force per model entry (``*``: the default).
- ``liftguard_feedback_total{result}``: labels sent to ``POST
  /v1/liftguard/feedback``: ``accepted``, or the error code of a refused one
  (``unknown_answer``, ``answer_not_certified``, ``duplicate_feedback``, ...).

The live risk monitor of each calibrated model entry (gauges with labels
``model`` and ``certificate``, the version the monitor watches; a new version
starts a new monitor, and the old series disappear):

- ``liftguard_risk_target``: the selective risk the certificate promises.
- ``liftguard_risk_labels``, ``liftguard_risk_errors``: labelled shown answers
  the monitor has taken, and the wrong ones among them.
- ``liftguard_risk_lower_bound``: the lower confidence bound of the alarm's own
  test (:attr:`guardrail.RiskMonitor.lower_bound`): the error probability of shown
  answers has been shown to exceed it; at least the target exactly when the alarm
  is on; 0 before any evidence.
- ``liftguard_risk_upper_bound``: an anytime-valid upper bound on the average error
  probability of the recent labelled answers (the last 500 to 600,
  :attr:`guardrail.RiskMonitor.bounds`); 1 before any label. After an alarm and a
  recovery it can lie below the lower bound: that one is about the worst time
  since the monitor started, this one about now.
- ``liftguard_risk_log_evalue``: the log of the monitor's e-value (0 before any
  label: no evidence); the alarm fires when it reaches ``log(1/level)``, the level
  of the monitor's test (``RiskMonitor.restart_level(alpha, k)``).
- ``liftguard_risk_alarm``: 1 once the realised risk is shown to exceed the
  target (sticky; in a fleet also an alarm kept on from a test lost since, until
  an operator clears it), else 0.
- ``liftguard_risk_answers``: answers whose verdict the monitor took (shown or
  not); ``liftguard_risk_shown_ratio``: the share shown (NaN before any).
- ``liftguard_risk_coverage_warning``: 1 once the share shown is shown to fall
  below the calibration's (a warning, not a risk alarm), else 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["ProxyMetrics", "RiskState", "risk_collector"]

_TOKEN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
_LATENCY_BUCKETS = (1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1)


class ProxyMetrics:
    """Every metric of one proxy, registered in ``registry`` (a new one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = registry if registry is not None else CollectorRegistry()
        self.registry = reg
        self.verdicts = Counter(
            "liftguard_verdicts",
            "Final verdicts of guarded answers",
            ["state", "cause"],
            registry=reg,
        )
        self.verdict_tokens = Histogram(
            "liftguard_verdict_tokens",
            "Tokens read before the verdict",
            buckets=_TOKEN_BUCKETS,
            registry=reg,
        )
        self.tokens_read = Counter(
            "liftguard_tokens_read", "Tokens read from the upstream", registry=reg
        )
        self.latency_per_token = Histogram(
            "liftguard_added_latency_seconds_per_token",
            "The proxy's own processing time per token of an answer (seconds)",
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.upstream_errors = Counter(
            "liftguard_upstream_errors", "Upstream failures", ["kind"], registry=reg
        )
        self.active_streams = Gauge("liftguard_active_streams", "Answers in progress", registry=reg)
        self.context_mismatches = Counter(
            "liftguard_context_mismatches",
            "Requests that changed a setting the certificate was calibrated with",
            ["field"],
            registry=reg,
        )
        self.client_disconnects = Counter(
            "liftguard_client_disconnects", "Clients that closed before the end", registry=reg
        )
        self.records_written = Counter(
            "liftguard_records_written", "Trace lines written", registry=reg
        )
        self.records_dropped = Counter(
            "liftguard_records_dropped", "Trace lines dropped", ["reason"], registry=reg
        )
        self.record_objects = Counter(
            "liftguard_record_objects",
            "Recording files published, kept, recovered or set aside",
            ["result"],
            registry=reg,
        )
        self.record_lines_kept = Counter(
            "liftguard_record_lines_kept_locally",
            "Trace lines of recording files kept in the spool after failed uploads",
            registry=reg,
        )
        self.record_lines_recovered = Counter(
            "liftguard_record_lines_recovered",
            "Trace lines of recording files published after an earlier run left them or "
            "failed tries kept them",
            registry=reg,
        )
        self.refreshes = Counter(
            "liftguard_certificate_refreshes", "Store alias re-reads", ["result"], registry=reg
        )
        self.certificate_info = Gauge(
            "liftguard_certificate_info",
            "1 for the certificate version in force per model entry",
            ["model", "certificate"],
            registry=reg,
        )
        self.feedback = Counter(
            "liftguard_feedback",
            "Labels sent to the feedback endpoint",
            ["result"],
            registry=reg,
        )

    def watch_fleet(self, blind: Callable[[], str | None]) -> None:
        """Export ``liftguard_fleet_blind`` (1 while the fleet store cannot be reached),
        ``liftguard_fleet_errors_total{op}`` (calls to it that failed or were dropped:
        ``keep``, ``verdict``, ``label``, ``read``), ``liftguard_fleet_timeouts_total{op}``
        (those that timed out) and ``liftguard_fleet_losses_total{kind}`` (losses of the
        fleet's state this replica detected: ``missing``, ``regressed``, ``diverged``,
        ``replaced``, ``foreign``)."""
        self.fleet_errors = Counter(
            "liftguard_fleet_errors",
            "Calls to the fleet store (Redis) that failed or were dropped",
            ["op"],
            registry=self.registry,
        )
        self.fleet_timeouts = Counter(
            "liftguard_fleet_timeouts",
            "Calls to the fleet store (Redis) that timed out",
            ["op"],
            registry=self.registry,
        )
        self.fleet_losses = Counter(
            "liftguard_fleet_losses",
            "Losses of the fleet's shared risk state this replica detected",
            ["kind"],
            registry=self.registry,
        )
        gauge = Gauge(
            "liftguard_fleet_blind",
            "1 while the fleet store (Redis) cannot be reached: labels are refused and the "
            "risk monitors do not see the fleet's labels",
            registry=self.registry,
        )
        gauge.set_function(lambda: 0.0 if blind() is None else 1.0)

    def watch_risk(self, states: Callable[[], list[RiskState]]) -> None:
        """Export the ``liftguard_risk_*`` gauges, read from ``states()`` at each scrape."""
        self.registry.register(risk_collector(states))


def risk_collector(states: Callable[[], list[RiskState]]) -> Collector:
    """A collector of the ``liftguard_risk_*`` gauges of ``states()``, read at each scrape."""
    return _RiskCollector(states)


@dataclass(frozen=True)
class RiskState:
    """One model entry's risk monitor, as ``/metrics`` shows it (the gauges above):
    ``lower`` is :attr:`~guardrail.RiskMonitor.lower_bound` (``alarm`` exactly when it
    is at least ``target``), ``upper`` the recent window's upper bound."""

    model: str
    certificate: str
    target: float
    labels: int
    errors: int
    lower: float
    upper: float
    log_evalue: float
    alarm: bool
    answers: int
    shown: int
    coverage_warning: bool


_RISK_GAUGES: tuple[tuple[str, str, Callable[[RiskState], float]], ...] = (
    ("target", "The selective risk the certificate promises", lambda s: s.target),
    ("labels", "Labelled shown answers the risk monitor took", lambda s: s.labels),
    ("errors", "Wrong answers among the labelled shown ones", lambda s: s.errors),
    (
        "lower_bound",
        "Lower confidence bound of the alarm's test (alarm iff >= target)",
        lambda s: s.lower,
    ),
    ("upper_bound", "Anytime-valid upper bound on the recent risk", lambda s: s.upper),
    (
        "log_evalue",
        "Log e-value of the risk monitor (alarm at log(1/alpha))",
        lambda s: s.log_evalue,
    ),
    ("alarm", "1 once the realised risk is shown to exceed the target", lambda s: s.alarm),
    ("answers", "Answers whose verdict the risk monitor took", lambda s: s.answers),
    (
        "shown_ratio",
        "Share of those answers that were shown",
        lambda s: s.shown / s.answers if s.answers else math.nan,
    ),
    (
        "coverage_warning",
        "1 once fewer answers are shown than calibrated",
        lambda s: s.coverage_warning,
    ),
)


class _RiskCollector(Collector):
    """The ``liftguard_risk_*`` gauges of every monitored model entry, read at scrape time
    (no series is left behind when a new certificate replaces a monitor)."""

    def __init__(self, states: Callable[[], list[RiskState]]) -> None:
        self._states = states

    def describe(self) -> Iterator[Metric]:
        for name, doc, _ in _RISK_GAUGES:
            yield GaugeMetricFamily(f"liftguard_risk_{name}", doc, labels=["model", "certificate"])

    def collect(self) -> Iterator[Metric]:
        states = self._states()
        for name, doc, value in _RISK_GAUGES:
            family = GaugeMetricFamily(
                f"liftguard_risk_{name}", doc, labels=["model", "certificate"]
            )
            for state in states:
                family.add_metric([state.model, state.certificate], float(value(state)))
            yield family
