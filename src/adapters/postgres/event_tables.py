"""The PostgreSQL event store's tables, as an archive works on them."""

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.postgres import PostgresAggregateRecorder, PostgresApplicationRecorder

from jobledger.adapters.sql.event_tables import SqlEventTables, recorders
from jobledger.persistence.ledger import Ledger
from jobledger.projections.database import Cursor


class PostgresEventTables(SqlEventTables):
    position = "notification_id"
    clash_errors = (psycopg.IntegrityError,)

    def __init__(self, ledger: Ledger) -> None:
        recorder, snapshots = recorders(
            ledger, PostgresApplicationRecorder, PostgresAggregateRecorder, "PostgreSQL"
        )
        schema = recorder.datastore.schema
        self.events = f'"{schema}"."{recorder.events_table_name}"'
        self.snapshots = (
            None if snapshots is None else f'"{schema}"."{snapshots.events_table_name}"'
        )
        self.channel = recorder.channel_name

    def among(self, count: int) -> str:  # noqa: ARG002 (one array, whatever the count)
        # One array: a list of placeholders costs psycopg more to parse than the server
        # to run.
        return "originator_id = ANY(?)"

    def id_params(self, ids: Sequence[UUID]) -> list[Any]:
        return [list(ids)]

    def notify(self, cursor: Cursor) -> None:
        cursor.execute(f'NOTIFY "{self.channel}"')

    def lock(self, cursor: Cursor) -> None:
        cursor.execute("SET LOCAL lock_timeout = '10s'")
        cursor.execute(f"LOCK TABLE {self.events} IN EXCLUSIVE MODE")
