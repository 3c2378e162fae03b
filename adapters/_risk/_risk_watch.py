"""The live risk monitor of each model entry, and the store of recent answers it takes labels of.

Each calibrated model entry (the proxy's; ``"*"``: its default certificate; a LiteLLM
guardrail is one entry, its name) has a :class:`~guardrail.RiskMonitor` made from the
certificate in force (:meth:`~guardrail.Certificate.risk_monitor` at the first level of
``RiskMonitor.restart_level(risk_alpha, k)``, so that a fleet that must restart a test
after losing its state stays within ``risk_alpha`` in all, and one process alarms at the
same label as a fleet). When
a store alias moves to another version, the entry's promise changed: its monitor is
replaced by that version's own (logged), a fresh one the first time. A version that comes
back (a rollback, a re-promotion) gets its monitor back, labels and alarm included: the
monitor tests that version's promise over the labels of answers it certified, an
anytime-valid test that a pause does not invalidate (one test per version). Each entry
keeps the monitors of its last :data:`KEPT_VERSIONS` versions out of force. An
uncalibrated certificate promises no risk and has no monitor.

Every answer the certificate decided (it ended, or the certificate blocked it; not one
cut off by the upstream or the client) under a context the certificate was calibrated
for feeds ``update_shown(certified)``: the monitor's coverage watch. What the watch keeps
of an answer is a :class:`FinishedAnswer`, so the proxy and the LiteLLM guardrail feed it
the same way. :meth:`RiskWatch.label` then feeds the label of one certified answer to
``update(correct=...)``, once (the HTTP side: :mod:`._feedback`). The ``id`` is the
request id (``liftguard.request_id`` of the verdict, also the ``x-liftguard-request-id``
header; at LiteLLM an id the guardrail mints, never the client-settable
``x-litellm-call-id``) or the ``id`` of the answer the client got
(``chatcmpl-...``) when no other kept answer carries the same one (some upstreams reuse
ids).

:class:`RiskWatch` keeps the latest ``feedback_ids`` answers (the oldest dropped first),
so memory stays bounded whatever the traffic; a label for a dropped answer is refused as
unknown. One lock covers the monitors and the store: answers end, labels arrive and
``/metrics`` reads from any thread.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from guardrail import Certificate, ConfigError, RiskMonitor

from .._serving._certs import CertificateSource
from .._serving._metrics import RiskState
from ._risk_replies import (
    FeedbackRefused,
    in_flight,
    label_reply,
    refusal,
    refuse_unless_shown,
    status_of,
)

__all__ = ["KEPT_VERSIONS", "SERVING", "FeedbackRefused", "FinishedAnswer", "RiskWatch"]

logger = logging.getLogger(__name__)

KEPT_VERSIONS = 16
"""Monitors of versions out of force kept per model entry, for when one comes back."""
SERVING = 65_536
"""Answers begun and not finished that the watch remembers at most (the oldest dropped)."""


@dataclass
class _Watch:
    """The monitor of one model entry, for the certificate version ``label``; in a fleet
    (:mod:`._fleet_watch`) also the key of its shared record and the record last read
    (``record``); ``latched``: an alarm that fired in a test lost since (a fleet's)."""

    label: str
    monitor: RiskMonitor | None  # None: the certificate is not calibrated
    version: str = ""
    record: Any = None
    latched: bool = False

    @property
    def n_labels(self) -> int:
        return self.monitor.n if self.monitor else 0

    @property
    def alarm(self) -> bool:
        """The alarm as reported: the test's own, or one latched from a lost test."""
        return self.latched or (self.monitor is not None and self.monitor.alarm)


@dataclass(frozen=True)
class FinishedAnswer:
    """What a risk watch takes of one answer once its verdict is final (``take(entry,
    answer)``; the proxy and the LiteLLM guardrail make one per answer, and so does a
    host that serves answers through a fleet replica of its own,
    :meth:`FleetSettings.replica`).

    ``request_id``: the id a label names (``x-liftguard-request-id``); ``completion_id``:
    the ``id`` the client got (a label may name it instead); ``label``: the certificate
    version that judged it (the label its certificate source's ``current()`` gave with
    it: an answer of a version no longer in force cannot be labelled); ``certified``:
    shown as certified (only those can be labelled); ``decided``: the certificate decided
    it (it ended, or the certificate blocked it), not an upstream failure or a client
    gone; ``covered``: under a context the certificate was calibrated for
    (``mismatched``: a setting the client changed); ``cause``: the verdict's cause (a
    :class:`guardrail.Cause` value).

    Examples
    --------
        >>> answer = FinishedAnswer("r1", "chatcmpl-1", "cert.json", certified=True,
        ...     decided=True, covered=True, mismatched=False, cause="certified")
        >>> answer.certified
        True
    """

    request_id: str
    completion_id: str
    label: str
    certified: bool
    decided: bool
    covered: bool
    mismatched: bool
    cause: str


class _Answer:
    """What the store keeps of one finished answer."""

    __slots__ = ("cause", "completion_id", "entry", "label", "labelled", "monitor", "status")

    def __init__(
        self,
        completion_id: str,
        entry: str,
        label: str,
        status: str,
        cause: str,
        monitor: RiskMonitor | None,
    ) -> None:
        self.completion_id, self.entry, self.label = completion_id, entry, label
        self.status, self.cause, self.monitor = status, cause, monitor
        self.labelled = False


class RiskWatch:
    """The risk monitors of some model entries and the store of recent answer ids.

    ``sources``: the certificate of each model entry; ``risk_alpha``: the monitors'
    false-alarm level; ``feedback_ids``: answers kept for labels (the oldest dropped
    first); ``count(result)``: called once per label sent, with ``accepted`` or the
    refusal's code (a metric)."""

    def __init__(
        self,
        sources: Mapping[str, CertificateSource],
        *,
        risk_alpha: float,
        feedback_ids: int,
        count: Callable[[str], object] | None = None,
    ) -> None:
        self._sources = sources
        self.risk_alpha, self.feedback_ids = risk_alpha, feedback_ids
        self.count: Callable[[str], object] = count if count is not None else _ignore
        self._lock = threading.Lock()
        self._watches: dict[str, _Watch] = {}
        self._past: OrderedDict[tuple[str, str], _Watch] = OrderedDict()  # (entry, label)
        self._answers: OrderedDict[str, _Answer] = OrderedDict()  # by request id, oldest first
        self._by_completion: dict[str, tuple[str, int]] = {}  # id -> (latest request id, count)
        self._serving: dict[str, None] = {}  # request ids begun and not finished, oldest first
        self.sync()

    # -- monitors --------------------------------------------------------------------------

    def sync(self) -> None:
        """Give every entry whose certificate version changed that version's monitor."""
        with self._lock:
            for entry in self._sources:
                self._watch(entry)

    def _watch(self, entry: str) -> _Watch:
        """The entry's watch for the certificate in force now (its version's own if it
        changed: the one kept from before, or a fresh one)."""
        certificate, label = self._sources[entry].current()
        watch = self._watches.get(entry)
        if watch is not None and watch.label == label:
            return watch
        new = self._past.pop((entry, label), None)
        what = f"its risk monitor back ({new.n_labels} labels)" if new else "a new risk monitor"
        if new is None:
            monitor = self._first_monitor(certificate)
            new = _Watch(label, monitor, self._version(entry, label, certificate))
        if new.monitor is None:
            what = "no risk monitor (not calibrated)"
        if watch is not None:
            self._past[(entry, watch.label)] = watch
            kept = [key for key in self._past if key[0] == entry]  # oldest first
            if len(kept) > KEPT_VERSIONS:
                del self._past[kept[0]]
            logger.info(
                "model %s: certificate %s -> %s: %s (the promise changed; the last monitor "
                "took %d labels, alarm %s)",
                entry,
                watch.label,
                label,
                what,
                watch.n_labels,
                "on" if watch.monitor is not None and watch.monitor.alarm else "off",
            )
        self._watches[entry] = new
        return new

    def monitor(self, entry: str) -> RiskMonitor | None:
        """A copy of the risk monitor of model entry ``entry``'s certificate version in
        force, as this watch holds it now (``None``: the certificate is not calibrated);
        a fleet replica's is the one in the fleet's record it read last (:meth:`refresh`
        first for the latest). ``KeyError`` for an entry it does not watch."""
        if entry not in self._sources:
            raise KeyError(entry)
        with self._lock:
            held = self._watch(entry).monitor
            return None if held is None else RiskMonitor.from_bytes(held.to_bytes())

    def new_monitor(self, certificate: Certificate, restarts: int) -> RiskMonitor:
        """A fresh monitor of ``certificate``'s promise for its test number ``restarts``
        (0: the first; a fleet counts the tests it had to restart after a loss), at
        ``RiskMonitor.restart_level(risk_alpha, restarts)``: over every test of a
        version, false alarms stay within ``risk_alpha``."""
        return certificate.risk_monitor(RiskMonitor.restart_level(self.risk_alpha, restarts))

    def _first_monitor(self, certificate: Certificate) -> RiskMonitor | None:
        """The monitor a version starts with here (``None``: uncalibrated, it promises no
        risk)."""
        try:
            return self.new_monitor(certificate, 0)
        except ConfigError:
            return None

    def _version(self, entry: str, label: str, certificate: Certificate) -> str:
        """The key of a version's shared logs (none in one process)."""
        return ""

    def begin(self, entry: str, request_id: str) -> None:
        """When an answer of model entry ``entry`` starts (its id is sent to the client
        before it ends): a label for it before :meth:`take` is refused as in flight
        (HTTP 503 ``answer_in_flight`` with ``Retry-After``), not as unknown."""
        if entry not in self._sources:
            return
        with self._lock:
            self._serving[request_id] = None
            if len(self._serving) > SERVING:  # (answers that never finished)
                del self._serving[next(iter(self._serving))]

    def take(self, entry: str, answer: FinishedAnswer) -> None:
        """Once per answer of model entry ``entry``, after its verdict: feed its coverage
        event to the entry's monitor and keep its ids for feedback."""
        if entry not in self._sources:
            return
        with self._lock:
            self._serving.pop(answer.request_id, None)
            watch = self._watch(entry)
            current = watch.label == answer.label
            monitor = watch.monitor if current else None
            if monitor is not None and answer.decided and answer.covered:
                self._take_verdict(entry, watch, answer.certified)
            status = status_of(answer.certified, answer.mismatched, current, monitor)
            self._keep_answer(entry, answer, status, watch, current)

    def _take_verdict(self, entry: str, watch: _Watch, shown: bool) -> None:
        """One decided, covered answer of the version in force (shown or not)."""
        self._feed_verdict(entry, watch, shown)

    def _keep_answer(
        self, entry: str, answer: FinishedAnswer, status: str, watch: _Watch, current: bool
    ) -> None:
        """Keep a finished answer for its label."""
        monitor = watch.monitor if current else None
        self._keep(
            answer.request_id,
            _Answer(answer.completion_id, entry, answer.label, status, answer.cause, monitor),
        )

    @classmethod
    def _feed_verdict(cls, entry: str, watch: _Watch, shown: bool) -> None:
        monitor = watch.monitor
        assert monitor is not None
        warned = monitor.coverage_warning
        if monitor.update_shown(shown) and not warned:
            cls._log_coverage(entry, watch)

    @classmethod
    def _feed_label(cls, entry: str, watch: _Watch, correct: bool) -> None:
        monitor = watch.monitor
        assert monitor is not None
        fired = monitor.alarm
        monitor.update(correct=correct)
        if monitor.alarm and not fired:
            cls._log_alarm(entry, watch)

    @staticmethod
    def _log_coverage(entry: str, watch: _Watch) -> None:
        """The line logged once when a monitor's coverage warning fires."""
        monitor = watch.monitor
        assert monitor is not None
        logger.warning(
            "coverage warning: model %s, certificate %s: after %d answers fewer are "
            "shown (%d) than the calibration promised (%g); the risk guarantee is not "
            "at stake, but the traffic may have drifted",
            entry,
            watch.label,
            monitor.answers,
            monitor.shown,
            monitor.coverage,
        )

    @staticmethod
    def _log_alarm(entry: str, watch: _Watch) -> None:
        """The line logged once when a monitor's alarm fires."""
        monitor = watch.monitor
        assert monitor is not None
        logger.warning(
            "risk alarm: model %s, certificate %s: after %d labelled answers (%d wrong) "
            "the error rate of shown answers exceeds the promised %g (it has exceeded "
            "%g; level %g): recalibrate on recent labelled traffic or roll back",
            entry,
            watch.label,
            monitor.n,
            monitor.errors,
            monitor.target,
            monitor.lower_bound,
            monitor.alpha,
        )

    def _keep(self, request_id: str, answer: _Answer) -> None:
        self._answers[request_id] = answer
        cid = answer.completion_id
        count = self._by_completion.get(cid, ("", 0))[1]
        self._by_completion[cid] = (request_id, count + 1)
        while len(self._answers) > self.feedback_ids:
            _, old = self._answers.popitem(last=False)
            # the oldest answer is never the latest of its completion id unless it is alone
            latest, count = self._by_completion[old.completion_id]
            if count == 1:
                del self._by_completion[old.completion_id]
            else:
                self._by_completion[old.completion_id] = (latest, count - 1)

    # -- labels ----------------------------------------------------------------------------

    def label(self, answer_id: str, correct: bool) -> dict[str, Any]:
        """Feed the label of answer ``answer_id`` (a request id or a completion id) to its
        monitor; what the monitor says now (``bounds``: ``lower_bound``, at least the target
        exactly while ``alarm``, and the recent window's upper bound, as in ``/metrics``).
        :class:`FeedbackRefused` (nothing changes) for
        an answer that is unknown, was not certified, or was labelled already, ..."""
        with self._lock:
            request_id, answer = self._find(answer_id)
            refuse_unless_shown(answer_id, answer)
            if answer.labelled:
                raise FeedbackRefused(
                    409, "duplicate_feedback", f"answer {answer_id!r} was labelled already"
                )
            watch = self._watch(answer.entry)
            monitor = answer.monitor
            if monitor is None or watch.monitor is not monitor:  # a new version since
                raise refusal("certificate_changed", answer_id, answer)
            self._feed_label(answer.entry, watch, correct)
            answer.labelled = True
            return label_reply(answer_id, request_id, correct, answer.entry, watch)

    async def alabel(self, answer_id: str, correct: bool) -> dict[str, Any]:
        """:meth:`label`, for callers that may wait on a store shared by several replicas
        (:class:`~._fleet_watch.FleetRiskWatch`)."""
        return self.label(answer_id, correct)

    async def refresh(self) -> None:
        """Bring the monitors up to date with what other replicas took (nothing to do in
        one process)."""
        return None

    def _find(self, answer_id: str) -> tuple[str, _Answer]:
        answer = self._answers.get(answer_id)
        if answer is not None:
            return answer_id, answer
        request_id, count = self._by_completion.get(answer_id, ("", 0))
        if count > 1:
            raise FeedbackRefused(
                409,
                "ambiguous_id",
                f"{count} recent answers carry the id {answer_id!r} (the upstream reuses "
                "ids): send the request id instead (x-liftguard-request-id, or "
                "liftguard.request_id of the verdict)",
            )
        if count == 0 and answer_id in self._serving:
            raise in_flight(answer_id)
        if count == 0:
            raise FeedbackRefused(
                404,
                "unknown_answer",
                f"no answer {answer_id!r} among the last {self.feedback_ids} served here "
                "(unknown, or dropped from the feedback store: feedback_ids)",
            )
        return request_id, self._answers[request_id]

    # -- reports ---------------------------------------------------------------------------

    def states(self) -> list[RiskState]:
        """Every monitored entry's monitor, for ``/metrics``."""
        with self._lock:
            return [_state(entry, watch) for entry, watch in self._current() if watch.monitor]

    def health(self) -> dict[str, Any]:
        """``{model entry: its monitor's alarm state}`` for ``/healthz`` (which needs no key,
        so no counts: those are in ``/metrics``); ``monitored`` is false for an
        uncalibrated certificate."""
        out: dict[str, Any] = {}
        with self._lock:
            for entry, watch in self._current():
                m = watch.monitor
                out[entry] = {
                    "certificate": watch.label,
                    "monitored": m is not None,
                    "alarm": watch.alarm if m else None,
                    "coverage_warning": m.coverage_warning if m else None,
                }
        return out

    def _current(self) -> list[tuple[str, _Watch]]:
        return [(entry, self._watch(entry)) for entry in self._sources]


def _state(entry: str, watch: _Watch) -> RiskState:
    m = watch.monitor
    assert m is not None
    return RiskState(
        entry,
        watch.label,
        m.target,
        m.n,
        m.errors,
        m.lower_bound,
        m.bounds[1],
        m.log_e_value,
        watch.alarm,
        m.answers,
        m.shown,
        m.coverage_warning,
    )


def _ignore(result: str) -> None:
    return None
