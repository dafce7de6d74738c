"""Appending many events at once to the PostgreSQL log with COPY.

eventsourcing's recorder inserts a page of events as one array of a composite type,
which psycopg writes as text: every event's state is escaped byte by byte, and the
server parses it back. For the batches the group-commit writer and the batch API
save, that costs more than the rows themselves (16,500 events/s for 5,000 events,
against 110,000/s with binary COPY on the same machine). The ordering guarantees are
the recorder's own: the same ``LOCK TABLE ... IN EXCLUSIVE MODE`` (so notification ids
commit in the order they are given, ADR 5), the same ``NOTIFY`` for the followers,
one transaction, and a version clash raised as eventsourcing's ``IntegrityError``.
"""

import contextlib
import weakref
from collections.abc import Sequence
from typing import Any

import psycopg
from eventsourcing.persistence import InterfaceError, OperationalError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.utils import retry
from psycopg import postgres
from psycopg.sql import SQL, Composed, Identifier

from jobledger.persistence.held import HeldConnection

# From how many events a save takes COPY: every save. Even a save of one event costs
# less this way than through the recorder's array of composites (ADR 42).
BULK_MIN_EVENTS = 1
# The columns' type oids, looked up once: by name, every COPY looked them up again.
_COLUMNS = [postgres.types[name].oid for name in ("uuid", "int8", "text", "bytea")]
_COPY = "COPY {}.{} (originator_id, originator_version, topic, state) FROM STDIN (FORMAT BINARY)"
# Per recorder, its preamble and its COPY statement as the bytes sent: composing them
# from SQL objects for every save was about a tenth of the writer thread's time.
_STATEMENTS: "weakref.WeakKeyDictionary[PostgresApplicationRecorder, tuple[bytes, bytes]]" = (
    weakref.WeakKeyDictionary()
)


@retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
def copy_events(
    recorder: PostgresApplicationRecorder,
    stored: Sequence[StoredEvent],
    held: HeldConnection | None = None,
) -> None:
    """Append ``stored`` in order, in one transaction, as the recorder would; on
    ``held``'s connection if given, else on one of the pool's."""
    preamble, statement = _statements(recorder)
    datastore = recorder.datastore
    connection = datastore.get_connection() if held is None else held.connection()
    with connection as conn, conn.cursor() as cursor:
        # The store's pool hands out connections in autocommit mode: BEGIN goes in the
        # preamble's simple query, one round trip fewer than a transaction block, which
        # sends its BEGIN on its own.
        cursor.execute(b"BEGIN; " + preamble)
        try:
            _copy(cursor, statement, stored)
            cursor.execute(b"COMMIT")
        except BaseException:
            with contextlib.suppress(psycopg.Error):
                conn.rollback()  # only if a transaction is still open
            raise


def _copy(cursor: psycopg.Cursor[Any], statement: bytes, stored: Sequence[StoredEvent]) -> None:
    with cursor.copy(statement) as copy:
        copy.set_types(_COLUMNS)
        for event in stored:
            copy.write_row(
                (event.originator_id, event.originator_version, event.topic, event.state)
            )


def _statements(recorder: PostgresApplicationRecorder) -> tuple[bytes, bytes]:
    """``recorder``'s preamble and COPY statement, as bytes. Identifiers are quoted as
    psycopg quotes them without a connection (the names are the recorder's own)."""
    found = _STATEMENTS.get(recorder)
    if found is None:
        copy = SQL(_COPY).format(
            Identifier(recorder.datastore.schema), Identifier(recorder.events_table_name)
        )
        found = (_preamble(recorder).as_bytes(None), copy.as_bytes(None))
        _STATEMENTS[recorder] = found
    return found


def _preamble(recorder: PostgresApplicationRecorder) -> Composed:
    """The recorder's lock statements and its NOTIFY as one query: without parameters
    it goes as one simple query, one round trip instead of one per statement."""
    notify = SQL("NOTIFY {}").format(Identifier(recorder.channel_name))
    return SQL("; ").join([*recorder.lock_table_statements, notify])
