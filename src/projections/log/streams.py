"""Loading many aggregates at once: one query for their streams instead of one each.

A worker that leases 32 executions would otherwise make 32 round trips (and 32 cache
copies) before it can record the leases. On PostgreSQL the streams come back in one
statement; other stores load them one by one through the repository.
"""

import functools
from collections.abc import Sequence
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import InterfaceError, OperationalError
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.utils import retry
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Identifier

from jobledger.persistence.codec import row_decoder
from jobledger.persistence.held import HeldConnection
from jobledger.persistence.ledger import Ledger

A = TypeVar("A", bound=Aggregate)

_STREAMS = (
    "SELECT originator_id, originator_version, topic, state FROM {}.{} "
    "WHERE originator_id = ANY(%s) ORDER BY originator_id, originator_version"
)


def load_many(
    ledger: Ledger, kind: type[A], ids: Sequence[UUID], held: HeldConnection | None = None
) -> dict[UUID, A]:
    """The current state of each id that exists and is a ``kind``; others are left out.
    On PostgreSQL, on ``held``'s connection if given (a worker's lease rounds), else on
    one of the pool's."""
    if not ids:
        return {}
    recorder = ledger.recorder
    if not isinstance(recorder, PostgresApplicationRecorder):
        return _one_by_one(ledger, kind, ids)
    # Straight from the columns, without a StoredEvent (a worker loads every run it leases).
    decode = row_decoder(ledger.mapper)
    found: dict[UUID, A] = {}
    aggregate: Any = None
    current: UUID | None = None
    # The ids come as UUIDs (the column's type), the rows ordered by id and version.
    for originator_id, version, topic, state in _select_streams(recorder, list(ids), held):
        if originator_id != current:
            _keep(found, kind, current, aggregate)
            current, aggregate = originator_id, None
        domain_event: Any = decode(originator_id, version, topic, state)
        aggregate = domain_event.mutate(aggregate)
    _keep(found, kind, current, aggregate)
    return found


def _keep(found: dict[UUID, A], kind: type[A], key: UUID | None, aggregate: object) -> None:
    if key is not None and isinstance(aggregate, kind):
        found[key] = aggregate


def _one_by_one(ledger: Ledger, kind: type[A], ids: Sequence[UUID]) -> dict[UUID, A]:
    found: dict[UUID, A] = {}
    for aggregate_id in ids:
        try:
            aggregate: Aggregate = ledger.repository.get(aggregate_id)
        except AggregateNotFoundError:
            continue
        if isinstance(aggregate, kind):
            found[aggregate_id] = aggregate
    return found


@retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
def _select_streams(
    recorder: PostgresApplicationRecorder, ids: list[UUID], held: HeldConnection | None
) -> list[tuple[UUID, int, str, bytes]]:
    datastore = recorder.datastore
    statement = _streams_statement(datastore.schema, recorder.events_table_name)
    connection = datastore.get_connection() if held is None else held.connection()
    with (
        connection as conn,
        conn.cursor(row_factory=tuple_row, binary=True) as cursor,
    ):
        cursor.execute(statement, [ids], prepare=True)
        return [
            (o, v, t, s if isinstance(s, bytes) else bytes(s)) for o, v, t, s in cursor.fetchall()
        ]


@functools.cache
def _streams_statement(schema: str, table: str) -> bytes:
    # As bytes, once: psycopg would compose it again for every lease round.
    return SQL(_STREAMS).format(Identifier(schema), Identifier(table)).as_bytes(None)
