"""The projection tables on SQLite: one connection, serialised by a lock."""

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from jobledger.projections.database import (
    STREAM_BATCH,
    Cursor,
    Row,
    RowsStatement,
    ShadowIndexes,
    row_values,
)


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
    def transaction(self, *, snapshot: bool = False, pipelined: bool = False) -> Iterator[Cursor]:  # noqa: ARG002 (one statement at a time in-process anyway)
        conn = self._connection()
        # IMMEDIATE for writers (no lock upgrade deadlock); a plain BEGIN reads a snapshot,
        # read-only as the port promises (PostgreSQL refuses a write in one too).
        conn.execute(f"PRAGMA query_only = {int(snapshot)}")
        conn.execute("BEGIN" if snapshot else "BEGIN IMMEDIATE")
        try:
            yield _SqliteCursor(conn.cursor())
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            if snapshot:
                conn.execute("PRAGMA query_only = 0")

    def build_indexes(self, statements: Sequence[bytes], *, connections: int) -> None:  # noqa: ARG002 (one writer at a time here)
        # Each build in a transaction of its own, as the port says: a failed one leaves
        # the builds before it, and none starts after it.
        for statement in statements:
            with self.transaction() as cursor:
                cursor.execute(statement.decode())

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

    def execute_in(self, sql: str, values: Sequence[Any]) -> Any:  # noqa: ANN401 (DB-API)
        return self._cursor.execute(f"{sql} ({', '.join('?' * len(values))})", values)

    def write_rows(self, statement: RowsStatement, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self._cursor.executemany(statement.each, rows)

    def write_records(self, statement: RowsStatement, records: Sequence[Row]) -> None:
        self.write_rows(statement, row_values(records, statement.columns))

    def insert_rows(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        if rows:
            marks = ", ".join("?" * len(columns))
            self._cursor.executemany(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})",  # noqa: S608 (constant names)
                rows,
            )

    def create_shadow(self, table: str, shadow: str) -> None:
        self._cursor.execute(f"CREATE TABLE {shadow} AS SELECT * FROM {table} WHERE 0")  # noqa: S608 (constant names)

    def shadow_indexes(self, table: str, shadow: str) -> ShadowIndexes:  # noqa: ARG002 (none here)
        """The rows go into ``table`` itself at the swap, under its own indexes."""
        return ShadowIndexes()

    def swap_shadow(self, table: str, shadow: str) -> None:
        self._cursor.execute(f"DELETE FROM {table}")  # noqa: S608 (constant names)
        self._cursor.execute(f"INSERT INTO {table} SELECT * FROM {shadow}")  # noqa: S608 (constant names)
        self._cursor.execute(f"DROP TABLE {shadow}")

    def asynchronous_commit(self) -> None:
        """SQLite has no such mode per transaction; the embedded store keeps its own."""

    def fetchone(self) -> Any:  # noqa: ANN401 (DB-API)
        return self._cursor.fetchone()

    def fetchmany(self, size: int) -> list[Any]:
        return self._cursor.fetchmany(size)

    def stream(self, sql: str, params: Sequence[Any] = ()) -> Iterator[list[Any]]:
        self._cursor.execute(sql, params)
        while rows := self._cursor.fetchmany(STREAM_BATCH):
            yield rows
