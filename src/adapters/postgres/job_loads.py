"""Loading many jobs in one round trip: each one's newest snapshot and the events after it.

The repository loads one aggregate per call: a query for the newest snapshot and one
for the events after it, each on a connection of its own. A scheduler tick that fires a
few hundred jobs spent most of its time there. On PostgreSQL one statement selects, for
all the ids at once, what those two queries would: the newest snapshot of each (if any)
and every event after it, in stream order.
"""

import functools
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import InterfaceError, OperationalError
from eventsourcing.postgres import PostgresAggregateRecorder, PostgresApplicationRecorder
from eventsourcing.utils import retry
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Composed, Identifier

from jobledger.persistence.log_store import StreamRow

# A snapshot's version is never one of the events read after it, so ordering by
# (id, version) puts each stream's snapshot first and its events after it in order.
_NEWEST_AND_AFTER = """
WITH newest AS (
    SELECT DISTINCT ON (originator_id) originator_id, originator_version, topic, state
    FROM {schema}.{snapshots} WHERE originator_id = ANY(%(ids)s::uuid[])
    ORDER BY originator_id, originator_version DESC
)
SELECT originator_id, originator_version, topic, state FROM newest
UNION ALL
SELECT e.originator_id, e.originator_version, e.topic, e.state
FROM unnest(%(ids)s::uuid[]) AS wanted (id)
LEFT JOIN newest n ON n.originator_id = wanted.id
JOIN {schema}.{events} e
    ON e.originator_id = wanted.id AND e.originator_version > coalesce(n.originator_version, 0)
ORDER BY 1, 2
"""


@retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
def select_streams(
    events: PostgresApplicationRecorder,
    snapshots: PostgresAggregateRecorder,
    ids: Sequence[UUID],
) -> list[StreamRow]:
    """For each of ``ids``: its newest snapshot, if any, then the events after it; the
    streams ordered by id, each in version order."""
    datastore = events.datastore
    statement = _statement(datastore.schema, snapshots.events_table_name, events.events_table_name)
    with (
        datastore.get_connection() as conn,
        conn.cursor(row_factory=tuple_row, binary=True) as cursor,
    ):
        cursor.execute(statement, {"ids": list(ids)}, prepare=True)
        return cursor.fetchall()


@functools.cache
def _statement(schema: str, snapshots: str, events: str) -> Composed:
    names: dict[str, Any] = {
        "schema": Identifier(schema),
        "snapshots": Identifier(snapshots),
        "events": Identifier(events),
    }
    return SQL(_NEWEST_AND_AFTER).format(**names)
