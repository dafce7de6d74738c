"""The queue fold: incremental projection equals a rebuild, whatever the delivery."""

import contextlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.adapters.memory.queue import MemoryQueue
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.errors import DomainError
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.limits import Limit, LimitValues
from jobledger.domain.policies import RetryPolicy
from jobledger.domain.progress import Progress
from jobledger.domain.queue import Queue
from jobledger.persistence.codec import MsgspecMapper
from jobledger.projections.queue.backend import (
    NamedLimit,
    QueueItem,
    QueueMeta,
    QueuePause,
    QueueState,
    decode_spec,
)
from jobledger.projections.queue.fold import (
    QUEUE_VIEWS,
    PreviousLoader,
    QueueFold,
    next_item,
    next_pause,
)

if TYPE_CHECKING:
    from collections.abc import Callable

T0 = datetime(2026, 10, 25, 0, 0, tzinfo=UTC)
COMMANDS = [
    "lease",
    "complete",
    "fail",
    "expire",
    "defer",
    "cancel",
    "requeue",
    "stale",
    "progress",
    "throttle",
    "snooze",
    "fail_permanently",
    "drop",
    "expire_run",
    "discard",
]


def history(data: st.DataObject) -> list[Any]:
    """The events of one execution driven by random commands (refused ones emit nothing)."""
    execution = Execution.enqueue(
        spec=ExecutionSpec(
            handler="test.echo",
            queue=data.draw(st.sampled_from(["default", "reports"])),
            priority=data.draw(st.integers(0, 9)),
            retry=RetryPolicy(max_retries=data.draw(st.integers(0, 2)), jitter=False),
            expires_at=data.draw(st.sampled_from([None, T0 + timedelta(seconds=200)])),
        ),
        ready_at=T0 + timedelta(seconds=data.draw(st.integers(0, 100))),
        trigger=Trigger.ADHOC,
    )
    for command in data.draw(st.lists(st.sampled_from(COMMANDS), max_size=12)):
        at = T0 + timedelta(seconds=data.draw(st.integers(0, 500)))
        # A refused command is part of a realistic history: it records nothing.
        with contextlib.suppress(DomainError):
            run(execution, command, at=at)
    return list(execution.collect_events())


def run(execution: Execution, command: str, *, at: datetime) -> None:
    lease_id = execution.lease_id or uuid.uuid4()
    commands: dict[str, Callable[[], None]] = {
        "lease": lambda: execution.lease(worker_id="w", lease_id=uuid.uuid4(), lease_expires_at=at),
        "complete": lambda: execution.complete(lease_id=lease_id, duration=timedelta(1), result={}),
        "fail": lambda: execution.fail(lease_id=lease_id, error="boom", at=at),
        "expire": lambda: execution.expire_lease(lease_id=lease_id, at=at),
        "defer": lambda: execution.defer(lease_id=lease_id, reason="open", ready_at=at),
        "cancel": lambda: execution.cancel(by="op", reason="r"),
        "requeue": lambda: execution.requeue(by="op", reason="r", at=at),
        "progress": lambda: execution.report_progress(
            lease_id=lease_id, progress=Progress(message=str(at))
        ),
        "throttle": lambda: execution.throttle(kind="concurrency", limit="k", at=at),
        "snooze": lambda: execution.snooze(
            lease_id=lease_id, reason="later", delay=timedelta(seconds=9), at=at
        ),
        "fail_permanently": lambda: execution.fail_permanently(lease_id=lease_id, error="bad"),
        "drop": lambda: execution.drop(lease_id=lease_id, reason="moot"),
        "expire_run": lambda: execution.expire(at=at),
        "discard": lambda: execution.discard(by="op", reason="r"),
    }
    stale = lambda: execution.complete(  # noqa: E731 (one of the table's commands)
        lease_id=uuid.uuid4(), duration=timedelta(1), result={}
    )
    commands.get(command, stale)()


def interleave(data: st.DataObject, histories: list[list[Any]]) -> list[Any]:
    """One log: every history in order, merged in a random order."""
    pending = [list(h) for h in histories if h]
    log: list[Any] = []
    while pending:
        index = data.draw(st.integers(0, len(pending) - 1))
        log.append(pending[index].pop(0))
        if not pending[index]:
            pending.pop(index)
    return log


def deliveries(data: st.DataObject, log: list[Any]) -> list[list[Any]]:
    """Pages of random sizes; some delivered twice, some again after later pages."""
    pages: list[list[Any]] = []
    start = 0
    while start < len(log):
        size = data.draw(st.integers(1, 7))
        pages.append(log[start : start + size])
        start += size
    delivered: list[list[Any]] = []
    for index, page in enumerate(pages):
        delivered.append(page)
        if data.draw(st.booleans()):
            delivered.append(page)  # a duplicate
        if index and data.draw(st.integers(0, 3)) == 0:
            delivered.append(pages[data.draw(st.integers(0, index - 1))])  # an old page again
    return delivered


def fresh_queue() -> MemoryQueue:
    queue = MemoryQueue()
    queue.reset(QueueMeta(store_id="s", epoch="e", position=0))
    return queue


def snapshot(queue: MemoryQueue) -> dict[str, list[tuple[Any, ...]]]:
    return {
        name: sorted(
            (str(i.execution_id), i.state, i.at, i.priority, i.version, i.attempt, i.lease_id)
            for i in queue.items(name)
        )
        for name in queue.queues()
    }


def log_loader(log: list[Any]) -> PreviousLoader:
    def load(execution_id: uuid.UUID, version: int) -> QueueItem | None:
        item = None
        for domain_event in log:
            if (
                domain_event.originator_id == execution_id
                and domain_event.originator_version < version
            ):
                item = next_item(domain_event, item)
        return item

    return load


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_incremental_projection_equals_a_rebuild(data: st.DataObject) -> None:
    """If pages arrive in random sizes, duplicated and re-delivered, then the queue still
    equals the one a rebuild from the whole log makes, member for member and score for
    score."""
    histories = [history(data) for _ in range(data.draw(st.integers(1, 6)))]
    log = interleave(data, histories)
    rebuilt = fresh_queue()
    rebuilt.apply(list(QueueFold(log_loader(log)).changes(log)), epoch="e")
    incremental = fresh_queue()
    fold = QueueFold(log_loader(log))
    for page in deliveries(data, log):
        incremental.apply(list(fold.changes(page)), epoch="e")
    assert snapshot(incremental) == snapshot(rebuilt)


def test_the_fold_follows_each_event() -> None:
    """If an execution is leased, fails, is dead-lettered and requeued, then its entry
    follows each step and disappears when it completes."""
    execution = Execution.enqueue(
        spec=ExecutionSpec(
            handler="test.echo", queue="q", priority=7, retry=RetryPolicy(max_retries=0)
        ),
        ready_at=T0,
        trigger=Trigger.ADHOC,
    )
    lease_id = uuid.uuid4()
    execution.lease(worker_id="w", lease_id=lease_id, lease_expires_at=T0 + timedelta(minutes=1))
    execution.fail(lease_id=lease_id, error="x", at=T0)
    execution.requeue(by="op", reason="fixed", at=T0 + timedelta(hours=1))
    events = list(execution.collect_events())
    items: list[QueueItem | None] = []
    item = None
    for domain_event in events:
        item = next_item(domain_event, item)
        items.append(item)
    states = [i.state if i else None for i in items]
    assert states == [QueueState.PENDING, QueueState.LEASED, QueueState.DEAD, QueueState.PENDING]
    leased, requeued, enqueued = items[1], items[3], items[0]
    assert leased is not None
    assert leased.lease_id == lease_id
    assert requeued is not None
    assert requeued.attempt == 2
    assert requeued.at == T0 + timedelta(hours=1)
    assert enqueued is not None
    assert decode_spec(enqueued.spec).handler == "test.echo"


def test_only_an_event_that_leaves_the_entry_as_it_was_is_marked_unchanged() -> None:
    """If a leased run reports progress, then that change is marked unchanged (a store
    holding the version before only moves the version on), with the lease's entry; the
    enqueue, the lease and the completion are not."""
    execution = Execution.enqueue(
        spec=ExecutionSpec(handler="test.echo", queue="q"), ready_at=T0, trigger=Trigger.ADHOC
    )
    lease_id = uuid.uuid4()
    execution.lease(worker_id="w", lease_id=lease_id, lease_expires_at=T0 + timedelta(minutes=1))
    execution.report_progress(lease_id=lease_id, progress=Progress(percent=50))
    execution.complete(lease_id=lease_id, duration=timedelta(1), result={})
    changes = list(QueueFold(_no_previous).changes(execution.collect_events()))
    assert [c.unchanged for c in changes] == [False, False, True, False]
    progressed = changes[2].item
    assert progressed is not None
    assert (progressed.state, progressed.lease_id, progressed.version) == (
        QueueState.LEASED,
        lease_id,
        3,
    )


def test_a_snooze_waits_and_a_discard_or_expiry_ends_the_entry() -> None:
    """If a handler snoozes its run, then the entry is pending at the snooze's end with
    the same attempt (a change, not left as it was); if the handler then discards it, or
    a pending run expires, then its entry is gone."""
    spec = ExecutionSpec(handler="test.echo", queue="q", expires_at=T0 + timedelta(minutes=5))
    snoozing = Execution.enqueue(spec=spec, ready_at=T0, trigger=Trigger.ADHOC)
    lease_id = uuid.uuid4()
    snoozing.lease(worker_id="w", lease_id=lease_id, lease_expires_at=T0 + timedelta(minutes=1))
    snoozing.snooze(lease_id=lease_id, reason="later", delay=timedelta(seconds=30), at=T0)
    again = uuid.uuid4()
    snoozing.lease(worker_id="w", lease_id=again, lease_expires_at=T0 + timedelta(minutes=2))
    snoozing.drop(lease_id=again, reason="moot")
    changes = list(QueueFold(_no_previous).changes(snoozing.collect_events()))
    snoozed = changes[2]
    assert snoozed.item is not None
    assert not snoozed.unchanged
    assert (snoozed.item.state, snoozed.item.at, snoozed.item.attempt) == (
        QueueState.PENDING,
        T0 + timedelta(seconds=30),
        1,
    )
    assert changes[-1].item is None
    expiring = Execution.enqueue(spec=spec, ready_at=T0, trigger=Trigger.ADHOC)
    expiring.expire(at=T0 + timedelta(minutes=5))
    assert [c.item is None for c in QueueFold(_no_previous).changes(expiring.collect_events())] == [
        False,
        True,
    ]


def _no_previous(_execution_id: uuid.UUID, _version: int) -> QueueItem | None:
    return None


def test_queue_events_fold_into_the_last_pause_record() -> None:
    """If a queue is paused, resumed and paused again, then the fold keeps the last pause
    with who, why and since when; a registration or a drain changes no record."""
    queue = Queue.register("emails")
    queue.pause(by="ada", reason="outage", at=T0)
    queue.resume(by="bob", at=T0 + timedelta(minutes=5))
    queue.drain(by="bob", reason="bad batch", cancelled=())
    queue.pause(by="cy", reason="again", at=T0 + timedelta(minutes=9))
    fold = QueueFold(_no_previous)
    assert list(fold.changes(queue.collect_events())) == []
    assert [p.paused for p in fold.take_pauses()] == [True, False, True]
    assert fold.take_pauses() == []
    assert fold.pauses() == [
        QueuePause(
            queue="emails",
            version=5,
            paused=True,
            by="cy",
            reason="again",
            since=T0 + timedelta(minutes=9),
        )
    ]


def test_a_deleted_limit_folds_into_a_record_without_values() -> None:
    """If a named limit is defined, deleted and defined again, then the fold hands on
    each record in order, the deletion as a record without values, and remembers the
    last; folded again after it, the deletion stays behind the newer record."""
    limit = Limit.define("smtp", LimitValues(concurrency=2), by="ada", at=T0)
    limit.delete(by="bob", at=T0)
    deletion = limit.collect_events()
    limit.change(LimitValues(concurrency=2), by="cy", at=T0)
    fold = QueueFold(_no_previous)
    fold.fold([*deletion, *limit.collect_events(), *deletion])
    taken = fold.take_limits()
    assert [(n.version, n.deleted, n.concurrency) for n in taken[:3]] == [
        (1, False, 2),
        (2, True, None),
        (3, False, 2),
    ]
    assert fold.named_limits() == [NamedLimit(name="smtp", version=3, concurrency=2)]


def test_a_replay_keeps_the_newest_pause_record() -> None:
    """If the pause events are folded again after newer ones (a redelivery), then the
    fold still remembers the newest record."""
    queue = Queue.register("emails")
    queue.pause(by="ada", reason="outage", at=T0)
    queue.resume(by="bob", at=T0)
    events = queue.collect_events()
    fold = QueueFold(_no_previous)
    fold.fold(events)
    fold.fold(events[:2])
    (record,) = fold.pauses()
    assert (record.version, record.paused) == (3, False)
    registered = events[0]
    assert isinstance(registered, Queue.Registered)
    assert next_pause(registered) is None


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_events_read_through_the_queue_views_fold_as_whole_ones(data: st.DataObject) -> None:
    """If the queue's readers decode leases and completions through their views (the
    rest of the state skipped), then the fold makes the same changes, in the same
    order, as it makes of the whole events."""
    histories = [history(data) for _ in range(data.draw(st.integers(1, 4)))]
    log = interleave(data, histories)
    mapper = MsgspecMapper()
    viewed = mapper.viewed(QUEUE_VIEWS)

    def through_views(domain_event: Any) -> Any:
        stored = mapper.to_stored_event(domain_event)
        return viewed(stored.originator_id, stored.originator_version, stored.topic, stored.state)

    read = [through_views(e) for e in log]
    ends = (Execution.Leased, Execution.Completed)
    assert all(
        type(r) is not type(e) for r, e in zip(read, log, strict=True) if isinstance(e, ends)
    )
    whole = list(QueueFold(log_loader(log)).changes(log))
    assert list(QueueFold(log_loader(log)).changes(read)) == whole
