"""The SQLite event store's tables, as an archive works on them: ids as hex, positions
as rowids; a transaction's write lock already holds the table."""

import sqlite3
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.sqlite import SQLiteAggregateRecorder, SQLiteApplicationRecorder

from jobledger.adapters.sql.event_tables import SqlEventTables, recorders
from jobledger.persistence.ledger import Ledger


class SqliteEventTables(SqlEventTables):
    position = "rowid"
    clash_errors = (sqlite3.IntegrityError,)

    def __init__(self, ledger: Ledger) -> None:
        recorder, snapshots = recorders(
            ledger, SQLiteApplicationRecorder, SQLiteAggregateRecorder, "SQLite"
        )
        self.events = f'"{recorder.events_table_name}"'
        self.snapshots = None if snapshots is None else f'"{snapshots.events_table_name}"'

    def ids(self, ids: Sequence[UUID]) -> list[Any]:
        return [i.hex for i in ids]
