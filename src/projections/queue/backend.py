"""The work queue contract: a projection of the log that workers lease from.

The queue holds every *open* execution of the log (pending, leased, dead-lettered) as
a ``QueueItem``. Two sides use it:

- the **projection** side writes what the log says, with ``apply``: a page of
  ``QueueChange`` values, each carrying the execution's event version. A change whose
  version is not newer than the stored one is ignored (the version guard), so a page
  can be applied twice, or an older page after a newer one, without effect. Removed
  executions (completed, cancelled) leave a tombstone version for the same reason.
- the **worker** side leases, extends, acks and releases. Those steps are atomic in
  the backend and do not change versions; the events the workers then record bring
  the same state through ``apply``.

Ordering: within a queue, a higher priority always leases first; within a priority,
the earliest ``ready_at`` first (first in, first out); equal times by execution id.
Priority and time are never mixed in one score: each priority has its own set.

A queue can be paused (``QueuePause``, the fold of the Queue aggregate's events,
version-guarded like an entry): a paused queue leases nothing, while its leases
already taken still extend, ack and release as usual.

A backend keeps a meta record (store id, epoch, position). ``apply`` and
``write_position`` take the epoch the projection believes in; if the backend lost its
data (the epoch is gone), they raise ``QueueLostError`` and change nothing, and the
projection rebuilds.
"""

import enum
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

import msgspec

if TYPE_CHECKING:
    # The stored form of an entry (queue_entries builds it from the items defined here).
    from jobledger.projections.queue.entries import EncodedEntry

PRIORITIES = range(9, -1, -1)  # leasing order: highest first


class QueueState(enum.StrEnum):
    PENDING = "pending"  # ready when ready_at <= now, delayed before that
    LEASED = "leased"
    DEAD = "dead"  # dead-lettered: waits for an operator


class EntryLimits(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The limits an entry waits for, as its run resolved them (values: the run's own;
    a named limit of the same key overrides them where the entry is leased)."""

    concurrency_key: str | None = None
    concurrency_max: int | None = None
    rate_key: str | None = None
    rate_limit: int | None = None
    rate_per_ms: int | None = None

    def descriptor(self) -> str:
        """The form the Redis scripts read: five fields joined by the unit separator
        (keys hold no control character: ``check_limit_key``)."""
        fields = (
            self.concurrency_key,
            self.concurrency_max,
            self.rate_key,
            self.rate_limit,
            self.rate_per_ms,
        )
        return LIMIT_SEPARATOR.join("" if f is None else str(f) for f in fields)


LIMIT_SEPARATOR = "\x1f"


class QueueItem(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An open execution as the queue holds it. Encoded without its defaults, so an
    entry's stored form names ``limits`` only when it has some (``has_limits``)."""

    execution_id: UUID
    queue: str
    priority: int
    version: int
    state: QueueState
    # PENDING: ready_at; LEASED: lease deadline; DEAD: when it was dead-lettered.
    at: datetime
    attempt: int  # PENDING: the attempt the next lease gets; LEASED: the leased attempt
    lease_id: UUID | None = None
    # LEASED: when the lease was granted (its event's time). A rebuild derives the
    # lease's ttl from it (``at - leased_at``); None for other states and old entries.
    leased_at: datetime | None = None
    # What a worker needs to run it, encoded by the projection (opaque to backends).
    spec: bytes = b""
    limits: EntryLimits | None = None


def has_limits(blob: bytes) -> bool:
    """Whether an encoded ``QueueItem`` may carry limits: False only when it does not
    (a payload that mentions the field name gives a false True, never a false False)."""
    return b"\xa6limits" in blob


class QueueChange(msgspec.Struct, frozen=True, kw_only=True):
    """What one event (or a fold of several) does to one execution's queue entry.

    ``item`` is the whole new entry; ``None`` removes the entry (terminal state),
    leaving a tombstone at ``version``. ``queue`` says where the entry lives.

    ``unchanged`` marks an event that leaves the entry as it was (a progress report, a
    throttle note): a store that holds the version just before it only moves the
    version on. Putting ``item`` instead would undo what the worker side did since the
    last event (a heartbeat's later deadline, a lease taken, an entry set aside by a
    limit), none of which the log records.
    """

    execution_id: UUID
    queue: str
    version: int
    item: QueueItem | None
    unchanged: bool = False

    @classmethod
    def put(cls, item: QueueItem) -> "QueueChange":
        """The change that makes ``item`` the entry, at the item's own version."""
        return cls(
            execution_id=item.execution_id, queue=item.queue, version=item.version, item=item
        )


class Lease(msgspec.Struct, frozen=True, kw_only=True):
    execution_id: UUID
    queue: str
    lease_id: UUID
    deadline: datetime
    attempt: int
    version: int
    spec: bytes

    @classmethod
    def of(cls, item: QueueItem, lease_id: UUID, deadline: datetime) -> "Lease":
        """The lease ``lease_id`` of ``item``'s entry until ``deadline``."""
        return cls(
            execution_id=item.execution_id,
            queue=item.queue,
            lease_id=lease_id,
            deadline=deadline,
            attempt=item.attempt,
            version=item.version,
            spec=item.spec,
        )


class Depths(msgspec.Struct, frozen=True, kw_only=True):
    ready: int = 0
    delayed: int = 0
    leased: int = 0
    dead: int = 0


class QueuePause(msgspec.Struct, frozen=True, kw_only=True):
    """A queue's pause as the log last set it. ``version`` is the Queue aggregate's:
    an older record never replaces a newer one (the guard entries have too)."""

    queue: str
    version: int
    paused: bool
    by: str = ""
    reason: str = ""
    since: datetime | None = None


class NamedLimit(msgspec.Struct, frozen=True, kw_only=True):
    """A named limit's values as the log last set them; ``version`` is the Limit
    aggregate's (the guard, as for pauses). None: that part does not limit. A deleted
    limit is kept as a record without values (``deleted``), so an older record of it
    never applies again."""

    name: str
    version: int
    concurrency: int | None = None
    rate: int | None = None
    rate_per_ms: int | None = None
    deleted: bool = False


LIMIT_KINDS = {"c": "concurrency", "r": "rate"}  # the scripts' short kinds
# How long a rebuild holds a concurrency key of its entries full (see LimitCloser).
REBUILD_GRACE_MS = 5_000


class LimitCloser:
    """The limits a rebuild cannot know the use of, and for how long to hold them full.

    A rate window's starts before the rebuild are not among the log's open entries; and
    a lease taken in Redis just before it lost its data is recorded in the log only
    after the rebuild read it, so its slot is missing from the rebuilt queue. Each rate
    key of the loaded entries therefore counts as full for one period, and each
    concurrency key for ``REBUILD_GRACE_MS``: a limit is never exceeded, at the cost of
    a pause after a loss (which is rare).
    """

    def __init__(self) -> None:
        self._periods: dict[str, int] = {}

    def add(self, limits: EntryLimits) -> None:
        if limits.concurrency_key is not None:
            self._periods[f"c:{limits.concurrency_key}"] = REBUILD_GRACE_MS
        if limits.rate_key is not None and limits.rate_per_ms:
            member = f"r:{limits.rate_key}"
            self._periods[member] = max(self._periods.get(member, 0), limits.rate_per_ms)

    def closed(self, now: int) -> dict[str, int]:
        """Each limit to hold full, and until when (score)."""
        return {member: now + period for member, period in self._periods.items()}


def enforced(
    named: NamedLimit | None, kind: str, own: int | None, own_per: int | None
) -> tuple[int | None, int | None]:
    """The value (and, for a rate, the period in ms) a limit of ``kind`` (``c`` or
    ``r``) is held to: the named limit's when it gives one, else the entry's own."""
    if named is not None and kind == "c" and named.concurrency is not None:
        return named.concurrency, None
    if named is not None and kind == "r" and named.rate is not None:
        return named.rate, named.rate_per_ms
    return own, own_per


class Throttle(msgspec.Struct, frozen=True, kw_only=True):
    """A due entry a lease round left waiting for a limit, for the first time."""

    execution_id: UUID
    queue: str
    version: int
    kind: str  # "concurrency" or "rate"
    key: str


class LeaseRound(msgspec.Struct, frozen=True, kw_only=True):
    """What one lease call did: the leases it took, and the entries it held back."""

    leases: list[Lease]
    throttled: list[Throttle] = msgspec.field(default_factory=list)


class LimitUsage(msgspec.Struct, frozen=True, kw_only=True):
    """One limit key of one queue now: runs holding it (concurrency) or starts in the
    current window (rate), and entries waiting for it; ``allowed``: the value enforced
    (None when nothing gives one)."""

    queue: str
    kind: str
    key: str
    in_use: int
    waiting: int
    allowed: int | None


class QueueMeta(msgspec.Struct, frozen=True, kw_only=True):
    """Which log the queue follows, which rebuild it belongs to, and how far it got;
    ``loading``: the rebuild that reset the store has not written its position yet
    (another process's follower waits for it rather than race its load);
    ``load_progress``: a count that such a load advances with every batch it writes and
    every few seconds while it runs, from 1 at its reset (0: a loader that does not
    count), so a follower can tell a live load from one whose loader died."""

    store_id: str
    epoch: str
    position: int
    loading: bool = False
    load_progress: int = 0


class QueueBackend(Protocol):
    """A queue store. Every method is atomic; times are zone-aware datetimes."""

    # ---- projection side ------------------------------------------------------------

    def read_meta(self) -> QueueMeta | None:
        """The meta record, or None when the store is empty (never built, or lost). From
        a ``reset`` for a load on, the new meta (``loading``) at once."""
        ...

    def reset(self, meta: QueueMeta) -> None:
        """Delete every queue key and start over with ``meta`` (the start of a rebuild)."""
        ...

    def apply(
        self,
        changes: Sequence[QueueChange],
        *,
        epoch: str,
        force: bool = False,
        position: int | None = None,
    ) -> None:
        """Apply changes in order, each only if its version is newer than the stored one.

        ``force`` skips the version guard (a repair that writes what the log says).
        ``position``: then record how far the log has been applied, as ``write_position``
        does (a follower's page and its end in one step where the store can).
        Raises QueueLostError, changing nothing, if ``epoch`` is not the stored epoch.
        """
        ...

    def load(self, items: Sequence[QueueItem], *, epoch: str) -> None:
        """Add entries to a store that was just reset: the bulk path of a rebuild.

        Each item's version becomes its stored version. Only for entries not yet in the
        store (no version guard, no tombstones). QueueLostError as for ``apply``.
        """
        ...

    def load_entries(self, batches: "Iterable[Sequence[EncodedEntry]]", *, epoch: str) -> int:
        """``load`` for entries already encoded (as the checkpoint stores them), in
        batches; returns how many."""
        ...

    def apply_pauses(self, pauses: Sequence[QueuePause], *, epoch: str) -> None:
        """Set each queue's pause record, unless the stored one has the same or a newer
        version. QueueLostError as for ``apply``."""
        ...

    def pauses(self) -> dict[str, QueuePause]:
        """Every queue's pause record (paused or resumed) since the last reset."""
        ...

    def apply_limits(self, limits: Sequence[NamedLimit], *, epoch: str) -> None:
        """Set each named limit, unless the stored one has the same or a newer version;
        runs waiting for its key are reconsidered at the next lease. QueueLostError as
        for ``apply``."""
        ...

    def named_limits(self) -> dict[str, NamedLimit]:
        """Every named limit in force (not deleted) since the last reset, by name."""
        ...

    def write_position(self, position: int, *, epoch: str) -> None:
        """Record how far the log has been applied. QueueLostError as for ``apply``."""
        ...

    def stamp_load(self, *, epoch: str) -> bool:
        """Count a sign of life of the load under ``epoch`` in the meta's
        ``load_progress`` (a batch written, or a beat of its loader); False, counting
        nothing, unless the store is loading under that epoch."""
        ...

    def queues(self) -> set[str]:
        """Every queue that holds or held an entry since the last reset."""
        ...

    def items(self, queue: str) -> list[QueueItem]:
        """Every open entry of ``queue``, in no particular order (for verify)."""
        ...

    def prune_tombstones(self, queue: str, *, before: datetime) -> int:
        """Forget tombstones of entries removed before ``before``; returns how many."""
        ...

    # ---- worker side ----------------------------------------------------------------

    def lease(
        self,
        queue: str,
        *,
        lease_ids: Sequence[UUID],
        ttl: timedelta,
        now: datetime,
    ) -> list[Lease]:
        """Lease up to ``len(lease_ids)`` ready entries, highest priority first, FIFO
        within a priority (none while the queue is paused); each gets the next lease
        id and the deadline ``now + ttl``.
        An entry is ready when ``now`` has reached its ``ready_at``; a shared queue
        (Redis) also waits for its own clock to reach it, so that a caller whose clock
        runs ahead cannot lease early."""
        ...

    def lease_round(
        self,
        queue: str,
        *,
        lease_ids: Sequence[UUID],
        ttl: timedelta,
        now: datetime,
        acks: Sequence[Lease] = (),
    ) -> LeaseRound:
        """``lease``, enforcing limits: an entry over a limit of its own is set aside
        (pending, its attempt unspent) until the limit has room, so later rounds do not
        look at it again; the round reports each entry it set aside for the first time.
        Entries of keys with room still lease in priority, then FIFO order. ``acks``
        (of any queue) are dropped first, as ``ack_many`` drops them: a worker sends its
        finished runs with its next round."""
        ...

    def limit_usage(self, queue: str, *, now: datetime) -> list[LimitUsage]:
        """Each limit key of ``queue`` that holds or held back an entry since the last
        reset, with its use now."""
        ...

    def extend(self, queue: str, execution_id: UUID, lease_id: UUID, *, deadline: datetime) -> bool:
        """Move the lease deadline; False if that lease is no longer held."""
        ...

    def ack(self, queue: str, execution_id: UUID, lease_id: UUID) -> bool:
        """Drop a finished lease's entry; False if that lease is no longer held."""
        ...

    def ack_many(self, leases: Iterable[Lease]) -> int:
        """``ack`` for each of ``leases``, in one round trip per queue; returns how many
        were still held."""
        ...

    def release(
        self, queue: str, execution_id: UUID, lease_id: UUID, *, ready_at: datetime
    ) -> bool:
        """Hand a lease back: the entry is pending again at ``ready_at``."""
        ...

    def expired(self, queue: str, *, now: datetime, limit: int) -> list[tuple[UUID, UUID]]:
        """(execution id, lease id) of leases whose deadline is at or before ``now``."""
        ...

    def depths(self, queue: str, *, now: datetime) -> Depths: ...


class WorkSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What a worker needs to run a leased execution; stored in ``QueueItem.spec``."""

    job_id: UUID | None
    handler: str
    payload: dict[str, object]
    timeout: timedelta
    max_attempts: int
    scheduled_for: datetime | None = None


_spec_encoder = msgspec.msgpack.Encoder()
_spec_decoder = msgspec.msgpack.Decoder(WorkSpec)


def encode_spec(spec: WorkSpec) -> bytes:
    return _spec_encoder.encode(spec)


def decode_spec(data: bytes) -> WorkSpec:
    return _spec_decoder.decode(data)


def later_deadline(item: QueueItem, previous: QueueItem | None) -> QueueItem:
    """``item`` as it replaces ``previous``: a lease the store already holds keeps the
    later of its two deadlines. Heartbeats move a deadline on in the store only (they
    are not events), so an event of the same lease carries its first deadline, and
    putting that back would expire a run whose worker is alive (apply.lua does the same).
    """
    if (
        previous is None
        or item.state is not QueueState.LEASED
        or previous.state is not QueueState.LEASED
        or previous.lease_id != item.lease_id
        or previous.at <= item.at
    ):
        return item
    return msgspec.structs.replace(item, at=previous.at)


def check_change(change: QueueChange) -> None:
    """Reject an entry the layout cannot hold, before anything is written."""
    item = change.item
    if item is None:
        return
    if item.execution_id != change.execution_id or item.queue != change.queue:
        raise ValueError(f"change for {change.execution_id} in {change.queue!r} carries {item}")
    if item.priority not in PRIORITIES:
        raise ValueError(f"priority {item.priority} of {item.execution_id} is not in 0..9")
    if item.state is QueueState.LEASED and item.lease_id is None:
        raise ValueError(f"leased entry {item.execution_id} has no lease id")
    if item.at.utcoffset() is None:
        raise ValueError(f"queue times must be zone-aware, got {item.at!r}")
