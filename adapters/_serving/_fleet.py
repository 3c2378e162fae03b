"""The state several replicas share in Redis (or Valkey): which answers may be labelled, and
the label and verdict logs every replica's risk monitor replays.

Keys (one hash tag, so a Redis Cluster keeps them in one slot and the scripts may touch
them together; ``P`` is ``<prefix>:{<namespace>}``):

- ``P:a:<request id>``: a hash per finished answer: ``entry``, ``label`` (the certificate
  version), ``version`` (:func:`version_key`), ``status`` (``shown`` or why a label does
  not count), ``cause``, ``completion`` (the id the client got) and, once labelled,
  ``labelled``. It expires after ``answer_ttl_s``.
- ``P:c:<completion id>``: a hash ``rid`` (the latest request id that carried it), ``n``
  (how many did): a completion id that several answers carry is ambiguous.
- ``P:l:<version>``, ``P:s:<version>``: the label log and the verdict log of one
  certificate version, one byte per event (``1`` correct / shown, ``0`` wrong / not
  shown), in the order Redis appended them: the one order every replica replays.
  ``P:g:<version>`` holds the logs' generation, a random id set when the first event is
  appended: when Redis loses the logs, the generation changes, and a replica that replayed
  the old ones starts its monitor afresh.

Every change is one Lua script, atomic in Redis: a label is taken at most once however
many replicas receive it at the same moment (``HSETNX labelled``, then ``APPEND``, in one
script). Nothing here reads, modifies and writes back across round trips.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_PREFIX",
    "FleetAnswer",
    "FleetLogs",
    "FleetStore",
    "LabelTaken",
    "fleet_client",
    "version_key",
]

DEFAULT_PREFIX = "liftguard"

# KEYS: answer hash, completion hash. ARGV: fields..., ttl, request id.
_KEEP = """
local ttl = tonumber(ARGV[#ARGV - 1])
local rid = ARGV[#ARGV]
local fields = {}
for i = 1, #ARGV - 2 do fields[i] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('HSET', KEYS[2], 'rid', rid)
redis.call('HINCRBY', KEYS[2], 'n', 1)
redis.call('EXPIRE', KEYS[2], ttl)
return 1
"""

# KEYS: log, generation. ARGV: byte, ttl, new generation. -> {length, generation}
_APPEND = """
redis.call('SET', KEYS[2], ARGV[3], 'NX')
local gen = redis.call('GET', KEYS[2])
local n = redis.call('APPEND', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return {n, gen}
"""

# KEYS: label log, verdict log, generation. ARGV: label start, verdict start.
# -> {generation or false, label bytes, verdict bytes}
_READ = """
local gen = redis.call('GET', KEYS[3])
local l = redis.call('GETRANGE', KEYS[1], ARGV[1], -1)
local s = redis.call('GETRANGE', KEYS[2], ARGV[2], -1)
return {gen, l, s}
"""

# KEYS: answer hash (by request id), completion hash (the id as a completion id).
# ARGV: answer prefix. -> {'ok', request id, fields...} | {'unknown'} | {'ambiguous', n}
_FIND = """
local rid = nil
local a = redis.call('HGETALL', KEYS[1])
if #a > 0 then
  return {'ok', '', unpack(a)}
end
local c = redis.call('HMGET', KEYS[2], 'rid', 'n')
if not c[1] then return {'unknown'} end
if tonumber(c[2]) > 1 then return {'ambiguous', c[2]} end
a = redis.call('HGETALL', ARGV[1] .. c[1])
if #a == 0 then return {'unknown'} end
return {'ok', c[1], unpack(a)}
"""

# KEYS: answer hash, label log, generation. ARGV: label byte, version, ttl, new generation.
# -> {'ok', position, generation} | {'unknown'} | {'duplicate'} | {'changed'}
_LABEL = """
local v = redis.call('HGET', KEYS[1], 'version')
if not v then return {'unknown'} end
if v ~= ARGV[2] then return {'changed'} end
if redis.call('HSETNX', KEYS[1], 'labelled', ARGV[1]) == 0 then return {'duplicate'} end
redis.call('SET', KEYS[3], ARGV[4], 'NX')
local gen = redis.call('GET', KEYS[3])
local n = redis.call('APPEND', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[3])
redis.call('EXPIRE', KEYS[3], ARGV[3])
return {'ok', n, gen}
"""


def fleet_client(url: str, *, timeout_s: float = 0.5, max_connections: int = 64) -> Any:
    """A ``redis.asyncio`` client for ``url`` (``redis://``, ``rediss://``, ``unix://``;
    Valkey speaks the same protocol) whose every call gives up after ``timeout_s``
    (connecting included) and makes no retries of its own, over a pool of at most
    ``max_connections`` that waits at most ``timeout_s`` for a free one."""
    try:
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
    except ImportError as exc:  # pragma: no cover - depends on the environment
        from guardrail import ConfigError

        raise ConfigError('a fleet store needs redis-py: pip install "liftguard[fleet]"') from exc
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout_s,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
    )
    return aioredis.Redis(connection_pool=pool)


def version_key(entry: str, label: str, digest: str, alpha: float) -> str:
    """The key of one monitor's logs: the model entry, the certificate version's label and
    content digest and the monitor's level, hashed (replicas that serve different
    certificates under one label, or watch at another level, never share a log).

    >>> version_key("*", "store:cert@prod=v3", "0123abcd", 0.05)
    'e29b926c58e635de6b022883'
    """
    raw = "\0".join((entry, label, digest, repr(float(alpha))))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:24]


@dataclass(frozen=True)
class FleetAnswer:
    """One finished answer as the fleet keeps it: the fields of ``P:a:<request id>``."""

    request_id: str
    completion_id: str
    entry: str
    label: str
    version: str
    status: str
    cause: str
    labelled: bool = False


@dataclass(frozen=True)
class LabelTaken:
    """A label the fleet took: its 1-based position in its version's label log, and the
    log's generation."""

    position: int
    generation: str


@dataclass(frozen=True)
class FleetLogs:
    """What :meth:`FleetStore.read` found: the logs' generation (``None``: no event yet)
    and the bytes of each log from the offsets asked for."""

    generation: str | None
    labels: bytes
    verdicts: bytes


class FleetStore:
    """The Redis side of the fleet: ``client`` is a ``redis.asyncio.Redis`` (or Valkey)
    client; every call raises what the client raises (a connection error, a timeout),
    which the caller turns into a 503 or a blind alarm."""

    def __init__(
        self,
        client: Any,
        *,
        namespace: str = "default",
        prefix: str = DEFAULT_PREFIX,
        answer_ttl_s: int = 7 * 24 * 3600,
        log_ttl_s: int = 90 * 24 * 3600,
    ) -> None:
        self.client = client
        self.prefix = f"{prefix}:{{{namespace}}}"
        self.answer_ttl_s, self.log_ttl_s = int(answer_ttl_s), int(log_ttl_s)
        self._keep = client.register_script(_KEEP)
        self._append = client.register_script(_APPEND)
        self._read = client.register_script(_READ)
        self._find = client.register_script(_FIND)
        self._label = client.register_script(_LABEL)

    def _key(self, kind: str, name: str) -> str:
        return f"{self.prefix}:{kind}:{name}"

    async def write(self, batch: list[FleetAnswer | tuple[str, bool, str]]) -> None:
        """Write a batch in one round trip, in order: each :class:`FleetAnswer` kept for
        its label (for ``answer_ttl_s``), each ``(version, shown, new generation)`` one
        verdict appended to the version's verdict log."""
        pipe = self.client.pipeline(transaction=False)
        for item in batch:
            if isinstance(item, FleetAnswer):
                await self._keep_in(pipe, item)
            else:
                version, shown, generation = item
                await self._append(
                    keys=[self._key("s", version), self._key("g", version)],
                    args=[b"1" if shown else b"0", self.log_ttl_s, generation],
                    client=pipe,
                )
        await pipe.execute()

    async def _keep_in(self, pipe: Any, answer: FleetAnswer) -> None:
        fields = {
            "entry": answer.entry,
            "label": answer.label,
            "version": answer.version,
            "status": answer.status,
            "cause": answer.cause,
            "completion": answer.completion_id,
        }
        argv = [x for pair in fields.items() for x in pair]
        await self._keep(
            keys=[self._key("a", answer.request_id), self._key("c", answer.completion_id)],
            args=[*argv, self.answer_ttl_s, answer.request_id],
            client=pipe,
        )

    async def find(self, answer_id: str) -> FleetAnswer | str:
        """The answer ``answer_id`` names (a request id, or a completion id only one kept
        answer carries), else ``"unknown"`` or ``"ambiguous:<n>"``."""
        out = await self._find(
            keys=[self._key("a", answer_id), self._key("c", answer_id)],
            args=[self._key("a", "")],
        )
        head = _text(out[0])
        if head == "unknown":
            return head
        if head == "ambiguous":
            return f"ambiguous:{_text(out[1])}"
        request_id = _text(out[1]) or answer_id
        fields = {_text(k): _text(v) for k, v in zip(out[2::2], out[3::2], strict=True)}
        return FleetAnswer(
            request_id,
            fields.get("completion", ""),
            fields.get("entry", ""),
            fields.get("label", ""),
            fields.get("version", ""),
            fields.get("status", ""),
            fields.get("cause", ""),
            "labelled" in fields,
        )

    async def take_label(
        self, request_id: str, version: str, correct: bool, generation: str
    ) -> LabelTaken | str:
        """Take the label of answer ``request_id`` for ``version``, once fleet-wide:
        :class:`LabelTaken`, else ``"unknown"`` (expired since it was found),
        ``"duplicate"`` or ``"changed"`` (the answer is of another version)."""
        out = await self._label(
            keys=[self._key("a", request_id), self._key("l", version), self._key("g", version)],
            args=[b"1" if correct else b"0", version, self.log_ttl_s, generation],
        )
        head = _text(out[0])
        if head != "ok":
            return head
        return LabelTaken(int(out[1]), _text(out[2]))

    async def read(self, version: str, labels_from: int, verdicts_from: int) -> FleetLogs:
        """The logs of ``version`` from the given offsets (0-based), and their generation."""
        out = await self._read(
            keys=[self._key("l", version), self._key("s", version), self._key("g", version)],
            args=[labels_from, verdicts_from],
        )
        generation = None if out[0] is None else _text(out[0])
        return FleetLogs(generation, bytes(out[1] or b""), bytes(out[2] or b""))

    async def ping(self) -> None:
        """Raise unless Redis answers."""
        await self.client.ping()

    async def aclose(self) -> None:
        await self.client.aclose()


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
