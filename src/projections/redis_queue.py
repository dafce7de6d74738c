"""The queue in Redis: one Lua script per operation, the keys of ``redis_keys``.

Each script touches the keys of one queue only (one hash tag, so one cluster slot);
the global meta and queue set are read and written by separate commands. Items are
stored as msgpack ``QueueItem`` values exactly as the projection applied them; what
the worker side changes afterwards (lease id, deadline, release time) lives in the
queue's ``state`` hash, so no script needs to decode msgpack.

Loss detection: ``jl:meta`` holds the store's epoch and each queue's ``meta`` key the
epoch it was created in. ``apply`` fails with ``QueueLostError`` when the global epoch
is missing or different, or when a queue listed in ``jl:queues`` lost its meta (a
partial loss); the scripts repeat the per-queue check atomically before writing.
"""

import itertools
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import TypeVar
from uuid import UUID

import msgspec
import redis
from redis.commands.core import Script

from jobledger.domain.clock import Clock, utc_now
from jobledger.projections.errors import QueueLostError
from jobledger.projections.queue import (
    Depths,
    Lease,
    QueueChange,
    QueueItem,
    QueueMeta,
    QueuePause,
    QueueState,
    check_change,
)
from jobledger.projections.queue_entries import EncodedEntry, encode_entry, encode_item
from jobledger.projections.redis_bulk import EntryPacker, pack, packed_pipeline
from jobledger.projections.redis_keys import DEFAULT_PREFIX, Keys, QueueKeys
from jobledger.projections.times import decode_time, due_score, encode_time, now_score

_T = TypeVar("_T")
_Arg = str | int | bytes  # a script argument

# One script call applies at most this many changes, so no call blocks Redis for long.
APPLY_CHUNK = 500
# Entries per batch of a bulk load (four commands per queue and batch).
LOAD_CHUNK = 10_000
# Keys per UNLINK during a reset, and tombstones per prune call.
DELETE_BATCH = 500

# Positions of the target sets in apply.lua's KEYS (1-based, as Lua counts).
_LEASED_INDEX = 6
_DEAD_INDEX = 7
_READY_INDEX = 8  # + priority


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


def _apply_keys(qkeys: QueueKeys) -> list[str]:
    """apply.lua's KEYS, in the order its header lists."""
    fixed = [qkeys.meta, qkeys.ver, qkeys.item, qkeys.state, qkeys.gone, qkeys.leased, qkeys.dead]
    return fixed + qkeys.ready_by_priority


class _Scripts:
    """The Lua scripts, registered once per client (redis-py reloads them after a
    SCRIPT FLUSH or a failover)."""

    def __init__(self, client: redis.Redis) -> None:
        self.apply = self._load(client, "apply")
        self.lease = self._load(client, "lease")
        self.extend = self._load(client, "extend")
        self.ack = self._load(client, "ack")
        self.release = self._load(client, "release")
        self.expired = self._load(client, "expired")
        self.prune = self._load(client, "prune")
        self.write_position = self._load(client, "write_position")
        self.pause = self._load(client, "pause")

    @staticmethod
    def _load(client: redis.Redis, name: str) -> Script:
        source = resources.files("jobledger.projections").joinpath(f"lua/{name}.lua")
        return client.register_script(source.read_text(encoding="utf-8"))


class RedisQueue:
    """A ``QueueBackend`` on a synchronous redis-py client that returns bytes."""

    def __init__(
        self,
        client: redis.Redis,
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
        self._encoder = msgspec.msgpack.Encoder()

    # ---- projection side ------------------------------------------------------------

    def read_meta(self) -> QueueMeta | None:
        raw = {_text(k): _text(v) for k, v in self._client.hgetall(self._keys.meta).items()}
        if not {"store_id", "epoch", "position"} <= raw.keys():
            return None
        return QueueMeta(
            store_id=raw["store_id"], epoch=raw["epoch"], position=int(raw["position"])
        )

    def reset(self, meta: QueueMeta) -> None:
        keys = self._keys
        # Dropping the meta first makes every writer on the old epoch fail from now on.
        self._client.unlink(keys.meta)
        listed = (_text(name) for name in self._client.smembers(keys.queues))
        known = itertools.chain.from_iterable(keys.queue(name).all() for name in listed)
        for batch in _batches(known, DELETE_BATCH):
            self._client.unlink(*batch)
        # Whatever the set does not name (a queue whose SADD never ran).
        leftovers = self._client.scan_iter(match=keys.queue_pattern, count=DELETE_BATCH)
        for batch in _batches(leftovers, DELETE_BATCH):
            self._client.unlink(*batch)
        self._client.unlink(keys.queues)
        self._client.hset(
            keys.meta,
            mapping={"store_id": meta.store_id, "epoch": meta.epoch, "position": meta.position},
        )

    def apply(self, changes: Sequence[QueueChange], *, epoch: str, force: bool = False) -> None:
        for change in changes:
            check_change(change)
        groups: dict[str, list[QueueChange]] = {}
        for change in changes:
            groups.setdefault(change.queue, []).append(change)
        listed = self._check_epoch(epoch, list(groups))
        removed_at = now_score(self._clock())
        for queue, group in groups.items():
            script_keys = _apply_keys(self._keys.queue(queue))
            for chunk in _batches(group, APPLY_CHUNK):
                args: list[_Arg] = [epoch, int(queue in listed), int(force), removed_at]
                args += [arg for change in chunk for arg in self._change_args(change)]
                if self._scripts.apply(keys=script_keys, args=args) < 0:
                    raise QueueLostError
            if queue not in listed:
                self._client.sadd(self._keys.queues, queue)

    def _check_epoch(self, epoch: str, queues: list[str]) -> set[str]:
        """Fail before writing anything if any queue lost its data; returns the queues
        the global set already lists."""
        pipe = self._client.pipeline(transaction=False)
        pipe.hget(self._keys.meta, "epoch")
        if queues:
            pipe.smismember(self._keys.queues, queues)
        for queue in queues:
            pipe.get(self._keys.queue(queue).meta)
        stored, *rest = pipe.execute()
        if stored is None or _text(stored) != epoch:
            raise QueueLostError
        if not queues:
            return set()
        flags, metas = rest[0], rest[1:]
        listed = {queue for queue, flag in zip(queues, flags, strict=True) if flag}
        for queue, meta in zip(queues, metas, strict=True):
            if (meta is None and queue in listed) or (meta is not None and _text(meta) != epoch):
                raise QueueLostError
        return listed

    def _change_args(self, change: QueueChange) -> list[_Arg]:
        item = change.item
        if item is None:
            return [str(change.execution_id), change.version, 0, 0, b"", ""]
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
            target,
            due_score(item.at),
            encode_item(item),
            f"{item.priority}|{lease_id}|",
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
                commands = self._new_queues([q for q in groups if q not in packers], epoch)
                for queue, entries in groups.items():
                    packer = packers.get(queue) or EntryPacker(self._keys.queue(queue))
                    packers[queue] = packer
                    commands += packer.pack(entries)
                pipeline.send(commands)
                count += len(batch)
        return count

    def _new_queues(self, queues: list[str], epoch: str) -> list[bytes]:
        """The commands that create ``queues`` (unless listed), after the epoch check.
        Only checked once per queue: a check waits for the batch Redis is executing."""
        if not queues:
            return []
        listed = self._check_epoch(epoch, queues)
        commands = []
        for queue in queues:
            if queue not in listed:
                commands.append(pack(("SET", self._keys.queue(queue).meta, epoch)))
                commands.append(pack(("SADD", self._keys.queues, queue)))
        return commands

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

    def write_position(self, position: int, *, epoch: str) -> None:
        if not self._scripts.write_position(keys=[self._keys.meta], args=[epoch, position]):
            raise QueueLostError

    def queues(self) -> set[str]:
        return {_text(name) for name in self._client.smembers(self._keys.queues)}

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
        if not lease_ids:
            return []
        qkeys = self._keys.queue(queue)
        deadline = now + ttl
        raw = self._scripts.lease(
            keys=[*qkeys.ready_by_priority, qkeys.leased, qkeys.item, qkeys.state, qkeys.paused],
            args=[
                now_score(now),
                due_score(deadline),
                encode_time(deadline),
                *(str(lease_id) for lease_id in lease_ids),
            ],
        )
        leases = []
        for eid, lease_id, blob in _batches(raw, 3):
            item = self._decoder.decode(blob)
            leases.append(
                Lease(
                    execution_id=UUID(_text(eid)),
                    queue=queue,
                    lease_id=UUID(_text(lease_id)),
                    deadline=deadline,
                    attempt=item.attempt,
                    version=item.version,
                    spec=item.spec,
                )
            )
        return leases

    def extend(self, queue: str, execution_id: UUID, lease_id: UUID, *, deadline: datetime) -> bool:
        qkeys = self._keys.queue(queue)
        return bool(
            self._scripts.extend(
                keys=[qkeys.leased, qkeys.state],
                args=[str(execution_id), str(lease_id), due_score(deadline), encode_time(deadline)],
            )
        )

    def ack(self, queue: str, execution_id: UUID, lease_id: UUID) -> bool:
        qkeys = self._keys.queue(queue)
        return bool(
            self._scripts.ack(
                keys=[qkeys.leased, qkeys.state, qkeys.item, qkeys.gone],
                args=[str(execution_id), str(lease_id), now_score(self._clock())],
            )
        )

    def release(
        self, queue: str, execution_id: UUID, lease_id: UUID, *, ready_at: datetime
    ) -> bool:
        qkeys = self._keys.queue(queue)
        return bool(
            self._scripts.release(
                keys=[qkeys.leased, qkeys.state, *qkeys.ready_by_priority],
                args=[str(execution_id), str(lease_id), due_score(ready_at), encode_time(ready_at)],
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
        *counts, leased, dead = pipe.execute()
        return Depths(
            ready=sum(counts[0::2]),
            delayed=sum(counts[1::2]),
            leased=leased,
            dead=dead,
        )
