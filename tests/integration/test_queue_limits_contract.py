"""Concurrency and rate limits in the queue: one contract, run on the memory and the
Redis backend alike."""

import uuid
from datetime import datetime, timedelta
from uuid import UUID

import msgspec
import pytest
from tests.integration.queue_backends import AT, META, REDIS_BACKENDS, TTL, Clock, Q

from jobledger.adapters.memory.queue import MemoryQueue
from jobledger.adapters.redis.queue import RedisQueue
from jobledger.projections.queue.backend import (
    REBUILD_GRACE_MS,
    Depths,
    EntryLimits,
    LeaseRound,
    LimitUsage,
    NamedLimit,
    QueueBackend,
    QueueChange,
    QueueItem,
    QueueState,
)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["memory", *REDIS_BACKENDS])
def backend(request: pytest.FixtureRequest, clock: Clock) -> QueueBackend:
    queue: QueueBackend
    if request.param == "memory":
        queue = MemoryQueue(clock=clock)
    else:
        queue = RedisQueue(request.getfixturevalue(request.param), "jltest", clock=clock)
    queue.reset(META)
    return queue


def concurrency(key: str, most: int | None) -> EntryLimits:
    return EntryLimits(concurrency_key=key, concurrency_max=most)


def rate(key: str, most: int | None, per: timedelta | None) -> EntryLimits:
    per_ms = None if per is None else int(per.total_seconds() * 1000)
    return EntryLimits(rate_key=key, rate_limit=most, rate_per_ms=per_ms)


def entry(
    limits: EntryLimits | None,
    *,
    priority: int = 5,
    at: datetime = AT,
    version: int = 1,
    state: QueueState = QueueState.PENDING,
    execution_id: UUID | None = None,
) -> QueueItem:
    return QueueItem(
        execution_id=execution_id or uuid.uuid4(),
        queue=Q,
        priority=priority,
        version=version,
        state=state,
        at=at,
        attempt=1,
        lease_id=uuid.uuid4() if state is QueueState.LEASED else None,
        spec=b"spec",
        limits=limits,
    )


def add(backend: QueueBackend, *items: QueueItem) -> None:
    backend.apply([QueueChange.put(item) for item in items], epoch=META.epoch)


def lease(backend: QueueBackend, count: int = 10, *, now: datetime = AT) -> LeaseRound:
    lease_ids = [uuid.uuid4() for _ in range(count)]
    return backend.lease_round(Q, lease_ids=lease_ids, ttl=TTL, now=now)


def ids(round_: LeaseRound) -> list[UUID]:
    return [held.execution_id for held in round_.leases]


def test_an_ack_carried_by_a_round_frees_its_slot_for_that_round(backend: QueueBackend) -> None:
    """If a lease round carries the ack of the run holding a key's only slot, then the
    slot is free before the round leases: the run waiting for the key leases in it."""
    first = entry(concurrency("customer:a", 1), at=AT - timedelta(seconds=1))
    waiting = entry(concurrency("customer:a", 1), at=AT)
    add(backend, first, waiting)
    held = lease(backend)
    assert ids(held) == [first.execution_id]
    assert ids(lease(backend)) == []
    lease_ids = [uuid.uuid4()]
    taken = backend.lease_round(Q, lease_ids=lease_ids, ttl=TTL, now=AT, acks=held.leases)
    assert ids(taken) == [waiting.execution_id]


def test_a_concurrency_key_leases_up_to_its_max_and_others_flow(backend: QueueBackend) -> None:
    """If four entries share a key with max 2 and another key has one, then a round
    leases the first two of the key and the other key's, and reports the two held back
    once; the next round leases nothing and reports nothing."""
    a = [entry(concurrency("customer:a", 2), at=AT - timedelta(seconds=10 - n)) for n in range(4)]
    b = entry(concurrency("customer:b", 2), at=AT)
    add(backend, *a, b)
    first = lease(backend)
    assert ids(first) == [a[0].execution_id, a[1].execution_id, b.execution_id]
    assert [(t.execution_id, t.kind, t.key) for t in first.throttled] == [
        (a[2].execution_id, "concurrency", "customer:a"),
        (a[3].execution_id, "concurrency", "customer:a"),
    ]
    assert {t.version for t in first.throttled} == {1}
    again = lease(backend)
    assert again.leases == []
    assert again.throttled == []


def test_a_waiting_entry_stays_pending_with_its_attempt(backend: QueueBackend) -> None:
    """If an entry waits for a limit, then the queue still shows it pending, at its
    ready time and attempt: waiting spends nothing."""
    held = entry(concurrency("k", 1))
    waiting = entry(concurrency("k", 1), at=AT + timedelta(milliseconds=1))
    add(backend, held, waiting)
    lease(backend, now=AT + timedelta(seconds=1))
    shown = {item.execution_id: item for item in backend.items(Q)}[waiting.execution_id]
    assert shown == waiting


def test_waiting_entries_count_as_ready_in_the_depths(backend: QueueBackend) -> None:
    """If 3 entries of a key with max 1 are due and one leased, then the depths show 2
    ready and 1 leased: waiting for a limit is being ready, not gone."""
    add(backend, *(entry(concurrency("k", 1), at=AT - timedelta(seconds=n)) for n in range(3)))
    lease(backend)
    assert backend.depths(Q, now=AT) == Depths(ready=2, delayed=0, leased=1, dead=0)


def test_a_freed_slot_lets_the_next_waiting_entry_lease(backend: QueueBackend) -> None:
    """If a leased entry of a full key is acked, then the next round leases the waiting
    entry that comes first by priority, then ready time."""
    first = entry(concurrency("k", 1), priority=5, at=AT - timedelta(seconds=9))
    late_high = entry(concurrency("k", 1), priority=7, at=AT)
    early_low = entry(concurrency("k", 1), priority=5, at=AT - timedelta(seconds=5))
    add(backend, first)
    (held,) = lease(backend).leases
    add(backend, early_low, late_high)
    assert ids(lease(backend)) == []
    assert backend.ack(Q, held.execution_id, held.lease_id)
    second = lease(backend)
    assert ids(second) == [late_high.execution_id]
    backend.release(Q, late_high.execution_id, second.leases[0].lease_id, ready_at=AT)
    # The released entry competes again: it is first by priority.
    assert ids(lease(backend)) == [late_high.execution_id]


def test_removing_a_leased_entry_frees_its_slot_and_a_waiting_one_goes(
    backend: QueueBackend,
) -> None:
    """If the log removes a leased entry (its run ended) and a waiting one (cancelled),
    then the slot is free and the cancelled entry never leases."""
    held, cancelled, kept = (
        entry(concurrency("k", 1), at=AT - timedelta(milliseconds=10 - n)) for n in range(3)
    )
    add(backend, held)
    lease(backend)
    add(backend, cancelled, kept)
    assert ids(lease(backend)) == []
    removals = [
        QueueChange(execution_id=held.execution_id, queue=Q, version=3, item=None),
        QueueChange(execution_id=cancelled.execution_id, queue=Q, version=2, item=None),
    ]
    backend.apply(removals, epoch=META.epoch)
    assert ids(lease(backend)) == [kept.execution_id]
    assert ids(lease(backend)) == []


def test_a_waiting_entry_the_log_changes_waits_again_without_a_second_report(
    backend: QueueBackend,
) -> None:
    """If the log moves a waiting entry's version (its throttle was recorded), then it
    waits again and no round reports it a second time."""
    add(backend, entry(concurrency("k", 1)))
    lease(backend)
    waiting = entry(concurrency("k", 1), at=AT - timedelta(milliseconds=5))
    add(backend, waiting)
    assert len(lease(backend).throttled) == 1
    add(backend, msgspec.structs.replace(waiting, version=2))
    again = lease(backend)
    assert (again.leases, again.throttled) == ([], [])


def test_a_rate_key_starts_at_most_its_limit_per_window(backend: QueueBackend) -> None:
    """If a rate key allows 2 starts per 10 s, then 2 lease at once, none until 10 s
    after the first start have passed, then the next 2."""
    items = [
        entry(rate("stripe", 2, timedelta(seconds=10)), at=AT - timedelta(seconds=5 - n))
        for n in range(5)
    ]
    add(backend, *items)
    first = lease(backend)
    assert ids(first) == [items[0].execution_id, items[1].execution_id]
    assert [t.kind for t in first.throttled] == ["rate"] * 3
    assert ids(lease(backend, now=AT + timedelta(seconds=5))) == []
    assert ids(lease(backend, now=AT + timedelta(seconds=10))) == []
    later = AT + timedelta(seconds=10, milliseconds=1)
    assert ids(lease(backend, now=later)) == [items[2].execution_id, items[3].execution_id]
    assert lease(backend, now=later).throttled == []


def test_entries_left_waiting_by_a_partial_window_are_looked_at_again(
    backend: QueueBackend,
) -> None:
    """If a rate window has room for fewer entries than wait, then those left waiting
    lease once the next start ages out, without anything else happening."""
    per = timedelta(seconds=10)
    items = [entry(rate("r", 2, per), at=AT - timedelta(seconds=5 - n)) for n in range(5)]
    add(backend, *items)
    assert ids(lease(backend, 1)) == [items[0].execution_id]
    assert ids(lease(backend, now=AT + timedelta(seconds=1))) == [items[1].execution_id]
    assert ids(lease(backend, now=AT + per + timedelta(milliseconds=1))) == [items[2].execution_id]
    later = AT + per + timedelta(seconds=1, milliseconds=2)
    assert ids(lease(backend, now=later)) == [items[3].execution_id]


def test_a_rate_window_holds_for_callers_whose_clocks_differ(backend: QueueBackend) -> None:
    """If a caller whose clock is ahead leases just past the window, then a caller whose
    clock is behind cannot start one more inside the window it still sees."""
    per = timedelta(seconds=10)
    items = [entry(rate("r", 2, per), at=AT - timedelta(seconds=5 - n)) for n in range(3)]
    add(backend, *items)
    assert len(lease(backend).leases) == 2
    # Ahead: the first two starts are out of its window, so the one left starts.
    assert len(lease(backend, now=AT + per + timedelta(milliseconds=1)).leases) == 1
    add(backend, entry(rate("r", 2, per), at=AT))
    # Behind: its window [now - 10 s, now] holds the first two starts already.
    assert lease(backend, now=AT + per - timedelta(milliseconds=1)).leases == []


def test_a_named_limit_overrides_the_runs_own_values(backend: QueueBackend) -> None:
    """If a named limit gives a key max 3, then entries that carry max 1 (or no value)
    for that key lease 3 at once; a change of the named limit applies to waiting
    entries."""
    items = [
        entry(concurrency("stripe", 1 if n % 2 else None), at=AT - timedelta(milliseconds=10 - n))
        for n in range(5)
    ]
    add(backend, *items)
    backend.apply_limits([NamedLimit(name="stripe", version=1, concurrency=3)], epoch=META.epoch)
    assert backend.named_limits()["stripe"].concurrency == 3
    assert len(lease(backend).leases) == 3
    backend.apply_limits([NamedLimit(name="stripe", version=2, concurrency=4)], epoch=META.epoch)
    # An older record does not replace a newer one.
    backend.apply_limits([NamedLimit(name="stripe", version=1, concurrency=9)], epoch=META.epoch)
    assert ids(lease(backend, now=AT + timedelta(seconds=2))) == [items[3].execution_id]


def test_a_deleted_named_limit_stops_applying_and_an_older_record_stays_out(
    backend: QueueBackend,
) -> None:
    """If a named limit of max 1 is deleted, then entries naming its key without a
    value all lease, it is gone from the named limits, and a replayed older record of
    it does not apply again."""
    items = [entry(concurrency("smtp", None), at=AT - timedelta(milliseconds=n)) for n in range(4)]
    add(backend, *items)
    first = NamedLimit(name="smtp", version=1, concurrency=1)
    backend.apply_limits([first], epoch=META.epoch)
    assert len(lease(backend).leases) == 1
    gone = NamedLimit(name="smtp", version=2, deleted=True)
    backend.apply_limits([gone], epoch=META.epoch)
    backend.apply_limits([first], epoch=META.epoch)
    assert "smtp" not in backend.named_limits()
    assert len(lease(backend, now=AT + timedelta(seconds=2)).leases) == 3


def test_a_key_without_a_value_does_not_limit(backend: QueueBackend) -> None:
    """If entries name a key but no value and no named limit exists, then all lease."""
    items = [entry(concurrency("free", None)) for _ in range(4)]
    add(backend, *items)
    assert len(lease(backend).leases) == 4


def test_usage_counts_in_use_and_waiting(backend: QueueBackend) -> None:
    """If a key has 2 leased of max 2 and 3 waiting, then the usage says so."""
    add(
        backend,
        *(entry(concurrency("k", 2), at=AT - timedelta(milliseconds=10 - n)) for n in range(5)),
    )
    add(backend, *(entry(rate("r", 1, timedelta(seconds=60))) for _ in range(2)))
    lease(backend)
    assert backend.limit_usage(Q, now=AT) == [
        LimitUsage(queue=Q, kind="concurrency", key="k", in_use=2, waiting=3, allowed=2),
        LimitUsage(queue=Q, kind="rate", key="r", in_use=1, waiting=1, allowed=1),
    ]


def test_a_reload_restores_held_slots_and_holds_its_limits_full_a_while(
    backend: QueueBackend, clock: Clock
) -> None:
    """If a rebuild loads 2 leased entries of a key with max 2, a pending one, and one
    of a rate key, then the concurrency key leases nothing for the grace, even with a
    slot freed, and after it only while a slot is free; the rate key waits one period
    from the rebuild (its earlier starts are unknown)."""
    leased = [entry(concurrency("k", 2), state=QueueState.LEASED, at=AT + TTL) for _ in range(2)]
    pending = entry(concurrency("k", 2))
    limited = entry(rate("r", 5, timedelta(seconds=10)))
    backend.reset(META)
    backend.load([*leased, pending, limited], epoch=META.epoch)
    removal = QueueChange(execution_id=leased[0].execution_id, queue=Q, version=2, item=None)
    backend.apply([removal], epoch=META.epoch)
    grace = timedelta(milliseconds=REBUILD_GRACE_MS)
    assert ids(lease(backend, now=AT + grace)) == []
    after_grace = AT + grace + timedelta(milliseconds=1)
    assert ids(lease(backend, now=after_grace)) == [pending.execution_id]
    after_period = clock.now + timedelta(seconds=10, milliseconds=1)
    assert ids(lease(backend, now=after_period)) == [limited.execution_id]


def test_a_paused_queue_leases_nothing_and_sets_nothing_aside(backend: QueueBackend) -> None:
    """If a queue is paused, then a round neither leases nor reports a limited entry."""
    from jobledger.projections.queue.backend import QueuePause  # noqa: PLC0415 (only here)

    add(backend, entry(concurrency("k", 1)), entry(concurrency("k", 1)))
    backend.apply_pauses([QueuePause(queue=Q, version=2, paused=True)], epoch=META.epoch)
    assert lease(backend) == LeaseRound(leases=[])
