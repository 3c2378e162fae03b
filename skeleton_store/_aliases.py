"""Aliases as append-only event logs, moved with create-only writes.

An alias of a skeleton is the directory ``<name>/aliases/<alias>/`` holding
events ``e00000001.json``, ``e00000002.json``, ... Each event is a sealed JSON
object with the target version and the stack of earlier targets (most recent
last, at most :data:`MAX_HISTORY`), so the newest event alone says where the
alias points and where :func:`rollback` goes. Moving an alias writes event
``seq + 1`` with the backend's atomic create-only write: of two concurrent
movers exactly one wins, the other re-reads and retries (compare-and-swap), so
no move is lost and the history is never corrupted. Events are never rewritten.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ._backends import Backend
from ._errors import ConcurrentWriteError, IntegrityError
from ._manifest import seal, unseal

__all__ = ["MAX_HISTORY", "AliasEvent", "alias_names", "current", "history", "move"]

MAX_HISTORY = 100
MAX_ATTEMPTS = 1000
_EVENT_RE = re.compile(r"e([0-9]{8,})\.json")


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class AliasEvent:
    """One move of an alias: it points at ``version`` since ``at``.

    ``action`` is ``"set"`` or ``"rollback"``; ``previous`` holds the earlier
    targets that :meth:`SkeletonStore.rollback` steps back through (most recent last).
    """

    name: str
    alias: str
    seq: int
    version: int
    action: str
    at: str
    previous: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "alias": self.alias,
            "seq": self.seq,
            "version": self.version,
            "action": self.action,
            "at": self.at,
            "previous": list(self.previous),
        }


def _dir(name: str, alias: str) -> str:
    return f"{name}/aliases/{alias}"


def _seqs(backend: Backend, name: str, alias: str) -> list[int]:
    out = []
    for entry in backend.listdir(_dir(name, alias)):
        m = _EVENT_RE.fullmatch(entry)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


def _load(backend: Backend, name: str, alias: str, seq: int) -> AliasEvent:
    path = f"{_dir(name, alias)}/e{seq:08d}.json"
    body = unseal(backend.read(path), path)
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


def current(backend: Backend, name: str, alias: str) -> AliasEvent | None:
    """The newest event of ``alias`` (None if it was never set)."""
    seqs = _seqs(backend, name, alias)
    return _load(backend, name, alias, seqs[-1]) if seqs else None


def history(backend: Backend, name: str, alias: str) -> list[AliasEvent]:
    """Every event of ``alias``, oldest first."""
    return [_load(backend, name, alias, s) for s in _seqs(backend, name, alias)]


def alias_names(backend: Backend, name: str) -> list[str]:
    return [a for a in backend.listdir(f"{name}/aliases") if _seqs(backend, name, a)]


Step = Callable[[AliasEvent | None], tuple[int, str, tuple[int, ...]] | None]


def move(backend: Backend, name: str, alias: str, step: Step) -> AliasEvent:
    """Append the event ``step(current)`` returns (``(version, action, previous)``).

    ``step`` returning ``None`` means no move is needed; the current event is
    returned. Retries on a lost race, with ``step`` applied to the new current.
    """
    for _ in range(MAX_ATTEMPTS):
        cur = current(backend, name, alias)
        nxt = step(cur)
        if nxt is None:
            if cur is None:  # pragma: no cover - a step must move an unset alias
                raise IntegrityError(f"alias {alias!r} of {name!r} is not set")
            return cur
        version, action, previous = nxt
        ev = AliasEvent(
            name=name,
            alias=alias,
            seq=cur.seq + 1 if cur is not None else 1,
            version=version,
            action=action,
            at=utc_now(),
            previous=previous[-MAX_HISTORY:],
        )
        if backend.create(f"{_dir(name, alias)}/e{ev.seq:08d}.json", seal(ev.to_dict())):
            return ev
    raise ConcurrentWriteError(
        f"could not move alias {alias!r} of {name!r}: lost {MAX_ATTEMPTS} races in a row"
    )
