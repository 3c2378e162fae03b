"""Aliases as append-only event logs, moved with create-only writes.

An alias of a skeleton is the directory ``<name>/aliases/<alias>/`` holding
events ``e00000001.json``, ``e00000002.json``, ... Each event is a sealed JSON
object with the target version and the stack of earlier targets (most recent
last, at most :data:`MAX_HISTORY`), so the newest event alone says where the
alias points and where :func:`rollback` goes. Moving an alias writes event
``seq + 1`` with the backend's atomic create-only write: of two concurrent
movers exactly one wins, the other re-reads and retries (compare-and-swap), so
no move is lost and the history is never corrupted. Events are never rewritten
or deleted.

A damaged event (bit rot, a hand edit) is never trusted: when the newest event
does not verify, resolving the alias fails with :class:`IntegrityError` naming
the file. A move may still write a new head over it: the new event takes the
next free number and continues from the newest event that verifies, and each
damaged event it supersedes is kept in place and marked by a sealed
``e<seq>.corrupt.json`` next to it (its sha256 and the reason), which lets
:func:`history` skip it; a warning says so. Markers are written only for
events that a newer event supersedes, so they never hide the head.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TypedDict

from ._backends import Backend
from ._errors import ConcurrentWriteError, IntegrityError
from ._manifest import seal, sha256_hex, unseal

__all__ = [
    "MAX_HISTORY",
    "AliasEvent",
    "BadEvent",
    "Head",
    "alias_names",
    "current",
    "events",
    "history",
    "is_marked",
    "mark",
    "move",
    "scan",
]

logger = logging.getLogger(__name__)

MAX_HISTORY = 100
MAX_ATTEMPTS = 1000
_EVENT_RE = re.compile(r"e([0-9]{8,})\.json")


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


class AliasEventDict(TypedDict):
    """The JSON form of an :class:`AliasEvent`."""

    name: str
    alias: str
    seq: int
    version: int
    action: str
    at: str
    previous: list[int]


@dataclass(frozen=True)
class AliasEvent:
    """One move of an alias: it points at ``version`` since ``at``.

    ``action`` is ``"set"``, ``"rollback"`` or ``"repair"`` (the newest event did
    not verify and the one before it was restored); ``previous`` holds the earlier
    targets that :meth:`SkeletonStore.rollback` steps back through (most recent last).

    Examples
    --------
        >>> import tempfile
        >>> from guardrail import VectorSkeleton
        >>> store = SkeletonStore(tempfile.mkdtemp())
        >>> v1 = store.put_skeleton("chat", VectorSkeleton([-1.0, -1.5, -2.0]))
        >>> event = store.promote("chat", v1.version)
        >>> event.alias, event.version, event.action
        ('production', 1, 'set')
    """

    name: str
    alias: str
    seq: int
    version: int
    action: str
    at: str
    previous: tuple[int, ...]

    def to_dict(self) -> AliasEventDict:
        return {
            "name": self.name,
            "alias": self.alias,
            "seq": self.seq,
            "version": self.version,
            "action": self.action,
            "at": self.at,
            "previous": list(self.previous),
        }


@dataclass(frozen=True)
class BadEvent:
    """An event file that does not verify: ``error`` says why and names its full path."""

    name: str
    alias: str
    seq: int
    sha256: str
    error: IntegrityError

    @property
    def rel(self) -> str:
        return _event(self.name, self.alias, self.seq)


@dataclass(frozen=True)
class Head:
    """The state a move starts from: the newest event that verifies, the damaged
    events above it (newest first) and the number the next event takes."""

    event: AliasEvent | None
    bad: tuple[BadEvent, ...]
    next_seq: int


def _dir(name: str, alias: str) -> str:
    return f"{name}/aliases/{alias}"


def _event(name: str, alias: str, seq: int) -> str:
    return f"{_dir(name, alias)}/e{seq:08d}.json"


def _marker(name: str, alias: str, seq: int) -> str:
    return f"{_dir(name, alias)}/e{seq:08d}.corrupt.json"


def _seqs(backend: Backend, name: str, alias: str) -> list[int]:
    out = []
    for entry in backend.listdir(_dir(name, alias)):
        m = _EVENT_RE.fullmatch(entry)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


def _parse(data: bytes, path: str, name: str, alias: str, seq: int) -> AliasEvent:
    body = unseal(data, path)
    try:
        ev = AliasEvent(
            name=body["name"],
            alias=body["alias"],
            seq=int(body["seq"]),
            version=int(body["version"]),
            action=str(body["action"]),
            at=str(body["at"]),
            previous=tuple(int(v) for v in body["previous"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise IntegrityError(f"{path}: malformed alias event ({exc})", path=path) from exc
    if (ev.name, ev.alias, ev.seq) != (name, alias, seq):
        raise IntegrityError(f"{path}: event names {ev.name}/{ev.alias}#{ev.seq}", path=path)
    return ev


def _try_load(backend: Backend, name: str, alias: str, seq: int) -> AliasEvent | BadEvent:
    rel = _event(name, alias, seq)
    data = backend.read(rel)
    try:
        return _parse(data, f"{backend.url}/{rel}", name, alias, seq)
    except IntegrityError as exc:
        return BadEvent(name, alias, seq, sha256_hex(data), exc)


def events(backend: Backend, name: str, alias: str) -> list[AliasEvent | BadEvent]:
    """Every event file of ``alias``, oldest first, damaged ones as :class:`BadEvent`."""
    return [_try_load(backend, name, alias, s) for s in _seqs(backend, name, alias)]


def scan(backend: Backend, name: str, alias: str) -> Head:
    """Read events from the newest down to the first one that verifies."""
    seqs = _seqs(backend, name, alias)
    bad: list[BadEvent] = []
    for seq in reversed(seqs):
        ev = _try_load(backend, name, alias, seq)
        if isinstance(ev, AliasEvent):
            return Head(ev, tuple(bad), seqs[-1] + 1)
        bad.append(ev)
    return Head(None, tuple(bad), seqs[-1] + 1 if seqs else 1)


def current(backend: Backend, name: str, alias: str) -> AliasEvent | None:
    """The newest event of ``alias`` (None if it was never set).

    :class:`IntegrityError` if that event does not verify: the alias is never
    resolved to an older target behind the caller's back.
    """
    seqs = _seqs(backend, name, alias)
    if not seqs:
        return None
    ev = _try_load(backend, name, alias, seqs[-1])
    if isinstance(ev, BadEvent):
        raise IntegrityError(
            f"alias {alias!r} of {name!r} cannot be resolved: its newest event does not "
            f"verify: {ev.error} (promote or rollback write a new head over it; "
            f"`liftguard skeleton verify --repair` restores the newest event that verifies)",
            path=ev.error.path,
        ) from ev.error
    return ev


def is_marked(backend: Backend, bad: BadEvent) -> bool:
    """Whether a valid marker records exactly these damaged bytes as superseded."""
    rel = _marker(bad.name, bad.alias, bad.seq)
    try:
        body = unseal(backend.read(rel), f"{backend.url}/{rel}")
    except FileNotFoundError:
        return False
    except IntegrityError as exc:
        logger.warning("ignoring a damaged marker: %s", exc)
        return False
    return body.get("sha256") == bad.sha256


def mark(backend: Backend, bad: BadEvent, superseded_by: int) -> str:
    """Write the marker of a damaged event that event ``superseded_by`` supersedes.

    Create-only (an existing marker is kept). Returns a sentence saying what was done.
    """
    if superseded_by <= bad.seq:  # pragma: no cover - callers only mark superseded events
        raise ValueError("only an event that a newer one supersedes may be marked")
    rel = _marker(bad.name, bad.alias, bad.seq)
    body = {
        "name": bad.name,
        "alias": bad.alias,
        "seq": bad.seq,
        "sha256": bad.sha256,
        "reason": str(bad.error),
        "superseded_by": superseded_by,
        "at": utc_now(),
    }
    backend.create(rel, seal(body))
    return (
        f"alias {bad.alias!r} of {bad.name!r}: {backend.url}/{bad.rel} does not verify; kept "
        f"in place, superseded by e{superseded_by:08d}.json and marked by {backend.url}/{rel}"
    )


def history(backend: Backend, name: str, alias: str) -> list[AliasEvent]:
    """Every event of ``alias``, oldest first, without the marked damaged ones.

    A damaged event without a marker raises :class:`IntegrityError` naming its file.
    """
    out = []
    for ev in events(backend, name, alias):
        if isinstance(ev, AliasEvent):
            out.append(ev)
        elif is_marked(backend, ev):
            logger.info("history of %s/%s skips marked damaged event %s", name, alias, ev.rel)
        else:
            raise ev.error
    return out


def alias_names(backend: Backend, name: str) -> list[str]:
    return [a for a in backend.listdir(f"{name}/aliases") if _seqs(backend, name, a)]


Step = Callable[[AliasEvent | None, bool], tuple[int, str, tuple[int, ...]] | None]


def move(
    backend: Backend, name: str, alias: str, step: Step, notes: list[str] | None = None
) -> AliasEvent:
    """Append the event ``step(event, damaged)`` returns (``(version, action, previous)``).

    ``event`` is the newest event that verifies, ``damaged`` whether newer events
    above it do not (then the new event supersedes and marks them, logging a
    warning and appending a sentence to ``notes`` for each). ``step`` returning
    ``None`` means no move is needed (never when ``damaged``); the current event
    is returned. Retries on a lost race with the new state.
    """
    for _ in range(MAX_ATTEMPTS):
        head = scan(backend, name, alias)
        nxt = step(head.event, bool(head.bad))
        if nxt is None:
            if head.event is None or head.bad:  # pragma: no cover - a step must move these
                raise IntegrityError(f"alias {alias!r} of {name!r} is not set")
            return head.event
        version, action, previous = nxt
        ev = AliasEvent(
            name=name,
            alias=alias,
            seq=head.next_seq,
            version=version,
            action=action,
            at=utc_now(),
            previous=previous[-MAX_HISTORY:],
        )
        if backend.create(_event(name, alias, ev.seq), seal(ev.to_dict())):
            for bad in head.bad:
                note = f"{mark(backend, bad, ev.seq)} (the alias now points at v{ev.version})"
                logger.warning("%s", note)
                if notes is not None:
                    notes.append(note)
            return ev
    raise ConcurrentWriteError(
        f"could not move alias {alias!r} of {name!r}: lost {MAX_ATTEMPTS} races in a row"
    )
