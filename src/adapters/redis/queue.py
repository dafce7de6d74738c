"""The queue in Redis: one Lua script per operation, the keys of ``redis_keys``.

Each script touches the keys of one queue only (one hash tag, so one cluster slot);
the global meta and queue set are read and written by separate commands. Items are
stored as msgpack ``QueueItem`` values exactly as the projection applied them; what
the worker side changes afterwards (lease id, deadline, release time) lives in the
queue's ``state`` hash, so no script needs to decode msgpack.

Loss detection: ``jl:meta`` holds the store's epoch and each queue's ``meta`` key the
epoch it was created in. ``apply`` fails with ``QueueLostError`` when the global epoch
is missing or different, when ``jl:queues`` lost its mark, or when a queue listed in
``jl:queues`` lost its meta (a partial loss, as a cluster master that comes back empty
leaves it); the scripts repeat the per-queue check atomically before writing.
``read_meta`` answers None for the same losses, so a follower finds them while the
log is quiet.
"""

import itertools
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast
from uuid import UUID

import msgspec
import structlog
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import NoScriptError, RedisError

from jobledger.adapters.redis.bulk import EntryPacker, packed_pipeline
from jobledger.adapters.redis.client import RedisClient, script
from jobledger.adapters.redis.keys import DEFAULT_PREFIX, Keys, QueueKeys
from jobledger.domain.clock import Clock, utc_now
from jobledger.projections.errors import QueueLostError
from jobledger.projections.queue.backend import (
    LIMIT_KINDS,
    Depths,
    Lease,
    LeaseRound,
    LimitUsage,
    NamedLimit,
    QueueChange,
    QueueItem,
    QueueMeta,
    QueuePause,
    QueueState,
    Throttle,
    check_change,
    enforced,
)
from jobledger.projections.queue.entries import EncodedEntry, encode_entry, encode_item
from jobledger.projections.times import decode_time, due_score, encode_time, now_score

log = structlog.get_logger(__name__)
_T = TypeVar("_T")
_Arg = str | int | bytes  # a script argument

# One script call applies at most this many changes, so no call blocks Redis for long.
APPLY_CHUNK = 500
# apply.lua's argument that holds the log position to record (ARGV[8]: zero-based 7).
_APPLY_POSITION = 7
# Entries per batch of a bulk load (four commands per queue and batch).
LOAD_CHUNK = 10_000
# How long a queue uses the named limits it read before it reads them again: a change
# reaches the lease script within this time.
NAMED_TTL = 1.0
# Keys per UNLINK during a reset, and tombstones per prune call.
DELETE_BATCH = 500

# Positions of the target sets in apply.lua's KEYS (1-based, as Lua counts).
_LEASED_INDEX = 6
_DEAD_INDEX = 7
_READY_INDEX = 8  # + priority
# No queue name has a colon, so no queue is named like the queue set's mark.
_MARK = ":epoch:"


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _batches(values: Iterable[_T], size: int) -> Iterator[list[_T]]:
    iterator = iter(values)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _blob(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def _listing_mark(epoch: str) -> str:
    """The member of the queue set that shows the set is whole (see ``redis_keys``)."""
    return f"{_MARK}{epoch}"


def _apply_keys(qkeys: QueueKeys) -> list[str]:
    """apply.lua's KEYS, in the order its header lists."""
    fixed = [qkeys.meta, qkeys.ver, qkeys.item, qkeys.state, qkeys.gone, qkeys.leased, qkeys.dead]
    return [*fixed, *qkeys.ready_by_priority, qkeys.lim, qkeys.lim_wake, qkeys.lim_noted]


def _ack_limit_keys(qkeys: QueueKeys) -> list[str]:
    return [qkeys.lim, qkeys.lim_wake, qkeys.lim_noted]


def _held_by_queue(leases: Iterable[Lease]) -> dict[str, list[tuple[UUID, UUID]]]:
    held: dict[str, list[tuple[UUID, UUID]]] = {}
    for lease in leases:
        held.setdefault(lease.queue, []).append((lease.execution_id, lease.lease_id))
    return held


def _allowed(
    named: NamedLimit | None, kind: str, own: str, own_per: str
) -> tuple[int | None, int | None]:
    """``enforced`` for the values as lim:vals stores them."""
    return enforced(named, kind, int(own) if own else None, int(own_per) if own_per else None)


def _lease_keys(qkeys: QueueKeys) -> list[str]:
    """lease.lua's KEYS, in the order its header lists."""
    fixed = [qkeys.leased, qkeys.item, qkeys.state, qkeys.paused, qkeys.lim, qkeys.lim_wake]
    return [*qkeys.ready_by_priority, *fixed, qkeys.lim_noted, qkeys.lim_vals]


class _Scripts:
    """The Lua scripts, registered once per client (redis-py reloads them after a
    SCRIPT FLUSH or a failover)."""

    def __init__(self, client: RedisClient) -> None:
        self.apply = self._load(client, "apply")
        self.lease = self._load(client, "lease")
        self.extend = self._load(client, "extend")
        self.ack = self._load(client, "ack")
        self.release = self._load(client, "release")
        self.expired = self._load(client, "expired")
        self.prune = self._load(client, "prune")
        self.write_position = self._load(client, "write_position")
        self.stamp_load = self._load(client, "stamp_load")
        self.pause = self._load(client, "pause")
        self.limit_set = self._load(client, "limit_set")

    @staticmethod
    def _load(client: RedisClient, name: str) -> Script:
        return script(client, name)


class RedisQueue:
    """A ``QueueBackend`` on a synchronous redis-py client that returns bytes."""

    def __init__(
        self,
        client: RedisClient,
        prefix: str = DEFAULT_PREFIX,
        *,
        clock: Clock = utc_now,
    ) -> None:
        if client.get_encoder().decode_responses:
            raise ValueError("RedisQueue needs a client with decode_responses=False")
        self._client = client
        self._keys = Keys(prefix)
        # The clock only dates tombstones, for prune_tombstones.
        self._clock = clock
        self._scripts = _Scripts(client)
        self._decoder = msgspec.msgpack.Decoder(QueueItem)
        self._pause_decoder = msgspec.msgpack.Decoder(QueuePause)
        self._limit_decoder = msgspec.msgpack.Decoder(NamedLimit)
        self._encoder = msgspec.msgpack.Encoder()
        # The named limits as lease.lua's arguments, and when they were read (monotonic).
        self._named: tuple[float, list[_Arg]] | None = None
        # A page of one queue goes in one script call, checks included (``apply``).
        self._whole_in_one = not isinstance(client, RedisCluster)
        self._round_scripts_loaded = False

    # ---- projection side ------------------------------------------------------------

    def read_meta(self) -> QueueMeta | None:
        """The store's meta, or None if the store lost any of its data (on a cluster,
        one master may lose the slots of some queues, or of the queue set, alone). A
        store that is loading is returned as such: what it holds is not whole yet."""
        pipe = self._client.pipeline(transaction=False)
        pipe.hgetall(self._keys.meta)
        pipe.smembers(self._keys.queues)
        stored, members = pipe.execute()
        raw = {_text(k): _text(v) for k, v in stored.items()}
        if not {"store_id", "epoch", "position"} <= raw.keys():
            return None
        position = int(raw["position"])
        meta = QueueMeta(
            store_id=raw["store_id"],
            epoch=raw["epoch"],
            position=position,
            # A store written before the flag: a queue at 0 may be loading.
            loading=raw["loading"] == "1" if "loading" in raw else position == 0,
            load_progress=int(raw.get("load_progress", 0)),
        )
        if meta.loading:
            # A store being reset or loaded is not whole until its load ends, and says so.
            return meta
        listed = {_text(name) for name in members}
        if _listing_mark(meta.epoch) not in listed or not self._all_there(meta.epoch, listed):
            return None
        return meta

    def _all_there(self, epoch: str, listed: set[str]) -> bool:
        names = sorted(listed - {_listing_mark(epoch)})
        if not names:
            return True
        pipe = self._client.pipeline(transaction=False)
        for name in names:
            pipe.get(self._keys.queue(name).meta)
        return all(meta is not None and _text(meta) == epoch for meta in pipe.execute())

    def reset(self, meta: QueueMeta) -> None:
        keys = self._keys
        # The new meta first, in one command: every writer on the old epoch fails from
        # now on, and a reader sees the new epoch loading, never a store with no meta
        # (which it would take for a lost queue and rebuild too).
        self._client.hset(
            keys.meta,
            mapping={
                "store_id": meta.store_id,
                "epoch": meta.epoch,
                "position": meta.position,
                "loading": int(meta.loading),
                "load_progress": meta.load_progress,
            },
        )
        listed = self.queues()
        known = itertools.chain.from_iterable(keys.queue(name).all() for name in listed)
        for batch in _batches(known, DELETE_BATCH):
            self._client.unlink(*batch)
        # Whatever the set does not name (a queue whose SADD never ran).
        leftovers = self._client.scan_iter(match=keys.queue_pattern, count=DELETE_BATCH)
        for batch in _batches(leftovers, DELETE_BATCH):
            self._client.unlink(*batch)
        # One key a command: on a cluster the two live in different slots.
        self._client.unlink(keys.queues)
        self._client.unlink(keys.limits)
        self._named = None
        self._client.sadd(keys.queues, _listing_mark(meta.epoch))

    def apply(
        self,
        changes: Sequence[QueueChange],
        *,
        epoch: str,
        force: bool = False,
        position: int | None = None,
    ) -> None:
        for change in changes:
            check_change(change)
        groups: dict[str, list[QueueChange]] = {}
        for change in changes:
            groups.setdefault(change.queue, []).append(change)
        if self._whole_in_one and len(groups) == 1 and len(changes) <= APPLY_CHUNK:
            ((queue, group),) = groups.items()
            self._apply_whole(queue, group, epoch=epoch, force=force, position=position)
            return
        listed = self._check_epoch(epoch, list(groups))
        for queue, group in groups.items():
            for chunk in _batches(group, APPLY_CHUNK):
                args = self._apply_args(queue, chunk, epoch, force=force, listed=queue in listed)
                if self._scripts.apply(keys=_apply_keys(self._keys.queue(queue)), args=args) < 0:
                    raise QueueLostError
            if queue not in listed:
                self._client.sadd(self._keys.queues, queue)
        if position is not None:
            self.write_position(position, epoch=epoch)

    def _apply_whole(
        self,
        queue: str,
        changes: Sequence[QueueChange],
        *,
        epoch: str,
        force: bool,
        position: int | None,
    ) -> None:
        """A page of one queue in one script call, which also makes the checks of the
        store (``_check_epoch``), lists the queue and records the position: one round
        trip instead of three (ADR 72). On one server only: on a cluster the global keys
        live in slots of their own."""
        args = self._apply_args(queue, changes, epoch, force=force, listed=False)
        args[_APPLY_POSITION] = "" if position is None else position
        keys = [*_apply_keys(self._keys.queue(queue)), self._keys.meta, self._keys.queues]
        if self._scripts.apply(keys=keys, args=args) < 0:
            raise QueueLostError

    def _apply_args(
        self, queue: str, changes: Iterable[QueueChange], epoch: str, *, force: bool, listed: bool
    ) -> list[_Arg]:
        """apply.lua's arguments (see its header) for ``changes`` of ``queue``."""
        base = self._keys.queue(queue).base
        args: list[_Arg] = [epoch, int(listed), int(force), now_score(self._clock()), base]
        args += [queue, _listing_mark(epoch), ""]
        args += [arg for change in changes for arg in self._change_args(change)]
        return args

    def _check_epoch(self, epoch: str, queues: list[str]) -> set[str]:
        """Fail before writing anything if any queue lost its data; returns the queues
        the global set already lists."""
        pipe = self._client.pipeline(transaction=False)
        pipe.hget(self._keys.meta, "epoch")
        pipe.smismember(self._keys.queues, [*queues, _listing_mark(epoch)])
        for queue in queues:
            pipe.get(self._keys.queue(queue).meta)
        stored, flags, *metas = pipe.execute()
        if stored is None or _text(stored) != epoch or not flags[-1]:
            raise QueueLostError
        listed = {queue for queue, flag in zip(queues, flags[:-1], strict=True) if flag}
        for queue, meta in zip(queues, metas, strict=True):
            if (meta is None and queue in listed) or (meta is not None and _text(meta) != epoch):
                raise QueueLostError
        return listed

    def _change_args(self, change: QueueChange) -> list[_Arg]:
        item = change.item
        if item is None:
            return [str(change.execution_id), change.version, 0, 0, b"", "", ""]
        lease_id = ""
        if item.state is QueueState.PENDING:
            target = _READY_INDEX + item.priority
        elif item.state is QueueState.LEASED:
            target, lease_id = _LEASED_INDEX, str(item.lease_id)
        else:
            target = _DEAD_INDEX
        return [
            str(change.execution_id),
            change.version,
            -target if change.unchanged else target,
            due_score(item.at),
            encode_item(item),
            f"{item.priority}|{lease_id}|",
            "" if item.limits is None else item.limits.descriptor(),
        ]

    def load(self, items: Sequence[QueueItem], *, epoch: str) -> None:
        for item in items:
            check_change(QueueChange.put(item))
        # Encoded chunk by chunk, so Redis writes one chunk while the next is encoded.
        chunks = (items[start : start + LOAD_CHUNK] for start in range(0, len(items), LOAD_CHUNK))
        self.load_entries(([encode_entry(i) for i in chunk] for chunk in chunks), epoch=epoch)

    def load_entries(self, batches: Iterable[Sequence[EncodedEntry]], *, epoch: str) -> int:
        """``load`` for entries already encoded (as the checkpoint stores them), in
        batches; returns how many. Plain bulk commands, no script: the queue was just
        reset, so nothing needs a guard."""
        self._check_epoch(epoch, [])  # also when there is nothing to load, as apply does
        packers: dict[str, EntryPacker] = {}
        count = 0
        with packed_pipeline(self._client) as pipeline:
            for batch in batches:
                groups: dict[str, list[EncodedEntry]] = {}
                for entry in batch:
                    groups.setdefault(entry[1], []).append(entry)
                self._new_queues([q for q in groups if q not in packers], epoch)
                commands = []
                for queue, entries in groups.items():
                    packer = packers.get(queue) or EntryPacker(self._keys.queue(queue))
                    packers[queue] = packer
                    commands.append((self._keys.queue(queue).meta, packer.pack(entries)))
                pipeline.send_groups(commands)
                count += len(batch)
                self.stamp_load(epoch=epoch)
        self._close_windows(packers)
        return count

    def _close_windows(self, packers: dict[str, EntryPacker]) -> None:
        """Close the limits of the loaded entries for a while (see ``LimitCloser``)."""
        moment = now_score(self._clock())
        pipe = self._client.pipeline(transaction=False)
        for queue, packer in packers.items():
            qkeys = self._keys.queue(queue)
            for member, until in packer.closer.closed(moment).items():
                pipe.set(qkeys.lim_closed(member), until, px=until - moment)
                pipe.zadd(qkeys.lim_wake, {member: until + 1})
        pipe.execute()

    def _new_queues(self, queues: list[str], epoch: str) -> None:
        """Create ``queues`` (unless listed), after the epoch check. Only checked once
        per queue: a check waits for the batch Redis is executing. Each meta is written
        before the set lists its queue (a listed queue without meta is a lost one),
        which on a cluster takes a reply from each master in turn."""
        if not queues:
            return
        listed = self._check_epoch(epoch, queues)
        new = [queue for queue in queues if queue not in listed]
        if not new:
            return
        pipe = self._client.pipeline(transaction=False)
        for queue in new:
            pipe.set(self._keys.queue(queue).meta, epoch)
        pipe.execute()
        self._client.sadd(self._keys.queues, *new)

    def apply_pauses(self, pauses: Sequence[QueuePause], *, epoch: str) -> None:
        if not pauses:
            return
        listed = self._check_epoch(epoch, sorted({pause.queue for pause in pauses}))
        for pause in pauses:
            qkeys = self._keys.queue(pause.queue)
            args: list[_Arg] = [epoch, int(pause.queue in listed), pause.version]
            args += [int(pause.paused), self._encoder.encode(pause)]
            if self._scripts.pause(keys=[qkeys.meta, qkeys.paused], args=args) < 0:
                raise QueueLostError
            if pause.queue not in listed:
                self._client.sadd(self._keys.queues, pause.queue)
                listed.add(pause.queue)

    def pauses(self) -> dict[str, QueuePause]:
        """The records, with ``paused`` as the flag the lease script reads says (what is
        enforced, even if something changed the flag alone)."""
        names = sorted(self.queues())
        pipe = self._client.pipeline(transaction=False)
        for name in names:
            pipe.hmget(self._keys.queue(name).paused, ["paused", "version", "record"])
        found: dict[str, QueuePause] = {}
        for name, (flag, version, record) in zip(names, pipe.execute(), strict=True):
            if flag is None:
                continue
            pause = (
                self._pause_decoder.decode(_blob(record))
                if record is not None
                else QueuePause(queue=name, version=int(version or 0), paused=False)
            )
            found[name] = msgspec.structs.replace(pause, paused=_text(flag) == "1")
        return found

    def apply_limits(self, limits: Sequence[NamedLimit], *, epoch: str) -> None:
        if not limits:
            return
        self._check_epoch(epoch, [])
        for limit in limits:
            args: list[_Arg] = [limit.name, limit.version, self._encoder.encode(limit)]
            self._scripts.limit_set(keys=[self._keys.limits], args=args)
        self._named = None
        # Entries waiting for these keys may have room now: each queue looks again.
        members = [f"{kind}:{limit.name}" for limit in limits for kind in ("c", "r")]
        pipe = self._client.pipeline(transaction=False)
        for queue in sorted(self.queues()):
            pipe.zadd(self._keys.queue(queue).lim_wake, dict.fromkeys(members, 0))
        pipe.execute()

    def named_limits(self) -> dict[str, NamedLimit]:
        raw = self._client.hgetall(self._keys.limits)
        records = (self._limit_decoder.decode(_blob(v)) for k, v in raw.items() if k[:2] == b"r:")
        return {limit.name: limit for limit in records if not limit.deleted}

    def _named_args(self) -> list[_Arg]:
        """lease.lua's named-limit arguments, read at most once per NAMED_TTL."""
        cached = self._named
        moment = time.monotonic()
        if cached is not None and moment - cached[0] < NAMED_TTL:
            return cached[1]
        named = self.named_limits()
        args: list[_Arg] = [len(named)]
        for limit in named.values():
            values = (limit.concurrency, limit.rate, limit.rate_per_ms)
            args += [limit.name, *("" if v is None else v for v in values)]
        self._named = (moment, args)
        return args

    def write_position(self, position: int, *, epoch: str) -> None:
        if not self._scripts.write_position(keys=[self._keys.meta], args=[epoch, position]):
            raise QueueLostError

    def stamp_load(self, *, epoch: str) -> bool:
        return bool(self._scripts.stamp_load(keys=[self._keys.meta], args=[epoch]))

    def queues(self) -> set[str]:
        names = {_text(name) for name in self._client.smembers(self._keys.queues)}
        return {name for name in names if not name.startswith(_MARK)}

    def items(self, queue: str) -> list[QueueItem]:
        qkeys = self._keys.queue(queue)
        pipe = self._client.pipeline(transaction=True)
        pipe.hgetall(qkeys.item)
        pipe.hgetall(qkeys.state)
        blobs, states = pipe.execute()
        return [
            self._current(self._decoder.decode(_blob(blob)), states.get(eid))
            for eid, blob in blobs.items()
        ]

    @staticmethod
    def _current(item: QueueItem, state: bytes | None) -> QueueItem:
        """The applied item with what the worker side changed since (see redis_keys)."""
        if state is None:
            return item
        _, lease_id, at = _text(state).split("|")
        if not at:  # untouched since applied: every worker step records a time
            return item
        if lease_id:  # leased or extended
            return msgspec.structs.replace(
                item, state=QueueState.LEASED, at=decode_time(at), lease_id=UUID(lease_id)
            )
        # released
        return msgspec.structs.replace(
            item, state=QueueState.PENDING, at=decode_time(at), lease_id=None
        )

    def prune_tombstones(self, queue: str, *, before: datetime) -> int:
        qkeys = self._keys.queue(queue)
        limit = now_score(before)
        total = 0
        while True:
            pruned = int(
                self._scripts.prune(keys=[qkeys.gone, qkeys.ver], args=[limit, DELETE_BATCH])
            )
            total += pruned
            if pruned < DELETE_BATCH:
                return total

    # ---- worker side ----------------------------------------------------------------

    def lease(
        self,
        queue: str,
        *,
        lease_ids: Sequence[UUID],
        ttl: timedelta,
        now: datetime,
    ) -> list[Lease]:
        return self.lease_round(queue, lease_ids=lease_ids, ttl=ttl, now=now).leases

    def lease_round(
        self,
        queue: str,
        *,
        lease_ids: Sequence[UUID],
        ttl: timedelta,
        now: datetime,
        acks: Sequence[Lease] = (),
    ) -> LeaseRound:
        if not lease_ids:
            self.ack_many(acks)
            return LeaseRound(leases=[])
        qkeys = self._keys.queue(queue)
        deadline = now + ttl
        # The script answers each lease id as the text it was sent: look it up, not parse.
        offered = {str(lease_id): lease_id for lease_id in lease_ids}
        keys = _lease_keys(qkeys)
        args: list[_Arg] = [
            now_score(now),
            due_score(deadline),
            encode_time(deadline),
            qkeys.base,
            *self._named_args(),
            *offered,
        ]
        if acks:
            raw = self._acked_then_leased(acks, keys, args)
        else:
            raw = self._scripts.lease(keys=keys, args=args)
        count = 3 * int(raw[0])
        leases = [
            Lease.of(self._decoder.decode(blob), offered[_text(lease_id)], deadline)
            for _eid, lease_id, blob in _batches(raw[1 : 1 + count], 3)
        ]
        throttled = [
            self._throttle(queue, eid, kind, key)
            for eid, kind, key in _batches(raw[1 + count :], 3)
        ]
        return LeaseRound(leases=leases, throttled=throttled)

    def _throttle(self, queue: str, eid: bytes, kind: bytes, key: bytes) -> Throttle:
        execution_id = UUID(_text(eid))
        blob = self._client.hget(self._keys.queue(queue).item, str(execution_id))
        version = 0 if blob is None else self._decoder.decode(_blob(blob)).version
        return Throttle(
            execution_id=execution_id,
            queue=queue,
            version=version,
            kind=LIMIT_KINDS[_text(kind)],
            key=_text(key),
        )

    def limit_usage(self, queue: str, *, now: datetime) -> list[LimitUsage]:
        qkeys = self._keys.queue(queue)
        vals = {_text(k): _text(v) for k, v in self._client.hgetall(qkeys.lim_vals).items()}
        named = self.named_limits()
        members = sorted(vals)
        enforced = [_allowed(named.get(m[2:]), m[0], *vals[m].split("|")) for m in members]
        pipe = self._client.pipeline(transaction=False)
        for member, (_, per) in zip(members, enforced, strict=True):
            if member[0] == "c":
                pipe.scard(qkeys.lim_run(member[2:]))
            else:
                pipe.zcount(qkeys.lim_starts(member[2:]), now_score(now) - (per or 0), "+inf")
            pipe.zcard(qkeys.lim_wait(member))
        counts = pipe.execute()
        return [
            LimitUsage(
                queue=queue,
                kind=LIMIT_KINDS[member[0]],
                key=member[2:],
                in_use=int(counts[2 * i]),
                waiting=int(counts[2 * i + 1]),
                allowed=allowed,
            )
            for i, (member, (allowed, _)) in enumerate(zip(members, enforced, strict=True))
        ]

    def extend(self, queue: str, execution_id: UUID, lease_id: UUID, *, deadline: datetime) -> bool:
        qkeys = self._keys.queue(queue)
        return bool(
            self._scripts.extend(
                keys=[qkeys.leased, qkeys.state],
                args=[str(execution_id), str(lease_id), due_score(deadline), encode_time(deadline)],
            )
        )

    def ack(self, queue: str, execution_id: UUID, lease_id: UUID) -> bool:
        return self._run_acks({queue: [(execution_id, lease_id)]}) > 0

    def ack_many(self, leases: Iterable[Lease]) -> int:
        return self._run_acks(_held_by_queue(leases))

    def _run_acks(self, held: Mapping[str, Sequence[tuple[UUID, UUID]]]) -> int:
        calls = self._ack_calls(held)
        return sum(int(self._scripts.ack(keys=keys, args=args)) for keys, args in calls)

    def _ack_calls(
        self, held: Mapping[str, Sequence[tuple[UUID, UUID]]]
    ) -> list[tuple[list[str], list[_Arg]]]:
        """ack.lua's keys and arguments for the (execution id, lease id) pairs ``held``
        by queue: a call per queue and chunk."""
        calls: list[tuple[list[str], list[_Arg]]] = []
        removed_at = now_score(self._clock())
        for queue, pairs in held.items():
            qkeys = self._keys.queue(queue)
            keys = [qkeys.leased, qkeys.state, qkeys.item, qkeys.gone, *_ack_limit_keys(qkeys)]
            for chunk in _batches(pairs, APPLY_CHUNK):
                args: list[_Arg] = [removed_at, qkeys.base]
                args += [str(value) for pair in chunk for value in pair]
                calls.append((keys, args))
        return calls

    def _acked_then_leased(
        self, acks: Sequence[Lease], keys: list[str], args: list[_Arg]
    ) -> list[Any]:
        """The acks' scripts and the lease script in one round trip: their EVALSHAs in a
        pipeline (a script call through a pipeline would ask whether each script is
        loaded first, a round trip of its own). A script the server has forgotten (a
        restart, SCRIPT FLUSH) runs again through its ``Script``, which loads it; an ack
        run twice drops nothing the second time."""
        if not self._round_scripts_loaded:
            # Loaded before the first such round, so that it acks before it leases: a
            # script the server forgot later runs after the round, and its slots free
            # for the next one.
            for script in (self._scripts.ack, self._scripts.lease):
                self._client.script_load(script.script)
            self._round_scripts_loaded = True
        pipe = self._client.pipeline(transaction=False)
        calls = self._ack_calls(_held_by_queue(acks))
        for ack_keys, ack_args in calls:
            pipe.evalsha(self._scripts.ack.sha, len(ack_keys), *ack_keys, *ack_args)
        pipe.evalsha(self._scripts.lease.sha, len(keys), *keys, *args)
        *acked, raw = pipe.execute(raise_on_error=False)
        if isinstance(raw, Exception) and not isinstance(raw, NoScriptError):
            raise raw
        # Before a forgotten lease runs again, as in the pipeline: its slots free for it.
        failed = self._acked_again(calls, acked)
        if isinstance(raw, NoScriptError):
            raw = self._scripts.lease(keys=keys, args=args)
        if failed:
            # The lease ran: raising now would leave its entries leased to nobody until
            # their ttl. An ack only hurries what the log's completion does anyway.
            log.warning("queue.acks_failed", calls=failed, acks=len(acks))
        return cast("list[Any]", raw)

    def _acked_again(
        self, calls: Sequence[tuple[list[str], list[_Arg]]], answers: Sequence[object]
    ) -> int:
        """Run again the acks whose script the server had forgotten (on a cluster, a
        master that failed over forgets its scripts while others remember theirs); how
        many of the round's acks failed, there or in the pipeline."""
        failed = 0
        for (ack_keys, ack_args), answer in zip(calls, answers, strict=True):
            if isinstance(answer, NoScriptError):
                try:
                    self._scripts.ack(keys=ack_keys, args=ack_args)
                except RedisError:
                    failed += 1
            elif isinstance(answer, Exception):
                failed += 1
        return failed

    def release(
        self, queue: str, execution_id: UUID, lease_id: UUID, *, ready_at: datetime
    ) -> bool:
        qkeys = self._keys.queue(queue)
        return bool(
            self._scripts.release(
                keys=[
                    qkeys.leased,
                    qkeys.state,
                    *qkeys.ready_by_priority,
                    qkeys.lim,
                    qkeys.lim_wake,
                ],
                args=[
                    str(execution_id),
                    str(lease_id),
                    due_score(ready_at),
                    encode_time(ready_at),
                    qkeys.base,
                ],
            )
        )

    def expired(self, queue: str, *, now: datetime, limit: int) -> list[tuple[UUID, UUID]]:
        if limit <= 0:
            return []
        qkeys = self._keys.queue(queue)
        raw = self._scripts.expired(keys=[qkeys.leased, qkeys.state], args=[now_score(now), limit])
        return [
            (UUID(_text(eid)), UUID(_text(state).split("|")[1])) for eid, state in _batches(raw, 2)
        ]

    def depths(self, queue: str, *, now: datetime) -> Depths:
        qkeys = self._keys.queue(queue)
        score = now_score(now)
        pipe = self._client.pipeline(transaction=True)
        for key in qkeys.ready_by_priority:
            pipe.zcount(key, "-inf", score)
            pipe.zcount(key, f"({score}", "+inf")
        pipe.zcard(qkeys.leased)
        pipe.zcard(qkeys.dead)
        pipe.hlen(qkeys.state)
        *counts, leased, dead, entries = pipe.execute()
        ready, delayed = sum(counts[0::2]), sum(counts[1::2])
        # Entries waiting for a limit are in no sorted set, but are open entries (the
        # state hash has every one): they were due, so they count as ready.
        waiting = max(entries - ready - delayed - leased - dead, 0)
        return Depths(ready=ready + waiting, delayed=delayed, leased=leased, dead=dead)
