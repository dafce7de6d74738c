"""Pages of the PostgreSQL log as binary rows: what the recorder's
``select_notifications`` selects, without a dict per row, text to parse or
``Notification`` objects."""

import functools
from typing import Any

from eventsourcing.persistence import InterfaceError, OperationalError
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.utils import retry
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Identifier, Literal

from jobledger.adapters.postgres.held import HeldConnection
from jobledger.persistence.log_store import LogRow

_ROWS = (
    "SELECT notification_id, {}, originator_version, topic, state FROM {}.{} "
    "WHERE notification_id > %s AND notification_id <= %s{} ORDER BY notification_id LIMIT %s"
)


@retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
def select_rows(
    recorder: PostgresApplicationRecorder,
    after: int,
    head: int,
    limit: int,
    topics: list[str],
    *,
    part: tuple[int, int] | None = None,
    text_ids: bool = False,
) -> list[LogRow]:
    """The events after ``after`` up to ``head`` (of ``topics``, of ``part``'s share)."""
    datastore = recorder.datastore
    statement = _rows_statement(
        datastore.schema,
        recorder.events_table_name,
        tuple(topics),
        parted=bool(part),
        text_ids=text_ids,
    )
    params: list[Any] = [after, head, *(part or ())[::-1], limit]
    return fetch(recorder, statement, params)


def fetch(
    recorder: PostgresApplicationRecorder,
    statement: bytes,
    params: list[Any],
    held: HeldConnection | None = None,
) -> list[Any]:
    """The rows of a prepared ``statement``, as binary tuples, on ``held``'s connection
    or a pooled one."""
    connection = recorder.datastore.get_connection() if held is None else held.connection()
    with (
        connection as conn,
        conn.cursor(row_factory=tuple_row, binary=True) as cursor,
    ):
        cursor.execute(statement, params, prepare=True)
        return cursor.fetchall()


_HEAD_AND_ROWS = (
    "SELECT h.head, h.stamp, e.notification_id, e.originator_id, e.originator_version, "
    "e.topic, e.state FROM (SELECT max(notification_id) AS head, "
    "(SELECT stamp FROM jobledger_quarantine_stamp) AS stamp FROM {0}.{1}) h "
    "LEFT JOIN LATERAL (SELECT notification_id, originator_id, originator_version, topic, "
    "state FROM {0}.{1} WHERE notification_id > %s AND notification_id <= h.head{2} "
    "ORDER BY notification_id LIMIT %s) e ON true"
)


@retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
def select_head_and_rows(
    recorder: PostgresApplicationRecorder,
    after: int,
    limit: int,
    topics: list[str],
    held: HeldConnection | None = None,
) -> tuple[int, int | None, list[LogRow]]:
    """The log's head, the quarantine's stamp and the page after ``after`` up to the
    head, in one statement: a follower reads a page on every wake-up, and a query for
    the head first, or for what its quarantine holds, was a round trip (and a
    connection's checkout) of its own each time. One statement also sees one snapshot,
    so the head and the stamp are those the page was read under."""
    datastore = recorder.datastore
    statement = _head_and_rows_statement(
        datastore.schema, recorder.events_table_name, tuple(topics)
    )
    params: list[Any] = [after, limit]
    found = fetch(recorder, statement, params, held)
    if not found:
        return 0, None, []  # unreachable: the aggregate always gives one row
    head, stamp = found[0][0], found[0][1]
    if head is None:
        return 0, stamp, []  # an empty log
    if found[0][2] is None:
        return int(head), stamp, []  # nothing after ``after``: the join's one empty row
    return int(head), stamp, [row[2:] for row in found]


@functools.cache
def _head_and_rows_statement(schema: str, table: str, topics: tuple[str, ...]) -> bytes:
    statement = SQL(_HEAD_AND_ROWS).format(
        Identifier(schema), Identifier(table), SQL(_topic_filter(topics))
    )
    # As bytes, once: composed again for every page, it cost a tenth of a follower's time.
    return statement.as_bytes(None)


def _topic_filter(topics: tuple[str, ...]) -> str:
    """The condition on ``topics`` ('' for every event), with the list written into the
    statement: as a parameter, psycopg dumped the same list for every page, about a
    twentieth of the queue follower's time in a drain (ADR 65). A ``%`` is doubled, so
    that it is not taken for a placeholder."""
    if not topics:
        return ""
    listed = Literal(list(topics)).as_string(None).replace("%", "%%")
    return f" AND topic = ANY({listed}::text[])"


# A stream's share: the last byte of its id (random in a UUID 4 or 7) modulo the count,
# as ``projections.log.reader.part_of`` computes it.
PART_OF = " AND get_byte(uuid_send(originator_id), 15) %% %s = %s"


@functools.cache
def _rows_statement(
    schema: str,
    table: str,
    topics: tuple[str, ...],
    *,
    parted: bool = False,
    text_ids: bool = False,
) -> bytes:
    topic_filter = _topic_filter(topics) + (PART_OF if parted else "")
    # PostgreSQL formats a UUID as text in a fraction of what ``UUID.__str__`` costs.
    stream = "originator_id::text" if text_ids else "originator_id"
    statement = SQL(_ROWS).format(
        SQL(stream), Identifier(schema), Identifier(table), SQL(topic_filter)
    )
    return statement.as_bytes(None)
