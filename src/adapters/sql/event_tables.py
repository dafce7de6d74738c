"""The event store's tables as an archive reads, removes and restores streams in them
(the ``EventTables`` port): the names and ways of eventsourcing's recorders, on the
projection database's cursor."""

from collections.abc import Iterator, Sequence
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.persistence import AggregateRecorder, ApplicationRecorder, StoredEvent

from jobledger.persistence.archive_files import ArchivedEvent
from jobledger.persistence.ledger import Ledger
from jobledger.projections.database import Cursor, chunked

_IDS = 500  # ids per statement

_Events = TypeVar("_Events", bound=ApplicationRecorder)
_Snapshots = TypeVar("_Snapshots", bound=AggregateRecorder)


def recorders(
    ledger: Ledger, events: type[_Events], snapshots: type[_Snapshots], backend: str
) -> tuple[_Events, _Snapshots | None]:
    """The ledger's recorders as ``backend``'s own classes (a TypeError for another's);
    no snapshots recorder where snapshots are off."""
    recorder = ledger.recorder
    if not isinstance(recorder, events):
        msg = f"{backend}'s event tables need a {backend} recorder, not {type(recorder)}"
        raise TypeError(msg)
    kept = None if ledger.snapshots is None else ledger.snapshots.recorder
    return recorder, kept if isinstance(kept, snapshots) else None


class SqlEventTables:
    """What both backends share; ``PostgresEventTables`` and ``SqliteEventTables`` name
    their tables, positions and ids."""

    events: str  # the events table, quoted (the recorder's own name, not user input)
    snapshots: str | None  # the snapshots table, quoted, if snapshots are on
    position: str  # the column of a log position
    clash_errors: tuple[type[Exception], ...]  # a row already there, as the driver says

    def ids(self, ids: Sequence[UUID]) -> list[Any]:
        """As the backend stores originator ids (parameters, one per id)."""
        return list(ids)

    def among(self, count: int) -> str:
        """``originator_id`` is one of ``count`` ids."""
        return f"originator_id IN ({', '.join('?' * count)})"

    def id_params(self, ids: Sequence[UUID]) -> list[Any]:
        """The parameters of ``among``."""
        return self.ids(ids)

    def notify(self, cursor: Cursor) -> None:
        """Wake the followers, where the store can."""

    def lock(self, cursor: Cursor) -> None:
        """Take the events table as every save does, where a transaction does not."""

    def streams(self, cursor: Cursor, ids: Sequence[UUID]) -> dict[UUID, list[ArchivedEvent]]:
        """Every event of the streams of ``ids`` that has one, each in version order."""
        found: dict[UUID, list[ArchivedEvent]] = {}
        for chunk in chunked(list(ids), _IDS):
            cursor.execute(
                f"SELECT {self.position}, originator_id, originator_version, topic, state "  # noqa: S608 (the recorder's own names)
                f"FROM {self.events} WHERE {self.among(len(chunk))}",
                self.id_params(chunk),
            )
            for row in _fetched(cursor):
                event = _archived(row)
                found.setdefault(event.originator_id, []).append(event)
        for events in found.values():
            events.sort(key=lambda e: e.originator_version)
        return found

    def insert(self, cursor: Cursor, stored: StoredEvent) -> None:
        """Record ``stored`` first: on SQLite the newest row then stays, so the rowids
        of removed rows are never handed out again."""
        originator_id = UUID(str(stored.originator_id))
        values = [
            *self.ids([originator_id]),
            stored.originator_version,
            stored.topic,
            stored.state,
        ]
        cursor.execute(
            f"INSERT INTO {self.events} (originator_id, originator_version, topic, state) "  # noqa: S608 (the recorder's own names)
            "VALUES (?, ?, ?, ?)",
            values,
        )
        self.notify(cursor)

    def insert_at(self, cursor: Cursor, events: Sequence[ArchivedEvent]) -> None:
        """Insert ``events`` at their own positions (ids below the head are free: the
        archive took them out)."""
        cursor.executemany(
            f"INSERT INTO {self.events} ({self.position}, originator_id, originator_version, "  # noqa: S608 (the recorder's own names)
            "topic, state) VALUES (?, ?, ?, ?, ?)",
            [
                (e.position, *self.ids([e.originator_id]), e.originator_version, e.topic, e.state)
                for e in events
            ],
        )

    def delete_streams(self, cursor: Cursor, ids: Sequence[UUID]) -> list[ArchivedEvent]:
        """Delete the streams and their snapshots; returns the events deleted, in order."""
        removed: list[ArchivedEvent] = []
        for chunk in chunked(list(ids), _IDS):
            cursor.execute(
                f"DELETE FROM {self.events} WHERE {self.among(len(chunk))} "  # noqa: S608 (the recorder's own names)
                f"RETURNING {self.position}, originator_id, originator_version, topic, state",
                self.id_params(chunk),
            )
            removed += [_archived(row) for row in _fetched(cursor)]
            if self.snapshots is not None:
                cursor.execute(
                    f"DELETE FROM {self.snapshots} WHERE {self.among(len(chunk))}",  # noqa: S608 (the recorder's own names)
                    self.id_params(chunk),
                )
        return sorted(removed, key=lambda e: e.position)


def _fetched(cursor: Cursor) -> Iterator[Any]:
    while rows := cursor.fetchmany(10_000):
        yield from rows


def _archived(row: Sequence[Any]) -> ArchivedEvent:
    position, originator_id, version, topic, state = row
    uuid = originator_id if isinstance(originator_id, UUID) else UUID(str(originator_id))
    return ArchivedEvent(int(position), uuid, int(version), str(topic), bytes(state))
