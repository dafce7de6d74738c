"""Appending many events at once to the PostgreSQL log with COPY.

eventsourcing's recorder inserts a page of events as one array of a composite type,
which psycopg writes as text: every event's state is escaped byte by byte, and the
server parses it back. For the batches the group-commit writer and the batch API
save, that costs more than the rows themselves (16,500 events/s for 5,000 events,
against 110,000/s with binary COPY on the same machine). The ordering guarantees are
the recorder's own: the same ``LOCK TABLE ... IN EXCLUSIVE MODE`` (so notification ids
commit in the order they are given, ADR 5), the same ``NOTIFY`` for the followers,
one transaction, and a version clash raised as eventsourcing's ``IntegrityError``.

The lock, the NOTIFY and the COPY go as one simple query, which PostgreSQL runs as one
implicit transaction that commits when the COPY ends: two round trips a save, where
``BEGIN``, ``COPY`` through psycopg's cursor and ``COMMIT`` took four (ADR 67).
psycopg's cursor refuses a COPY among other statements, so the query goes through the
connection's libpq object and psycopg's own generators, and the rows are written in
COPY's binary format here: four columns of fixed types.
"""

import contextlib
import struct
import weakref
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import InterfaceError, OperationalError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.utils import retry
from psycopg.generators import copy_end, copy_to, execute
from psycopg.pq import ExecStatus
from psycopg.sql import SQL, Identifier

from jobledger.adapters.postgres.held import HeldConnection
from jobledger.persistence.codec import StoredRow

# Every save takes COPY: even a save of one event costs less this way than through the
# recorder's array of composites (ADR 42).
_COPY = "COPY {}.{} (originator_id, originator_version, topic, state) FROM STDIN (FORMAT BINARY)"
# Per recorder, its statements and its COPY as the bytes sent: composing them from SQL
# objects for every save was about a tenth of the writer thread's time.
_STATEMENTS: "weakref.WeakKeyDictionary[PostgresApplicationRecorder, bytes]" = (
    weakref.WeakKeyDictionary()
)
# What the statements before the COPY answer when they went through.
_STARTED = frozenset({ExecStatus.COMMAND_OK, ExecStatus.TUPLES_OK, ExecStatus.COPY_IN})
# COPY's binary format: a signature, flags and the length of an extension (none); per
# row the number of fields, then each field's length and bytes; -1 fields at the end.
_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
_TRAILER = struct.pack("!h", -1)
_ROW_HEAD = struct.Struct("!hi16siq")  # 4 fields; the uuid's 16 bytes; the int8's 8
_LENGTH = struct.Struct("!i")
# The data goes in pieces of this size: libpq may never take a much larger one (a
# buffer psycopg's own COPY also splits, for the same reason).
_CHUNK = 128 * 1024
_topic_fields: dict[str, bytes] = {}
_TOPICS_KEPT = 1000


@retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
def copy_events(
    recorder: PostgresApplicationRecorder,
    stored: Sequence[StoredEvent | StoredRow],
    held: HeldConnection | None = None,
) -> None:
    """Append ``stored`` in order, in one transaction, as the recorder would; on
    ``held``'s connection if given, else on one of the pool's."""
    statement = _statement(recorder)
    data = binary_rows(stored)
    datastore = recorder.datastore
    connection = datastore.get_connection() if held is None else held.connection()
    with connection as conn, conn.lock:
        _append(conn, statement, data)


def _append(conn: psycopg.Connection[Any], statement: bytes, data: bytes) -> None:
    """Run ``statement`` (statements ending in a ``COPY ... FROM STDIN``) and send
    ``data`` to its COPY. A failed statement, or a COPY the server refuses (a version
    clash), raises psycopg's error with the connection idle again: the implicit
    transaction is rolled back."""
    pgconn = conn.pgconn
    pgconn.send_query(statement)
    results = conn.wait(execute(pgconn))
    for result in results:
        if result.status not in _STARTED:
            raise psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
    if results[-1].status != ExecStatus.COPY_IN:
        msg = "the statement did not end in a COPY FROM STDIN"
        raise psycopg.ProgrammingError(msg)
    try:
        for start in range(0, len(data), _CHUNK):
            conn.wait(copy_to(pgconn, data[start : start + _CHUNK], flush=False))
    except BaseException as error:
        # Ends the COPY with an error, so the server rolls back, if it still listens.
        with contextlib.suppress(psycopg.Error):
            conn.wait(copy_end(pgconn, f"{type(error).__name__} while sending".encode()))
        raise
    try:
        conn.wait(copy_end(pgconn, None))
    except ValueError as error:
        # psycopg expects one result after a COPY; a failed implicit commit adds one.
        msg = "the server answered the end of the COPY with more than one result"
        raise psycopg.DatabaseError(msg) from error


def binary_rows(stored: Sequence[StoredEvent | StoredRow]) -> bytes:
    """``stored`` as the rows of a binary COPY into (originator_id uuid,
    originator_version int8, topic text, state bytea), with its header and trailer."""
    parts = [_HEADER]
    append, head, length = parts.append, _ROW_HEAD.pack, _LENGTH.pack
    topics = _topic_fields
    for event in stored:
        originator_id = event.originator_id
        if not isinstance(originator_id, UUID):
            originator_id = UUID(str(originator_id))
        append(head(4, 16, originator_id.bytes, 8, event.originator_version))
        topic = topics.get(event.topic)
        if topic is None:
            topic = _topic_field(event.topic)
        append(topic)
        state = event.state
        append(length(len(state)))
        append(state)
    append(_TRAILER)
    return b"".join(parts)


def _topic_field(topic: str) -> bytes:
    """A topic as a COPY field (length, then UTF-8), kept: a log has few topics."""
    encoded = topic.encode()
    field = _LENGTH.pack(len(encoded)) + encoded
    if len(_topic_fields) < _TOPICS_KEPT:
        _topic_fields[topic] = field
    return field


def _statement(recorder: PostgresApplicationRecorder) -> bytes:
    """``recorder``'s lock statements, its NOTIFY and the COPY, as one query's bytes.
    Identifiers are quoted as psycopg quotes them without a connection (the names are
    the recorder's own)."""
    found = _STATEMENTS.get(recorder)
    if found is None:
        copy = SQL(_COPY).format(
            Identifier(recorder.datastore.schema), Identifier(recorder.events_table_name)
        )
        notify = SQL("NOTIFY {}").format(Identifier(recorder.channel_name))
        found = SQL("; ").join([*recorder.lock_table_statements, notify, copy]).as_bytes(None)
        _STATEMENTS[recorder] = found
    return found
