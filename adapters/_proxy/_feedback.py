"""The proxy's risk watch: its model entries, its settings, its metrics, fed each answer the
proxy finished (the serving core's :class:`~adapters._serving._risk_watch.RiskWatch`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from .._serving._certs import CertificateSource
from .._serving._feedback import feedback_response
from .._serving._risk_watch import FinishedAnswer, RiskWatch
from ._guarded import AnswerGuard

if TYPE_CHECKING:
    from ._config import ProxyConfig

__all__ = ["ProxyRiskWatch"]


class ProxyRiskWatch(RiskWatch):
    """The proxy's watch: its model entries, its settings, its metrics."""

    def __init__(
        self, config: ProxyConfig, sources: Mapping[str, CertificateSource], metrics: Any
    ) -> None:
        super().__init__(
            sources,
            risk_alpha=config.risk_alpha,
            feedback_ids=config.feedback_ids,
            count=lambda result: metrics.feedback.labels(result=result).inc(),
        )
        self._config = config
        metrics.watch_risk(self.states)

    def answer_finished(self, guard: AnswerGuard) -> None:
        """Once per proxied answer, after its verdict (see :meth:`RiskWatch.take`)."""
        info = guard.info
        entry = self._config.entry_for(info.model)
        if entry is None:
            return
        self.take(
            entry,
            FinishedAnswer(
                info.request_id,
                guard.completion_id,
                info.label,
                guard.certified,
                guard.error is None,
                info.covered,
                bool(info.mismatches),
                guard.verdict.cause.value,
            ),
        )

    async def endpoint(self, request: Request) -> Response:
        """``POST /v1/liftguard/feedback``."""
        config = self._config
        return await feedback_response(
            [self], request, max_bytes=config.max_body_bytes, timeout_s=config.body_timeout_s
        )
