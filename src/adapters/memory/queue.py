"""The queue in process memory, for the embedded mode.

It mirrors the Redis layout (one sorted list per priority, leased and dead sets,
versions kept as tombstones) and its millisecond scores, so both backends order and
time entries the same way and pass the same contract tests. Nothing survives the
process: on start the projection finds no meta record and rebuilds from the log.
"""

import bisect
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeAlias
from uuid import UUID

import msgspec

from jobledger.adapters.memory.limits import MAX_SET_ASIDE, SPAN, QueueLimits
from jobledger.domain.clock import Clock, utc_now
from jobledger.projections.errors import QueueLostError
from jobledger.projections.queue.backend import (
    LIMIT_KINDS,
    PRIORITIES,
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
    later_deadline,
)
from jobledger.projections.queue.entries import EncodedEntry, decode_item
from jobledger.projections.times import due_score, now_score

# (score, execution id as text, execution id): the text breaks score ties the way a
# Redis sorted set does, by member.
_Slot: TypeAlias = tuple[int, str, UUID]


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class _Queue:
    items: dict[UUID, QueueItem] = field(default_factory=dict)
    ready: list[list[_Slot]] = field(default_factory=lambda: [[] for _ in PRIORITIES])
    leased: dict[UUID, int] = field(default_factory=dict)  # deadline scores
    dead: set[UUID] = field(default_factory=set)
    versions: dict[UUID, int] = field(default_factory=dict)  # open entries and tombstones
    gone: dict[UUID, int] = field(default_factory=dict)  # tombstone -> removal score
    pause: QueuePause | None = None  # as the log last set it (None: never paused)
    limits: QueueLimits = field(default_factory=QueueLimits)

    @property
    def paused(self) -> bool:
        return self.pause is not None and self.pause.paused

    def insert(self, item: QueueItem) -> None:
        eid = item.execution_id
        self.items[eid] = item
        self.limits.place(eid, item.limits, leased=item.state is QueueState.LEASED)
        if item.state is QueueState.PENDING:
            bisect.insort(self.ready[item.priority], (due_score(item.at), str(eid), eid))
        elif item.state is QueueState.LEASED:
            self.leased[eid] = due_score(item.at)
        else:
            self.dead.add(eid)

    def remove(self, eid: UUID) -> QueueItem | None:
        item = self.items.pop(eid, None)
        if item is None:
            return None
        waited = self.limits.unlink(eid)  # then it is in no ready list
        if item.state is QueueState.LEASED:
            del self.leased[eid]
        elif item.state is QueueState.DEAD:
            self.dead.discard(eid)
        elif not waited:
            ready = self.ready[item.priority]
            del ready[bisect.bisect_left(ready, (due_score(item.at), str(eid), eid))]
        return item

    def held(self, eid: UUID, lease_id: UUID) -> QueueItem | None:
        """The entry if ``lease_id`` is its current lease."""
        item = self.items.get(eid)
        if item is None or item.state is not QueueState.LEASED or item.lease_id != lease_id:
            return None
        return item

    def take_ready(self, priority: int, now: int, limit: int) -> list[_Slot]:
        ready = self.ready[priority]
        # (now + 1,) sorts before every slot scored now + 1 and after every slot scored now.
        end = min(bisect.bisect_left(ready, (now + 1,)), limit)
        taken = ready[:end]
        del ready[:end]
        return taken

    def wake(self, now: int, named: dict[str, NamedLimit]) -> None:
        """Put the waiting entries of limits with room back in their ready lists."""
        for ordered, text, eid in self.limits.woken(now, named):
            band, score = divmod(ordered, SPAN)
            bisect.insort(self.ready[9 - band], (score, text, eid))


class MemoryQueue:
    """A ``QueueBackend`` in a dict per queue, guarded by one lock."""

    def __init__(self, *, clock: Clock = utc_now) -> None:
        # The clock only dates tombstones, for prune_tombstones.
        self._clock = clock
        self._lock = threading.Lock()
        self._meta: QueueMeta | None = None
        self._queues: dict[str, _Queue] = {}
        self._named: dict[str, NamedLimit] = {}

    # ---- projection side ------------------------------------------------------------

    def read_meta(self) -> QueueMeta | None:
        with self._lock:
            return self._meta

    def reset(self, meta: QueueMeta) -> None:
        with self._lock:
            self._queues.clear()
            self._named.clear()
            self._meta = meta

    def apply(
        self,
        changes: Sequence[QueueChange],
        *,
        epoch: str,
        force: bool = False,
        position: int | None = None,
    ) -> None:
        with self._lock:
            self._check_epoch(epoch)
            for change in changes:
                check_change(change)
            removed_at = now_score(self._clock())
            for change in changes:
                queue = self._queues.setdefault(change.queue, _Queue())
                _apply_one(queue, change, force=force, removed_at=removed_at)
        if position is not None:
            self.write_position(position, epoch=epoch)

    def apply_pauses(self, pauses: Sequence[QueuePause], *, epoch: str) -> None:
        with self._lock:
            self._check_epoch(epoch)
            for pause in pauses:
                queue = self._queues.setdefault(pause.queue, _Queue())
                if queue.pause is None or pause.version > queue.pause.version:
                    queue.pause = pause

    def pauses(self) -> dict[str, QueuePause]:
        with self._lock:
            return {
                name: queue.pause for name, queue in self._queues.items() if queue.pause is not None
            }

    def apply_limits(self, limits: Sequence[NamedLimit], *, epoch: str) -> None:
        with self._lock:
            self._check_epoch(epoch)
            for limit in limits:
                known = self._named.get(limit.name)
                if known is None or limit.version > known.version:
                    self._named[limit.name] = limit
            for queue in self._queues.values():
                for limit in limits:
                    queue.limits.wake.update({f"c:{limit.name}": 0, f"r:{limit.name}": 0})

    def named_limits(self) -> dict[str, NamedLimit]:
        with self._lock:
            return {name: limit for name, limit in self._named.items() if not limit.deleted}

    def write_position(self, position: int, *, epoch: str) -> None:
        with self._lock:
            meta = self._check_epoch(epoch)
            self._meta = msgspec.structs.replace(meta, position=position, loading=False)

    def queues(self) -> set[str]:
        with self._lock:
            return set(self._queues)

    def items(self, queue: str) -> list[QueueItem]:
        with self._lock:
            found = self._queues.get(queue)
            return [] if found is None else list(found.items.values())

    def prune_tombstones(self, queue: str, *, before: datetime) -> int:
        limit = now_score(before)
        with self._lock:
            found = self._queues.get(queue)
            if found is None:
                return 0
            pruned = [eid for eid, removed in found.gone.items() if removed < limit]
            for eid in pruned:
                del found.gone[eid]
                del found.versions[eid]
            return len(pruned)

    def load(self, items: Sequence[QueueItem], *, epoch: str) -> None:
        changes = [QueueChange.put(item) for item in items]
        self.apply(changes, epoch=epoch, force=True)
        moment = now_score(self._clock())
        with self._lock:
            for name in {item.queue for item in items}:
                self._queues[name].limits.close(moment)
        self.stamp_load(epoch=epoch)

    def stamp_load(self, *, epoch: str) -> bool:
        with self._lock:
            meta = self._meta
            if meta is None or meta.epoch != epoch or not meta.loading:
                return False
            self._meta = msgspec.structs.replace(meta, load_progress=meta.load_progress + 1)
            return True

    def load_entries(self, batches: Iterable[Sequence[EncodedEntry]], *, epoch: str) -> int:
        count = 0
        for batch in batches:
            self.load([decode_item(entry[7]) for entry in batch], epoch=epoch)
            count += len(batch)
        return count

    def _check_epoch(self, epoch: str) -> QueueMeta:
        if self._meta is None or self._meta.epoch != epoch:
            raise QueueLostError
        return self._meta

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
        self.ack_many(acks)
        score = now_score(now)
        with self._lock:
            found = self._queues.get(queue)
            if found is None or found.paused or not lease_ids:
                return LeaseRound(leases=[])
            found.wake(score, self._named)
            taken, throttled = _Round(found, queue, score, self._named).run(len(lease_ids))
            leases = [
                _lease_one(found, eid, lease_id, now + ttl)
                for eid, lease_id in zip(taken, lease_ids, strict=False)
            ]
            return LeaseRound(leases=leases, throttled=throttled)

    def limit_usage(self, queue: str, *, now: datetime) -> list[LimitUsage]:
        with self._lock:
            found = self._queues.get(queue)
            if found is None:
                return []
            return found.limits.usage(queue, now_score(now), self._named)

    def extend(self, queue: str, execution_id: UUID, lease_id: UUID, *, deadline: datetime) -> bool:
        return self._replace_held(queue, execution_id, lease_id, at=deadline)

    def ack(self, queue: str, execution_id: UUID, lease_id: UUID) -> bool:
        removed_at = now_score(self._clock())
        with self._lock:
            found = self._queues.get(queue)
            if found is None or found.held(execution_id, lease_id) is None:
                return False
            # The version stays as a tombstone: the log's own removal comes later.
            found.remove(execution_id)
            found.limits.forget(execution_id)
            found.gone[execution_id] = removed_at
            return True

    def ack_many(self, leases: Iterable[Lease]) -> int:
        return sum(self.ack(lease.queue, lease.execution_id, lease.lease_id) for lease in leases)

    def release(
        self, queue: str, execution_id: UUID, lease_id: UUID, *, ready_at: datetime
    ) -> bool:
        return self._replace_held(
            queue, execution_id, lease_id, state=QueueState.PENDING, at=ready_at, lease_id=None
        )

    def _replace_held(
        self, queue: str, execution_id: UUID, held_by: UUID, /, **changes: object
    ) -> bool:
        """Change a leased entry if the lease ``held_by`` still holds it; False otherwise."""
        with self._lock:
            found = self._queues.get(queue)
            item = None if found is None else found.held(execution_id, held_by)
            if found is None or item is None:
                return False
            found.remove(execution_id)
            found.insert(msgspec.structs.replace(item, **changes))
            return True

    def expired(self, queue: str, *, now: datetime, limit: int) -> list[tuple[UUID, UUID]]:
        score = now_score(now)
        with self._lock:
            found = self._queues.get(queue)
            if found is None or limit <= 0:
                return []
            due = sorted((s, str(eid), eid) for eid, s in found.leased.items() if s <= score)
            return [(eid, _lease_id(found.items[eid])) for _, _, eid in due[:limit]]

    def depths(self, queue: str, *, now: datetime) -> Depths:
        score = now_score(now)
        with self._lock:
            found = self._queues.get(queue)
            if found is None:
                return Depths()
            ready = sum(bisect.bisect_left(slots, (score + 1,)) for slots in found.ready)
            pending = sum(len(slots) for slots in found.ready)
            # Entries waiting for a limit were due: they count as ready (as in Redis).
            return Depths(
                ready=ready + len(found.limits.aside),
                delayed=pending - ready,
                leased=len(found.leased),
                dead=len(found.dead),
            )


@dataclass
class _Round:
    """One lease round over a queue's ready lists, as lease.lua runs it: an entry over a
    limit is set aside, the others are taken, until enough are taken."""

    found: _Queue
    queue: str
    now: int
    named: dict[str, NamedLimit]
    aside: int = 0

    def run(self, wanted: int) -> tuple[list[UUID], list[Throttle]]:
        taken: list[UUID] = []
        throttled: list[Throttle] = []
        for priority in PRIORITIES:
            while len(taken) < wanted and self.aside < MAX_SET_ASIDE:
                batch = self.found.take_ready(priority, self.now, wanted - len(taken))
                if not batch:
                    break
                for slot in batch:
                    leases, throttle = self._one(slot, priority)
                    if leases:
                        taken.append(slot[2])
                    elif throttle is not None:
                        throttled.append(throttle)
            if len(taken) == wanted or self.aside >= MAX_SET_ASIDE:
                break
        return taken, throttled

    def _one(self, slot: _Slot, priority: int) -> tuple[bool, Throttle | None]:
        """Whether the entry leases; if not, what to report (None when it waited before)."""
        score, text, eid = slot
        limits = self.found.limits
        verdict = limits.verdict(eid, self.now, self.named)
        if verdict.member is None:
            limits.count(eid, self.now, self.named)
            return True, None
        self.aside += 1
        ordered = (9 - priority) * SPAN + max(score, 0)
        if not limits.set_aside(eid, verdict.member, (ordered, text, eid), verdict.wake_at):
            return False, None
        return False, Throttle(
            execution_id=eid,
            queue=self.queue,
            version=self.found.items[eid].version,
            kind=LIMIT_KINDS[verdict.member[0]],
            key=verdict.member[2:],
        )


def _apply_one(queue: _Queue, change: QueueChange, *, force: bool, removed_at: int) -> None:
    eid = change.execution_id
    stored = queue.versions.get(eid)
    if not force and stored is not None and change.version <= stored:
        return
    if change.unchanged and not force and stored == change.version - 1:
        _move_version(queue, eid, change.version)
        return
    previous = queue.remove(eid)
    queue.versions[eid] = change.version
    if change.item is None:
        queue.gone[eid] = removed_at
        queue.limits.forget(eid)
    else:
        queue.gone.pop(eid, None)
        queue.insert(later_deadline(change.item, previous))


def _move_version(queue: _Queue, eid: UUID, version: int) -> None:
    """An event that left the entry as it was: only its version moves on (an entry the
    worker side acked stays gone)."""
    queue.versions[eid] = version
    item = queue.items.get(eid)
    if item is not None:
        queue.items[eid] = msgspec.structs.replace(item, version=version)


def _lease_one(found: _Queue, eid: UUID, lease_id: UUID, deadline: datetime) -> Lease:
    item = found.items[eid]
    leased = msgspec.structs.replace(item, state=QueueState.LEASED, at=deadline, lease_id=lease_id)
    # take_ready already removed it from its ready list.
    found.items[eid] = leased
    found.leased[eid] = due_score(deadline)
    return Lease.of(item, lease_id, deadline)


def _lease_id(item: QueueItem) -> UUID:
    if item.lease_id is None:  # a leased entry always has one (check_change)
        raise AssertionError(f"leased entry {item.execution_id} has no lease id")
    return item.lease_id
