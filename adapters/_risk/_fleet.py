"""The state several replicas share in Redis (or Valkey): which answers may be labelled, and
one small record per certificate version that holds its risk monitor's whole state.

Keys (one hash tag, so a Redis Cluster keeps them in one slot and the scripts may touch
them together; ``P`` is ``<prefix>:{<namespace>}``):

- ``P:a:<request id>``: a hash per finished answer: ``entry``, ``label`` (the certificate
  version), ``version`` (:func:`version_key`), ``status`` (``shown`` or why a label does
  not count), ``cause``, ``completion`` (the id the client got), ``test`` (the test in
  force when it was kept: a label counts only in that test) and, once labelled,
  ``labelled``. It expires after ``answer_ttl_s``. An answer kept while its version has
  no record names a new test id in the record's place (``test`` alone), which the next
  record of the version takes.
  While the answer is still being served, the hash holds ``status`` ``in_flight`` alone
  (:data:`IN_FLIGHT`, for ``in_flight_ttl_s``), written when it starts: a label sent to
  another replica meanwhile is told to come back, not that the answer is unknown.
- ``P:c:<completion id>``: a hash ``rid`` (the latest request id that carried it), ``n``
  (how many did): a completion id that several answers carry is ambiguous.
- ``P:m:<version>``: the version's :class:`FleetRecord`, a hash ``sum`` (its checksum),
  ``test`` (the id of the test it carries) and ``body``: the whole state the alarm needs
  (some 15 kB, the same after ten labels or ten million), replaced in one script with each
  label, each batch of verdicts and each restart.
- ``P:h:<version>``: the record's history: a sorted set of ``<change>:<chain value>`` by
  change count, trimmed to the last ``history_len`` changes of the test in force; read
  only by a replica more than :data:`RECENT` changes behind, to check that the record it
  reads descends from the one it saw.
- ``P:x:<version>``: the audit stream of labels taken (request id, label, the record's
  checksum after it), trimmed to about ``audit_len`` entries; nothing on the request path
  reads it.

A change is one script, atomic in Redis, that replaces the record only if it still is the
one the replica read (its ``sum``): a label is taken at most once however many replicas
receive it at the same moment, and its once-only mark (``labelled``) is set in the same
step as the record that counts it. A replica whose record is out of date gets the current
one back and tries again. Nothing reads, modifies and writes back across round trips
without that check.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any

from guardrail import RiskMonitor

__all__ = [
    "DEFAULT_PREFIX",
    "IN_FLIGHT",
    "RECENT",
    "FleetAnswer",
    "FleetRecord",
    "FleetStore",
    "Moved",
    "deployment_namespace",
    "fleet_client",
    "history_needed",
    "loss_of",
    "new_test",
    "version_key",
]

DEFAULT_PREFIX = "liftguard"
IN_FLIGHT = "in_flight"
"""The status of an answer a replica is still serving (its record not written yet)."""
RECENT = 64
"""Chain values a record keeps of its last changes: a replica that read it at most this
many changes ago checks that the record it reads now descends from the one it read; one
further behind checks it in the record's history (``P:h:<version>``)."""

# KEYS: answer hash, completion hash, record.
# ARGV: fields..., a new test id ('': the answer is of no version in force), ttl, request id.
_KEEP = """
local ttl = tonumber(ARGV[#ARGV - 1])
local rid = ARGV[#ARGV]
local fields = {}
for i = 1, #ARGV - 3 do fields[i] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
if ARGV[#ARGV - 2] ~= '' then
  local test = redis.call('HGET', KEYS[3], 'test')
  if not test then
    test = ARGV[#ARGV - 2]
    redis.call('HSET', KEYS[3], 'test', test)
    redis.call('EXPIRE', KEYS[3], ttl)
  end
  redis.call('HSET', KEYS[1], 'test', test)
end
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('HSET', KEYS[2], 'rid', rid)
redis.call('HINCRBY', KEYS[2], 'n', 1)
redis.call('EXPIRE', KEYS[2], ttl)
return 1
"""

# KEYS: answer hash. ARGV: ttl. The mark of an answer being served, unless it is kept.
_BEGIN = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'status', 'in_flight')
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""

# KEYS: record. ARGV: the checksum the replica holds.
# -> {'missing', the test answers were kept under meanwhile or ''} | {'same'} | {sum, body}
_READ = """
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'hash' and t ~= 'none' then return {'a ' .. t, ''} end
local r = redis.call('HMGET', KEYS[1], 'sum', 'body', 'test')
if not r[1] then return {'missing', r[3] or ''} end
if r[1] == ARGV[1] then return {'same'} end
return {r[1], r[2] or ''}
"""

# KEYS: answer hash (by request id), completion hash (the id as a completion id).
# ARGV: answer prefix. -> {'ok', request id, fields...} | {'unknown'} | {'ambiguous', n}
_FIND = """
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

# KEYS: record, answer hash, audit stream, history.
# ARGV: expected sum ('' = no record), new sum, new test, new body, ttl,
#       label ('' = none, '1' correct, '0' wrong), version, audit length, request id,
#       new change count, new chain value, history length.
# -> {'ok'} | {'moved', '', test} (no record; answers kept under that test meanwhile)
#    | {'moved', sum, body} | {'unknown'} | {'changed'} | {'duplicate'}
#    | {'before'} (the answer was kept under another test)
_COMMIT = """
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'hash' and t ~= 'none' then return {'moved', 'a ' .. t, ''} end
local cur = redis.call('HMGET', KEYS[1], 'sum', 'body', 'test')
if (cur[1] or '') ~= ARGV[1] then
  if not cur[1] then return {'moved', '', cur[3] or ''} end
  return {'moved', cur[1], cur[2] or ''}
end
if not cur[1] and cur[3] and cur[3] ~= ARGV[3] then return {'moved', '', cur[3]} end
if ARGV[6] ~= '' then
  local a = redis.call('HMGET', KEYS[2], 'version', 'labelled', 'test')
  if not a[1] then return {'unknown'} end
  if a[1] ~= ARGV[7] then return {'changed'} end
  if a[2] then return {'duplicate'} end
  if a[3] ~= ARGV[3] then return {'before'} end
  redis.call('HSET', KEYS[2], 'labelled', ARGV[6])
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[8], '*',
             'id', ARGV[9], 'correct', ARGV[6], 'sum', ARGV[2])
end
if not cur[1] then redis.call('DEL', KEYS[4]) end
redis.call('ZADD', KEYS[4], ARGV[10], ARGV[10] .. ':' .. ARGV[11])
redis.call('ZREMRANGEBYRANK', KEYS[4], 0, -(tonumber(ARGV[12]) + 1))
redis.call('EXPIRE', KEYS[4], ARGV[5])
redis.call('HSET', KEYS[1], 'sum', ARGV[2], 'test', ARGV[3], 'body', ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return {'ok'}
"""


def fleet_client(
    url: str,
    *,
    timeout_s: float = 0.5,
    connect_timeout_s: float = 5.0,
    max_connections: int = 64,
) -> Any:
    """A ``redis.asyncio`` client for ``url`` (``redis://``, ``rediss://``, ``unix://``;
    Valkey speaks the same protocol) whose every command gives up after ``timeout_s`` and
    every new connection after ``connect_timeout_s`` (its set-up takes several round trips,
    TLS and authentication included), over a pool of at most ``max_connections`` that
    waits at most ``connect_timeout_s`` for a free one. A command that times out is not
    sent again and costs its own connection (its reply may still come); the pool's other
    connections are kept. A command whose connection was closed (a server restarted or
    failed over since it was last used) is sent once more on a new one: every change is
    a check-and-set that recognises its own write (:meth:`FleetStore.commit`)."""
    try:
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import ConnectionError as LostConnection
    except ImportError as exc:  # pragma: no cover - depends on the environment
        from guardrail import ConfigError

        raise ConfigError('a fleet store needs redis-py: pip install "liftguard[fleet]"') from exc
    try:  # no CLIENT SETINFO on connecting: fewer round trips before the first command
        from redis.driver_info import DriverInfo

        quiet: dict[str, Any] = {"driver_info": DriverInfo(name=None, lib_version=None)}
    except ImportError:  # redis-py before 7
        quiet = {"lib_name": None, "lib_version": None}
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=connect_timeout_s,
        socket_timeout=timeout_s,
        socket_connect_timeout=connect_timeout_s,
        retry=Retry(NoBackoff(), 1, supported_errors=(LostConnection,)),
        **quiet,
    )
    return aioredis.Redis(connection_pool=pool)


def version_key(entry: str, digest: str, alpha: float) -> str:
    """The key of one monitor's record: the model entry, the certificate's content digest
    and the monitor's level, hashed. The certificate's label (a file name, a store alias)
    is not in it: the same content under two names is one test; different content under
    one name, or another level, never shares a record.

    >>> version_key("*", "0123abcd", 0.05)
    '7680d9fc6d1d111a89cf71fb'
    """
    raw = "\0".join((entry, digest, repr(float(alpha))))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:24]


def deployment_namespace(deployment: str) -> str:
    """The default namespace of a deployment named ``deployment`` (the proxy's: its
    upstream URL, without credentials): replicas of one deployment share it, two
    deployments do not, whatever certificates they serve. Records inside it are keyed
    by the certificate's content (:func:`version_key`), not by its file name.

    >>> deployment_namespace("http://llm:8000/v1")
    'd-02186a9bf1785456'
    """
    return "d-" + hashlib.sha256(deployment.encode("utf-8")).hexdigest()[:16]


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
class FleetRecord:
    """The shared state of one certificate version's risk monitor (``P:m:<version>``).

    ``state``: :meth:`guardrail.RiskMonitor.to_bytes` of the test in force; ``test``: its
    random id; ``restarts``: how many tests of this version were started after a loss
    before it (the test runs at ``RiskMonitor.restart_level(alpha, restarts)``);
    ``latched``: an alarm fired in a test lost since (on until an operator clears it);
    ``losses`` and ``cause``: losses detected so far, and the last one's cause. ``seq``
    grows by one with each change and ``chain`` hashes the previous chain value, a random
    salt and the new state, so a replica that remembers ``(seq, chain)`` recognises a
    record that went back (a stale snapshot), one that branched off, and one that was
    replaced;
    ``recent`` holds the chain values of the last :data:`RECENT` changes, newest last."""

    version: str
    test: str
    seq: int
    chain: str
    recent: tuple[str, ...]
    restarts: int
    latched: bool
    losses: int
    cause: str
    state: bytes
    read_sum: str = field(default="", compare=False, repr=False)  # as read from Redis
    parsed: RiskMonitor | None = field(default=None, compare=False, repr=False)

    @classmethod
    def first(
        cls,
        version: str,
        state: bytes,
        *,
        restarts: int = 0,
        latched: bool = False,
        losses: int = 0,
        cause: str = "",
        test: str = "",
    ) -> FleetRecord:
        """A new test's record: ``test``, the id answers were kept under while there was
        no record (a new one if none)."""
        chain = secrets.token_hex(8)
        return cls(
            version, test or new_test(), 1, chain, (chain,), restarts, latched, losses,
            cause, state,
        )  # fmt: skip

    def then(self, state: bytes, *, latched: bool | None = None) -> FleetRecord:
        """The record after one change of this test's state (its chain value hashes the
        last one, a random salt and the state: two branches never share one)."""
        salted = (self.chain + secrets.token_hex(8)).encode("ascii")
        digest = hashlib.sha256(salted + state).hexdigest()[:16]
        return replace(
            self,
            seq=self.seq + 1,
            chain=digest,
            recent=(*self.recent, digest)[-RECENT:],
            latched=self.latched if latched is None else latched,
            state=state,
            read_sum="",
            parsed=None,
        )

    def monitor(self) -> RiskMonitor:
        """The monitor ``state`` holds, parsed once (``ValueError`` if it holds none): the
        one a replica reports from, never to change (a change starts from a copy)."""
        if self.parsed is None:
            object.__setattr__(self, "parsed", RiskMonitor.from_bytes(self.state))
        assert self.parsed is not None
        return self.parsed

    def body(self) -> bytes:
        head = {
            "format": 1, "version": self.version, "test": self.test, "seq": self.seq,
            "chain": self.chain, "recent": list(self.recent), "restarts": self.restarts,
            "latched": self.latched, "losses": self.losses, "cause": self.cause,
        }  # fmt: skip
        return json.dumps(head, separators=(",", ":")).encode("utf-8") + b"\n" + self.state

    def checksum(self) -> str:
        """``sum``: what a change compares to find the record unchanged."""
        return self.read_sum or _checksum(self.version, self.body())

    @classmethod
    def parse(cls, version: str, body: bytes) -> FleetRecord:
        """The record of ``version`` that ``body`` (:meth:`body`'s bytes, from anywhere)
        holds, whose state a monitor can hold; ``ValueError`` otherwise."""
        record = cls.decode(version, _checksum(version, body), body)
        if not record.recent or record.recent[-1] != record.chain or record.seq < 1:
            raise ValueError("unreadable (its change count or chain values do not fit)")
        try:
            record.monitor()
        except ValueError as exc:
            raise ValueError(f"unreadable (its state: {exc})"[:200]) from None
        return replace(record, read_sum="", parsed=None)

    @classmethod
    def decode(cls, version: str, checksum: str, body: bytes) -> FleetRecord:
        """The record of ``version`` that ``body`` holds; ``ValueError`` for a foreign
        value (a checksum that does not match, another version's, another format)."""
        if _checksum(version, body) != checksum:
            raise ValueError("its checksum does not match its content")
        try:
            raw, state = body.split(b"\n", 1)
            head = json.loads(raw)
            if head["format"] != 1 or head["version"] != version:
                raise ValueError("another version's or format's record")
            return cls(
                version, str(head["test"]), int(head["seq"]), str(head["chain"]),
                tuple(str(c) for c in head["recent"]), int(head["restarts"]),
                bool(head["latched"]), int(head["losses"]), str(head["cause"]), state,
                read_sum=checksum,
            )  # fmt: skip
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"unreadable ({exc})"[:200]) from None


def _checksum(version: str, body: bytes) -> str:
    return hashlib.sha256(version.encode("utf-8") + b"\0" + body).hexdigest()[:32]


def new_test() -> str:
    """A new test's id."""
    return secrets.token_hex(8)


@dataclass(frozen=True)
class Moved:
    """What a change found instead of the record it expected: the current record (``None``:
    no record; ``pending``: the test id answers were kept under meanwhile), or why what
    is there is not one (``foreign``)."""

    record: FleetRecord | None
    foreign: str | None = None
    pending: str = ""


def loss_of(seen: FleetRecord | None, found: Moved, history: Collection[str] = ()) -> str | None:
    """Why ``found`` shows that the fleet's state was lost since this replica saw ``seen``
    (``None``: it follows from ``seen``, or this replica saw nothing yet). A record more
    than :data:`RECENT` changes ahead is checked against ``history``, the chain values its
    history holds at ``seen``'s change (:func:`history_needed`); none (a history trimmed
    past it, or evicted) leaves it unchecked, which the caller reports."""
    if found.foreign is not None:
        return f"foreign: the record is not one a replica wrote ({found.foreign})"
    if seen is None:
        return None
    now = found.record
    if now is None:
        return (
            f"missing: the record (at change {seen.seq}) is gone: Redis restarted empty, "
            "evicted it, or failed over to a server without it"
        )
    if now.test != seen.test:
        if now.restarts > seen.restarts:
            return None  # another replica started the next test after a loss
        return (
            f"replaced: test {seen.test} (change {seen.seq}) became test {now.test} "
            f"(change {now.seq}) without a restart: Redis lost the record and a replica "
            "that had not seen it started afresh"
        )
    if now.seq < seen.seq:
        return (
            f"regressed: from change {seen.seq} back to {now.seq}: a stale snapshot was "
            "restored, or Redis failed over to a replica that lagged"
        )
    back = now.seq - seen.seq
    if back < len(now.recent):
        descends = now.recent[-1 - back] == seen.chain
    else:  # further back than the record's own chain values: its history tells
        descends = not history or seen.chain in history
    if not descends:
        return (
            f"diverged: change {seen.seq} is not the one this replica saw: the record went "
            "back and was changed again since (a stale snapshot or a failover)"
        )
    return None


def history_needed(seen: FleetRecord | None, found: Moved) -> bool:
    """Whether :func:`loss_of` needs the chain values the record's history holds at
    ``seen``'s change (:meth:`FleetStore.history`): the record found is of the same test,
    more than its :data:`RECENT` chain values ahead."""
    now = found.record
    return (
        seen is not None
        and now is not None
        and now.test == seen.test
        and now.seq - seen.seq >= len(now.recent)
    )


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
        record_ttl_s: int = 90 * 24 * 3600,
        audit_len: int = 100_000,
        history_len: int = 16_384,
        in_flight_ttl_s: int = 900,
    ) -> None:
        self.client = client
        self.prefix = f"{prefix}:{{{namespace}}}"
        self.answer_ttl_s, self.record_ttl_s = int(answer_ttl_s), int(record_ttl_s)
        self.in_flight_ttl_s = int(in_flight_ttl_s)
        self._begin = client.register_script(_BEGIN)
        self.audit_len, self.history_len = int(audit_len), int(history_len)
        self._keep = client.register_script(_KEEP)
        self._read = client.register_script(_READ)
        self._find = client.register_script(_FIND)
        self._commit = client.register_script(_COMMIT)

    def key(self, kind: str, name: str) -> str:
        """The key of kind ``a`` (answer), ``c`` (completion id), ``m`` (record), ``h``
        (its history) or ``x`` (audit stream) named ``name``."""
        return f"{self.prefix}:{kind}:{name}"

    async def keep(self, answers: list[FleetAnswer | str]) -> None:
        """Keep answers for their labels (for ``answer_ttl_s``), and mark those still
        being served (a request id: :data:`IN_FLIGHT` for ``in_flight_ttl_s``, unless
        kept already), in order, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for answer in answers:
            if isinstance(answer, str):
                key = self.key("a", answer)
                await self._begin(keys=[key], args=[self.in_flight_ttl_s], client=pipe)
                continue
            fields = {
                "entry": answer.entry,
                "label": answer.label,
                "version": answer.version,
                "status": answer.status,
                "cause": answer.cause,
                "completion": answer.completion_id,
            }
            argv = [x for pair in fields.items() for x in pair]
            keys = [
                self.key("a", answer.request_id),
                self.key("c", answer.completion_id),
                self.key("m", answer.version),
            ]
            test = new_test() if answer.version else ""
            args = [*argv, test, self.answer_ttl_s, answer.request_id]
            await self._keep(keys=keys, args=args, client=pipe)
        await pipe.execute()

    async def find(self, answer_id: str) -> FleetAnswer | str:
        """The answer ``answer_id`` names (a request id, or a completion id only one kept
        answer carries), else ``"unknown"`` or ``"ambiguous:<n>"``."""
        return _answer(answer_id, await self._find(**self._find_args(answer_id)))

    async def find_and_read(
        self, answer_id: str, held: list[tuple[str, FleetRecord | None]]
    ) -> tuple[FleetAnswer | str, list[Moved | None]]:
        """:meth:`find`, and :meth:`read` of each ``(version, held record)``, in one round
        trip."""
        pipe = self.client.pipeline(transaction=False)
        await self._find(**self._find_args(answer_id), client=pipe)
        for version, record in held:
            await self._read(**self._read_args(version, record), client=pipe)
        out = await pipe.execute()
        reads = [_read(version, o) for (version, _), o in zip(held, out[1:], strict=True)]
        return _answer(answer_id, out[0]), reads

    def _find_args(self, answer_id: str) -> dict[str, list[Any]]:
        return {
            "keys": [self.key("a", answer_id), self.key("c", answer_id)],
            "args": [self.key("a", "")],
        }

    def _read_args(self, version: str, held: FleetRecord | None) -> dict[str, list[Any]]:
        return {"keys": [self.key("m", version)], "args": [held.checksum() if held else ""]}

    async def read(self, version: str, held: FleetRecord | None) -> Moved | None:
        """The record of ``version`` unless it is still ``held`` (``None``); one round trip,
        which carries the record only when it changed."""
        return _read(version, await self._read(**self._read_args(version, held)))

    async def commit(
        self,
        held: FleetRecord | None,
        new: FleetRecord,
        label: tuple[str, bool] | None = None,
    ) -> Moved | str:
        """Replace the record ``held`` (``None``: no record yet) by ``new``, with the label
        ``(request id, correct)`` of an answer taken in the same step: ``"ok"``, or the
        record found instead (:class:`Moved`: nothing changed), or, for a label,
        ``"unknown"`` (expired since it was found), ``"changed"`` (the answer is of another
        version), ``"duplicate"`` or ``"before"`` (kept under a test lost since)."""
        rid, correct = label if label is not None else ("", None)
        out = await self._commit(
            keys=[
                self.key("m", new.version), self.key("a", rid), self.key("x", new.version),
                self.key("h", new.version),
            ],
            args=[
                held.checksum() if held else "", new.checksum(), new.test, new.body(),
                self.record_ttl_s,
                "" if correct is None else "1" if correct else "0", new.version,
                self.audit_len, rid, new.seq, new.chain, self.history_len,
            ],
        )  # fmt: skip
        head = _text(out[0])
        if head != "moved":
            return head
        if not _text(out[1]):
            return Moved(None, pending=_text(out[2]))
        return _moved(new.version, out[1:])

    async def history(self, version: str, seq: int) -> list[str]:
        """The chain values the history of ``version``'s record holds at change ``seq``
        (none: trimmed past it, or evicted; several: only after a loss)."""
        out = await self.client.zrangebyscore(self.key("h", version), seq, seq)
        return [_text(member).split(":", 1)[1] for member in out]

    async def ping(self) -> None:
        """Raise unless Redis answers."""
        await self.client.ping()

    async def aclose(self) -> None:
        await self.client.aclose()


def _answer(answer_id: str, out: list[Any]) -> FleetAnswer | str:
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


def _read(version: str, out: list[Any]) -> Moved | None:
    head = _text(out[0])
    if head == "same":
        return None
    if head == "missing":
        return Moved(None, pending=_text(out[1]))
    return _moved(version, out)


def _moved(version: str, out: list[Any]) -> Moved:
    try:
        record = FleetRecord.decode(version, _text(out[0]), bytes(out[1]))
        record.monitor()  # a state a monitor can hold, else ValueError
    except ValueError as exc:
        return Moved(None, str(exc))
    return Moved(record)


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
