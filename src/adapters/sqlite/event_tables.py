"""The SQLite event store's tables, as an archive works on them: ids as hex, positions
as rowids; a transaction's write lock already holds the table."""

import sqlite3
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.sqlite import SQLiteAggregateRecorder, SQLiteApplicationRecorder

from jobledger.adapters.sql.event_tables import SqlEventTables
from jobledger.persistence.ledger import Ledger


class SqliteEventTables(SqlEventTables):
    position = "rowid"
    clash_errors = (sqlite3.IntegrityError,)

    def __init__(self, ledger: Ledger) -> None:
        recorder = ledger.recorder
        if not isinstance(recorder, SQLiteApplicationRecorder):
            msg = f"SQLite's event tables need a SQLite recorder, not {type(recorder)}"
            raise TypeError(msg)
        self.events = f'"{recorder.events_table_name}"'
        snapshots = None if ledger.snapshots is None else ledger.snapshots.recorder
        self.snapshots = (
            f'"{snapshots.events_table_name}"'
            if isinstance(snapshots, SQLiteAggregateRecorder)
            else None
        )

    def ids(self, ids: Sequence[UUID]) -> list[Any]:
        return [i.hex for i in ids]
