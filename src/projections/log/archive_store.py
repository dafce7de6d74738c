"""The log's side of an archive (ADR 45): which closed executions may leave the log,
their events as stored, and their removal in one transaction with its record.

Only events at or below the low-water mark (the lowest position of every follower)
are removed: every follower has applied them, and none reads them again unless it
replays from 0, when their absence is what the archive made true.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol
from uuid import UUID

import structlog
from eventsourcing.persistence import MapperDeserialisationError, StoredEvent
from eventsourcing.utils import TopicError

from jobledger.persistence.archive_files import ArchivedEvent, events_digest
from jobledger.persistence.ledger import Ledger
from jobledger.persistence.log_store import LogRow, RowPage
from jobledger.projections.database import Cursor, Database
from jobledger.projections.log.positions import Positions
from jobledger.projections.log.reader import LogReader
from jobledger.projections.read_models.tables import ReadModelTables

log = structlog.get_logger(__name__)

# An execution's stream begins with one of these (at version 1).
FIRST_TOPICS = ("jobledger:ExecutionEnqueued", "jobledger:ExecutionSkipped")
# No command may follow these: a stream that ends with one is closed for good.
CLOSING_TOPICS = frozenset(
    {
        "jobledger:ExecutionCompleted",
        "jobledger:ExecutionCancelled",
        "jobledger:ExecutionDiscarded",
        "jobledger:ExecutionExpired",
        "jobledger:ExecutionSkipped",
    }
)
_UNDECODABLE = (MapperDeserialisationError, TopicError, ValueError)


class ArchiveStoreError(Exception):
    """The log changed under the archive: nothing was removed."""


@dataclass(frozen=True)
class Mark:
    """The low-water mark: the lowest position of any follower, and whose it is."""

    position: int
    follower: str


@dataclass(frozen=True)
class ClosedStream:
    """A closed execution's whole stream, as stored."""

    execution_id: UUID
    queue: str
    closed_at: datetime
    events: list[ArchivedEvent]


@dataclass(frozen=True)
class Removal:
    """One verified archive's executions, to leave the log with their record."""

    name: str
    location: str
    streams: Sequence[ClosedStream]
    events_sha256: str
    record: StoredEvent  # the HistoryArchived event
    sha256: str
    manifest_sha256: str
    archived_at: datetime


class EventTables(Protocol):
    """The event store's tables, in the projection database's transactions: each
    backend names them, and addresses their ids and positions, its own way."""

    @property
    def clash_errors(self) -> tuple[type[Exception], ...]:
        """What the driver raises for a row already there."""
        ...

    def lock(self, cursor: Cursor) -> None:
        """Take the events table as every save does, where a transaction does not."""

    def streams(self, cursor: Cursor, ids: Sequence[UUID]) -> dict[UUID, list[ArchivedEvent]]:
        """Every event of the streams of ``ids`` that has one, each in version order."""

    def insert(self, cursor: Cursor, stored: StoredEvent) -> None:
        """Record ``stored`` as the next event of the log (and wake the followers)."""

    def insert_at(self, cursor: Cursor, events: Sequence[ArchivedEvent]) -> None:
        """Insert ``events`` at their own positions."""

    def delete_streams(self, cursor: Cursor, ids: Sequence[UUID]) -> list[ArchivedEvent]:
        """Delete the streams and their snapshots; returns the events deleted, in order."""


class ArchiveBooks(Protocol):
    """What the database keeps of archives: which were recorded, which executions each
    holds; and which executions are still open (those stay in the log). Each works in
    the transaction of ``cursor``, beside the removal it records."""

    def still_open(self, cursor: Cursor, ids: Sequence[UUID]) -> set[UUID]:
        """Those of ``ids`` whose execution is open."""
        ...

    def record(self, cursor: Cursor, removal: Removal) -> None:
        """Record ``removal``'s archive and the executions it holds (a name recorded
        before fails the transaction)."""
        ...

    def forget(self, cursor: Cursor, name: str) -> None:
        """Forget which executions the archive ``name`` holds (it stays recorded)."""
        ...

    def archive_of(self, cursor: Cursor, execution_id: UUID) -> tuple[str, str] | None:
        """(name, location) of the archive holding ``execution_id``, if any."""
        ...

    def archived_ids(self, cursor: Cursor, ids: Sequence[UUID]) -> set[UUID]:
        """Those of ``ids`` that an archive holds."""
        ...

    def names(self, cursor: Cursor) -> set[str]:
        """The names of every archive recorded."""
        ...


class ArchiveStore:
    """Reads and removes closed executions' streams in the event store's database."""

    def __init__(
        self,
        ledger: Ledger,
        database: Database,
        tables: EventTables,
        *,
        positions: Positions,
        books: ArchiveBooks,
        read_models: ReadModelTables,
    ) -> None:
        self._ledger = ledger
        self._database = database
        self._positions = positions
        self._books = books
        self._read_models = read_models
        self._reader = LogReader(ledger, topics=FIRST_TOPICS)
        self._tables = tables

    def low_water_mark(self, queue_position: int | None) -> Mark:
        """The lowest follower position; ``queue_position``: the queue's, if known."""
        with self._database.transaction(snapshot=True) as cursor:
            mark = self._lowest(cursor)
        if queue_position is not None and queue_position < mark.position:
            return Mark(queue_position, "queue-projection")
        return mark

    def first_events(self, after: int, stop: int, limit: int) -> RowPage:
        """The first events of executions after ``after`` up to ``stop``."""
        return self._reader.rows(after, stop=stop, limit=limit)

    def created_at(self, row: LogRow) -> datetime | None:
        """When the execution of its first event ``row`` was created; None if that event
        no longer decodes (it is quarantined: its stream stays in the log)."""
        try:
            created: datetime = self._reader.event(row).timestamp
        except _UNDECODABLE:
            return None
        return created

    def closed(self, rows: Sequence[LogRow], mark: int) -> list[ClosedStream]:
        """The executions of ``rows`` (their first events) that closed at or below
        ``mark``, each with every event of its stream."""
        ids = [UUID(str(row[1])) if not isinstance(row[1], UUID) else row[1] for row in rows]
        with self._database.transaction(snapshot=True) as cursor:
            still_open = self._books.still_open(cursor, ids)
            shut = [i for i in ids if i not in still_open]
            streams = self._tables.streams(cursor, shut)
        found = [self._closed(i, streams.get(i, []), mark) for i in shut]
        return [stream for stream in found if stream is not None]

    def _closed(
        self, execution_id: UUID, events: list[ArchivedEvent], mark: int
    ) -> ClosedStream | None:
        """The stream, if it is whole, closed, and closed at or below ``mark``."""
        if not events or events[-1].topic not in CLOSING_TOPICS or events[-1].position > mark:
            return None
        if [e.originator_version for e in events] != list(range(1, len(events) + 1)):
            return None  # a stream whose events are not all there (yet): leave it
        try:
            first = self._reader.event(_row(events[0]))
            closed_at: datetime = self._reader.event(_row(events[-1])).timestamp
        except _UNDECODABLE:
            return None
        return ClosedStream(execution_id, str(first.spec.queue), closed_at, events)

    def remove(self, removal: Removal) -> None:
        """Record ``removal.record`` and remove the streams, their snapshots and
        read-model rows, in one transaction; ArchiveStoreError (and nothing changed) if
        the rows removed are not exactly the archived ones, or a follower fell below."""
        last = max(e.position for s in removal.streams for e in s.events)
        with self._database.transaction() as cursor:
            self._lock(cursor)
            mark = self._lowest(cursor)
            if mark.position < last:
                msg = f"the {mark.follower} follower moved back to {mark.position}, below {last}"
                raise ArchiveStoreError(msg)
            self._tables.insert(cursor, removal.record)
            removed = self._tables.delete_streams(cursor, [s.execution_id for s in removal.streams])
            if events_digest(removed) != removal.events_sha256:
                msg = f"the log's events are not those archived in {removal.name}"
                raise ArchiveStoreError(msg)
            self._read_models.forget_executions(
                cursor, [str(s.execution_id) for s in removal.streams]
            )
            self._books.record(cursor, removal)

    def restore(self, name: str, events: Sequence[ArchivedEvent], record: StoredEvent) -> None:
        """Put ``events`` back at their positions, record ``record`` (HistoryRestored)
        and forget the archive's executions in the index, in one transaction. The followers are past
        those positions: their rows come back with a rebuild."""
        try:
            with self._database.transaction() as cursor:
                self._lock(cursor)
                self._tables.insert(cursor, record)
                self._tables.insert_at(cursor, events)
                # The archive's row stays: its files are no orphans (HistoryRestored says
                # its events are back).
                self._books.forget(cursor, name)
        except self._tables.clash_errors as error:
            msg = f"{name}: a stream of it is in the log again ({error.__class__.__name__})"
            raise ArchiveStoreError(msg) from None

    def archive_of(self, execution_id: UUID) -> tuple[str, str] | None:
        """(name, folder) of the archive holding ``execution_id``, if it was archived."""
        with self._database.transaction(snapshot=True) as cursor:
            return self._books.archive_of(cursor, execution_id)

    def archived_ids(self, execution_ids: Sequence[UUID]) -> set[UUID]:
        """Those of ``execution_ids`` that were archived."""
        with self._database.transaction(snapshot=True) as cursor:
            return self._books.archived_ids(cursor, execution_ids)

    def _lock(self, cursor: Cursor) -> None:
        """Take the position rows, then the events table as every save does."""
        self._positions.lock_all(cursor)
        self._tables.lock(cursor)

    def _lowest(self, cursor: Cursor) -> Mark:
        lowest = self._positions.lowest(cursor)
        return Mark(0, "(none yet)") if lowest is None else Mark(lowest[1], lowest[0])

    def recorded(self) -> set[str]:
        """The names of every archive whose removal committed."""
        with self._database.transaction(snapshot=True) as cursor:
            return self._books.names(cursor)


def _row(event: ArchivedEvent) -> LogRow:
    return (
        event.position,
        event.originator_id,
        event.originator_version,
        event.topic,
        event.state,
    )


__all__ = [
    "CLOSING_TOPICS",
    "ArchiveBooks",
    "ArchiveStore",
    "ArchiveStoreError",
    "ClosedStream",
    "EventTables",
    "Mark",
    "Removal",
]
