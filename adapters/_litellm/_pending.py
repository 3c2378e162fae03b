"""The guarded requests between LiteLLM's pre-call hook and their answer, each under a key
the guardrail mints itself (sans I/O: no LiteLLM import).

A client sets LiteLLM's call id (the ``x-litellm-call-id`` header), so two requests can carry
the same one: state kept under it would let one request's answer be guarded with the other's
settings, or not at all. :class:`PendingRequests` keys each request on a fresh random key it
writes into the request's LiteLLM metadata (``metadata.liftguard_request``, read by LiteLLM and
never sent upstream; whatever a client sent there is overwritten), and ties the entry to
LiteLLM's own per-request logging object when there is one (a request that carries another is
not given the entry): an answer is guarded with its own request's state or not at all.

The id an answer is known by (``request_id`` of its verdict, its logs, the id its label is sent
under) is minted here too (:func:`new_request_id`), never LiteLLM's call id: with a client-chosen
call id, two answers would share it, and a label sent for one would reach the other.

The state is bounded: at most :data:`MAX_PENDING` requests are kept at once, the oldest
forgotten past it (a request whose answer never came: a client that left, an upstream that
failed before the post-call hooks). An answer whose request is not found (forgotten, or never
prepared by the pre-call hook) is refused by the guardrail, never passed through.
"""

from __future__ import annotations

import secrets
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, Generic, TypeVar

from guardrail import ConfigError

__all__ = ["KEY", "MAX_PENDING", "PendingRequests", "new_request_id"]

KEY = "liftguard_request"
"""The field of a request's ``metadata`` that holds its key."""
MAX_PENDING = 10_000
"""The most requests kept between the pre-call hook and their answer."""

_R = TypeVar("_R")


def new_request_id() -> str:
    """A fresh request id (``lg-`` and 128 random bits): no client sets it, no two
    requests share it, in one process or in a fleet."""
    return f"lg-{secrets.token_hex(16)}"


class PendingRequests(Generic[_R]):
    """Requests (``_R``: what the post-call hooks need) kept under keys of their own.

    Examples
    --------
        >>> pending = PendingRequests[str](limit=2)
        >>> first, second = {"messages": []}, {"messages": []}
        >>> pending.add(first, "first")
        >>> first["metadata"]["liftguard_request"] != ""
        True
        >>> second["metadata"] = {"liftguard_request": first["metadata"]["liftguard_request"]}
        >>> pending.add(second, "second")  # a key a client sent is replaced
        >>> pending.peek(second), pending.take(second), pending.take(first)
        ('second', 'second', 'first')
        >>> pending.take(first) is None  # taken once
        True
        >>> third = [{"messages": []} for _ in range(3)]
        >>> for n, data in enumerate(third):
        ...     pending.add(data, str(n))
        >>> pending.take(third[0]) is None  # the oldest, forgotten past the limit
        True
    """

    def __init__(self, limit: int = MAX_PENDING) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ConfigError(f"max_pending_requests must be an integer >= 1, got {limit!r}")
        self.limit = limit
        self._entries: OrderedDict[str, tuple[Callable[[], Any] | None, _R]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, data: MutableMapping[str, Any], request: _R) -> None:
        """Keep ``request`` for ``data`` (LiteLLM's request, its metadata changed in place)
        under a fresh key. Raises ``ValueError`` if ``data["metadata"]`` is not an object."""
        metadata = data.get("metadata")
        if metadata is None:
            metadata = data["metadata"] = {}
        if not isinstance(metadata, MutableMapping):
            raise ValueError(f"metadata must be an object, got {type(metadata).__name__}")
        key = secrets.token_hex(16)
        metadata[KEY] = key
        self._entries[key] = (_owner(data), request)
        while len(self._entries) > self.limit:
            self._entries.popitem(last=False)

    def take(self, data: Mapping[str, Any]) -> _R | None:
        """The request kept for ``data``, removed; None if there is none (never kept,
        forgotten past the limit, taken already, or kept for another LiteLLM request: ``data``
        carries another logging object)."""
        return self._find(data, remove=True)

    def peek(self, data: Mapping[str, Any]) -> _R | None:
        """The request kept for ``data``, left in place (None as :meth:`take`)."""
        return self._find(data, remove=False)

    def _find(self, data: Mapping[str, Any], *, remove: bool) -> _R | None:
        metadata = data.get("metadata")
        key = metadata.get(KEY) if isinstance(metadata, Mapping) else None
        if not isinstance(key, str):
            return None
        entry = self._entries.get(key)
        if entry is None:
            return None
        owner, request = entry
        current = data.get("litellm_logging_obj")  # (none in LiteLLM's failure hook's copy)
        if owner is not None and current is not None and owner() is not current:
            return None
        if remove:
            del self._entries[key]
        return request


def _owner(data: MutableMapping[str, Any]) -> Callable[[], Any] | None:
    """A weak reference to LiteLLM's logging object of the request (one per request, made by
    LiteLLM's proxy, never by a client), None where there is none."""
    obj = data.get("litellm_logging_obj")
    if obj is None or isinstance(obj, str | bytes | int | float | bool | list | dict):
        return None
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj
