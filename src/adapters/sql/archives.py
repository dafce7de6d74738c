"""The archive's bookkeeping tables (ADR 45): ``jobledger_archives`` (one row per
archive whose removal committed) and ``jobledger_archived_executions`` (which archive
holds each execution), and the open executions an archive must leave in the log."""

from collections.abc import Sequence
from uuid import UUID

from jobledger.projections.database import Cursor, chunked
from jobledger.projections.log.archive_store import Removal
from jobledger.projections.times import to_ms

_IDS = 500  # ids per IN (...) list, well below SQLite's parameter limit
_OPEN = "SELECT execution_id FROM jobledger_open_executions WHERE execution_id IN"
_ARCHIVED_IDS = "SELECT execution_id FROM jobledger_archived_executions WHERE execution_id IN"
_ARCHIVE_OF = (
    "SELECT a.name, a.location FROM jobledger_archived_executions e "
    "JOIN jobledger_archives a ON a.name = e.archive WHERE e.execution_id = ?"
)
_NAMES = "SELECT name FROM jobledger_archives"
_FORGET_ARCHIVED = "DELETE FROM jobledger_archived_executions WHERE archive = ?"
_INSERT_ARCHIVE = (
    "INSERT INTO jobledger_archives (name, location, first_position, last_position, "
    "executions, events, sha256, manifest_sha256, archived_at_ms) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_ARCHIVED = "INSERT INTO jobledger_archived_executions (execution_id, archive) VALUES (?, ?)"


class SqlArchiveBooks:
    """The archive's bookkeeping (``ArchiveBooks``) on the event store's database."""

    def still_open(self, cursor: Cursor, ids: Sequence[UUID]) -> set[UUID]:
        return _found(cursor, _OPEN, ids)

    def record(self, cursor: Cursor, removal: Removal) -> None:
        ids = [str(s.execution_id) for s in removal.streams]
        first = min(e.position for s in removal.streams for e in s.events)
        last = max(e.position for s in removal.streams for e in s.events)
        count = sum(len(s.events) for s in removal.streams)
        cursor.execute(
            _INSERT_ARCHIVE,
            (
                removal.name,
                removal.location,
                first,
                last,
                len(ids),
                count,
                removal.sha256,
                removal.manifest_sha256,
                to_ms(removal.archived_at),
            ),
        )
        cursor.executemany(_INSERT_ARCHIVED, [(i, removal.name) for i in ids])

    def forget(self, cursor: Cursor, name: str) -> None:
        cursor.execute(_FORGET_ARCHIVED, (name,))

    def archive_of(self, cursor: Cursor, execution_id: UUID) -> tuple[str, str] | None:
        cursor.execute(_ARCHIVE_OF, (str(execution_id),))
        row = cursor.fetchone()
        return None if row is None else (str(row[0]), str(row[1]))

    def archived_ids(self, cursor: Cursor, ids: Sequence[UUID]) -> set[UUID]:
        return _found(cursor, _ARCHIVED_IDS, ids)

    def names(self, cursor: Cursor) -> set[str]:
        return {str(row[0]) for batch in cursor.stream(_NAMES) for row in batch}


def _found(cursor: Cursor, select: str, ids: Sequence[UUID]) -> set[UUID]:
    """Those of ``ids`` that ``select`` (ending in ``IN``) finds."""
    found: set[UUID] = set()
    for chunk in chunked([str(i) for i in ids], _IDS):
        cursor.execute_in(select, chunk)
        found.update(UUID(str(row[0])) for row in cursor.fetchmany(len(chunk)))
    return found
