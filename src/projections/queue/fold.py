"""The fold of execution events into queue entries: pure, no I/O.

Every event of an Execution maps to the entry it leaves in the queue, given the entry
before it. Applying the changes of a log in order gives the queue; applying them again,
or an older change after a newer one, gives the same queue (the version guard of the
backends), which is what makes the projection exactly-once in effect.

The events of a Queue aggregate fold into the queue's pause record (``QueuePause``),
and those of a Limit aggregate into the named limit (``NamedLimit``), each guarded by
its aggregate's version the same way.
"""

from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import msgspec

from jobledger.domain.execution import Execution
from jobledger.domain.limits import Limit, LimitValues, RunLimits
from jobledger.domain.queue import Queue
from jobledger.domain.topics import event_topics
from jobledger.persistence.codec import EventView
from jobledger.projections.queue.backend import (
    EntryLimits,
    NamedLimit,
    QueueChange,
    QueueItem,
    QueuePause,
    QueueState,
    WorkSpec,
    decode_spec,
    encode_spec,
)

# Loads the entry an execution had before ``version`` (None if it had none): used when
# a page starts in the middle of an execution's history and no cache knows it.
PreviousLoader = Callable[[UUID, int], QueueItem | None]

EXECUTION_TOPICS = frozenset(event_topics(Execution))
QUEUE_TOPICS = frozenset(event_topics(Queue))
LIMIT_TOPICS = frozenset(event_topics(Limit))


def is_execution_event(topic: str) -> bool:
    return topic in EXECUTION_TOPICS


# What the queue's readers decode of the two events every run a worker runs records
# (``EventView``): a lease's worker and a completion's result and duration are skipped,
# not decoded (ADR 73). The fold takes each view's struct for its event's class.
QUEUE_VIEWS = (
    EventView(Execution.Leased, ("timestamp", "attempt", "lease_id", "lease_expires_at")),
    EventView(Execution.Completed, ()),
)
_LEASED_VIEW, _COMPLETED_VIEW = (view.struct for view in QUEUE_VIEWS)
_ENDS = (
    Execution.Completed,
    Execution.Cancelled,
    Execution.Discarded,
    Execution.Expired,
    _COMPLETED_VIEW,
)


def next_item(domain_event: Any, previous: QueueItem | None) -> QueueItem | None:  # noqa: ANN401 (any execution event)
    """The entry after ``domain_event``; None once the execution is finished."""
    if isinstance(domain_event, Execution.Enqueued):
        return _enqueued(domain_event)
    if previous is None:
        return None  # finished (or never enqueued): later events change nothing
    if isinstance(domain_event, _ENDS):
        return None
    version: int = domain_event.originator_version
    return msgspec.structs.replace(previous, version=version, **_changes(domain_event, previous))


def _changes(domain_event: Any, previous: QueueItem) -> dict[str, Any]:  # noqa: ANN401 (any execution event)
    """The fields of the entry an event changes (none: only its version moves on)."""
    change = _CHANGES.get(type(domain_event))
    return {} if change is None else change(domain_event, previous)


def _leased(event: Execution.Leased, _previous: QueueItem) -> dict[str, Any]:
    return {
        "state": QueueState.LEASED,
        "at": event.lease_expires_at,
        "attempt": event.attempt,
        "lease_id": event.lease_id,
        "leased_at": event.timestamp,
    }


def _dead_lettered(event: Execution.DeadLettered, _previous: QueueItem) -> dict[str, Any]:
    return {
        "state": QueueState.DEAD,
        "at": event.timestamp,
        "attempt": event.attempts,
        "lease_id": None,
        "leased_at": None,
    }


_CHANGES: dict[type[Any], Callable[[Any, QueueItem], dict[str, Any]]] = {
    Execution.Leased: _leased,
    _LEASED_VIEW: _leased,
    Execution.Retried: lambda e, _p: _pending(e.ready_at, e.next_attempt),
    Execution.Deferred: lambda e, p: _pending(e.ready_at, p.attempt),
    # A snooze gives the attempt back: the next lease is the same attempt again.
    Execution.Snoozed: lambda e, p: _pending(e.ready_at, p.attempt),
    Execution.Requeued: lambda e, p: _pending(e.ready_at, p.attempt + 1),
    Execution.BroughtForward: lambda e, p: _pending(e.ready_at, p.attempt),
    Execution.Replaced: lambda e, p: {"spec": _with_payload(p.spec, e.payload)},
    Execution.Debounced: lambda e, p: {"spec": _with_payload(p.spec, e.payload), "at": e.ready_at},
    Execution.DeadLettered: _dead_lettered,
}


def leaves_entry(domain_event: Any) -> bool:  # noqa: ANN401 (any execution event)
    """Whether an event of an open run leaves its queue entry as it was: only the
    version moves on (a progress report, a throttle note, an expiry before its retry)."""
    return type(domain_event) not in _CHANGES


def _with_payload(spec: bytes, payload: dict[str, Any]) -> bytes:
    return encode_spec(msgspec.structs.replace(decode_spec(spec), payload=payload))


def next_pause(domain_event: Queue.Event) -> QueuePause | None:
    """The queue's pause record after ``domain_event``; None if it leaves it as it was
    (a registration or a drain)."""
    version = domain_event.originator_version
    match domain_event:
        case Queue.Paused():
            return QueuePause(
                queue=domain_event.queue,
                version=version,
                paused=True,
                by=domain_event.by,
                reason=domain_event.reason,
                since=domain_event.at,
            )
        case Queue.Resumed():
            return QueuePause(queue=domain_event.queue, version=version, paused=False)
    return None


def named_limit(name: str, version: int, values: LimitValues) -> NamedLimit:
    per = None if values.per is None else _milliseconds(values.per)
    return NamedLimit(
        name=name,
        version=version,
        concurrency=values.concurrency,
        rate=values.rate,
        rate_per_ms=per,
    )


def entry_limits(limits: RunLimits | None) -> EntryLimits | None:
    """A run's resolved limits as its queue entry carries them."""
    if limits is None:
        return None
    concurrency, rate = limits.concurrency, limits.rate
    return EntryLimits(
        concurrency_key=None if concurrency is None else concurrency.key,
        concurrency_max=None if concurrency is None else concurrency.max,
        rate_key=None if rate is None else rate.key,
        rate_limit=None if rate is None else rate.limit,
        rate_per_ms=None if rate is None or rate.per is None else _milliseconds(rate.per),
    )


def _milliseconds(period: timedelta) -> int:
    return round(period.total_seconds() * 1000)


def _pending(ready_at: datetime, attempt: int) -> dict[str, Any]:
    return {
        "state": QueueState.PENDING,
        "at": ready_at,
        "attempt": attempt,
        "lease_id": None,
        "leased_at": None,
    }


def restored(item: QueueItem, now: datetime) -> QueueItem:
    """``item`` as a rebuild at ``now`` loads it: a lease gets at least one lease ttl
    from ``now`` (see ADR 0008, "Restored leases").

    The log holds a lease's first deadline only: the heartbeats that moved it on were
    never events. So a rebuild would hand back long-running leases already expired,
    and they would be retried under their live workers. With the grace window a live
    worker's next heartbeat extends the restored lease (same lease id); a dead worker's
    lease expires one ttl later than it would have.
    """
    if item.state is not QueueState.LEASED or item.leased_at is None:
        return item
    deadline = now + (item.at - item.leased_at)
    if deadline <= item.at:
        return item
    return msgspec.structs.replace(item, at=deadline)


def _enqueued(enqueued: Execution.Enqueued) -> QueueItem:
    spec = enqueued.spec
    work = WorkSpec(
        job_id=enqueued.job_id,
        handler=spec.handler,
        payload=spec.payload,
        timeout=spec.timeout,
        max_attempts=spec.retry.max_attempts,
        scheduled_for=enqueued.scheduled_for,
    )
    return QueueItem(
        execution_id=enqueued.originator_id,
        queue=spec.queue,
        priority=spec.priority,
        version=enqueued.originator_version,
        state=QueueState.PENDING,
        at=enqueued.ready_at,
        attempt=enqueued.attempt,
        spec=encode_spec(work),
        limits=entry_limits(spec.limits),
    )


class QueueFold:
    """Folds pages of execution events into queue changes, remembering open entries."""

    def __init__(self, load_previous: PreviousLoader) -> None:
        # Keyed by the id's integer: a UUID hashes and compares in Python, an int in C,
        # and a replay looks the cache up twice per event.
        self._open: dict[int, QueueItem] = {}
        self._load_previous = load_previous
        # Each queue's last pause record, and those folded since ``take_pauses``.
        self._pauses: dict[str, QueuePause] = {}
        self._new_pauses: list[QueuePause] = []
        # The same for named limits.
        self._limits: dict[str, NamedLimit] = {}
        self._new_limits: list[NamedLimit] = []

    def remember(self, items: Iterable[QueueItem]) -> None:
        """Seed the fold with entries known to be current (from a checkpoint)."""
        for item in items:
            self._open[item.execution_id.int] = item

    def forget(self) -> None:
        self._open.clear()
        self._pauses.clear()
        self._new_pauses.clear()
        self._limits.clear()
        self._new_limits.clear()

    def pauses(self) -> list[QueuePause]:
        """Every queue's last pause record the fold has seen."""
        return list(self._pauses.values())

    def take_pauses(self) -> list[QueuePause]:
        """The pause records folded since the last call: what a page changes."""
        taken, self._new_pauses = self._new_pauses, []
        return taken

    def named_limits(self) -> list[NamedLimit]:
        """Every named limit the fold has seen, as last set."""
        return list(self._limits.values())

    def take_limits(self) -> list[NamedLimit]:
        """The named limits folded since the last call."""
        taken, self._new_limits = self._new_limits, []
        return taken

    def open_items(self) -> list[QueueItem]:
        """Every open entry the fold has seen (after a full replay: the whole queue)."""
        return list(self._open.values())

    def changes(self, domain_events: Iterable[Any]) -> Iterator[QueueChange]:
        for domain_event in domain_events:
            change = self.change(domain_event)
            if change is not None:
                yield change

    def fold(self, domain_events: Iterable[Any]) -> None:
        """``changes`` without the changes: only what the fold remembers moves on (a
        full replay keeps the end state, so building each change would be waste)."""
        step = self._step
        for domain_event in domain_events:
            if isinstance(domain_event, Queue.Event | Limit.Event):
                self._setting(domain_event)
            else:
                step(domain_event)

    def _setting(self, domain_event: Queue.Event | Limit.Event) -> None:
        if not isinstance(domain_event, Limit.Defined | Limit.Changed | Limit.Deleted):
            self._pause(domain_event)
            return
        version = domain_event.originator_version
        if isinstance(domain_event, Limit.Deleted):
            limit = NamedLimit(name=domain_event.name, version=version, deleted=True)
        else:
            limit = named_limit(domain_event.name, version, domain_event.values)
        known = self._limits.get(limit.name)
        if known is None or known.version < limit.version:
            self._limits[limit.name] = limit
        self._new_limits.append(limit)

    def _pause(self, domain_event: Queue.Event) -> None:
        pause = next_pause(domain_event)
        if pause is None:
            return
        known = self._pauses.get(pause.queue)
        if known is None or known.version < pause.version:
            self._pauses[pause.queue] = pause
        self._new_pauses.append(pause)

    def change(self, domain_event: Any) -> QueueChange | None:  # noqa: ANN401 (any execution event)
        if isinstance(domain_event, Queue.Event | Limit.Event):
            self._setting(domain_event)
            return None
        previous, item = self._step(domain_event)
        execution_id: UUID = domain_event.originator_id
        version: int = domain_event.originator_version
        if item is not None:
            return QueueChange(
                execution_id=execution_id,
                queue=item.queue,
                version=version,
                item=item,
                unchanged=previous is not None and leaves_entry(domain_event),
            )
        if previous is None:
            return None
        return QueueChange(
            execution_id=execution_id, queue=previous.queue, version=version, item=None
        )

    def _step(self, domain_event: Any) -> tuple[QueueItem | None, QueueItem | None]:  # noqa: ANN401 (any execution event)
        """(entry before, entry after) ``domain_event``; the cache learns the latter."""
        execution_id: UUID = domain_event.originator_id
        version: int = domain_event.originator_version
        key = execution_id.int
        cached = self._open.get(key)
        if version == 1:
            previous = None
        elif cached is not None and cached.version == version - 1:
            previous = cached
        else:
            # A redelivered or unseen event: ask the log what came before it.
            previous = self._load_previous(execution_id, version)
        item = next_item(domain_event, previous)
        if cached is not None and cached.version >= version:
            return previous, item  # an old event again: the cache already knows better
        if item is not None:
            self._open[key] = item
        elif cached is not None:
            del self._open[key]
        return previous, item


def latest_per_execution(changes: Iterable[QueueChange]) -> list[QueueChange]:
    """The last change of each execution: what a version-guarded store ends up with
    after all of them, for a fraction of the writes."""
    latest: dict[UUID, QueueChange] = {}
    for change in changes:
        latest[change.execution_id] = change
    return list(latest.values())
