"""One risk monitor per certificate version for a whole fleet of replicas: :class:`FleetRiskWatch`.

Several ``liftguard serve`` processes behind a load balancer, or LiteLLM workers and pods,
share a Redis (or Valkey) server (:mod:`._fleet`). Each replica

- keeps every finished answer there (so a label may reach any replica) and appends the
  verdict of each decided, covered answer to its version's verdict log, in the background:
  a guarded request never waits on Redis, and a write that fails or finds too many
  writes pending is dropped and counted;
- takes a label in one atomic script (at most once fleet-wide, wherever it arrives),
  which appends it to the version's label log;
- replays both logs, in Redis's order, into a local :class:`~guardrail.RiskMonitor` of
  the version (on each label it takes, before each report it serves and every
  ``refresh_s``): every replica's monitor is the one monitor that a single process fed
  every label would be, so the fleet has one anytime-valid test per version at one
  ``alpha``, and ``/metrics`` and ``/healthz`` read the same state from any replica.

When Redis is unreachable or slow (each call waits at most ``timeout_s``), guarded
requests go on unchanged; a label is refused with HTTP 503 ``fleet_unavailable`` (send it
again later; one a hung server still applies when it wakes is taken once, and the second
send gets 409 ``duplicate_feedback``); the watch reports itself ``blind`` with the reason, and
logs once when it goes blind and once when it sees again. It recovers by itself on the
next call that succeeds. When Redis loses its data (a restart without persistence, an
eviction), answers kept before are unknown to labels, and each version's logs start
again: the replicas notice the logs' new generation and start their monitors afresh
(a fresh test on the new labels; the evidence gathered before is lost, never mixed).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import secrets
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from guardrail import Certificate

from ._certs import CertificateSource
from ._fleet import FleetAnswer, FleetStore, fleet_client, version_key
from ._risk_replies import FeedbackRefused, label_reply, refusal, refuse_unless_shown
from ._risk_watch import FinishedAnswer, RiskWatch, _Watch

__all__ = ["BATCH", "FleetRiskWatch", "FleetSettings", "make_risk_watch"]

logger = logging.getLogger(__name__)

BATCH = 256
"""Writes sent to Redis in one round trip at most."""


class FleetRiskWatch(RiskWatch):
    """A :class:`~._risk_watch.RiskWatch` whose answers and monitors live in ``store``,
    shared by every replica (see the module docstring). ``count_error(op)``: called once
    per failed or dropped call to Redis (a metric); ``max_pending``: background writes
    in flight at most; ``timeout_s``: the longest any call waits on Redis."""

    def __init__(
        self,
        sources: Mapping[str, CertificateSource],
        store: FleetStore,
        *,
        risk_alpha: float,
        count: Callable[[str], object] | None = None,
        count_error: Callable[[str], object] | None = None,
        timeout_s: float = 0.5,
        refresh_s: float = 1.0,
        max_pending: int = 10_000,
    ) -> None:
        self.store = store
        self.timeout_s, self.refresh_s, self.max_pending = timeout_s, refresh_s, max_pending
        self.count_error: Callable[[str], object] = count_error or (lambda op: None)
        self.blind: str | None = None
        """Why the watch cannot see the fleet's state now (``None``: it can)."""
        self._queue: deque[FleetAnswer | tuple[str, bool, str]] = deque()
        self._idle = asyncio.Event()
        self._idle.set()
        self._writer: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        super().__init__(sources, risk_alpha=risk_alpha, feedback_ids=1, count=count)

    def _version(self, entry: str, label: str, certificate: Certificate) -> str:
        digest = hashlib.sha256(certificate.to_json().encode("utf-8")).hexdigest()
        return version_key(entry, label, digest, self.risk_alpha)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start replaying the logs every ``refresh_s`` (in the running loop)."""
        self.ensure_started()

    def ensure_started(self) -> None:
        """:meth:`start`, from a coroutine of the loop the watch should run in (a host
        with no start-up hook of its own calls it on each request: only the first
        starts anything)."""
        if self._task is None:
            self._loop = asyncio.get_running_loop()
            self._task = self._loop.create_task(self._refresh_loop())

    async def drain(self) -> None:
        """Wait until the writes queued so far are sent (or failed: each batch waits at
        most ``timeout_s``)."""
        await self._idle.wait()

    async def aclose(self) -> None:
        """Stop replaying, let the pending writes finish, close the client."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self.drain()
        await self.store.aclose()

    async def _refresh_loop(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self.refresh_s)

    # -- answers ---------------------------------------------------------------------------

    def _take_verdict(self, entry: str, watch: _Watch, shown: bool) -> None:
        self._write((watch.version, shown, secrets.token_hex(8)))

    def _keep_answer(
        self, entry: str, answer: FinishedAnswer, status: str, watch: _Watch, current: bool
    ) -> None:
        self._write(
            FleetAnswer(
                answer.request_id,
                answer.completion_id,
                entry,
                answer.label,
                watch.version if current else "",
                status,
                answer.cause,
            )
        )

    def _write(self, item: FleetAnswer | tuple[str, bool, str]) -> None:
        """Queue ``item`` for the writer (never waits, never raises)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a thread of the host's: hand it to the watch's loop
            if self._loop is None or self._loop.is_closed():
                self._failed(_op(item), "no event loop to write to Redis from")
            else:
                self._loop.call_soon_threadsafe(self._enqueue, item)
            return
        self._enqueue(item)

    def _enqueue(self, item: FleetAnswer | tuple[str, bool, str]) -> None:
        if len(self._queue) >= self.max_pending:
            self._failed(_op(item), f"{self.max_pending} writes to Redis pending: one dropped")
            return
        self._queue.append(item)
        self._idle.clear()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_queue())

    async def _write_queue(self) -> None:
        """Send what is queued, in batches of at most :data:`BATCH`, one round trip each."""
        try:
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(BATCH, len(self._queue)))]
                try:
                    await asyncio.wait_for(self.store.write(batch), self.timeout_s)
                except Exception as exc:  # a connection error, a timeout, a script error
                    for item in batch:
                        self._failed(_op(item), _reason(exc))
                else:
                    self._seen()
        finally:
            self._idle.set()

    def _failed(self, op: str, reason: str) -> None:
        self.count_error(op)
        if self.blind is None:
            logger.warning(
                "fleet store unreachable (%s: %s): guarded answers go on; labels get 503 "
                "and the risk alarm is blind until it answers again",
                op,
                reason,
            )
        self.blind = f"{op}: {reason}"

    def _seen(self) -> None:
        if self.blind is not None:
            logger.warning("fleet store reachable again (was: %s)", self.blind)
        self.blind = None

    # -- labels ----------------------------------------------------------------------------

    def label(self, answer_id: str, correct: bool) -> dict[str, Any]:
        raise TypeError("a fleet watch takes labels through alabel (it waits on Redis)")

    async def alabel(self, answer_id: str, correct: bool) -> dict[str, Any]:
        found = await self._call("label", self.store.find(answer_id))
        if found == "unknown":
            raise FeedbackRefused(
                404,
                "unknown_answer",
                f"no answer {answer_id!r} kept by the fleet (unknown, expired after "
                f"{self.store.answer_ttl_s} s, or its record has not reached the fleet store "
                "yet: send it again in a moment)",
            )
        if isinstance(found, str):  # ambiguous:<n>
            raise FeedbackRefused(
                409,
                "ambiguous_id",
                f"{found.split(':', 1)[1]} recent answers carry the id {answer_id!r} (the "
                "upstream reuses ids): send the request id instead (x-liftguard-request-id, "
                "or liftguard.request_id of the verdict)",
            )
        refuse_unless_shown(answer_id, found)
        if found.labelled:
            raise FeedbackRefused(
                409, "duplicate_feedback", f"answer {answer_id!r} was labelled already"
            )
        with self._lock:
            watch = self._watch(found.entry) if found.entry in self._sources else None
        if watch is None or watch.monitor is None or watch.version != found.version:
            raise refusal("certificate_changed", answer_id, found)
        gen = secrets.token_hex(8)
        taken = await self._call(
            "label", self.store.take_label(found.request_id, found.version, correct, gen)
        )
        if taken == "duplicate":
            raise FeedbackRefused(
                409, "duplicate_feedback", f"answer {answer_id!r} was labelled already"
            )
        if isinstance(taken, str):  # unknown (expired meanwhile) or changed
            raise refusal("certificate_changed", answer_id, found)
        await self._call("replay", self._replay(found.entry, watch, taken.position))
        return label_reply(answer_id, found.request_id, correct, found.entry, watch)

    async def _call(self, op: str, call: Coroutine[Any, Any, Any]) -> Any:
        try:
            out = await asyncio.wait_for(call, self.timeout_s)
        except FeedbackRefused:
            raise
        except Exception as exc:
            self._failed(op, _reason(exc))
            raise FeedbackRefused(
                503,
                "fleet_unavailable",
                f"the fleet store (Redis) did not answer ({_reason(exc)}): send the label "
                "again later (a label a hung server still applies when it wakes is taken once: "
                "the second send then gets 409 duplicate_feedback)",
            ) from None
        self._seen()
        return out

    # -- replay ----------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Replay what every replica appended since the last time, for each version in
        force; a failure marks the watch blind (and is counted)."""
        with self._lock:
            current = [(entry, self._watch(entry)) for entry in self._sources]
        for entry, watch in current:
            if watch.monitor is None:
                continue
            try:
                await asyncio.wait_for(self._replay(entry, watch, 0), self.timeout_s)
            except Exception as exc:
                self._failed("replay", _reason(exc))
                return
        self._seen()

    async def _replay(self, entry: str, watch: _Watch, at_least: int) -> None:
        """Feed ``watch``'s monitor what its logs hold beyond what it read (at least
        ``at_least`` labels in all, when the log has them)."""
        for _ in range(3):
            start_l, start_v = watch.labels_read, watch.verdicts_read
            logs = await self.store.read(watch.version, start_l, start_v)
            with self._lock:
                if logs.generation != watch.generation and (
                    watch.generation is not None or watch.labels_read or watch.verdicts_read
                ):
                    self._restart(entry, watch, logs.generation)
                    continue  # read again from the start
                watch.generation = logs.generation
                labels = logs.labels[watch.labels_read - start_l :]
                verdicts = logs.verdicts[watch.verdicts_read - start_v :]
                for byte in verdicts:
                    self._feed_verdict(entry, watch, byte == ord("1"))
                for byte in labels:
                    self._feed_label(entry, watch, byte == ord("1"))
                watch.labels_read += len(labels)
                watch.verdicts_read += len(verdicts)
                if watch.labels_read >= at_least:
                    return

    def _restart(self, entry: str, watch: _Watch, generation: str | None) -> None:
        certificate, _ = self._sources[entry].current()
        logger.warning(
            "model %s, certificate %s: the fleet's logs were lost (Redis restarted without "
            "them?): the risk monitor starts afresh (it had %d labels)",
            entry,
            watch.label,
            watch.labels_read,
        )
        watch.monitor = certificate.risk_monitor(self.risk_alpha)
        watch.labels_read = watch.verdicts_read = 0
        watch.generation = None

    # -- reports ---------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        out = super().health()
        for state in out.values():
            state["blind"] = self.blind
        return out


@dataclass(frozen=True)
class FleetSettings:
    """Where a fleet keeps its state: the Redis (or Valkey) ``url``, the fleet's
    ``namespace``, the longest wait on any call (``timeout_s``) and how long an answer can
    be labelled (``feedback_ttl_s``)."""

    url: str
    namespace: str = "default"
    timeout_s: float = 0.5
    feedback_ttl_s: int = 7 * 24 * 3600


def make_risk_watch(
    sources: Mapping[str, CertificateSource],
    *,
    risk_alpha: float,
    feedback_ids: int,
    count: Callable[[str], object],
    fleet: FleetSettings | None = None,
    count_error: Callable[[str], object] | None = None,
) -> RiskWatch:
    """The risk watch of a server (the proxy, the LiteLLM guardrail): its own, or with
    ``fleet`` the one the fleet shares (``feedback_ids`` then does not apply)."""
    if fleet is None:
        return RiskWatch(sources, risk_alpha=risk_alpha, feedback_ids=feedback_ids, count=count)
    store = FleetStore(
        fleet_client(fleet.url, timeout_s=fleet.timeout_s),
        namespace=fleet.namespace,
        answer_ttl_s=fleet.feedback_ttl_s,
    )
    return FleetRiskWatch(
        sources, store, risk_alpha=risk_alpha, count=count, count_error=count_error,
        timeout_s=fleet.timeout_s,
    )  # fmt: skip


def _op(item: FleetAnswer | tuple[str, bool, str]) -> str:
    return "keep" if isinstance(item, FleetAnswer) else "verdict"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError | concurrent.futures.TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"[:200]
