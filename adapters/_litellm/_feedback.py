"""The LiteLLM guardrail's live risk monitor: labels after the fact on LiteLLM's own server,
and the ``liftguard_risk_*`` gauges in the process's Prometheus registry.

Each :class:`~adapters.litellm.LiftGuardGuardrail` has a
:class:`~adapters._risk._feedback.RiskWatch` with one model entry, the guardrail's name.
:func:`register` adds it to this process's watches and, once, adds to LiteLLM's FastAPI app
(when LiteLLM's proxy server runs in this process):

- ``POST /v1/liftguard/feedback`` ``{"id": ..., "correct": true|false}``: the label of one
  certified answer (the proxy's endpoint: same body, same replies). The ``id`` is the
  request id the guardrail minted (``liftguard.request_id`` of the verdict, the
  ``x-liftguard-request-id`` response header; never LiteLLM's call id, which a client sets)
  or the completion's ``id`` while no other kept answer carries it. The route is
  behind LiteLLM's own key check (``user_api_key_auth``: the master key, or a key LiteLLM's
  route rules let through).
- ``GET /v1/liftguard/risk``: every guardrail's monitor (alarm, bounds, counts), behind the
  same key check.
- ``POST /v1/liftguard/refresh``: re-read every guardrail's certificate now (a store alias
  after ``liftguard skeleton promote``), ``{guardrail: changed}``; the same key check.

The gauges (the proxy's, with ``model`` set to the guardrail's name) and
``liftguard_feedback_total{result}`` are registered in ``prometheus_client``'s default
registry, which LiteLLM's ``/metrics`` serves when its ``prometheus`` callback is on
(``litellm_settings: callbacks: ["prometheus"]``). With ``PROMETHEUS_MULTIPROC_DIR`` set
LiteLLM serves a registry of its own instead. With several workers, each process has its own
monitors unless the guardrails share a fleet store (``redis: true`` or ``redis_url``): then a
label may reach any worker, every worker's monitor is the fleet's, and
``liftguard_fleet_blind``, ``liftguard_fleet_errors_total{op}``,
``liftguard_fleet_timeouts_total{op}`` and ``liftguard_fleet_losses_total{kind}`` are
exported too.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._risk._feedback import FEEDBACK_PATH, feedback_response
from .._risk._fleet_watch import FleetRiskWatch
from .._risk._risk_watch import RiskWatch
from .._serving._metrics import RiskState, risk_collector

__all__ = ["FEEDBACK_PATH", "REFRESH_PATH", "RISK_PATH", "count", "register"]

logger = logging.getLogger(__name__)

RISK_PATH = "/v1/liftguard/risk"
REFRESH_PATH = "/v1/liftguard/refresh"
_PROXY_MODULE = "litellm.proxy.proxy_server"

_lock = threading.Lock()
_watches: dict[str, RiskWatch] = {}
_refreshers: dict[str, Callable[[], Awaitable[bool]]] = {}
_feedback_counter: Any = None
_fleet_errors: Any = None
_fleet_timeouts: Any = None
_fleet_losses: Any = None
_routes_added: set[int] = set()


def register(name: str, watch: RiskWatch, refresh: Callable[[], Awaitable[bool]]) -> None:
    """Serve guardrail ``name``'s ``watch`` (its labels, its gauges) and ``refresh`` (re-read
    its certificate) from this process."""
    with _lock:
        _watches[name] = watch
        _refreshers[name] = refresh
        _export_metrics()
        if isinstance(watch, FleetRiskWatch):
            watch.count_timeout = lambda op: _fleet_timeouts.labels(op=op).inc()
            watch.count_loss = lambda kind: _fleet_losses.labels(kind=kind).inc()
        app = _litellm_app()
        if app is not None and id(app) not in _routes_added:
            _add_routes(app)
            _routes_added.add(id(app))


def count_error(op: str) -> None:
    """One call to the fleet store that failed or was dropped."""
    if _fleet_errors is not None:
        _fleet_errors.labels(op=op).inc()


def _blind() -> float:
    with _lock:
        watches = list(_watches.values())
    return float(any(getattr(w, "blind", None) is not None for w in watches))


def count(result: str) -> None:
    """One label sent: ``accepted`` or the refusal's code."""
    if _feedback_counter is not None:
        _feedback_counter.labels(result=result).inc()


def _states() -> list[RiskState]:
    with _lock:
        watches = list(_watches.values())
    return [state for watch in watches for state in watch.states()]


def _export_metrics() -> None:
    global _feedback_counter, _fleet_errors, _fleet_timeouts, _fleet_losses
    if _feedback_counter is not None:
        return
    from prometheus_client import REGISTRY, Counter, Gauge

    _feedback_counter = Counter(
        "liftguard_feedback", "Labels sent to the feedback endpoint", ["result"]
    )
    _fleet_errors = Counter(
        "liftguard_fleet_errors", "Calls to the fleet store (Redis) that failed or were dropped",
        ["op"],
    )  # fmt: skip
    _fleet_timeouts = Counter(
        "liftguard_fleet_timeouts", "Calls to the fleet store (Redis) that timed out", ["op"]
    )
    _fleet_losses = Counter(
        "liftguard_fleet_losses", "Losses of the fleet's shared risk state detected", ["kind"]
    )
    Gauge(
        "liftguard_fleet_blind", "1 while a guardrail's fleet store (Redis) cannot be reached"
    ).set_function(_blind)
    REGISTRY.register(risk_collector(_states))


def _litellm_app() -> Any:
    """LiteLLM's FastAPI app when its proxy server runs in this process, else None (the
    guardrail made in a plain Python program: nothing to serve from)."""
    module = sys.modules.get(_PROXY_MODULE)
    return getattr(module, "app", None)


def _add_routes(app: Any) -> None:
    from fastapi import Depends
    from fastapi.routing import APIRoute
    from litellm.proxy.auth.user_api_key_auth import user_api_key_auth

    auth = [Depends(user_api_key_auth)]
    routes = [
        APIRoute(
            FEEDBACK_PATH, feedback, methods=["POST"], dependencies=auth, include_in_schema=False
        ),
        APIRoute(RISK_PATH, risk, methods=["GET"], dependencies=auth, include_in_schema=False),
        APIRoute(
            REFRESH_PATH, refresh, methods=["POST"], dependencies=auth, include_in_schema=False
        ),
    ]
    # first, ahead of LiteLLM's catch-all pass-through routes
    app.router.routes[0:0] = routes
    logger.info("liftguard: %s added to LiteLLM's server", ", ".join(r.path for r in routes))


async def feedback(request: Request) -> Response:
    """``POST /v1/liftguard/feedback``: the label goes to the guardrail that served the
    answer (the first whose store knows the id)."""
    with _lock:
        watches = list(_watches.values())
    return await feedback_response(watches, request)


async def risk(request: Request) -> Response:
    """``GET /v1/liftguard/risk``: ``{guardrail: its monitor}`` (the alarm, the bounds, the
    counts; ``monitored`` false for an uncalibrated certificate)."""
    with _lock:
        watches = dict(_watches)
    out: dict[str, Any] = {}
    for name, watch in watches.items():
        await watch.refresh()  # a fleet's: what every worker took, replayed
        states = {s.model: s for s in watch.states()}
        for entry, health in watch.health().items():
            state = states.get(entry)
            if state is not None:
                health.update(
                    target=state.target,
                    labels=state.labels,
                    errors=state.errors,
                    bounds=[state.lower, state.upper],
                    answers=state.answers,
                    shown=state.shown,
                )
            out[name] = health
    return JSONResponse(out)


async def refresh(request: Request) -> Response:
    """``POST /v1/liftguard/refresh``: ``{guardrail: whether a new certificate version is in
    force}`` (a failing store keeps the current one, logged)."""
    with _lock:
        refreshers = dict(_refreshers)
    return JSONResponse({name: await reread() for name, reread in refreshers.items()})
