"""The PostgreSQL event store's own paths (the ``LogStore`` port): COPY for saves, one
statement for many streams, binary rows for pages, a connection a thread keeps."""

import functools
from collections.abc import Sequence
from typing import cast
from uuid import UUID

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    InterfaceError,
    OperationalError,
    StoredEvent,
)
from eventsourcing.postgres import PostgresAggregateRecorder, PostgresApplicationRecorder
from eventsourcing.utils import retry
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Identifier

from jobledger.adapters.postgres.bulk import copy_events
from jobledger.adapters.postgres.held import HeldConnection
from jobledger.adapters.postgres.job_loads import select_streams
from jobledger.adapters.postgres.log_rows import fetch, select_head_and_rows, select_rows
from jobledger.persistence.codec import StoredRow
from jobledger.persistence.log_store import (
    Held,
    LivePage,
    LogRow,
    RowPage,
    RowRead,
    StreamRow,
    page_of,
)

_STREAMS = (
    "SELECT originator_id, originator_version, topic, state FROM {}.{} "
    "WHERE originator_id = ANY(%s) ORDER BY originator_id, originator_version"
)
_POSITIONS = "SELECT originator_version, notification_id FROM {}.{} WHERE originator_id = %s"


class PostgresLogStore:
    """The ``LogStore`` of eventsourcing's PostgreSQL recorders."""

    def __init__(self, recorder: ApplicationRecorder, snapshots: AggregateRecorder | None) -> None:
        if not isinstance(recorder, PostgresApplicationRecorder):
            msg = f"a PostgreSQL log store needs a PostgreSQL recorder, not {type(recorder)}"
            raise TypeError(msg)
        self.recorder = recorder
        self.snapshots = snapshots if isinstance(snapshots, PostgresAggregateRecorder) else None

    def hold(self) -> HeldConnection:
        return HeldConnection(self.recorder.datastore)

    appends = True

    def append(self, rows: Sequence[StoredEvent | StoredRow], held: Held | None) -> None:
        copy_events(self.recorder, rows, _held(held))

    def newest_and_after(self, ids: Sequence[UUID]) -> list[StreamRow] | None:
        if self.snapshots is None:
            return None
        if not ids:
            return []
        rows: list[StreamRow] = select_streams(self.recorder, self.snapshots, ids)
        return rows

    def streams(self, ids: Sequence[UUID], held: Held | None) -> list[StreamRow]:
        rows: list[StreamRow] = _select_streams(self.recorder, list(ids), _held(held))
        return rows

    def positions(self, originator_id: UUID) -> dict[int, int]:
        recorder = self.recorder
        datastore = recorder.datastore
        statement = SQL(_POSITIONS).format(
            Identifier(datastore.schema), Identifier(recorder.events_table_name)
        )
        with datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as cursor:
            cursor.execute(statement, [originator_id])
            return dict(cursor.fetchall())

    def read_rows(self, after: int, read: RowRead) -> RowPage:
        recorder = self.recorder
        if isinstance(read, LivePage):
            head, stamp, found = select_head_and_rows(
                recorder, after, read.limit, list(read.topics), _held(read.held)
            )
            return page_of(head, found, read.limit, stamp)
        head = recorder.max_notification_id() or 0
        if read.stop is not None:
            head = min(head, read.stop)
        limit = read.limit
        if read.part is not None:
            # A window of positions, not a LIMIT: the planner cannot know how rare a
            # share's events are, and would scan the whole table for each page.
            limit *= read.part[1]
            head = min(head, after + limit)
        if head <= after:
            return RowPage((), after)
        rows: list[LogRow] = select_rows(
            recorder,
            after,
            head,
            limit,
            list(read.topics),
            part=read.part,
            text_ids=read.text_ids,
        )
        return page_of(head, rows, limit)


def _held(held: Held | None) -> HeldConnection | None:
    # Only this store's ``hold`` makes the connections its callers hand back.
    return cast("HeldConnection | None", held)


@retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
def _select_streams(
    recorder: PostgresApplicationRecorder, ids: list[UUID], held: HeldConnection | None
) -> list[StreamRow]:
    statement = _streams_statement(recorder.datastore.schema, recorder.events_table_name)
    return [
        (o, v, t, s if isinstance(s, bytes) else bytes(s))
        for o, v, t, s in fetch(recorder, statement, [ids], held)
    ]


@functools.cache
def _streams_statement(schema: str, table: str) -> bytes:
    # As bytes, once: psycopg would compose it again for every lease round.
    return SQL(_STREAMS).format(Identifier(schema), Identifier(table)).as_bytes(None)
