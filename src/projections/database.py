"""The event store's own database, for the projection tables that live beside the log.

SQL is written once, with SQLite's ``?`` placeholders; the PostgreSQL side rewrites
them. PostgreSQL connections come from a pool: followers commit a transaction per
page, and a new connection per transaction costs more than the work.
"""

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import psycopg
from psycopg_pool import ConnectionPool

STREAM_BATCH = 10_000


class Cursor(Protocol):
    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any: ...  # noqa: ANN401 (DB-API)
    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> Any: ...  # noqa: ANN401
    def fetchone(self) -> Any: ...  # noqa: ANN401 (DB-API)
    def fetchmany(self, size: int) -> list[Any]: ...
    def stream(self, sql: str, params: Sequence[Any] = ()) -> Iterator[list[Any]]:
        """Rows in batches, without holding the whole result in memory first."""
        ...


class Database(Protocol):
    def transaction(self, *, snapshot: bool = False) -> contextlib.AbstractContextManager[Cursor]:
        """A cursor inside one transaction; commits on success. ``snapshot``: a read-only
        view that stays consistent for the whole transaction."""
        ...

    def close(self) -> None: ...


class PostgresDatabase:
    def __init__(self, conninfo: str, *, max_size: int = 4, wait: float = 3.0) -> None:
        # ``wait``: how long a caller waits for a connection. While the server is down
        # none comes, and a request should hear so in seconds (a 503), not in the
        # pool's default half minute. ``reconnect_timeout``: the pool retries a lost
        # connection with a doubling pause; giving up after a few seconds lets the
        # next caller start afresh, so a server that is back is used within seconds,
        # not after a pause that grew through the whole outage.
        self._pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=max_size,
            open=True,
            name="jobledger-projections",
            timeout=wait,
            reconnect_timeout=wait,
            # One empty query at checkout: a connection the server dropped (a restart)
            # is replaced there, instead of failing the caller once per connection.
            check=ConnectionPool.check_connection,
        )

    @contextlib.contextmanager
    def transaction(self, *, snapshot: bool = False) -> Iterator[Cursor]:
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            if snapshot:
                cursor.execute(b"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            yield _QmarkCursor(conn, cursor)

    def close(self) -> None:
        self._pool.close()


def _pg(sql: str) -> bytes:
    return sql.replace("?", "%s").encode()


class _QmarkCursor:
    def __init__(self, conn: psycopg.Connection[Any], cursor: psycopg.Cursor[Any]) -> None:
        self._conn = conn
        self._cursor = cursor

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:  # noqa: ANN401 (DB-API)
        return self._cursor.execute(_pg(sql), params)

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> Any:  # noqa: ANN401
        return self._cursor.executemany(_pg(sql), params)

    def fetchone(self) -> Any:  # noqa: ANN401 (DB-API)
        return self._cursor.fetchone()

    def fetchmany(self, size: int) -> list[Any]:
        return self._cursor.fetchmany(size)

    def stream(self, sql: str, params: Sequence[Any] = ()) -> Iterator[list[Any]]:
        # A server-side cursor: PostgreSQL sends the rows batch by batch.
        with self._conn.cursor(name="jobledger_stream") as named:
            named.itersize = STREAM_BATCH
            named.execute(_pg(sql), params)
            while rows := named.fetchmany(STREAM_BATCH):
                yield rows


class SqliteDatabase:
    """One connection per thread: SQLite connections must stay in their thread."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._local = threading.local()
        self._opened: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self._path, isolation_level=None, timeout=30, check_same_thread=False
            )
            self._local.conn = conn
            with self._lock:
                self._opened.append(conn)
        return conn

    @contextlib.contextmanager
    def transaction(self, *, snapshot: bool = False) -> Iterator[Cursor]:
        conn = self._connection()
        # IMMEDIATE for writers (no lock upgrade deadlock); a plain BEGIN reads a snapshot.
        conn.execute("BEGIN" if snapshot else "BEGIN IMMEDIATE")
        try:
            yield _SqliteCursor(conn.cursor())
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._lock:
            for conn in self._opened:
                conn.close()
            self._opened.clear()


class _SqliteCursor:
    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:  # noqa: ANN401 (DB-API)
        return self._cursor.execute(sql, params)

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> Any:  # noqa: ANN401
        return self._cursor.executemany(sql, params)

    def fetchone(self) -> Any:  # noqa: ANN401 (DB-API)
        return self._cursor.fetchone()

    def fetchmany(self, size: int) -> list[Any]:
        return self._cursor.fetchmany(size)

    def stream(self, sql: str, params: Sequence[Any] = ()) -> Iterator[list[Any]]:
        self._cursor.execute(sql, params)
        while rows := self._cursor.fetchmany(STREAM_BATCH):
            yield rows
