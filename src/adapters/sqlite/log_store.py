"""The SQLite event store's own paths (the ``LogStore`` port): the recorder's interface
for saves and pages (one connection: nothing to batch into fewer round trips), one
statement for many streams (the repository would build and copy each one alone), the
rowid for positions."""

from collections.abc import Sequence
from uuid import UUID

from eventsourcing.persistence import AggregateRecorder, ApplicationRecorder
from eventsourcing.sqlite import SQLiteApplicationRecorder

from jobledger.persistence.log_store import Held, RecorderLogStore, StreamRow
from jobledger.projections.database import chunked

_IDS = 500  # ids per statement: SQLite allows a few thousand parameters at most


class SqliteLogStore(RecorderLogStore):
    """The ``LogStore`` of eventsourcing's SQLite recorders."""

    def __init__(self, recorder: ApplicationRecorder, snapshots: AggregateRecorder | None) -> None:
        if not isinstance(recorder, SQLiteApplicationRecorder):
            msg = f"a SQLite log store needs a SQLite recorder, not {type(recorder)}"
            raise TypeError(msg)
        super().__init__(recorder, snapshots)
        self.sqlite = recorder

    def streams(self, ids: Sequence[UUID], held: Held | None) -> list[StreamRow]:  # noqa: ARG002 (one connection: nothing to hold)
        table = self.sqlite.events_table_name  # the recorder's own name, not user input
        found: list[StreamRow] = []
        with self.sqlite.datastore.transaction(commit=False) as cursor:
            for ids_chunk in chunked(ids, _IDS):
                chunk = [i.hex for i in ids_chunk]
                cursor.execute(
                    "SELECT originator_id, originator_version, topic, state "  # noqa: S608 (see above)
                    f"FROM {table} WHERE originator_id IN ({', '.join('?' * len(chunk))}) "
                    "ORDER BY originator_id, originator_version",
                    chunk,
                )
                found += [(UUID(o), v, t, bytes(s)) for o, v, t, s in cursor.fetchall()]
        return found

    def positions(self, originator_id: UUID) -> dict[int, int]:
        table = self.sqlite.events_table_name  # the recorder's own name, not user input
        with self.sqlite.datastore.transaction(commit=False) as cursor:
            cursor.execute(
                f"SELECT originator_version, rowid FROM {table} WHERE originator_id = ?",  # noqa: S608 (see above)
                [originator_id.hex],
            )
            return {row[0]: row[1] for row in cursor.fetchall()}
