"""The ``ArchiveBooks`` port's contract (``projections.log.archive_store``), run on
both stores through ``SqlArchiveBooks``: a recorded archive is found by name and by
the executions it holds, forgetting them keeps the archive, and only the open
executions are open.

Each test makes archives and executions of its own in a store its module shares."""

import sqlite3
import uuid
from datetime import UTC, datetime

import psycopg
import pytest
from eventsourcing.persistence import StoredEvent

from jobledger.adapters.sql.archives import SqlArchiveBooks
from jobledger.persistence.archive_files import ArchivedEvent
from jobledger.projections.database import Database
from jobledger.projections.log.archive_store import ArchiveBooks, ClosedStream, Removal

INTEGRITY_ERRORS = (psycopg.IntegrityError, sqlite3.IntegrityError)
MANY = 1_200  # more ids than one IN (...) list takes


@pytest.fixture
def books() -> ArchiveBooks:
    return SqlArchiveBooks()


def removal(*execution_ids: uuid.UUID, name: str | None = None) -> Removal:
    """An archive of ``execution_ids``, each a stream of two events."""
    streams = [
        ClosedStream(
            execution_id,
            "default",
            datetime(2026, 1, 1, tzinfo=UTC),
            [ArchivedEvent(10 + 2 * n + v, execution_id, v, "t", b"") for v in (1, 2)],
        )
        for n, execution_id in enumerate(execution_ids)
    ]
    return Removal(
        name=name or f"archive-{uuid.uuid4().hex[:10]}",
        location="/archives/here",
        streams=streams,
        events_sha256="e",
        record=StoredEvent(uuid.uuid4(), 1, "t", b""),
        sha256="s",
        manifest_sha256="m",
        archived_at=datetime(2026, 1, 2, tzinfo=UTC),
    )


def record(database: Database, books: ArchiveBooks, archive: Removal) -> None:
    with database.transaction() as cursor:
        books.record(cursor, archive)


def test_a_recorded_archive_holds_its_executions(
    books: ArchiveBooks, module_database: Database
) -> None:
    """If an archive is recorded, then its name is among the names, each of its
    executions is found in it, and executions of no archive are not."""
    held = [uuid.uuid4() for _ in range(3)]
    other = uuid.uuid4()
    archive = removal(*held)
    record(module_database, books, archive)
    with module_database.transaction(snapshot=True) as cursor:
        assert archive.name in books.names(cursor)
        assert books.archived_ids(cursor, [*held, other]) == set(held)
        assert books.archive_of(cursor, held[1]) == (archive.name, "/archives/here")
        assert books.archive_of(cursor, other) is None
    with module_database.transaction(snapshot=True) as cursor:
        cursor.execute(
            "SELECT first_position, last_position, executions, events, archived_at_ms "
            "FROM jobledger_archives WHERE name = ?",
            (archive.name,),
        )
        assert tuple(cursor.fetchone()) == (11, 16, 3, 6, 1767312000000)


def test_an_archive_is_recorded_once(books: ArchiveBooks, module_database: Database) -> None:
    """If an archive's name was recorded, then recording it again fails its transaction
    and keeps none of its executions."""
    first = removal(uuid.uuid4())
    record(module_database, books, first)
    again = removal(uuid.uuid4(), name=first.name)
    with pytest.raises(INTEGRITY_ERRORS):
        record(module_database, books, again)
    with module_database.transaction(snapshot=True) as cursor:
        assert books.archived_ids(cursor, [again.streams[0].execution_id]) == set()


def test_a_forgotten_archive_holds_no_executions_but_stays(
    books: ArchiveBooks, module_database: Database
) -> None:
    """If an archive's executions are forgotten (a restore), then none is found in it,
    those of other archives still are, and the archive's name stays."""
    gone, kept = removal(uuid.uuid4(), uuid.uuid4()), removal(uuid.uuid4())
    record(module_database, books, gone)
    record(module_database, books, kept)
    with module_database.transaction() as cursor:
        books.forget(cursor, gone.name)
    ids = [s.execution_id for s in (*gone.streams, *kept.streams)]
    with module_database.transaction(snapshot=True) as cursor:
        assert books.archived_ids(cursor, ids) == {kept.streams[0].execution_id}
        assert books.archive_of(cursor, ids[0]) is None
        assert {gone.name, kept.name} <= books.names(cursor)


def test_many_ids_are_looked_up_at_once(books: ArchiveBooks, module_database: Database) -> None:
    """If more ids are asked about than one statement takes, then every one is."""
    held = [uuid.uuid4() for _ in range(MANY)]
    record(module_database, books, removal(*held))
    asked = [*held[::2], *(uuid.uuid4() for _ in range(MANY))]
    with module_database.transaction(snapshot=True) as cursor:
        assert books.archived_ids(cursor, asked) == set(held[::2])


def test_only_open_executions_are_open(books: ArchiveBooks, module_database: Database) -> None:
    """If executions have an open row, then they are open; others are not."""
    opened = [uuid.uuid4() for _ in range(MANY)]
    with module_database.transaction() as cursor:
        cursor.executemany(
            "INSERT INTO jobledger_open_executions (execution_id, queue, version, state, "
            "priority, score, item) VALUES (?, 'default', 1, 'pending', 0, 0, ?)",
            [(str(i), b"x") for i in opened],
        )
    closed = [uuid.uuid4() for _ in range(3)]
    with module_database.transaction(snapshot=True) as cursor:
        assert books.still_open(cursor, [*opened, *closed]) == set(opened)
        assert books.still_open(cursor, closed) == set()
