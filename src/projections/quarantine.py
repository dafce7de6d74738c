"""Events a follower cannot apply: isolated, recorded, retried on request.

A follower applies pages of events. When a page fails with an error about one of its
events (a payload the queue's codec cannot carry, a state that no longer decodes, a
value a column refuses), the follower applies the page again event by event, records
the event that fails in ``jobledger_quarantine`` and goes on past it: one bad event
never stops a projection. Later events of the same stream (the same execution or job)
are held as well, in the same table: applied on top of a missing event they would
leave a state no fold of the log can produce. ``retry`` applies a stream's
quarantined events in log order, in the follower they failed in (ADR "quarantined
events").

An error that is not about the event (a lost connection, a timeout, a missing table,
a Redis that refuses writes) is an outage: it is raised, and the follower retries
the page with back-off as before. Quarantining every event during an outage would
skip the whole log.
"""

import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

import msgspec
import psycopg
import redis
import structlog
from eventsourcing import persistence

from jobledger.domain.clock import Clock, utc_now
from jobledger.domain.json_values import error_line
from jobledger.infra.outages import CLUSTER_OUTAGE_ERRORS
from jobledger.persistence.log_store import LogRow, RowPage
from jobledger.projections.errors import ContendedError, ProjectionError, QueueLostError

log = structlog.get_logger(__name__)

# The followers, by the names their rows, logs and metrics carry.
QUEUE_FOLLOWER = "queue-projection"
CHECKPOINT_FOLLOWER = "checkpoint-projection"
READ_MODELS_FOLLOWER = "read-models"
JOB_SCHEDULE_FOLLOWER = "job-schedule"
RELEASES_FOLLOWER = "releases"  # the scheduler leader's: what runs' ends release
NOTIFIER_FOLLOWER = "notifications"  # the scheduler leader's: the notification rules
FOLLOWERS = (
    QUEUE_FOLLOWER,
    CHECKPOINT_FOLLOWER,
    READ_MODELS_FOLLOWER,
    JOB_SCHEDULE_FOLLOWER,
    RELEASES_FOLLOWER,
    NOTIFIER_FOLLOWER,
)

MAX_ERROR_CHARS = 2000
MAX_KEPT = 10_000  # isolated events a long-lived follower remembers in memory
_NAMED = 5  # events a summary names
HELD = "held: an earlier event of this stream is quarantined in this follower"

# Errors of the infrastructure, not of an event: retried with back-off, never
# quarantined. A missing table or privilege (ProgrammingError) would fail every event.
_OUTAGES: tuple[type[BaseException], ...] = (
    OSError,  # ConnectionError, TimeoutError, socket errors
    MemoryError,
    QueueLostError,
    ContendedError,
    psycopg.OperationalError,  # lost connections, pool timeouts, deadlocks, shutdowns
    psycopg.InterfaceError,
    psycopg.ProgrammingError,
    psycopg.InternalError,  # a read-only replica after a fail-over, a failed transaction
    psycopg.NotSupportedError,
    persistence.OperationalError,
    persistence.InterfaceError,
    persistence.ProgrammingError,
    persistence.InternalError,
    persistence.NotSupportedError,
    persistence.ConnectionUnavailableError,
    persistence.WaitInterruptedError,
    redis.ConnectionError,  # includes BusyLoadingError
    redis.TimeoutError,
    redis.ReadOnlyError,
    *CLUSTER_OUTAGE_ERRORS,
    sqlite3.OperationalError,  # locked, disk full, no such table
    sqlite3.InterfaceError,
    sqlite3.ProgrammingError,
)
# Redis answers these while it cannot take writes, whatever they hold.
_REDIS_UNAVAILABLE = ("OOM", "BUSY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "MISCONF")


def is_outage(error: BaseException) -> bool:
    """True if ``error`` is about a dependency rather than about the event applied."""
    if isinstance(error, _OUTAGES):
        return True
    return isinstance(error, redis.ResponseError) and str(error).startswith(_REDIS_UNAVAILABLE)


def describe(error: BaseException) -> str:
    """The error as stored: its type and message, one line, no NUL, bounded."""
    return error_line(error, max_chars=MAX_ERROR_CHARS)


# The first quarantined version of each held stream: that event and those after it wait.
Held = dict[str, int]


def is_held(row: LogRow, held: Held) -> bool:
    first = held.get(str(row[1]))
    return first is not None and row[2] >= first


def _hold(held: Held, row: LogRow) -> None:
    stream = str(row[1])
    held[stream] = min(held.get(stream, row[2]), row[2])


class QuarantinedEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One event a follower could not apply."""

    id: int
    follower: str
    position: int  # the event's notification id in the log
    originator_id: str
    originator_version: int
    topic: str
    error: str
    first_seen: datetime
    last_seen: datetime
    attempts: int
    # Set when an operator gave up on it: the follower goes on without it for good.
    dropped_at: datetime | None = None
    dropped_by: str | None = None
    dropped_reason: str | None = None


class QuarantineTable(Protocol):
    """Where quarantined events are kept (``jobledger_quarantine``, migration 0006, on
    the event store's database)."""

    def record(self, follower: str, row: LogRow, error: str, *, at: datetime) -> int:
        """Record ``row`` as quarantined in ``follower`` (seen again: with the new
        error, one more attempt); how many attempts it has now."""
        ...

    def inherit(self, follower: str, source: str, *, up_to: int) -> None:
        """Quarantine in ``follower``, each once, the waiting events ``source`` holds up
        to position ``up_to``."""
        ...

    def held(self, follower: str) -> Held:
        """The streams with a waiting event in ``follower``, each with the lowest
        version of those."""
        ...

    def events(self, *, follower: str | None, dropped: bool) -> list[QuarantinedEvent]:
        """The events (of ``follower``) waiting for a retry, or (``dropped``) given up
        on, by position and follower."""
        ...

    def counts(self) -> dict[str, int]:
        """Waiting events per follower that has any."""
        ...

    def remove(self, event_id: int) -> None: ...

    def mark_dropped(self, event_ids: Sequence[int], *, by: str, reason: str, at: datetime) -> None:
        """Record that ``by`` gave up on these events, and why."""
        ...

    def failed_again(self, event_id: int, error: str, *, at: datetime) -> None:
        """Record one more attempt at the event, which failed with ``error``."""
        ...


class Quarantine:
    """The quarantined events: the projector records them, the API and the CLI read and
    retry them."""

    def __init__(self, table: QuarantineTable) -> None:
        self._table = table

    def record(self, follower: str, row: LogRow, error: str, *, at: datetime) -> bool:
        """Record (or see again) ``row`` as quarantined in ``follower``; True if it
        was not in the table before."""
        return self._table.record(follower, row, error, at=at) == 1

    def inherit(self, follower: str, source: str, *, up_to: int) -> None:
        """Quarantine in ``follower`` what ``source`` holds up to ``up_to``: a follower
        rebuilt from another's state (the queue from the checkpoint) lacks the same
        events, and a retry must apply them to it too."""
        self._table.inherit(follower, source, up_to=up_to)

    def held(self, follower: str) -> Held:
        """The streams with a quarantined event in ``follower``, each with its first
        quarantined version."""
        return self._table.held(follower)

    def events(
        self, *, follower: str | None = None, dropped: bool = False
    ) -> list[QuarantinedEvent]:
        """Every quarantined event (of ``follower``) in log order: those waiting for a
        retry, or (``dropped``) those an operator gave up on."""
        return self._table.events(follower=follower, dropped=dropped)

    def counts(self) -> dict[str, int]:
        """Quarantined events per follower (every follower named, zeros too)."""
        return dict.fromkeys(FOLLOWERS, 0) | self._table.counts()

    def count(self) -> int:
        return sum(self.counts().values())

    def remove(self, event_id: int) -> None:
        self._table.remove(event_id)

    def drop(self, event_id: int, *, by: str, reason: str, at: datetime) -> list[QuarantinedEvent]:
        """Give up on a waiting event, and on the events of its stream after it in the
        same follower (they would wait for it for ever): the follower goes on without
        them, and applies the stream's later events. Returns what was dropped."""
        found = [e for e in self.events() if e.id == event_id]
        if not found:
            return []
        first = found[0]
        dropped = [
            e
            for e in self.events(follower=first.follower)
            if e.originator_id == first.originator_id
            and e.originator_version >= first.originator_version
        ]
        self._table.mark_dropped([e.id for e in dropped], by=by, reason=reason, at=at)
        return dropped

    def failed_again(self, event_id: int, error: str, *, at: datetime) -> None:
        self._table.failed_again(event_id, error, at=at)


# Applies ``rows`` (possibly none) and moves the follower from ``start`` to
# ``position``; False if another process had moved it first (nothing applied).
ApplyRows = Callable[[Sequence[LogRow], int, int], bool]


@dataclass
class Isolation:
    """Isolates the events one follower cannot apply.

    Without a table (``quarantine`` None) or with ``persist`` off, what it isolates is
    only kept in ``isolated`` (a verify, a dry fold); with one, every isolated event is
    recorded before the follower moves past it, so a crash in between loses nothing.
    ``hold`` off: the later events of an isolated stream are applied (for a follower
    whose every event sets all it keeps of the stream, like the job-schedule index).
    """

    follower: str
    quarantine: Quarantine | None = None
    persist: bool = True
    hold: bool = True
    counted: Callable[[str], None] = lambda _follower: None
    now: Clock = utc_now
    # What this run isolated (the stored state left out), the first MAX_KEPT of them.
    isolated: list[tuple[LogRow, str]] = field(default_factory=list)
    count: int = 0
    _held: Held = field(default_factory=dict)
    _unrecorded: Held = field(default_factory=dict)
    # The quarantine's stamp when ``_held`` was last read from it (None: not known).
    _stamp: int | None = None

    def held(self, stamp: int | None = None) -> Held:
        """The streams held in this follower: the table's, and those isolated here but
        not recorded. The table is read again unless ``stamp`` (the quarantine's stamp
        read with the page at hand) equals the one of the last read: any change of the
        table moves the stamp (a retry elsewhere releases streams; another process of
        this follower isolates some), and this process records its own in ``_held``."""
        if not self.hold:
            return self._held  # stays empty
        if stamp is not None and stamp == self._stamp and self.quarantine is not None:
            return self._held
        self._held = self.quarantine.held(self.follower) if self.quarantine is not None else {}
        self._stamp = stamp  # only once read: a read that failed leaves no stamp behind
        for stream, version in self._unrecorded.items():
            self._held[stream] = min(self._held.get(stream, version), version)
        return self._held

    def isolate(self, row: LogRow, error: BaseException | str) -> None:
        """Quarantine ``row``; an outage is raised instead (the caller retries)."""
        if isinstance(error, BaseException) and is_outage(error):
            raise error
        text = error if isinstance(error, str) else describe(error)
        # The table is read again at the next page, whether the record below is made or
        # fails: what it holds is the truth, not this copy.
        self._stamp = None
        if self.hold:
            _hold(self._held, row)
        self.count += 1
        if len(self.isolated) < MAX_KEPT:
            self.isolated.append(((row[0], row[1], row[2], row[3], b""), text))
        if self.quarantine is None or not self.persist:
            if self.hold:
                _hold(self._unrecorded, row)
            return  # a dry run: its caller reports what it isolated
        if not self.quarantine.record(self.follower, row, text, at=self.now()):
            return  # seen before (a replay, a restart): counted and logged then
        self.counted(self.follower)
        log.error(
            "projection.event_quarantined",
            follower=self.follower,
            position=row[0],
            originator_id=str(row[1]),
            originator_version=row[2],
            topic=row[3],
            error=text,
        )

    @property
    def unrecorded(self) -> Held:
        """The streams isolated here that the table does not hold (a dry run's)."""
        return self._unrecorded

    def absorb(self, isolated: Sequence[tuple[LogRow, str]], count: int, unrecorded: Held) -> None:
        """Take in what another process isolated for this follower (a rebuild's share)."""
        self.count += count
        self.isolated.extend(isolated[: max(0, MAX_KEPT - len(self.isolated))])
        for stream, version in unrecorded.items():
            self._unrecorded[stream] = min(self._unrecorded.get(stream, version), version)
            if self.hold:
                self._held[stream] = min(self._held.get(stream, version), version)

    def apply(self, page: RowPage, start: int, apply_rows: ApplyRows) -> bool:
        """Apply ``page`` (from ``start``) through ``apply_rows``, isolating what fails.

        The page goes in one call first; if that fails for an event's sake, it goes
        again one event at a time (each moving the follower past it), so its good
        events are applied exactly once and only the culprit is quarantined.
        """
        rows = page.rows
        # A page of no events holds nothing back: the table need not be read for it.
        held = self.held(page.stamp) if rows else {}
        if held:
            for row in rows:
                if is_held(row, held):
                    self.isolate(row, HELD)
            rows = [row for row in rows if not is_held(row, held)]
        try:
            return apply_rows(rows, start, page.position)
        except Exception as error:
            if is_outage(error):
                raise
            log.warning(
                "projection.page_failed",
                follower=self.follower,
                start=start,
                position=page.position,
                error=describe(error),
            )
        return self._one_by_one(rows, start, page.position, apply_rows)

    def _one_by_one(
        self, rows: Sequence[LogRow], start: int, position: int, apply_rows: ApplyRows
    ) -> bool:
        for row in rows:
            if is_held(row, self._held):
                self.isolate(row, HELD)
                continue
            try:
                if not apply_rows([row], start, row[0]):
                    return False
            except Exception as error:  # noqa: BLE001 (isolate raises an outage again)
                self.isolate(row, error)
                continue
            start = row[0]
        return apply_rows([], start, position)

    def each(self, rows: Iterable[LogRow], apply_row: Callable[[LogRow], None]) -> None:
        """``apply_row`` for every row, isolating those that fail (a replay's fold)."""
        held = self.held()
        for row in rows:
            if held and is_held(row, held):
                self.isolate(row, HELD)
                continue
            try:
                apply_row(row)
            except Exception as error:  # noqa: BLE001 (isolate raises an outage again)
                self.isolate(row, error)

    def decoded(
        self, rows: Iterable[LogRow], decode: Callable[[UUID | str, int, str, bytes], Any]
    ) -> list[tuple[int, str, Any]]:
        """(position, stream id as text, event) of every row, in order, the event read by
        ``decode`` (a replay's fold); a row it cannot read, or of a held stream, is
        isolated instead."""
        held = self.held()
        events: list[tuple[int, str, Any]] = []
        append = events.append
        for row in rows:
            position, stream, version, topic, state = row
            if held and is_held(row, held):
                self.isolate(row, HELD)
                continue
            try:
                event = decode(stream, version, topic, state)
            except Exception as error:  # noqa: BLE001 (isolate raises an outage again)
                self.isolate(row, error)
                continue
            append((position, stream if stream.__class__ is str else str(stream), event))
        return events

    def summary(self) -> str:
        """One line naming what this run isolated ('' if nothing)."""
        if not self.isolated:
            return ""
        named = ", ".join(
            f"position {row[0]} ({event_type(row[3])} of {row[1]})"
            for row, _error in self.isolated[:_NAMED]
        )
        rest = self.count - _NAMED
        more = f" and {rest} more" if rest > 0 else ""
        return (
            f"{self.count} event(s) quarantined in {self.follower}: {named}{more}; "
            "see `jobledger projections quarantine list`"
        )


@dataclass(frozen=True)
class Unapplied:
    """What a verify's fold could not apply, against the table."""

    waiting: list[QuarantinedEvent]  # quarantined, waiting for a retry
    dropped: list[QuarantinedEvent]  # given up on by an operator: not a fault
    unrecorded: list[tuple[LogRow, str]]  # not (yet) in the table

    @property
    def faults(self) -> int:
        return len(self.waiting) + len(self.unrecorded)


def unapplied(isolation: Isolation) -> Unapplied:
    """Sort what ``isolation`` (a verify's, not persisted) isolated by the table."""
    table = isolation.quarantine
    waiting = table.events(follower=isolation.follower) if table else []
    dropped = table.events(follower=isolation.follower, dropped=True) if table else []
    known = {e.position for e in waiting} | {e.position for e in dropped}
    unrecorded = [(row, error) for row, error in isolation.isolated if row[0] not in known]
    return Unapplied(waiting, dropped, unrecorded)


def event_type(topic: str) -> str:
    """``ExecutionEnqueued`` of ``jobledger:ExecutionEnqueued`` (or of a module path)."""
    return topic.rpartition(":")[2].rpartition(".")[2]


# ---- retry ------------------------------------------------------------------------


class RetryStoppedError(ProjectionError):
    """A retry stopped because a dependency is unreachable; nothing was changed for
    the event it was applying."""


@dataclass
class RetryReport:
    applied: list[QuarantinedEvent] = field(default_factory=list)
    failed: list[tuple[QuarantinedEvent, str]] = field(default_factory=list)
    waiting: list[QuarantinedEvent] = field(default_factory=list)  # behind a failed one
    missing: list[int] = field(default_factory=list)  # ids not in the table


ReadRow = Callable[[int], LogRow | None]  # the stored event at a log position
ApplyOne = Callable[[LogRow], None]  # applies one event without moving the follower


def retry(
    quarantine: Quarantine,
    appliers: Mapping[str, ApplyOne],
    read_row: ReadRow,
    *,
    ids: Sequence[int] | None = None,
    now: Clock = utc_now,
) -> RetryReport:
    """Apply quarantined events again, each in the follower it failed in.

    A stream's events go in log order from its first quarantined one (a later event
    waits for the earlier), so retrying one event retries those of its stream before
    it. An event that applies leaves the table; one that fails again stays, with the
    new error, and the events of its stream after it wait. A running follower may
    hold a new event of a stream while its earlier ones are being applied: the table
    is read again after each pass, a few times, to apply those too.
    """
    events = quarantine.events()
    run = _Retry(quarantine, appliers, read_row, now)
    wanted: set[tuple[str, str]] | None = None
    if ids is not None:
        known = {event.id for event in events}
        run.report.missing = [i for i in ids if i not in known]
        wanted = {(e.follower, e.originator_id) for e in events if e.id in ids}
    seen: set[int] = set()
    for _pass in range(_RETRY_PASSES):
        todo = [
            e
            for e in events
            if e.id not in seen and (wanted is None or (e.follower, e.originator_id) in wanted)
        ]
        if not todo:
            break
        for event in todo:
            seen.add(event.id)
            run.one(event)
        events = quarantine.events()
    return run.report


_RETRY_PASSES = 3


@dataclass
class _Retry:
    quarantine: Quarantine
    appliers: Mapping[str, ApplyOne]
    read_row: ReadRow
    now: Clock
    report: RetryReport = field(default_factory=RetryReport)
    stopped: set[tuple[str, str]] = field(default_factory=set)  # streams that failed

    def one(self, event: QuarantinedEvent) -> None:
        stream = (event.follower, event.originator_id)
        if stream in self.stopped:
            self.report.waiting.append(event)
            return
        error = _retry_one(event, self.appliers, self.read_row)
        if error is None:
            self.quarantine.remove(event.id)
            self.report.applied.append(event)
            log.info("projection.quarantine_applied", follower=event.follower, id=event.id)
        else:
            self.quarantine.failed_again(event.id, error, at=self.now())
            self.report.failed.append((event, error))
            self.stopped.add(stream)


def _retry_one(
    event: QuarantinedEvent, appliers: Mapping[str, ApplyOne], read_row: ReadRow
) -> str | None:
    apply_one = appliers.get(event.follower)
    if apply_one is None:
        return f"no follower named {event.follower!r} in this release"
    row = read_row(event.position)
    if row is None or str(row[1]) != event.originator_id:
        return f"the log holds no event at position {event.position} for {event.originator_id}"
    try:
        apply_one(row)
    except Exception as error:
        if is_outage(error):
            raise RetryStoppedError(
                f"retry stopped at quarantined event {event.id}: {describe(error)}"
            ) from error
        return describe(error)
    return None


def isolation_of(
    follower: str,
    quarantine: Quarantine,
    *,
    persist: bool = True,
    counted: Callable[[str], None] | None = None,
) -> Isolation:
    """How ``follower`` isolates events: recorded (unless not ``persist``), and counted.
    The job-schedule index holds no stream: each job event sets the job's next fire
    whole, so the events after a quarantined one keep the index right. Nor do the
    releases and the notifier: each run's end releases (or tells of) what it does on
    its own."""
    isolation = Isolation(
        follower,
        quarantine,
        persist=persist,
        hold=follower not in {JOB_SCHEDULE_FOLLOWER, RELEASES_FOLLOWER, NOTIFIER_FOLLOWER},
    )
    if counted is not None:
        isolation.counted = counted
    return isolation
