"""What the risk watch answers a label with: the reply to one taken, and the refusals
(:class:`FeedbackRefused`, an HTTP status, a code and a message naming why)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from guardrail import RiskMonitor

if TYPE_CHECKING:
    from ._risk_watch import _Watch

__all__ = [
    "SHOWN",
    "FeedbackRefused",
    "in_flight",
    "label_reply",
    "refusal",
    "refuse_unless_shown",
    "status_of",
]

SHOWN = "shown"
"""The status of an answer whose label feeds its monitor."""


class FeedbackRefused(Exception):
    """A label the proxy does not take: HTTP ``status`` with ``code`` and a message;
    ``retry_after``: seconds after which the same label may be taken (``Retry-After``)."""

    def __init__(
        self, status: int, code: str, message: str, *, retry_after: int | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.retry_after = status, code, retry_after


def in_flight(answer_id: str) -> FeedbackRefused:
    """The refusal of a label for an answer still being served (by this replica or, in a
    fleet, another): its record is not kept yet, so send the label again in a moment."""
    return FeedbackRefused(
        503,
        "answer_in_flight",
        f"answer {answer_id!r} is still being served (or its record is on its way to the "
        "fleet store): send the label again in a moment",
        retry_after=1,
    )


def status_of(certified: bool, mismatched: bool, current: bool, monitor: RiskMonitor | None) -> str:
    """Whether a label of an answer can feed its monitor (:data:`SHOWN`), else why not:
    not certified, judged by a version no longer in force, no monitor (uncalibrated), or
    made with settings the certificate was not calibrated for."""
    if not certified:
        return "answer_not_certified"
    if not current:
        return "certificate_changed"
    if monitor is None:
        return "no_risk_monitor"
    if mismatched:
        return "answer_not_covered"
    return SHOWN


def label_reply(
    answer_id: str, request_id: str, correct: bool, entry: str, watch: _Watch
) -> dict[str, Any]:
    """The reply to a label taken: what the monitor says now."""
    monitor = watch.monitor
    assert monitor is not None
    return {
        "id": answer_id,
        "request_id": request_id,
        "correct": correct,
        "model": entry,
        "certificate": watch.label,
        "labels": monitor.n,
        "errors": monitor.errors,
        "bounds": [monitor.lower_bound, monitor.bounds[1]],
        "alarm": watch.alarm,
    }


class Refusable(Protocol):
    status: str
    cause: str
    label: str
    entry: str


def refuse_unless_shown(answer_id: str, answer: Refusable) -> None:
    if answer.status != SHOWN:
        raise refusal(answer.status, answer_id, answer)


def refusal(code: str, answer_id: str, answer: Refusable) -> FeedbackRefused:
    message = {
        "answer_not_certified": f"answer {answer_id!r} was not certified (cause "
        f"{answer.cause}): only answers the certificate let through bear on its risk",
        "answer_not_covered": f"answer {answer_id!r} was made with settings the certificate "
        "was not calibrated for (see its context_mismatches): its promise does not cover it",
        "certificate_changed": f"answer {answer_id!r} was certified by {answer.label}, which "
        f"model entry {answer.entry!r} no longer serves: its label does not bear on the "
        "promise in force",
        "no_risk_monitor": f"the certificate of model entry {answer.entry!r} ({answer.label}) "
        "is not calibrated: it promises no risk, and there is no monitor to feed",
    }[code]
    return FeedbackRefused(409, code, message)
