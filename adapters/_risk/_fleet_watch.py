"""One risk monitor per certificate version for a whole fleet of replicas: :class:`FleetRiskWatch`.

Several ``liftguard serve`` processes behind a load balancer, or LiteLLM workers and pods,
share a Redis (or Valkey) server (:mod:`._fleet`). Each replica

- keeps every finished answer there (so a label may reach any replica), in the background:
  a guarded request never waits on Redis, and a write that fails or finds too many writes
  pending is dropped and counted; an answer that starts is marked in flight there the same
  way, so that a label sent to any replica before its record is kept gets HTTP 503
  ``answer_in_flight`` with ``Retry-After``, not 404;
- takes a label, or a batch of its answers' verdicts, by replacing the version's record
  (the monitor's whole state, constant in size) in one atomic script that checks the
  record is still the one it read, and sets the label's once-only mark in the same step:
  every replica's monitor is the one monitor that a single process fed every label would
  be, so the fleet has one anytime-valid test per version;
- reads the record (one round trip, which carries it only when it changed) on each label,
  before each report and every ``refresh_s``; a starting replica reads it once and never
  replays a history.

Each replica remembers the record it last read (its change count and chain value, see
:class:`~._fleet.FleetRecord`). A record that went back, branched off, was replaced or
is missing or unreadable is a **loss** (:func:`~._fleet.loss_of`): the label that meets
it gets HTTP 503 ``fleet_state_lost`` naming the cause, the loss is logged and counted,
and the replica that saw it first starts the next test, which every replica then adopts:
at the next level of ``RiskMonitor.restart_level`` (so that false alarms over any number
of restarts stay within ``risk_alpha``), with an alarm that any replica saw fire kept on
(``latched``) until an operator clears it (:meth:`FleetRiskWatch.clear_alarm`). Answers
kept under a lost test cannot be labelled in the next one (409 ``answer_before_loss``):
their labels may have been taken already; those kept while the record was missing can
(they name the next test's id, :mod:`._fleet`). ``/healthz`` shows each version's restarts,
losses and the last cause, the same from every replica.

When Redis is unreachable or slow, guarded requests go on unchanged; a label is refused
with HTTP 503 ``fleet_unavailable`` (send it again later; one a hung server still applies
when it wakes is taken once, and the second send gets 409 ``duplicate_feedback``); the
watch reports itself ``blind`` with the reason, and logs once when it goes blind and once
when it sees again. A command waits at most ``timeout_s`` and a new connection at most
``connect_timeout_s`` (:func:`~._fleet.fleet_client`); each timeout is logged and counted.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import logging
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from guardrail import Certificate, ConfigError, RiskMonitor

from .._serving._certs import CertificateSource
from .._serving._options import check_fleet_settings, check_risk_settings
from ._fleet import (
    IN_FLIGHT,
    FleetAnswer,
    FleetRecord,
    FleetStore,
    Moved,
    deployment_namespace,
    fleet_client,
    history_needed,
    loss_of,
    version_key,
)
from ._risk_replies import FeedbackRefused, in_flight, label_reply, refusal, refuse_unless_shown
from ._risk_watch import FinishedAnswer, RiskWatch, _Watch

__all__ = ["BATCH", "FleetRiskWatch", "FleetSettings", "make_risk_watch"]

logger = logging.getLogger(__name__)

BATCH = 256
"""Writes sent to Redis in one round trip at most."""
TRIES = 20
"""Reads of a record that moved under a change before the change gives up (503)."""

_Change = Callable[[RiskMonitor], None]
_Item = FleetAnswer | str | tuple[str, str, bool]
"""What the writer sends: an answer to keep, the in-flight mark of an answer begun (its
request id), or a verdict ``(entry, version, shown)``."""


class StateLost(Exception):
    """The fleet's record of a version was lost (:func:`~._fleet.loss_of`'s cause)."""


class FleetRiskWatch(RiskWatch):
    """A :class:`~._risk_watch.RiskWatch` whose answers and monitors live in ``store``,
    shared by every replica (see the module docstring). ``count_error(op)``: called once
    per failed or dropped call to Redis (a metric); ``count_timeout(op)``: once per call
    that timed out; ``count_loss(kind)``: once per loss this replica detected;
    ``max_pending``: background writes in flight at most; ``timeout_s``: the longest a
    command waits on Redis (``connect_timeout_s``: a new connection)."""

    def __init__(
        self,
        sources: Mapping[str, CertificateSource],
        store: FleetStore,
        *,
        risk_alpha: float,
        count: Callable[[str], object] | None = None,
        count_error: Callable[[str], object] | None = None,
        count_timeout: Callable[[str], object] | None = None,
        count_loss: Callable[[str], object] | None = None,
        timeout_s: float = 0.5,
        connect_timeout_s: float = 5.0,
        refresh_s: float = 1.0,
        max_pending: int = 10_000,
    ) -> None:
        self.store = store
        self.timeout_s, self.connect_timeout_s = timeout_s, connect_timeout_s
        self.refresh_s, self.max_pending = refresh_s, max_pending
        self.count_error: Callable[[str], object] = count_error or _ignore
        self.count_timeout: Callable[[str], object] = count_timeout or _ignore
        self.count_loss: Callable[[str], object] = count_loss or _ignore
        self.blind: str | None = None
        """Why the watch cannot see the fleet's state now (``None``: it can)."""
        self._queue: deque[_Item] = deque()
        self._idle = asyncio.Event()
        self._idle.set()
        self._writer: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._changing: dict[str, asyncio.Lock] = {}  # one change per version at a time
        self._unsent: dict[str, FleetAnswer] = {}  # by request and completion id
        super().__init__(sources, risk_alpha=risk_alpha, feedback_ids=1, count=count)

    def _first_monitor(self, certificate: Certificate) -> RiskMonitor | None:
        """What this replica reports for a version until it holds the version's record (the
        record's monitor, or the fresh one it starts the first test with): the fresh
        monitor's target and level, without the expected coverage (nothing reads it before:
        every change starts from :meth:`_held_monitor`). Unlike a fresh monitor it needs no
        Clopper-Pearson bound, whose scipy import would delay a starting replica's first
        request by a few tenths of a second; :meth:`ensure_started` imports it meanwhile,
        off the event loop."""
        cal = certificate.calibration
        if cal is None:  # uncalibrated: it promises no risk
            return None
        try:
            return RiskMonitor(cal.risk, RiskMonitor.restart_level(self.risk_alpha, 0))
        except ConfigError:  # (as the fresh monitor would be refused)
            return None

    def _warm(self) -> None:
        """Build each certificate's fresh monitor once and drop it (in a worker thread): the
        imports its bound needs are then done before a first test or a restart needs one."""
        for source in list(self._sources.values()):
            with contextlib.suppress(Exception):
                self.new_monitor(source.current()[0], 0)

    def _version(self, entry: str, label: str, certificate: Certificate) -> str:
        digest = hashlib.sha256(certificate.to_json().encode("utf-8")).hexdigest()
        return version_key(entry, digest, self.risk_alpha)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Read every record once, then again every ``refresh_s`` (in the running loop)."""
        self.ensure_started()

    def ensure_started(self) -> None:
        """:meth:`start`, from a coroutine of the loop the watch should run in (a host
        with no start-up hook of its own calls it on each request: only the first
        starts anything)."""
        if self._task is None:
            self._loop = asyncio.get_running_loop()
            self._closing = False
            self._task = self._loop.create_task(self._refresh_loop())
            self._loop.run_in_executor(None, self._warm)

    async def drain(self) -> None:
        """Wait until the writes queued so far are sent (or failed)."""
        await self._idle.wait()

    async def aclose(self) -> None:
        """Stop reading, let the pending writes finish, close the client."""
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self.drain()
        await self.store.aclose()

    async def _refresh_loop(self) -> None:
        """Until :meth:`aclose`, which also cancels it: a cancellation that arrives as a
        Redis reply does is dropped by ``asyncio.wait_for`` before Python 3.12 (the call
        returns the reply), so the loop ends by the flag too, never only by the cancel."""
        while not self._closing:
            try:
                await self.refresh()
            except Exception as exc:  # never ends the loop: the next round tries again
                self._failed("read", _reason(exc))
            if self._closing:
                return
            await asyncio.sleep(self.refresh_s)

    # -- answers ---------------------------------------------------------------------------

    def begin(self, entry: str, request_id: str) -> None:
        """:meth:`RiskWatch.begin`, and the answer's in-flight mark written to Redis in the
        background, so that a label another replica receives meanwhile is refused as in
        flight too."""
        super().begin(entry, request_id)
        if entry in self._sources:
            self._write(request_id)

    def _take_verdict(self, entry: str, watch: _Watch, shown: bool) -> None:
        self._write((entry, watch.version, shown))

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

    def _write(self, item: _Item) -> None:
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

    def _enqueue(self, item: _Item) -> None:
        if len(self._queue) >= self.max_pending:
            self._failed(_op(item), f"{self.max_pending} writes to Redis pending: one dropped")
            return
        self._queue.append(item)
        if isinstance(item, FleetAnswer):
            self._unsent[item.request_id] = self._unsent[item.completion_id] = item
        self._idle.clear()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_queue())

    async def _write_queue(self) -> None:
        """Send what is queued, in batches of at most :data:`BATCH`: the answers (and the
        in-flight marks) in one round trip, then each entry's verdicts in one change of its
        record."""
        try:
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(BATCH, len(self._queue)))]
                answers = [item for item in batch if isinstance(item, FleetAnswer | str)]
                if answers:
                    try:
                        await self._call("keep", self.store.keep(answers))
                    except FeedbackRefused:
                        for _ in answers[1:]:
                            self.count_error("keep")
                    for answer in answers:
                        if isinstance(answer, str):
                            continue
                        for name in (answer.request_id, answer.completion_id):
                            if self._unsent.get(name) is answer:
                                del self._unsent[name]
                verdicts: dict[tuple[str, str], list[bool]] = {}
                for item in batch:
                    if isinstance(item, tuple):
                        verdicts.setdefault(item[:2], []).append(item[2])
                for (entry, version), shown in verdicts.items():
                    await self._write_verdicts(entry, version, shown)
        finally:
            self._idle.set()

    async def _write_verdicts(self, entry: str, version: str, shown: list[bool]) -> None:
        with self._lock:
            watch = self._watch(entry)
        if watch.monitor is None or watch.version != version:
            return  # (a new certificate version since: its verdicts no longer count)

        def change(monitor: RiskMonitor) -> None:
            for one in shown:
                monitor.update_shown(one)

        try:
            await self._change(entry, watch, change, op="verdict")
        except (FeedbackRefused, StateLost):
            for _ in shown[1:]:  # _call counted the first
                self.count_error("verdict")

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
        with self._lock:  # the records are read with the answer: the change then fits them
            watches = [(entry, self._watch(entry)) for entry in self._sources]
        watches = [(entry, watch) for entry, watch in watches if watch.monitor is not None]
        held = [(watch.version, watch.record) for _, watch in watches]
        found, reads = await self._call("label", self.store.find_and_read(answer_id, held))
        for (entry, watch), (_, record), read in zip(watches, held, reads, strict=True):
            cause = await self._apply_read(entry, watch, record, read)
            mine = isinstance(found, FleetAnswer) and found.version == watch.version
            if cause is not None and mine:
                raise _lost(cause)
        if _coming(found) and answer_id in self._unsent:  # on its way from this replica
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.drain(), self.timeout_s)
            found = await self._call("label", self.store.find(answer_id))
        if _coming(found) and (
            found != "unknown" or answer_id in self._serving or answer_id in self._unsent
        ):  # marked in flight, still being served here, or its record still queued here
            raise in_flight(answer_id)
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
            its = self._watch(found.entry) if found.entry in self._sources else None
        if its is None or its.monitor is None or its.version != found.version:
            raise refusal("certificate_changed", answer_id, found)
        watch = its

        def change(monitor: RiskMonitor) -> None:
            monitor.update(correct=correct)

        try:
            taken = await self._change(
                found.entry, watch, change, op="label", label=(found.request_id, correct)
            )
        except StateLost as exc:
            raise _lost(str(exc)) from None
        if taken == "duplicate":
            raise FeedbackRefused(
                409, "duplicate_feedback", f"answer {answer_id!r} was labelled already"
            )
        if taken == "before":
            raise FeedbackRefused(
                409,
                "answer_before_loss",
                f"answer {answer_id!r} was kept under a test of its certificate that was "
                "lost since (see /healthz): its label may have been taken there, so it "
                "cannot count in the test in force",
            )
        if taken != "ok":  # unknown (expired meanwhile) or changed
            raise refusal("certificate_changed", answer_id, found)
        return label_reply(answer_id, found.request_id, correct, found.entry, watch)

    async def _call(self, op: str, call: Coroutine[Any, Any, Any]) -> Any:
        """Await one call to Redis; a failure marks the watch blind and is a 503."""
        try:  # the client's own timeouts end the call; this guard only backs them up
            out = await asyncio.wait_for(call, self.connect_timeout_s + 2 * self.timeout_s)
        except Exception as exc:
            reason = _reason(exc)
            if reason == "timed out":
                self.count_timeout(op)
                logger.warning(
                    "fleet store call timed out (%s): Redis did not answer within the command "
                    "timeout (%g s) or a new connection within the connect timeout (%g s)",
                    op,
                    self.timeout_s,
                    self.connect_timeout_s,
                )
            self._failed(op, reason)
            raise FeedbackRefused(
                503,
                "fleet_unavailable",
                f"the fleet store (Redis) did not answer ({reason}): send the label "
                "again later (a label a hung server still applies when it wakes is taken once: "
                "the second send then gets 409 duplicate_feedback)",
            ) from None
        self._seen()
        return out

    # -- the shared record -----------------------------------------------------------------

    async def _change(
        self,
        entry: str,
        watch: _Watch,
        change: _Change | None,
        *,
        op: str,
        label: tuple[str, bool] | None = None,
        latched: bool | None = None,
    ) -> str:
        """Apply ``change`` to the version's shared monitor (with ``label``'s once-only mark,
        and ``latched`` set) in one atomic step: ``"ok"``, or the label's refusal
        (``duplicate``, ``before``, ``unknown``, ``changed``). A record that moved is
        followed and the change tried again on it; :class:`StateLost` (once the next test
        started) when it shows a loss; FeedbackRefused 503 when Redis fails."""
        pending = ""  # the test answers were kept under while there was no record
        async with self._changing.setdefault(watch.version, asyncio.Lock()):
            for _ in range(TRIES):
                held: FleetRecord | None = watch.record
                monitor = self._held_monitor(entry, watch)
                if change is not None:
                    change(monitor)
                state = monitor.to_bytes()
                new = (
                    FleetRecord.first(watch.version, state, test=pending)
                    if held is None
                    else held.then(state, latched=latched)
                )
                out = await self._call(op, self.store.commit(held, new, label))
                mine = isinstance(out, Moved) and out.record is not None
                if mine and out.record.checksum() == new.checksum():  # ours, sent twice
                    out = "ok"
                if isinstance(out, Moved):
                    cause = await self._loss(op, held, out)
                    if cause is not None:
                        await self._restart(entry, watch, cause, out, op)
                        raise StateLost(cause)
                    if self._follow(entry, watch, out) and latched is None:
                        latched = True
                    pending = out.pending
                    continue
                if out == "ok":
                    with self._lock:
                        self._adopt(entry, watch, new, monitor)
                return str(out)
        self._failed(op, f"the record kept changing under {TRIES} tries")
        raise FeedbackRefused(
            503, "fleet_unavailable", "the fleet's record kept changing: send the label again"
        )

    async def _loss(self, op: str, held: FleetRecord | None, found: Moved) -> str | None:
        """:func:`~._fleet.loss_of`, with the record's history read when this replica is
        more than ``RECENT`` changes behind. A history that no longer reaches back that far
        (trimmed, or evicted) proves nothing: the record is then followed as a starting
        replica would, logged and counted (``unverified``), and no test restarts."""
        history: list[str] = []
        if history_needed(held, found):
            assert held is not None and found.record is not None
            history = await self._call(op, self.store.history(held.version, held.seq))
            if not history:
                self.count_loss("unverified")
                logger.warning(
                    "certificate version %s: this replica last saw change %d, %d changes "
                    "ago, further back than the record's history keeps (%d): it cannot "
                    "check that the record descends from it, and follows it unchecked",
                    held.version, held.seq, found.record.seq - held.seq,
                    self.store.history_len,
                )  # fmt: skip
        return loss_of(held, found, history)

    def _held_monitor(self, entry: str, watch: _Watch) -> RiskMonitor:
        """A copy of the monitor the held record carries (none yet: a fresh first test)."""
        record: FleetRecord | None = watch.record
        if record is None:
            certificate, _ = self._sources[entry].current()
            return self.new_monitor(certificate, 0)
        return RiskMonitor.from_bytes(record.state)

    def _follow(self, entry: str, watch: _Watch, found: Moved) -> bool:
        """Adopt ``found``, a record that follows from the held one (another replica's
        change, or its restart of the test after a loss); True when this replica saw an
        alarm that the record lost with a test and must keep on (latch)."""
        record = found.record
        if record is None:
            return False
        held: FleetRecord | None = watch.record
        knew = watch.alarm
        with self._lock:
            self._adopt(entry, watch, record, record.monitor())
        return held is not None and record.test != held.test and knew and not watch.alarm

    async def _restart(self, entry: str, watch: _Watch, cause: str, found: Moved, op: str) -> None:
        """The fleet's state was lost (``cause``; ``found``: what is there now): log and
        count it, and start the next test, at the next level, with any alarm this replica
        or the record saw fire kept on; unless another replica started it first (then
        follow that one)."""
        self.count_loss(cause.split(":", 1)[0])
        held: FleetRecord | None = watch.record
        logger.warning(
            "model %s, certificate %s: the fleet's risk state was lost (%s); this replica "
            "had seen %d labels of the test, alarm %s",
            entry, watch.label, cause, watch.n_labels, "on" if watch.alarm else "off",
        )  # fmt: skip
        for _ in range(TRIES):
            prior = found.record
            restarts = max(held.restarts if held else 0, prior.restarts if prior else 0) + 1
            losses = max(held.losses if held else 0, prior.losses if prior else 0) + 1
            latched = watch.alarm or (prior is not None and (prior.latched or _fired(prior)))
            certificate, _ = self._sources[entry].current()
            monitor = self.new_monitor(certificate, restarts)
            new = FleetRecord.first(
                watch.version, monitor.to_bytes(), restarts=restarts, latched=latched,
                losses=losses, cause=cause, test=found.pending,
            )  # fmt: skip
            if found.foreign is not None:  # what is there is no record: replace it whatever
                await self._call(op, self.store.client.delete(self.store.key("m", watch.version)))
            out = await self._call(op, self.store.commit(prior, new))
            if out == "ok":
                logger.warning(
                    "model %s, certificate %s: test %d starts at level %.3g%s",
                    entry, watch.label, restarts, monitor.alpha,
                    " (the alarm stays on until an operator clears it)" if latched else "",
                )  # fmt: skip
                with self._lock:
                    watch.record, watch.monitor, watch.latched = new, monitor, latched
                return
            assert isinstance(out, Moved)
            found = out
            if await self._loss(op, held, found) is None:  # another replica's next test
                if self._follow(entry, watch, found):
                    await self._call(op, self._latch(entry, watch))
                return

    async def _latch(self, entry: str, watch: _Watch) -> None:
        """Keep the alarm on in the record (this replica saw it fire in a lost test)."""
        monitor = RiskMonitor.from_bytes(watch.record.state)
        held: FleetRecord = watch.record
        new = held.then(monitor.to_bytes(), latched=True)
        if await self.store.commit(held, new) == "ok":
            with self._lock:
                self._adopt(entry, watch, new, monitor)

    def _adopt(self, entry: str, watch: _Watch, record: FleetRecord, monitor: RiskMonitor) -> None:
        """Hold ``record`` and its monitor; log what changed (each replica logs it once)."""
        old = watch.monitor
        held: FleetRecord | None = watch.record
        if held is not None and record.test != held.test:
            logger.warning(
                "model %s, certificate %s: the fleet started test %d after a loss (%s)",
                entry, watch.label, record.restarts, record.cause,
            )  # fmt: skip
            old = None
        watch.record, watch.monitor, watch.latched = record, monitor, record.latched
        if old is not None and monitor.alarm and not old.alarm:
            self._log_alarm(entry, watch)
        if old is not None and monitor.coverage_warning and not old.coverage_warning:
            self._log_coverage(entry, watch)

    async def refresh(self) -> None:
        """Read each version's record (when it changed) and follow it; a loss starts the
        next test; a failure marks the watch blind (and is counted)."""
        with self._lock:
            current = [(entry, self._watch(entry)) for entry in self._sources]
        for entry, watch in current:
            if watch.monitor is None:
                continue
            try:
                await self._refresh_one(entry, watch)
            except FeedbackRefused:
                return  # counted, and blind

    async def _refresh_one(self, entry: str, watch: _Watch) -> None:
        held: FleetRecord | None = watch.record
        found = await self._call("read", self.store.read(watch.version, held))
        await self._apply_read(entry, watch, held, found)

    async def _apply_read(
        self, entry: str, watch: _Watch, held: FleetRecord | None, found: Moved | None
    ) -> str | None:
        """Follow ``found``, what a read of the record ``held`` returned (``None``: it had
        not changed); the loss's cause when it shows one (the next test then started)."""
        if found is None or watch.record is not held:  # (a change of this replica's since)
            return None
        cause = await self._loss("read", held, found)
        if watch.record is not held:  # (a change of this replica's while it read the history)
            return None
        if cause is None:
            if self._follow(entry, watch, found):
                async with self._changing.setdefault(watch.version, asyncio.Lock()):
                    await self._call("read", self._latch(entry, watch))
            return None
        async with self._changing.setdefault(watch.version, asyncio.Lock()):
            if watch.record is held:  # (else a change of this replica's met it first)
                await self._restart(entry, watch, cause, found, "read")
        return cause

    async def clear_alarm(self, entry: str) -> bool:
        """An operator's: turn off, fleet-wide, an alarm kept on from a test lost since
        (``latched``) for ``entry``'s version in force; True if one was on. The alarm of
        the test in force is that test's own, sticky as a single process's."""
        with self._lock:
            watch = self._watch(entry)
        if watch.monitor is None:  # uncalibrated: no alarm
            return False
        await self._refresh_one(entry, watch)
        if not watch.latched:
            return False
        await self._change(entry, watch, None, op="clear", latched=False)
        return True

    async def export_record(self, entry: str) -> bytes | None:
        """An operator's: the fleet's record of ``entry``'s certificate version in force,
        as its bytes (``None``: there is none, or what is there is not a record). They are
        a JSON line (``format``, ``version``, ``test``, ``seq``, ``chain``, ``recent``,
        ``restarts``, ``latched``, ``losses``, ``cause``: see the docs' "Several replicas")
        and the monitor's state (:meth:`guardrail.RiskMonitor.to_bytes`):
        :meth:`import_record` writes them back, in this or another server or namespace (a
        deployment that moves takes its test with it). FeedbackRefused (503) when Redis
        does not answer; ``KeyError`` for an entry this replica does not watch."""
        with self._lock:
            watch = self._watch(entry)
        if watch.monitor is None:  # uncalibrated: no record
            return None
        found = await self._call("read", self.store.read(watch.version, None))
        return None if found is None or found.record is None else found.record.body()

    async def import_record(self, entry: str, record: bytes) -> None:
        """An operator's: write ``record`` (:meth:`export_record`'s bytes) as the fleet's
        record of ``entry``'s certificate version in force, where the version has none yet
        (before the replicas of a moved deployment start: a replica that held another
        record sees this one as a loss). The fleet's test then goes on from that state, its
        alarm and restarts included. ConfigError when the record is unreadable or of
        another version (another certificate content, model entry or ``risk_alpha``), or
        when the version has a record (or answers kept for a test of its own) already;
        FeedbackRefused (503) when Redis does not answer; ``KeyError`` for an entry this
        replica does not watch."""
        with self._lock:
            watch = self._watch(entry)
        if watch.monitor is None:
            raise ConfigError(f"model entry {entry!r}: its certificate is not calibrated")
        try:
            new = FleetRecord.parse(watch.version, record)
        except ValueError as exc:
            raise ConfigError(f"model entry {entry!r}: the record is {exc}") from None
        async with self._changing.setdefault(watch.version, asyncio.Lock()):
            out = await self._call("import", self.store.commit(None, new))
        if out != "ok":
            raise ConfigError(
                f"model entry {entry!r}: the fleet holds its certificate version's record (or "
                "answers kept for a test of its own) already: import into a namespace "
                "without it"
            )

    # -- reports ---------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        out = super().health()
        with self._lock:
            for entry, state in out.items():
                state["blind"] = self.blind
                record: FleetRecord | None = self._watches[entry].record
                if record is not None:
                    state["restarts"] = record.restarts
                    state["losses"] = record.losses
                    state["last_loss"] = record.cause or None
        return out


def _coming(found: FleetAnswer | str) -> bool:
    """What the fleet store holds of a label's answer says its record is still to come
    (nothing, or the answer's in-flight mark)."""
    return found == "unknown" or (isinstance(found, FleetAnswer) and found.status == IN_FLIGHT)


def _lost(cause: str) -> FeedbackRefused:
    return FeedbackRefused(
        503,
        "fleet_state_lost",
        f"the fleet's risk state was lost ({cause}): the next test started, at a lower "
        "level; this answer was kept under the lost test, so its label cannot count",
    )


def _fired(record: FleetRecord) -> bool:
    try:
        return record.monitor().alarm
    except ValueError:
        return False


@dataclass(frozen=True)
class FleetSettings:
    """Where the replicas of a fleet share the answers, the labels and the risk monitors
    (frozen; a bad value is a :class:`~guardrail.ConfigError` naming the field): every
    replica that names the same Redis or Valkey server and namespace (the docs' "Several
    replicas"). A label is taken once whichever replica receives it, and one anytime-valid
    test per certificate content covers the whole fleet.

    ``url``: the server, ``redis://HOST:PORT/DB``, ``rediss://...`` or ``unix://PATH``.
    ``namespace``: the fleet's name there; ``None``: derived from ``deployment``, the
    deployment's name (by default the proxy's upstream URL; :meth:`namespace_for`): two
    deployments never share an alarm unless given one namespace or deployment name.
    ``timeout_s``: the longest a command waits; ``connect_timeout_s``: the longest a new
    connection does; ``feedback_ttl_s``: how long an answer can be labelled (a fleet's
    answers are kept by the server, so the proxy's ``feedback_ids`` does not apply). The
    server down or slow never fails or slows a guarded answer: labels get HTTP 503 and
    the monitors report themselves blind until it answers again.

    Examples
    --------
        >>> fleet = FleetSettings("redis://127.0.0.1:6379/0", deployment="chat")
        >>> fleet.namespace_for("http://llm:8000/v1") == FleetSettings(
        ...     "redis://other:6379/0", deployment="chat").namespace_for("")
        True
    """

    url: str
    namespace: str | None = None
    deployment: str | None = None
    timeout_s: float = 0.5
    connect_timeout_s: float = 5.0
    feedback_ttl_s: int = 7 * 24 * 3600

    def __post_init__(self) -> None:
        if not isinstance(self.url, str):
            raise ConfigError(f"fleet.url must be a redis:// URL, got {self.url!r:.80}")
        check_fleet_settings(
            self.url, self.namespace, self.timeout_s, self.feedback_ttl_s,
            deployment=self.deployment, connect_timeout_s=self.connect_timeout_s,
            names=("fleet.url", "fleet.namespace", "fleet.deployment", "fleet.timeout_s",
                   "fleet.connect_timeout_s", "fleet.feedback_ttl_s"),
        )  # fmt: skip

    def namespace_for(self, deployment: str) -> str:
        """The fleet's namespace: ``namespace`` if given, else the one derived from the
        ``deployment`` field, else from the ``deployment`` argument (the front end's own
        default name: the proxy's upstream URL without credentials;
        :func:`~._fleet.deployment_namespace`). Replicas of one deployment share it, two
        deployments with the same certificate on one server never do."""
        if self.namespace is not None:
            return self.namespace
        return deployment_namespace(self.deployment if self.deployment is not None else deployment)

    def replica(
        self,
        certificates: Mapping[str, CertificateSource],
        *,
        risk_alpha: float = 0.05,
        deployment: str = "",
        count: Callable[[str], object] | None = None,
        count_error: Callable[[str], object] | None = None,
        count_timeout: Callable[[str], object] | None = None,
        count_loss: Callable[[str], object] | None = None,
    ) -> FleetRiskWatch:
        """A replica of this fleet in this process: what ``liftguard serve --redis`` and
        the LiteLLM guardrail run, for a host that serves answers itself.
        ``certificates``: the certificate of each model entry (``"*"``: the default;
        :class:`StaticCertificate` or :func:`certificate_source`); ``risk_alpha``: the
        monitors' false-alarm level (the replicas of a fleet share it); ``deployment``:
        the name the namespace derives from when ``namespace`` is not set
        (:meth:`namespace_for`). ``count(result)``, ``count_error(op)``,
        ``count_timeout(op)`` and ``count_loss(kind)`` are called once per label sent
        (``accepted`` or its refusal's code), per failed or dropped call to Redis, per
        call that timed out and per loss detected (the proxy's metrics).

        In an event loop: ``begin(entry, request_id)`` when an answer starts,
        ``take(entry, FinishedAnswer(...))`` when its verdict is final (written to Redis
        in the background; ``await drain()`` waits for the writes), ``await
        alabel(answer_id, correct)`` for a label (the reply
        ``POST /v1/liftguard/feedback`` sends, or FeedbackRefused with its HTTP status
        and code), ``await refresh()`` to read what other replicas took (``await
        start()`` does it every second), ``monitor(entry)``, ``health()`` and
        ``states()`` to report, ``await aclose()`` at the end.

        See the docs' "Several replicas" for an example.
        """
        check_risk_settings(risk_alpha, 1)
        client = fleet_client(
            self.url, timeout_s=self.timeout_s, connect_timeout_s=self.connect_timeout_s
        )
        store = FleetStore(
            client, namespace=self.namespace_for(deployment), answer_ttl_s=self.feedback_ttl_s
        )
        return FleetRiskWatch(
            certificates, store, risk_alpha=risk_alpha, count=count, count_error=count_error,
            count_timeout=count_timeout, count_loss=count_loss, timeout_s=self.timeout_s,
            connect_timeout_s=self.connect_timeout_s,
        )  # fmt: skip


def make_risk_watch(
    sources: Mapping[str, CertificateSource],
    *,
    risk_alpha: float,
    feedback_ids: int,
    count: Callable[[str], object],
    fleet: FleetSettings | None = None,
    deployment: str = "",
    count_error: Callable[[str], object] | None = None,
    count_timeout: Callable[[str], object] | None = None,
    count_loss: Callable[[str], object] | None = None,
) -> RiskWatch:
    """The risk watch of a server (the proxy, the LiteLLM guardrail): its own, or with
    ``fleet`` the one the fleet shares (``feedback_ids`` then does not apply), in its
    namespace for ``deployment`` (:meth:`FleetSettings.namespace_for`)."""
    if fleet is None:
        return RiskWatch(sources, risk_alpha=risk_alpha, feedback_ids=feedback_ids, count=count)
    return fleet.replica(
        sources, risk_alpha=risk_alpha, deployment=deployment, count=count,
        count_error=count_error, count_timeout=count_timeout, count_loss=count_loss,
    )  # fmt: skip


def _op(item: _Item) -> str:
    return "verdict" if isinstance(item, tuple) else "keep"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError | concurrent.futures.TimeoutError | TimeoutError):
        return "timed out"
    if type(exc).__name__ == "TimeoutError":  # redis.exceptions.TimeoutError
        return "timed out"
    return f"{type(exc).__name__}: {exc}"[:200]


def _ignore(what: str) -> None:
    return None
