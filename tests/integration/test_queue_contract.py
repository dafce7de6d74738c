"""The queue backend contract, run against the memory and the Redis backend alike."""

import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from uuid import UUID

import msgspec
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs
from tests.integration.queue_backends import AT, META, REDIS_BACKENDS, TTL, Clock, Q

from jobledger.adapters.memory.queue import MemoryQueue
from jobledger.adapters.redis.client import RedisClient
from jobledger.adapters.redis.keys import Keys
from jobledger.adapters.redis.queue import APPLY_CHUNK, RedisQueue
from jobledger.projections.errors import QueueLostError
from jobledger.projections.queue.backend import (
    Depths,
    Lease,
    QueueBackend,
    QueueChange,
    QueueItem,
    QueueMeta,
    QueuePause,
    QueueState,
)
from jobledger.projections.queue.entries import encode_entry
from jobledger.projections.queue.fold import restored


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=REDIS_BACKENDS)
def queue_client(request: pytest.FixtureRequest) -> RedisClient:
    """An emptied client of one Redis server, or of a Redis Cluster."""
    client: RedisClient = request.getfixturevalue(request.param)
    return client


@pytest.fixture(params=["memory", *REDIS_BACKENDS])
def new_backend(request: pytest.FixtureRequest, clock: Clock) -> Callable[[], QueueBackend]:
    """Makes backends on one empty store (never reset)."""
    if request.param == "memory":
        memory = MemoryQueue(clock=clock)
        return lambda: memory
    client: RedisClient = request.getfixturevalue(request.param)
    return lambda: RedisQueue(client, "jltest", clock=clock)


@pytest.fixture
def backend(new_backend: Callable[[], QueueBackend]) -> QueueBackend:
    queue = new_backend()
    queue.reset(META)
    return queue


def entry(
    execution_id: UUID | None = None,
    *,
    queue: str = Q,
    priority: int = 5,
    version: int = 1,
    state: QueueState = QueueState.PENDING,
    at: datetime = AT,
    attempt: int = 1,
    lease_id: UUID | None = None,
) -> QueueItem:
    if state is QueueState.LEASED and lease_id is None:
        lease_id = uuid.uuid4()
    return QueueItem(
        execution_id=execution_id or uuid.uuid4(),
        queue=queue,
        priority=priority,
        version=version,
        state=state,
        at=at,
        attempt=attempt,
        lease_id=lease_id,
        spec=f"spec-{version}".encode(),
    )


def put(item: QueueItem) -> QueueChange:
    return QueueChange.put(item)


def removal(execution_id: UUID, version: int, queue: str = Q) -> QueueChange:
    return QueueChange(execution_id=execution_id, queue=queue, version=version, item=None)


def add(backend: QueueBackend, *items: QueueItem, force: bool = False) -> None:
    backend.apply([put(item) for item in items], epoch=META.epoch, force=force)


def lease(
    backend: QueueBackend, count: int = 1, *, now: datetime = AT, queue: str = Q
) -> list[Lease]:
    return backend.lease(queue, lease_ids=[uuid.uuid4() for _ in range(count)], ttl=TTL, now=now)


def leased_ids(backend: QueueBackend, count: int = 1, *, now: datetime = AT) -> list[UUID]:
    return [held.execution_id for held in lease(backend, count, now=now)]


def open_items(backend: QueueBackend, queue: str = Q) -> dict[UUID, QueueItem]:
    return {item.execution_id: item for item in backend.items(queue)}


# ---- enqueue and lease ------------------------------------------------------------------


def test_an_applied_item_is_leased_with_its_fields(backend: QueueBackend) -> None:
    """If a pending item is applied, then a lease returns it with its attempt, version,
    spec and the deadline now + ttl, and the entry shows as leased."""
    item = entry(version=3, attempt=2)
    add(backend, item)
    lease_id = uuid.uuid4()
    leases = backend.lease(Q, lease_ids=[lease_id, uuid.uuid4()], ttl=TTL, now=AT)
    assert leases == [
        Lease(
            execution_id=item.execution_id,
            queue=Q,
            lease_id=lease_id,
            deadline=AT + TTL,
            attempt=2,
            version=3,
            spec=b"spec-3",
        )
    ]
    assert backend.items(Q) == [
        QueueItem(
            execution_id=item.execution_id,
            queue=Q,
            priority=5,
            version=3,
            state=QueueState.LEASED,
            at=AT + TTL,
            attempt=2,
            lease_id=lease_id,
            spec=b"spec-3",
        )
    ]


def test_a_higher_priority_leases_first_even_when_younger(backend: QueueBackend) -> None:
    """If a low-priority item is older than a high-priority one, then the high one leases first."""
    low = entry(priority=0, at=AT - timedelta(hours=1))
    high = entry(priority=9, at=AT)
    middle = entry(priority=4, at=AT - timedelta(minutes=1))
    add(backend, low, middle, high)
    assert leased_ids(backend) == [high.execution_id]
    assert leased_ids(backend, 5) == [middle.execution_id, low.execution_id]


def test_a_priority_leases_first_in_first_out(backend: QueueBackend) -> None:
    """If items of one priority have different ready times, then they lease oldest first,
    and equal times lease in execution id order."""
    times = [AT - timedelta(seconds=s) for s in (5, 50, 1, 30)]
    items = [entry(at=at) for at in times]
    tied = sorted(
        [entry(at=AT - timedelta(seconds=10)) for _ in range(3)], key=lambda i: str(i.execution_id)
    )
    add(backend, *items, *reversed(tied))
    expected = sorted(items, key=lambda i: i.at)
    expected = expected[:2] + tied + expected[2:]
    assert leased_ids(backend, 10) == [i.execution_id for i in expected]


def test_a_delayed_item_leases_only_once_due(backend: QueueBackend) -> None:
    """If an item is ready at a later time, then no lease takes it before that time, not
    even a fraction of a millisecond early, and a lease at that time does."""
    due = AT + timedelta(seconds=10, microseconds=500)
    item = entry(at=due)
    add(backend, item)
    assert lease(backend, now=AT) == []
    assert lease(backend, now=due - timedelta(microseconds=1)) == []
    assert leased_ids(backend, now=due + timedelta(milliseconds=1)) == [item.execution_id]


def test_a_lease_takes_at_most_the_count_and_each_entry_once(backend: QueueBackend) -> None:
    """If more items are ready than asked for, then a lease returns the count asked, and
    the next lease returns the others, never one twice."""
    items = [entry() for _ in range(5)]
    add(backend, *items)
    first = leased_ids(backend, 3)
    second = leased_ids(backend, 3)
    assert len(first) == 3
    assert len(second) == 2
    assert set(first) | set(second) == {i.execution_id for i in items}
    assert lease(backend, 3) == []
    assert backend.lease(Q, lease_ids=[], ttl=TTL, now=AT) == []


def test_concurrent_leases_never_share_an_entry(backend: QueueBackend) -> None:
    """If several threads lease at once, then every entry goes to exactly one of them."""
    items = [entry(priority=i % 10) for i in range(60)]
    add(backend, *items)
    taken: list[UUID] = []
    lock = threading.Lock()

    def worker() -> None:
        while got := leased_ids(backend, 4):
            with lock:
                taken.extend(got)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(taken) == sorted(i.execution_id for i in items)


# ---- worker steps -------------------------------------------------------------------------


def test_a_stale_lease_id_changes_nothing(backend: QueueBackend) -> None:
    """If ack, extend or release name a lease that does not hold the entry, then they
    return False and the entry is unchanged."""
    item = entry()
    add(backend, item)
    (held,) = lease(backend)
    before = backend.items(Q)
    stale = uuid.uuid4()
    assert not backend.ack(Q, item.execution_id, stale)
    assert not backend.extend(Q, item.execution_id, stale, deadline=AT + timedelta(hours=1))
    assert not backend.release(Q, item.execution_id, stale, ready_at=AT)
    assert not backend.ack(Q, uuid.uuid4(), held.lease_id)
    assert not backend.ack("elsewhere", item.execution_id, held.lease_id)
    assert backend.items(Q) == before
    assert backend.ack(Q, item.execution_id, held.lease_id)
    assert not backend.ack(Q, item.execution_id, held.lease_id)
    assert backend.items(Q) == []


def test_ack_many_drops_only_the_held_leases_of_every_queue(backend: QueueBackend) -> None:
    """If many leases of two queues are acked at once, among them a stale one, then the
    held ones are dropped, each leaving a tombstone, and the count says how many."""
    items = [entry() for _ in range(3)]
    other = entry(queue="other")
    add(backend, *items, other)
    held = lease(backend, 3)
    (held_other,) = lease(backend, queue="other")
    stale = msgspec.structs.replace(held[0], lease_id=uuid.uuid4())
    assert backend.ack_many([]) == 0
    assert backend.ack_many([stale]) == 0
    assert backend.ack_many([*held[1:], held_other, stale]) == 3
    assert [i.execution_id for i in backend.items(Q)] == [held[0].execution_id]
    assert backend.items("other") == []
    add(backend, other)
    assert backend.items("other") == []


def test_a_lease_round_drops_the_acks_it_carries_first(backend: QueueBackend) -> None:
    """If a lease round carries acks (of its queue and of another, one of them stale),
    then the held ones are dropped as ack_many drops them, and the round leases what is
    pending; without a lease id to offer it still drops them."""
    first, second = entry(at=AT - timedelta(seconds=1)), entry()
    third = entry()
    other = entry(queue="other")
    add(backend, first, second, other)
    held = lease(backend)
    (held_other,) = lease(backend, queue="other")
    stale = msgspec.structs.replace(held_other, lease_id=uuid.uuid4())
    taken = backend.lease_round(
        Q, lease_ids=[uuid.uuid4(), uuid.uuid4()], ttl=TTL, now=AT, acks=[*held, stale]
    )
    assert [t.execution_id for t in taken.leases] == [second.execution_id]
    assert open_items(backend).keys() == {second.execution_id}
    assert open_items(backend, "other").keys() == {other.execution_id}
    add(backend, third)
    empty = backend.lease_round(Q, lease_ids=[], ttl=TTL, now=AT, acks=[held_other])
    assert empty.leases == []
    assert backend.items("other") == []
    assert open_items(backend).keys() == {second.execution_id, third.execution_id}


def test_a_pending_entry_has_no_lease_to_act_on(backend: QueueBackend) -> None:
    """If an entry is pending, then no lease id acks, extends or releases it."""
    item = entry()
    add(backend, item)
    assert not backend.ack(Q, item.execution_id, uuid.uuid4())
    assert not backend.extend(Q, item.execution_id, uuid.uuid4(), deadline=AT)
    assert not backend.release(Q, item.execution_id, uuid.uuid4(), ready_at=AT)


def test_a_released_entry_is_pending_at_the_given_time(backend: QueueBackend) -> None:
    """If a lease is released with a ready time, then the entry is pending at that time
    with the same attempt and no lease, and leases again once due."""
    item = entry(attempt=3)
    add(backend, item)
    (held,) = lease(backend)
    later = AT + timedelta(minutes=1)
    assert backend.release(Q, item.execution_id, held.lease_id, ready_at=later)
    assert backend.items(Q) == [entry(item.execution_id, attempt=3, at=later, version=item.version)]
    assert not backend.ack(Q, item.execution_id, held.lease_id)
    assert lease(backend, now=AT) == []
    (again,) = lease(backend, now=later)
    assert again.attempt == 3
    assert again.lease_id != held.lease_id


def test_expired_lists_only_leases_past_their_deadline(backend: QueueBackend) -> None:
    """If leases have different deadlines, then expired lists those at or before now,
    oldest first, up to the limit, with the lease id that holds each."""
    items = [entry() for _ in range(3)]
    add(backend, *items)
    leases = [
        backend.lease(Q, lease_ids=[uuid.uuid4()], ttl=timedelta(seconds=s), now=AT)[0]
        for s in (10, 20, 30)
    ]
    pairs = [(held.execution_id, held.lease_id) for held in leases]
    assert backend.expired(Q, now=AT + timedelta(seconds=9), limit=10) == []
    assert backend.expired(Q, now=AT + timedelta(seconds=20), limit=10) == pairs[:2]
    assert backend.expired(Q, now=AT + timedelta(hours=1), limit=2) == pairs[:2]
    assert backend.expired(Q, now=AT + timedelta(hours=1), limit=0) == []
    assert backend.expired("elsewhere", now=AT + timedelta(hours=1), limit=10) == []


def test_extend_moves_the_deadline(backend: QueueBackend) -> None:
    """If a lease is extended, then it expires at the new deadline and not before."""
    item = entry()
    add(backend, item)
    (held,) = lease(backend)
    new_deadline = AT + timedelta(minutes=5)
    assert backend.extend(Q, item.execution_id, held.lease_id, deadline=new_deadline)
    assert backend.expired(Q, now=AT + TTL, limit=10) == []
    assert backend.expired(Q, now=new_deadline, limit=10) == [(item.execution_id, held.lease_id)]
    (current,) = backend.items(Q)
    assert (current.state, current.at, current.lease_id) == (
        QueueState.LEASED,
        new_deadline,
        held.lease_id,
    )


def test_a_lease_recorded_in_the_log_is_held(backend: QueueBackend) -> None:
    """If the log applies a leased entry, then its lease id can extend and ack it."""
    lease_id = uuid.uuid4()
    item = entry(state=QueueState.LEASED, lease_id=lease_id, at=AT + TTL)
    add(backend, item)
    assert lease(backend, now=AT + timedelta(days=1)) == []
    assert backend.expired(Q, now=AT + TTL, limit=1) == [(item.execution_id, lease_id)]
    assert backend.extend(Q, item.execution_id, lease_id, deadline=AT + 2 * TTL)
    assert backend.ack(Q, item.execution_id, lease_id)
    assert backend.items(Q) == []


# ---- a live lease keeps its deadline ---------------------------------------------------------


def unchanged(item: QueueItem, version: int) -> QueueChange:
    """The change of an event that leaves ``item`` as it was (a progress report)."""
    moved = msgspec.structs.replace(item, version=version)
    return QueueChange(
        execution_id=item.execution_id,
        queue=item.queue,
        version=version,
        item=moved,
        unchanged=True,
    )


def recorded_lease(backend: QueueBackend) -> tuple[QueueItem, Lease]:
    """A run leased by a worker, with its lease recorded in the log and applied."""
    item = entry()
    add(backend, item)
    (held,) = lease(backend)
    logged = entry(
        item.execution_id, version=2, state=QueueState.LEASED, lease_id=held.lease_id, at=AT + TTL
    )
    add(backend, logged)
    return logged, held


def test_an_unchanged_event_keeps_an_extended_deadline(backend: QueueBackend) -> None:
    """If a heartbeat extends a lease and then a progress report of that lease is
    applied, then the lease expires at the extended deadline, not at its first one."""
    logged, held = recorded_lease(backend)
    later = AT + 3 * TTL
    assert backend.extend(Q, logged.execution_id, held.lease_id, deadline=later)
    backend.apply([unchanged(logged, 3), unchanged(logged, 4)], epoch=META.epoch)
    assert backend.expired(Q, now=AT + 2 * TTL, limit=10) == []
    assert backend.expired(Q, now=later, limit=10) == [(logged.execution_id, held.lease_id)]
    (current,) = backend.items(Q)
    assert (current.at, current.version, current.lease_id) == (later, 4, held.lease_id)


def test_a_put_of_the_same_lease_never_moves_its_deadline_back(backend: QueueBackend) -> None:
    """If an entry of the lease that holds it is put again with an earlier deadline (a
    page that folded several events, or a replay), then the later deadline stays; under
    another lease, the new deadline is taken."""
    logged, held = recorded_lease(backend)
    later = AT + 3 * TTL
    assert backend.extend(Q, logged.execution_id, held.lease_id, deadline=later)
    add(backend, msgspec.structs.replace(logged, version=3))
    assert backend.expired(Q, now=AT + 2 * TTL, limit=10) == []
    (current,) = backend.items(Q)
    assert (current.at, current.version) == (later, 3)
    other = msgspec.structs.replace(logged, version=4, lease_id=uuid.uuid4(), at=AT + TTL)
    add(backend, other)
    assert backend.expired(Q, now=AT + TTL, limit=10) == [(logged.execution_id, other.lease_id)]


def test_a_later_deadline_in_the_log_replaces_an_earlier_one(backend: QueueBackend) -> None:
    """If the log's entry of the holding lease has a later deadline than the store's,
    then the later one is taken (a deadline only moves forward)."""
    logged, held = recorded_lease(backend)
    add(backend, msgspec.structs.replace(logged, version=3, at=AT + 2 * TTL))
    assert backend.expired(Q, now=AT + TTL, limit=10) == []
    assert backend.expired(Q, now=AT + 2 * TTL, limit=10) == [(logged.execution_id, held.lease_id)]


def test_an_unchanged_event_keeps_a_lease_the_log_has_not_seen(backend: QueueBackend) -> None:
    """If a worker leased an entry and a note that leaves it as it was (a throttle) is
    applied before the lease's own event, then the entry stays leased, not offered
    again, and its next lease carries the new version."""
    item = entry()
    add(backend, item)
    (held,) = lease(backend)
    backend.apply([unchanged(item, 2)], epoch=META.epoch)
    assert lease(backend, now=AT + timedelta(seconds=1)) == []
    assert backend.release(Q, item.execution_id, held.lease_id, ready_at=AT)
    (again,) = lease(backend, now=AT + timedelta(seconds=1))
    assert again.version == 2


def test_an_unchanged_event_after_an_ack_keeps_the_entry_gone(backend: QueueBackend) -> None:
    """If a worker acked its lease and a progress report of it is applied afterwards,
    then the entry stays gone and only the version moves on."""
    logged, held = recorded_lease(backend)
    assert backend.ack(Q, logged.execution_id, held.lease_id)
    backend.apply([unchanged(logged, 3)], epoch=META.epoch)
    assert backend.items(Q) == []
    add(backend, msgspec.structs.replace(logged, version=3))  # not newer: ignored
    assert backend.items(Q) == []


def test_an_unchanged_event_over_an_older_store_is_put(backend: QueueBackend) -> None:
    """If the store holds a version older than the one just before an unchanged event
    (a page that folded the lease and its progress into one change), then the event's
    entry is put whole."""
    item = entry()
    add(backend, item)
    leased = entry(
        item.execution_id, version=2, state=QueueState.LEASED, lease_id=uuid.uuid4(), at=AT + TTL
    )
    backend.apply([unchanged(leased, 3)], epoch=META.epoch)
    assert lease(backend, now=AT + timedelta(days=1)) == []
    assert backend.expired(Q, now=AT + TTL, limit=10) == [(item.execution_id, leased.lease_id)]


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    history=st.lists(
        st.one_of(
            st.tuples(st.just("extend"), st.integers(1, 60_000)),
            st.tuples(st.just("progress"), st.integers(1, 3)),
            st.tuples(st.just("replay"), st.just(0)),
        ),
        max_size=25,
    )
)
def test_a_live_leases_deadline_is_the_latest_extension_seen(
    backend: QueueBackend, history: list[tuple[str, int]]
) -> None:
    """If a held lease gets heartbeats, progress reports (in pages of any size) and
    replays of its events, in any order, then its deadline is the latest extension
    seen (its first deadline before any)."""
    backend.reset(META)
    logged, held = recorded_lease(backend)
    applied, version, latest = [put(logged)], 2, logged.at
    for step, value in history:
        if step == "extend":  # a heartbeat: its time's now + ttl, so always later
            latest += timedelta(milliseconds=value)
            assert backend.extend(Q, logged.execution_id, held.lease_id, deadline=latest)
        elif step == "progress":
            page = [unchanged(logged, version + n) for n in range(1, value + 1)]
            version += value
            applied += page
            backend.apply(page, epoch=META.epoch)
        else:
            backend.apply(applied, epoch=META.epoch)
    (current,) = backend.items(Q)
    assert (current.state, current.lease_id, current.at) == (
        QueueState.LEASED,
        held.lease_id,
        latest,
    )
    assert backend.expired(Q, now=latest - timedelta(milliseconds=1), limit=1) == []


# ---- the version guard ----------------------------------------------------------------------


def test_a_dead_entry_is_not_leased_and_a_requeue_revives_it(backend: QueueBackend) -> None:
    """If an entry is dead-lettered, then no lease takes it and depths count it as dead;
    if a newer pending version is applied, then it leases again."""
    dead = entry(state=QueueState.DEAD, version=4, attempt=3, at=AT - timedelta(hours=1))
    add(backend, dead)
    assert lease(backend, now=AT + timedelta(days=1)) == []
    assert backend.depths(Q, now=AT) == Depths(dead=1)
    assert backend.items(Q) == [dead]
    add(backend, entry(dead.execution_id, version=5, attempt=4))
    assert backend.depths(Q, now=AT) == Depths(ready=1)
    assert leased_ids(backend) == [dead.execution_id]


def test_an_older_or_equal_version_is_ignored(backend: QueueBackend) -> None:
    """If a change is not newer than the stored version, then it changes nothing."""
    item = entry(version=5, priority=1)
    add(backend, item)
    add(backend, entry(item.execution_id, version=4, priority=9))
    add(backend, entry(item.execution_id, version=5, priority=9, state=QueueState.DEAD))
    assert backend.items(Q) == [item]


def test_a_removal_leaves_a_tombstone(backend: QueueBackend) -> None:
    """If an entry is removed, then a redelivered older change does not bring it back,
    but a forced one does."""
    item = entry(version=2)
    add(backend, item)
    backend.apply([removal(item.execution_id, 3)], epoch=META.epoch)
    assert backend.items(Q) == []
    assert backend.depths(Q, now=AT) == Depths()
    add(backend, item)
    assert backend.items(Q) == []
    add(backend, item, force=True)
    assert backend.items(Q) == [item]
    assert leased_ids(backend) == [item.execution_id]


def test_an_ack_keeps_the_version_as_a_tombstone(backend: QueueBackend) -> None:
    """If a lease is acked, then replaying the change that enqueued it does not bring it back."""
    item = entry()
    add(backend, item)
    (held,) = lease(backend)
    assert backend.ack(Q, item.execution_id, held.lease_id)
    add(backend, item)
    assert backend.items(Q) == []
    add(backend, entry(item.execution_id, version=2))
    assert [i.version for i in backend.items(Q)] == [2]


def test_a_page_applies_in_order_within_itself(backend: QueueBackend) -> None:
    """If one page holds several versions of an entry, then the last newer one wins."""
    eid = uuid.uuid4()
    changes = [put(entry(eid, version=1)), put(entry(eid, version=3, priority=7))]
    changes += [put(entry(eid, version=2)), removal(eid, 3)]
    backend.apply(changes, epoch=META.epoch)
    assert backend.items(Q) == [entry(eid, version=3, priority=7)]


def test_a_large_page_is_applied_whole(backend: QueueBackend) -> None:
    """If a page holds more changes than one script call takes, then all are applied."""
    items = [entry(priority=i % 10) for i in range(APPLY_CHUNK * 2 + 7)]
    add(backend, *items)
    assert backend.depths(Q, now=AT) == Depths(ready=len(items))


def test_an_invalid_change_is_refused_before_anything_is_written(backend: QueueBackend) -> None:
    """If a page holds an entry the queue cannot hold, then apply raises and writes nothing."""
    good = entry()
    for bad in (
        entry(priority=10),
        msgspec.structs.replace(entry(state=QueueState.LEASED), lease_id=None),
        entry(queue="other"),
    ):
        change = QueueChange(execution_id=bad.execution_id, queue=Q, version=bad.version, item=bad)
        with pytest.raises(ValueError, match=str(bad.execution_id)):
            backend.apply([put(good), change], epoch=META.epoch)
    assert backend.items(Q) == []


# ---- reading ------------------------------------------------------------------------------


def test_depths_count_each_state(backend: QueueBackend) -> None:
    """If entries are ready, delayed, leased and dead, then depths count each."""
    add(
        backend,
        entry(at=AT - timedelta(seconds=1)),
        entry(at=AT, priority=0),
        entry(at=AT + timedelta(milliseconds=1)),
        entry(at=AT + timedelta(hours=1), priority=9),
        entry(state=QueueState.LEASED),
        entry(state=QueueState.DEAD),
        entry(state=QueueState.DEAD, priority=2),
    )
    assert backend.depths(Q, now=AT) == Depths(ready=2, delayed=2, leased=1, dead=2)
    lease(backend)
    assert backend.depths(Q, now=AT) == Depths(ready=1, delayed=2, leased=2, dead=2)
    assert backend.depths("elsewhere", now=AT) == Depths()


def test_items_are_exactly_the_open_entries(backend: QueueBackend) -> None:
    """If entries are applied in every state and one is removed, then items returns the
    open ones with all their fields."""
    pending = entry(priority=2, version=3, attempt=2, at=AT + timedelta(microseconds=7))
    leased = entry(state=QueueState.LEASED, version=6, attempt=3)
    dead = entry(state=QueueState.DEAD, version=9, attempt=4)
    removed = entry()
    add(backend, pending, leased, dead, removed)
    backend.apply([removal(removed.execution_id, 2)], epoch=META.epoch)
    assert open_items(backend) == {i.execution_id: i for i in (pending, leased, dead)}
    assert backend.items("elsewhere") == []


def test_queues_lists_every_queue_since_the_reset(backend: QueueBackend) -> None:
    """If entries are applied to named queues, then queues lists them until a reset."""
    assert backend.queues() == set()
    add(backend, entry(queue="a"), entry(queue="b"))
    removed = entry(queue="c")
    add(backend, removed)
    backend.apply([removal(removed.execution_id, 2, queue="c")], epoch=META.epoch)
    assert backend.queues() == {"a", "b", "c"}
    backend.reset(META)
    assert backend.queues() == set()
    assert backend.items("a") == []


def test_named_queues_are_independent(backend: QueueBackend) -> None:
    """If two queues hold entries, then leasing, acking and counting one leaves the other alone."""
    a = entry(queue="a", priority=1)
    b = entry(queue="b", priority=9)
    add(backend, a, b)
    (held,) = lease(backend, 5, queue="a")
    assert held.execution_id == a.execution_id
    assert not backend.ack("b", a.execution_id, held.lease_id)
    assert backend.depths("a", now=AT) == Depths(leased=1)
    assert backend.depths("b", now=AT) == Depths(ready=1)
    assert backend.items("b") == [b]
    assert [x.execution_id for x in lease(backend, 5, queue="b")] == [b.execution_id]


def test_prune_forgets_only_old_tombstones(backend: QueueBackend, clock: Clock) -> None:
    """If tombstones are pruned before a time, then only entries removed earlier lose
    their guard, and entries still open keep theirs."""
    old, recent, still_open = entry(version=2), entry(version=2), entry(version=2)
    add(backend, old, recent, still_open)
    backend.apply([removal(old.execution_id, 3)], epoch=META.epoch)
    clock.now = AT + timedelta(hours=1)
    backend.apply([removal(recent.execution_id, 3)], epoch=META.epoch)
    cutoff = AT + timedelta(minutes=30)
    assert backend.prune_tombstones(Q, before=cutoff) == 1
    assert backend.prune_tombstones(Q, before=cutoff) == 0
    assert backend.prune_tombstones("elsewhere", before=cutoff) == 0
    add(backend, old, recent, entry(still_open.execution_id, version=1))
    assert open_items(backend) == {old.execution_id: old, still_open.execution_id: still_open}
    assert backend.prune_tombstones(Q, before=AT + timedelta(days=1)) == 1


# ---- meta and loss ------------------------------------------------------------------------


def test_a_store_never_reset_has_no_meta(new_backend: Callable[[], QueueBackend]) -> None:
    """If a store was never reset, then it has no meta and refuses to apply."""
    backend = new_backend()
    assert backend.read_meta() is None
    with pytest.raises(QueueLostError):
        add(backend, entry())
    with pytest.raises(QueueLostError):
        backend.write_position(1, epoch=META.epoch)


def test_write_position_records_the_position(backend: QueueBackend) -> None:
    """If the epoch matches, then write_position moves the position and keeps the rest."""
    assert backend.read_meta() == META
    backend.write_position(42, epoch=META.epoch)
    assert backend.read_meta() == QueueMeta(store_id="s", epoch="e1", position=42)


def test_a_page_applied_with_its_position_records_both(backend: QueueBackend) -> None:
    """If a page is applied with the log position it ends at, then the store holds its
    changes and that position; with another epoch it refuses both."""
    first, second = entry(), entry(queue="other")
    backend.apply([put(first)], epoch=META.epoch, position=7)
    assert open_items(backend).keys() == {first.execution_id}
    meta = backend.read_meta()
    assert meta is not None
    assert (meta.position, meta.loading) == (7, False)
    backend.apply([put(second)], epoch=META.epoch, position=9)  # a queue not seen yet
    assert backend.queues() == {Q, "other"}
    with pytest.raises(QueueLostError):
        backend.apply([put(entry())], epoch="e0", position=11)
    assert len(backend.items(Q)) == 1
    assert backend.read_meta() == msgspec.structs.replace(META, position=9)


def test_a_store_reset_for_a_load_says_so_until_a_position_is_written(
    backend: QueueBackend,
) -> None:
    """If a store is reset as loading, then its meta says so, at position 0, until the
    new epoch writes a position (0 included: an empty log loaded)."""
    backend.reset(QueueMeta(store_id="s", epoch="e2", position=0, loading=True))
    meta = backend.read_meta()
    assert meta is not None
    assert (meta.epoch, meta.position, meta.loading) == ("e2", 0, True)
    backend.write_position(0, epoch="e2")
    assert backend.read_meta() == QueueMeta(store_id="s", epoch="e2", position=0)


def test_a_load_counts_its_batches_in_the_meta(backend: QueueBackend) -> None:
    """If a store reset for a load is loaded batch by batch, then each batch advances
    the meta's load_progress; a load under another epoch, or after the position was
    written, counts nothing."""
    backend.reset(QueueMeta(store_id="s", epoch="e2", position=0, loading=True, load_progress=1))
    backend.load([entry(queue="a")], epoch="e2")
    assert backend.load_entries([[encode_entry(entry(queue="b"))]] * 2, epoch="e2") == 2
    meta = backend.read_meta()
    assert meta is not None
    assert (meta.loading, meta.load_progress) == (True, 4)
    with pytest.raises(QueueLostError):
        backend.load([entry(queue="a")], epoch="e1")
    backend.write_position(3, epoch="e2")
    backend.load([entry(queue="a")], epoch="e2")
    meta = backend.read_meta()
    assert meta is not None
    assert (meta.loading, meta.load_progress, meta.position) == (False, 4, 3)


def test_a_load_counts_beats_only_while_it_loads(backend: QueueBackend) -> None:
    """If a loader counts a beat, then the meta's load_progress moves only while the
    store is loading under the loader's epoch: not under another epoch, and not once
    the position was written."""
    backend.reset(QueueMeta(store_id="s", epoch="e2", position=0, loading=True, load_progress=1))
    assert backend.stamp_load(epoch="e2") is True
    assert backend.stamp_load(epoch="e1") is False
    meta = backend.read_meta()
    assert meta is not None
    assert meta.load_progress == 2  # the reset's 1 and one beat
    backend.write_position(3, epoch="e2")
    assert backend.stamp_load(epoch="e2") is False
    assert backend.read_meta() == QueueMeta(store_id="s", epoch="e2", position=3, load_progress=2)


def test_a_new_epoch_refuses_the_old_one(backend: QueueBackend) -> None:
    """If the store was reset with a new epoch, then apply and write_position with the
    old one raise QueueLostError and change nothing."""
    add(backend, entry(queue="a"))
    new = QueueMeta(store_id="s", epoch="e2", position=7)
    backend.reset(new)
    with pytest.raises(QueueLostError):
        add(backend, entry(queue="a"), entry(queue="b"))
    with pytest.raises(QueueLostError):
        backend.apply([], epoch="e1")
    with pytest.raises(QueueLostError):
        backend.write_position(99, epoch="e1")
    assert backend.read_meta() == new
    assert backend.queues() == set()
    assert backend.items("a") == backend.items("b") == []
    backend.apply([put(entry(queue="a"))], epoch="e2")
    assert len(backend.items("a")) == 1


# ---- pause ------------------------------------------------------------------------------


def pause(backend: QueueBackend, version: int, *, paused: bool = True, queue: str = Q) -> None:
    record = QueuePause(
        queue=queue, version=version, paused=paused, by="ada", reason="outage", since=AT
    )
    backend.apply_pauses([record], epoch=META.epoch)


def test_a_paused_queue_leases_nothing_while_others_do(backend: QueueBackend) -> None:
    """If a queue is paused, then it leases nothing and keeps its entries ready, while
    another queue keeps leasing."""
    held, other = entry(), entry(queue="other")
    add(backend, held, other)
    pause(backend, 2)
    assert lease(backend, 5) == []
    assert backend.depths(Q, now=AT) == Depths(ready=1)
    assert [x.execution_id for x in lease(backend, 5, queue="other")] == [other.execution_id]


def test_a_resumed_queue_leases_again(backend: QueueBackend) -> None:
    """If a paused queue is resumed, then its ready entries lease again."""
    item = entry()
    add(backend, item)
    pause(backend, 2)
    pause(backend, 3, paused=False)
    assert leased_ids(backend) == [item.execution_id]


def test_a_lease_taken_before_the_pause_still_acts(backend: QueueBackend) -> None:
    """If a lease was taken before the queue was paused, then it still extends, releases
    (not leased again while paused) and acks."""
    first, second = entry(), entry(at=AT + timedelta(seconds=1))
    add(backend, first, second)
    held, released = lease(backend, 2, now=AT + timedelta(seconds=1))
    pause(backend, 2)
    later = AT + TTL * 2
    assert backend.extend(Q, held.execution_id, held.lease_id, deadline=later)
    assert backend.release(Q, released.execution_id, released.lease_id, ready_at=AT)
    assert lease(backend, 5) == []
    assert backend.ack(Q, held.execution_id, held.lease_id)
    assert backend.depths(Q, now=AT) == Depths(ready=1)


def test_an_older_pause_record_is_ignored(backend: QueueBackend) -> None:
    """If a pause record arrives after a newer one (a replayed page), then the newer
    record stands."""
    add(backend, entry())
    pause(backend, 3, paused=False)
    pause(backend, 2)
    assert backend.pauses()[Q].paused is False
    assert len(lease(backend)) == 1


def test_pauses_are_listed_and_a_reset_forgets_them(backend: QueueBackend) -> None:
    """If a queue with no entries is paused, then queues and pauses list it, with who,
    why and since when, until a reset."""
    pause(backend, 2, queue="idle")
    assert backend.queues() == {"idle"}
    assert backend.pauses() == {
        "idle": QueuePause(
            queue="idle", version=2, paused=True, by="ada", reason="outage", since=AT
        )
    }
    backend.reset(META)
    assert backend.pauses() == {}
    with pytest.raises(QueueLostError):
        backend.apply_pauses([QueuePause(queue="idle", version=3, paused=False)], epoch="stale")


# ---- Redis only ---------------------------------------------------------------------------


@pytest.fixture
def redis_backend(queue_client: RedisClient, clock: Clock) -> RedisQueue:
    queue = RedisQueue(queue_client, "jltest", clock=clock)
    queue.reset(META)
    return queue


@pytest.mark.redis
def test_a_lease_round_with_acks_loads_scripts_the_server_forgot(
    redis_backend: RedisQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If Redis does not know the scripts of a lease round that carries acks (after a
    SCRIPT FLUSH or a restart: here, names no script has), then the round loads them:
    the acks are dropped and the round leases."""
    first, second = entry(at=AT - timedelta(seconds=1)), entry()
    add(redis_backend, first, second)
    held = lease(redis_backend)
    scripts = redis_backend._scripts
    # Not SCRIPT FLUSH: the server is shared with tests running beside this one.
    monkeypatch.setattr(scripts.ack, "sha", "0" * 40)
    monkeypatch.setattr(scripts.lease, "sha", "1" * 40)
    taken = redis_backend.lease_round(Q, lease_ids=[uuid.uuid4()], ttl=TTL, now=AT, acks=held)
    assert [t.execution_id for t in taken.leases] == [second.execution_id]
    assert [i.execution_id for i in redis_backend.items(Q)] == [second.execution_id]


class _RefusingAck:
    """An ack script the server does not know (NOSCRIPT in the pipeline) and whose run
    again fails, as right after a cluster master failed over."""

    sha = "0" * 40

    def __init__(self, script: object) -> None:
        self.script = script

    def __call__(self, **_call: object) -> object:
        raise redis.exceptions.ResponseError("ack refused")


@pytest.mark.redis
@pytest.mark.parametrize("way", ["error answer", "forgotten, then refused"])
def test_a_failed_ack_keeps_the_rounds_leases(
    redis_backend: RedisQueue,
    queue_client: RedisClient,
    monkeypatch: pytest.MonkeyPatch,
    way: str,
) -> None:
    """If an ack of a lease round fails (its script answers an error, or the server had
    forgotten it and its run again fails), then the round still hands over what it
    leased, the failed ack's entry stays leased for the log's completion to drop, and
    the failure is logged."""
    first, second = entry(at=AT - timedelta(seconds=1)), entry()
    add(redis_backend, first, second)
    held = lease(redis_backend)
    scripts = redis_backend._scripts
    if way == "error answer":
        failing = queue_client.script_load("return redis.error_reply('ack refused')")
        monkeypatch.setattr(scripts.ack, "sha", failing)
    else:
        monkeypatch.setattr(scripts, "ack", _RefusingAck(scripts.ack.script))
    with capture_logs() as logs:
        taken = redis_backend.lease_round(Q, lease_ids=[uuid.uuid4()], ttl=TTL, now=AT, acks=held)
    assert [t.execution_id for t in taken.leases] == [second.execution_id]
    assert {i.execution_id for i in redis_backend.items(Q)} == {
        first.execution_id,
        second.execution_id,
    }
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["queue.acks_failed"]


@pytest.mark.redis
def test_a_page_of_one_queue_is_one_round_trip_on_one_server(
    redis_client: redis.Redis, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If a page of one queue is applied with its position on one server, then it takes
    one round trip (the script makes the store's checks and records the position), and
    a page of two queues still applies; after a FLUSHALL a page is refused and writes
    nothing."""
    backend = RedisQueue(redis_client, "jltest", clock=clock)
    backend.reset(META)
    add(backend, entry())
    pool = redis_client.connection_pool
    taken: list[object] = []
    get_connection = pool.get_connection

    def counted(*args: object, **kwargs: object) -> object:
        taken.append(args)
        return get_connection(*args, **kwargs)

    monkeypatch.setattr(pool, "get_connection", counted)
    backend.apply([put(entry())], epoch=META.epoch, position=5)
    assert len(taken) == 1
    monkeypatch.undo()
    backend.apply([put(entry()), put(entry(queue="other"))], epoch=META.epoch, position=6)
    assert (len(backend.items(Q)), len(backend.items("other"))) == (3, 1)
    meta = backend.read_meta()
    assert meta is not None
    assert meta.position == 6
    redis_client.flushall()
    with pytest.raises(QueueLostError):
        backend.apply([put(entry())], epoch=META.epoch, position=7)
    assert redis_client.dbsize() == 0


@pytest.mark.redis
def test_a_flushed_redis_is_detected(redis_backend: RedisQueue, queue_client: RedisClient) -> None:
    """If Redis loses everything (FLUSHALL), then apply and write_position with the old
    epoch raise QueueLostError and write nothing."""
    add(redis_backend, entry())
    queue_client.flushall()
    with pytest.raises(QueueLostError):
        add(redis_backend, entry())
    with pytest.raises(QueueLostError):
        redis_backend.write_position(5, epoch=META.epoch)
    assert queue_client.dbsize() == 0
    assert redis_backend.read_meta() is None


@pytest.mark.redis
def test_a_queue_that_lost_its_keys_is_detected(
    redis_backend: RedisQueue, queue_client: RedisClient
) -> None:
    """If one queue loses its keys while the global meta survives (a partial loss), then
    apply raises QueueLostError for it, before writing to any queue of the page, and
    the store's meta reads as lost."""
    add(redis_backend, entry(queue="a"), entry(queue="b"))
    queue_client.unlink(*Keys("jltest").queue("b").all())
    with pytest.raises(QueueLostError):
        add(redis_backend, entry(queue="a"), entry(queue="b"))
    assert len(redis_backend.items("a")) == 1
    assert redis_backend.items("b") == []
    assert redis_backend.read_meta() is None


@pytest.mark.redis
def test_a_queue_set_that_lost_its_data_is_detected(
    redis_backend: RedisQueue, queue_client: RedisClient
) -> None:
    """If the set of queues loses its data while the meta and the queues survive (on a
    cluster, each lives on a master of its own), then apply raises QueueLostError and
    the store's meta reads as lost: the queues it no longer names would be forgotten."""
    add(redis_backend, entry(queue="a"))
    queue_client.unlink(Keys("jltest").queues)
    with pytest.raises(QueueLostError):
        add(redis_backend, entry(queue="a"))
    assert redis_backend.read_meta() is None


class _Watched:
    """A Redis client that lets ``after`` look at the store after every command."""

    def __init__(self, client: RedisClient, after: Callable[[], None]) -> None:
        self._client, self._after = client, after

    def __getattr__(self, name: str) -> object:
        command = getattr(self._client, name)

        def watched(*args: object, **kwargs: object) -> object:
            done = command(*args, **kwargs)
            self._after()
            return done

        return watched


@pytest.mark.redis
def test_a_reset_under_way_reads_as_the_new_epoch_loading(
    redis_backend: RedisQueue,
    queue_client: RedisClient,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If a store holding queues is reset for a load, then another process reading the
    meta after any command of the reset sees the new epoch loading, never a store that
    lost its data (which it would rebuild as well), and writers on the old epoch fail."""
    add(redis_backend, entry(queue="a"), entry(queue="b"))
    other = RedisQueue(queue_client, "jltest", clock=clock)
    seen: list[QueueMeta | None] = []
    watched = _Watched(queue_client, lambda: seen.append(other.read_meta()))
    monkeypatch.setattr(redis_backend, "_client", watched)
    new = QueueMeta(store_id=META.store_id, epoch="e2", position=0, loading=True)
    redis_backend.reset(new)
    assert len(seen) >= 4
    assert all(meta == new for meta in seen)
    with pytest.raises(QueueLostError):
        add(other, entry(queue="a"))
    assert other.queues() == set()


@pytest.mark.redis
def test_prefixes_isolate_stores(queue_client: RedisClient, clock: Clock) -> None:
    """If two backends use different prefixes, even nested ones, then a reset of one
    leaves the other's entries and meta alone."""
    outer = RedisQueue(queue_client, "jltest", clock=clock)
    inner = RedisQueue(queue_client, "jltest:tenant", clock=clock)
    for backend in (outer, inner):
        backend.reset(META)
        add(backend, entry())
    outer.reset(QueueMeta(store_id="s", epoch="e2", position=0))
    assert outer.items(Q) == []
    assert len(inner.items(Q)) == 1
    assert inner.read_meta() == META


def as_text(key: bytes | str) -> str:
    return key.decode() if isinstance(key, bytes) else key


@pytest.mark.redis
def test_every_key_of_a_queue_shares_one_hash_tag(
    redis_backend: RedisQueue, queue_client: RedisClient
) -> None:
    """If a queue is used, then all its keys carry the queue's hash tag (one cluster slot)."""
    add(redis_backend, entry(queue="a"), entry(queue="a", state=QueueState.DEAD))
    lease(redis_backend, queue="a")
    queue_keys = [as_text(k) for k in queue_client.scan_iter(match="jltest:{q:*")]
    assert queue_keys
    assert all(k.startswith("jltest:{q:a}:") for k in queue_keys)
    pause(redis_backend, 2, queue="a")
    queue_keys = [as_text(k) for k in queue_client.scan_iter(match="jltest:{q:*")]
    assert "jltest:{q:a}:paused" in queue_keys
    assert all(k.startswith("jltest:{q:a}:") for k in queue_keys)
    assert {as_text(k) for k in queue_client.scan_iter(match="*")} - set(queue_keys) == {
        "jltest:meta",
        "jltest:queues",
    }


@pytest.mark.redis
def test_a_caller_whose_clock_runs_ahead_does_not_lease_early(redis_backend: RedisQueue) -> None:
    """If a worker's clock runs ahead of the Redis server's, then an entry its clock
    says is due is not leased until the server's clock reaches the entry's ready time
    too: the shared queue waits for both clocks."""
    soon = datetime.now(UTC) + timedelta(seconds=0.5)
    add(redis_backend, entry(at=soon))
    ahead = datetime.now(UTC) + timedelta(seconds=10)
    assert lease(redis_backend, now=ahead) == []
    time.sleep(max((soon - datetime.now(UTC)).total_seconds(), 0) + 0.05)
    assert len(lease(redis_backend, now=ahead)) == 1


@pytest.mark.redis
def test_a_client_decoding_responses_is_refused(redis_server: str) -> None:
    """If the client decodes responses to text, then RedisQueue refuses it (items are bytes)."""
    client = redis.Redis.from_url(redis_server, decode_responses=True)
    try:
        with pytest.raises(ValueError, match="decode_responses"):
            RedisQueue(client)
    finally:
        client.close()


# ---- property: replays and reorderings converge ----------------------------------------------

EXECUTIONS = [UUID(int=n) for n in range(1, 6)]
LEASE_IDS = [UUID(int=n) for n in range(100, 103)]


def queue_of(execution_id: UUID) -> str:
    return "even" if execution_id.int % 2 == 0 else "odd"


@st.composite
def changes_of(draw: st.DrawFn, execution_id: UUID) -> list[QueueChange]:
    """Several versions of one execution; each version has exactly one change."""
    versions = draw(st.lists(st.integers(1, 9), min_size=1, max_size=4, unique=True))
    changes = []
    for version in versions:
        state = draw(st.sampled_from([*QueueState, None]))
        if state is None:
            changes.append(removal(execution_id, version, queue_of(execution_id)))
            continue
        at = AT + timedelta(milliseconds=draw(st.integers(-5000, 5000)))
        lease_id = None
        if state is QueueState.LEASED:
            # As in a log: every event of one lease carries that lease's deadline.
            lease_id = draw(st.sampled_from(LEASE_IDS))
            at = AT + timedelta(seconds=lease_id.int % 100)
        item = entry(
            execution_id,
            queue=queue_of(execution_id),
            priority=draw(st.integers(0, 9)),
            version=version,
            state=state,
            at=at,
            attempt=draw(st.integers(1, 3)),
            lease_id=lease_id,
        )
        changes.append(put(item))
    return changes


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[list[list[QueueChange]], dict[UUID, QueueChange]]:
    """Pages that deliver every change at least once, with duplicates, in any order; and
    the newest change of each execution."""
    executions = draw(st.lists(st.sampled_from(EXECUTIONS), min_size=1, unique=True))
    changes = [c for eid in executions for c in draw(changes_of(eid))]
    repeats = draw(st.lists(st.sampled_from(changes), max_size=6))
    ordered = draw(st.permutations(changes + repeats))
    cuts = sorted(draw(st.lists(st.integers(0, len(ordered)), max_size=4)))
    pages = [ordered[a:b] for a, b in zip([0, *cuts], [*cuts, len(ordered)], strict=True)]
    newest: dict[UUID, QueueChange] = {}
    for change in changes:
        if (
            change.execution_id not in newest
            or change.version > newest[change.execution_id].version
        ):
            newest[change.execution_id] = change
    return pages, newest


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(delivery=deliveries())
def test_any_delivery_ends_with_the_newest_versions(
    backend: QueueBackend, delivery: tuple[list[list[QueueChange]], dict[UUID, QueueChange]]
) -> None:
    """If changes arrive in any order, split into any pages and with duplicates, then the
    queue holds exactly the newest version of each execution (none if that removes it)."""
    pages, newest = delivery
    backend.reset(META)
    for page in pages:
        backend.apply(page, epoch=META.epoch)
    expected = {c.execution_id: c.item for c in newest.values() if c.item is not None}
    actual = {i.execution_id: i for q in ("even", "odd") for i in backend.items(q)}
    assert actual == expected
    ready = sum(backend.depths(q, now=AT + timedelta(hours=1)).ready for q in ("even", "odd"))
    pending = [i for i in expected.values() if i.state is QueueState.PENDING]
    assert ready == len(pending)


# ---- property: both backends answer alike ---------------------------------------------------


class Step(msgspec.Struct, frozen=True):
    kind: str
    execution_id: UUID
    at: datetime
    pick: int  # which held lease a worker step names; 0 names a stale one
    changes: list[QueueChange]


@st.composite
def steps(draw: st.DrawFn) -> Step:
    execution_id = draw(st.sampled_from(EXECUTIONS))
    kinds = ["apply", "lease", "extend", "ack", "release", "expired", "pause"]
    kind = draw(st.sampled_from(kinds))
    return Step(
        kind=kind,
        execution_id=execution_id,
        # Sub-millisecond offsets check that both backends round times the same way.
        at=AT + timedelta(microseconds=draw(st.integers(-3_000_000, 6_000_000))),
        pick=draw(st.integers(0, 20)),
        changes=draw(changes_of(execution_id)) if kind == "apply" else [],
    )


class Worker:
    """Drives both backends with the same steps, naming leases they handed out."""

    def __init__(self) -> None:
        self.held: list[tuple[UUID, UUID]] = []

    def target(self, step: Step) -> tuple[str, UUID, UUID]:
        if step.pick == 0 or not self.held:
            execution_id, lease_id = step.execution_id, LEASE_IDS[0]
        else:
            execution_id, lease_id = self.held[step.pick % len(self.held)]
        return queue_of(execution_id), execution_id, lease_id

    def run(self, backend: QueueBackend, step: Step, lease_ids: list[UUID]) -> object:
        queue, execution_id, lease_id = self.target(step)
        match step.kind:
            case "apply" | "pause":
                return self.project(backend, step)
            case "lease":
                queue = queue_of(step.execution_id)
                return backend.lease(queue, lease_ids=lease_ids, ttl=TTL, now=step.at)
            case "extend":
                return backend.extend(queue, execution_id, lease_id, deadline=step.at + TTL)
            case "ack":
                return backend.ack(queue, execution_id, lease_id)
            case "release":
                return backend.release(queue, execution_id, lease_id, ready_at=step.at)
            case _:
                return backend.expired(queue, now=step.at, limit=3)

    @staticmethod
    def project(backend: QueueBackend, step: Step) -> object:
        """What the projection writes: the step's changes, or a pause (even pick) or a
        resume (odd pick) of the step's queue at version ``pick``."""
        queue = queue_of(step.execution_id)
        if step.kind == "apply":
            backend.apply(step.changes, epoch=META.epoch)
            return backend.depths(queue, now=step.at)
        record = QueuePause(queue=queue, version=step.pick, paused=step.pick % 2 == 0)
        backend.apply_pauses([record], epoch=META.epoch)
        return backend.pauses()

    def saw(self, step: Step, answer: object) -> None:
        if isinstance(answer, list):
            self.held += [(a.execution_id, a.lease_id) for a in answer if isinstance(a, Lease)]
        for change in step.changes:
            if change.item is not None and change.item.lease_id is not None:
                self.held.append((change.execution_id, change.item.lease_id))


@pytest.mark.redis
@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    priorities=st.lists(st.integers(0, 9), min_size=len(EXECUTIONS), max_size=len(EXECUTIONS)),
    script=st.lists(steps(), min_size=5, max_size=30),
)
def test_memory_and_redis_answer_alike(
    queue_client: RedisClient, clock: Clock, priorities: list[int], script: list[Step]
) -> None:
    """If both backends get the same applies, pauses and worker steps, then every step
    returns the same answer and both end with the same entries."""
    memory = MemoryQueue(clock=clock)
    remote = RedisQueue(queue_client, "jldiff", clock=clock)
    # Every execution starts pending, so worker steps have entries to act on.
    start = [
        entry(eid, queue=queue_of(eid), priority=p, at=AT + timedelta(milliseconds=eid.int))
        for eid, p in zip(EXECUTIONS, priorities, strict=True)
    ]
    for backend in (memory, remote):
        backend.reset(META)
        add(backend, *start)
    worker = Worker()
    for step in script:
        lease_ids = [uuid.uuid4() for _ in range(3)]
        answer = worker.run(memory, step, lease_ids)
        assert worker.run(remote, step, lease_ids) == answer
        worker.saw(step, answer)
    for queue in ("even", "odd"):
        assert open_items(memory, queue) == open_items(remote, queue)


def test_a_bulk_load_equals_applying_the_same_items(backend: QueueBackend) -> None:
    """If items are bulk-loaded into a reset store, then the queue is the same as after
    applying them one by one: same entries, same order of leasing, same versions."""
    items = [
        entry(priority=p % 10, at=AT - timedelta(seconds=p), version=p % 3 + 1) for p in range(30)
    ]
    items += [
        entry(queue="other", state=QueueState.LEASED),
        entry(state=QueueState.DEAD),
        entry(at=AT + timedelta(hours=1)),
    ]

    def observe() -> tuple[object, ...]:
        seen = tuple((open_items(backend, q), backend.depths(q, now=AT)) for q in (Q, "other"))
        return (*seen, backend.queues(), [x.execution_id for x in lease(backend, 40)])

    backend.load(items, epoch=META.epoch)
    loaded = observe()
    backend.reset(META)
    add(backend, *items)
    assert observe() == loaded
    backend.reset(META)
    backend.load(items, epoch=META.epoch)
    older = msgspec.structs.replace(items[0], version=items[0].version - 1, priority=9)
    add(backend, older)  # the loaded version guards like an applied one
    assert open_items(backend)[older.execution_id] == items[0]


def test_a_bulk_load_with_a_stale_epoch_is_refused(backend: QueueBackend) -> None:
    """If the store was reset under another epoch, then a load raises QueueLostError."""
    with pytest.raises(QueueLostError):
        backend.load([entry()], epoch="not-the-epoch")
    assert backend.items(Q) == []


def test_a_restored_lease_outlives_the_rebuild_by_one_ttl(backend: QueueBackend) -> None:
    """If a rebuild long after a lease was granted restores it, then the lease expires
    no sooner than one of its ttls after the rebuild (not at its first deadline), and
    the worker that holds it extends it with the same lease id."""
    lease_id = uuid.uuid4()
    granted = entry(state=QueueState.LEASED, lease_id=lease_id, at=AT + TTL)
    granted = msgspec.structs.replace(granted, leased_at=AT)
    rebuilt_at = AT + timedelta(hours=2)
    backend.load([restored(granted, rebuilt_at)], epoch=META.epoch)
    pair = (granted.execution_id, lease_id)
    assert backend.expired(Q, now=rebuilt_at + TTL - timedelta(seconds=1), limit=10) == []
    assert backend.expired(Q, now=rebuilt_at + TTL, limit=10) == [pair]
    assert backend.extend(Q, granted.execution_id, lease_id, deadline=rebuilt_at + 2 * TTL)
    assert backend.expired(Q, now=rebuilt_at + TTL, limit=10) == []
    assert backend.expired(Q, now=rebuilt_at + 2 * TTL, limit=10) == [pair]


def test_a_restore_never_shortens_a_lease_nor_moves_the_rest(backend: QueueBackend) -> None:
    """If a rebuild's clock is behind a lease's grant (clock skew), or an entry is not
    leased, then the restore loads the entry as the log left it."""
    fresh = msgspec.structs.replace(entry(state=QueueState.LEASED, at=AT + TTL), leased_at=AT)
    pending = entry(at=AT - timedelta(hours=1))
    skewed = AT - timedelta(seconds=5)
    backend.load([restored(item, skewed) for item in (fresh, pending)], epoch=META.epoch)
    assert open_items(backend) == {fresh.execution_id: fresh, pending.execution_id: pending}
