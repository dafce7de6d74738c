"""The SQLite event store's own paths (the ``LogStore`` port): the recorder's interface
for saves, loads and pages (one connection: nothing to batch into fewer round trips),
the rowid for positions."""

from uuid import UUID

from eventsourcing.persistence import AggregateRecorder, ApplicationRecorder
from eventsourcing.sqlite import SQLiteApplicationRecorder

from jobledger.persistence.log_store import RecorderLogStore


class SqliteLogStore(RecorderLogStore):
    """The ``LogStore`` of eventsourcing's SQLite recorders."""

    def __init__(self, recorder: ApplicationRecorder, snapshots: AggregateRecorder | None) -> None:
        if not isinstance(recorder, SQLiteApplicationRecorder):
            msg = f"a SQLite log store needs a SQLite recorder, not {type(recorder)}"
            raise TypeError(msg)
        super().__init__(recorder, snapshots)
        self.sqlite = recorder

    def positions(self, originator_id: UUID) -> dict[int, int]:
        table = self.sqlite.events_table_name  # the recorder's own name, not user input
        with self.sqlite.datastore.transaction(commit=False) as cursor:
            cursor.execute(
                f"SELECT originator_version, rowid FROM {table} WHERE originator_id = ?",  # noqa: S608 (see above)
                [originator_id.hex],
            )
            return {row[0]: row[1] for row in cursor.fetchall()}
