"""A pooled connection that one thread keeps for its saves.

eventsourcing's datastore takes a connection from its pool for every statement and
checks it with an empty query first (``POSTGRES_PRE_PING``: after a server restart
every pooled connection is dead). For the group-commit writer, which saves one batch
after another from a single thread, that check and the pool's bookkeeping were a round
trip and a tenth of a millisecond of Python per batch. A ``HeldConnection`` takes one
connection from the pool, with the pool's check, and keeps it; a connection that fails
goes back to the pool (which discards a broken one), and the next save takes another,
checked again. So a restart costs the writer one failed try, which its callers' retry
(``copy_events``') covers.
"""

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
from eventsourcing.persistence import (
    DatabaseError,
    DataError,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    PersistenceError,
    ProgrammingError,
)
from eventsourcing.postgres import PostgresDatastore

# psycopg's errors as eventsourcing's, in the order its datastore tries them (a
# subclass before its base), so retries and conflicts read the same either way.
_ERRORS: tuple[tuple[type[psycopg.Error], type[PersistenceError]], ...] = (
    (psycopg.InterfaceError, InterfaceError),
    (psycopg.OperationalError, OperationalError),
    (psycopg.DataError, DataError),
    (psycopg.IntegrityError, IntegrityError),
    (psycopg.InternalError, InternalError),
    (psycopg.ProgrammingError, ProgrammingError),
    (psycopg.NotSupportedError, NotSupportedError),
    (psycopg.DatabaseError, DatabaseError),
    (psycopg.Error, PersistenceError),
)


def translated(error: psycopg.Error) -> PersistenceError:
    """``error`` as the eventsourcing error its datastore would have raised."""
    kind = next(ours for theirs, ours in _ERRORS if isinstance(error, theirs))
    return kind(str(error))


class HeldConnection:
    """One connection of ``datastore``'s pool, kept between uses by one thread."""

    def __init__(self, datastore: PostgresDatastore) -> None:
        self._datastore = datastore
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()  # close() may come from another thread

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """The held connection (taken, and checked, if none is held); psycopg's errors
        come out as eventsourcing's, and after any error the connection goes back to
        the pool."""
        try:
            conn = self._take()
            try:
                yield conn
            except BaseException:
                # Rare (a conflict, an outage): a checked connection is worth the try.
                self._give_back()
                raise
        except psycopg.Error as error:
            raise translated(error) from error

    def close(self) -> None:
        """Give the connection back to the pool (a later use takes one again)."""
        self._give_back()

    def _take(self) -> psycopg.Connection[Any]:
        with self._lock:
            if self._conn is None:
                datastore = self._datastore
                datastore.pool.open(
                    datastore.pool_open_timeout is not None, datastore.pool_open_timeout or 30.0
                )
                self._conn = datastore.pool.getconn()
            return self._conn

    def _give_back(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # a closed pool: nothing to give back to
                self._datastore.pool.putconn(conn)
