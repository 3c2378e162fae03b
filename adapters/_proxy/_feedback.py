"""The proxy's risk watch: its model entries, its settings, its metrics, fed each answer the
proxy finished (the serving core's :class:`~adapters._risk._risk_watch.RiskWatch`, or
with ``redis_url`` the fleet's :class:`~adapters._risk._fleet_watch.FleetRiskWatch`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from .._risk._feedback import feedback_response
from .._risk._fleet_watch import FleetRiskWatch, make_risk_watch
from .._risk._risk_watch import FinishedAnswer, RiskWatch
from .._serving._certs import CertificateSource
from .._serving._wire import redact_url
from ._answer import ProxyAnswer

if TYPE_CHECKING:
    from ._config import ProxyConfig

__all__ = ["ProxyRiskWatch", "clear_latched_alarms"]


class ProxyRiskWatch:
    """The proxy's watch: its model entries, its settings, its metrics (``watch``: the
    one-process watch, or the fleet's with ``config.fleet``)."""

    def __init__(
        self, config: ProxyConfig, sources: Mapping[str, CertificateSource], metrics: Any
    ) -> None:
        def count(result: str) -> None:
            metrics.feedback.labels(result=result).inc()

        fleet = config.fleet
        if fleet is not None:
            metrics.watch_fleet(lambda: self.blind)
        self.watch: RiskWatch = make_risk_watch(
            sources,
            risk_alpha=config.risk_alpha,
            feedback_ids=config.feedback_ids,
            count=count,
            fleet=fleet,
            deployment=redact_url(config.upstream),
            count_error=lambda op: metrics.fleet_errors.labels(op=op).inc(),
            count_timeout=lambda op: metrics.fleet_timeouts.labels(op=op).inc(),
            count_loss=lambda kind: metrics.fleet_losses.labels(kind=kind).inc(),
        )
        self._config = config
        metrics.watch_risk(self.watch.states)

    @property
    def blind(self) -> str | None:
        """Why the fleet's state cannot be seen now (``None``: it can, or no fleet)."""
        return self.watch.blind if isinstance(self.watch, FleetRiskWatch) else None

    async def start(self) -> None:
        if isinstance(self.watch, FleetRiskWatch):
            await self.watch.start()

    async def aclose(self) -> None:
        if isinstance(self.watch, FleetRiskWatch):
            await self.watch.aclose()

    def sync(self) -> None:
        self.watch.sync()

    async def health(self) -> dict[str, Any]:
        """``/healthz``'s ``risk``: each entry's alarm state, up to date with the fleet."""
        await self.watch.refresh()
        return self.watch.health()

    async def refresh(self) -> None:
        await self.watch.refresh()

    def answer_started(self, answer: ProxyAnswer) -> None:
        """Once per proxied answer, before its id reaches the client (see
        :meth:`RiskWatch.begin`)."""
        entry = self._config.entry_for(answer.info.model)
        if entry is not None:
            self.watch.begin(entry, answer.info.request_id)

    def answer_finished(self, answer: ProxyAnswer) -> None:
        """Once per proxied answer, after its verdict (see :meth:`RiskWatch.take`)."""
        info = answer.info
        entry = self._config.entry_for(info.model)
        if entry is None:
            return
        self.watch.take(
            entry,
            FinishedAnswer(
                info.request_id,
                answer.completion_id,
                info.label,
                answer.certified,
                answer.error is None,
                info.covered,
                bool(info.mismatches),
                answer.verdict.cause.value,
            ),
        )

    async def endpoint(self, request: Request) -> Response:
        """``POST /v1/liftguard/feedback``."""
        limits = self._config.limits
        return await feedback_response(
            [self.watch], request, max_bytes=limits.max_body_bytes, timeout_s=limits.body_timeout_s
        )


async def clear_latched_alarms(
    config: ProxyConfig, models: Sequence[str] | None = None
) -> dict[str, tuple[str, bool]]:
    """An operator's (``liftguard clear-alarm``): with the replicas' own ``config``, turn off
    in the fleet's record the alarm kept on from a lost test
    (:meth:`~adapters._risk._fleet_watch.FleetRiskWatch.clear_alarm`) of each model
    entry named in ``models`` (default: every entry); ``{entry: (certificate, whether one
    was on)}``. ``KeyError`` for a model no entry serves; FeedbackRefused (503) when
    Redis does not answer."""
    from .._serving._metrics import ProxyMetrics

    names = list(models or config.model_certificates)
    if not models and config.certificate is not None:
        names.append("*")
    sources: dict[str, CertificateSource] = {}
    for name in names:
        entry, source = config.entry_for(name), config.source_for(name)
        if entry is None or source is None:
            raise KeyError(name)
        sources[entry] = source
    risk = ProxyRiskWatch(config, sources, ProxyMetrics())
    watch = risk.watch
    assert isinstance(watch, FleetRiskWatch)
    try:
        return {
            entry: (source.current()[1], await watch.clear_alarm(entry))
            for entry, source in sources.items()
        }
    finally:
        await watch.aclose()
