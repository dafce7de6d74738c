"""The projection tables on PostgreSQL: a pool, ``?`` placeholders rewritten, a page's
rows written as one JSON array read back with the table's own row type (ADR 43), and
the index builds of a rebuild's new tables."""

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec
import psycopg

from jobledger.adapters.postgres.bounded import (
    BoundedPool,
    bounded_connection,
    check_if_idle,
    connect_timeout,
)
from jobledger.projections.database import (
    STREAM_BATCH,
    Cursor,
    Row,
    RowsStatement,
    ShadowIndexes,
    row_values,
)


class PostgresDatabase:
    def __init__(
        self, conninfo: str, *, max_size: int = 4, wait: float = 3.0, check_after: float = 1.0
    ) -> None:
        # ``wait``: how long a caller waits for a connection. While the server is down
        # none comes, and a request should hear so in seconds (a 503), not in the
        # pool's default half minute. ``reconnect_timeout``: the pool retries a lost
        # connection with a doubling pause; giving up after a few seconds lets the
        # next caller start afresh, so a server that is back is used within seconds,
        # not after a pause that grew through the whole outage. ``check_after``: a call
        # waiting this long asks whether the server still answers (ADR 79).
        self._conninfo = conninfo
        self._pool = BoundedPool(
            conninfo,
            connection_class=bounded_connection(check_after),
            kwargs={"connect_timeout": connect_timeout(check_after)},
            # None kept open: a role that reads no projection table (a worker) holds
            # none; those that do keep theirs while used (closed after ten idle minutes).
            min_size=0,
            max_size=max_size,
            open=True,
            name="jobledger-projections",
            timeout=wait,
            reconnect_timeout=wait,
            check=check_if_idle,
        )

    @contextlib.contextmanager
    def transaction(self, *, snapshot: bool = False, pipelined: bool = False) -> Iterator[Cursor]:
        with self._pool.connection() as conn, contextlib.ExitStack() as stack:
            if pipelined:
                stack.enter_context(conn.pipeline())
            with conn.transaction(), conn.cursor() as cursor:
                if snapshot:
                    cursor.execute(b"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                yield _QmarkCursor(conn, cursor)

    def build_indexes(self, statements: Sequence[bytes], *, connections: int) -> None:
        builds = list(reversed(statements))  # popped from the end: in the order given
        failures: list[BaseException] = []
        lock = threading.Lock()

        def build() -> None:
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    _prepare_for_builds(conn, connections)
                    while True:
                        with lock:
                            if failures or not builds:
                                return
                            statement = builds.pop()
                        conn.execute(statement)
            except BaseException as error:  # noqa: BLE001 (raised in the caller's thread)
                with lock:
                    failures.append(error)

        threads = [
            threading.Thread(target=build, name=f"index-build-{n}", daemon=True)
            for n in range(min(connections, len(statements)))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]

    def close(self) -> None:
        self._pool.close()


def _prepare_for_builds(conn: psycopg.Connection[Any], connections: int) -> None:
    conn.execute(_INDEX_MEMORY, (_INDEX_MEMORY_KB // connections,))
    if connections > 1:
        # A build a core: the server's own workers would share the cores with the
        # other connections' builds, and each build merges alone at its end.
        conn.execute(b"SET max_parallel_maintenance_workers = 0")


def _pg(sql: str) -> bytes:
    return sql.replace("?", "%s").encode()


def _json_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """``rows`` as a JSON array of objects by column name; bytes in PostgreSQL's hex
    form, which a bytea column reads (JSON has no bytes)."""
    return _encoder.encode(
        [dict(zip(columns, map(_hex_bytes, row), strict=True)) for row in rows]
    ).decode()


_COLUMN_TYPES = (
    "SELECT format_type(a.atttypid, a.atttypmod) FROM unnest(%s::text[]) WITH ORDINALITY "
    "AS c(name, n) JOIN pg_attribute a ON a.attrelid = to_regclass(%s) AND a.attname = c.name "
    "ORDER BY c.n"
)


_SHADOW_NAME = "_rebuild"  # what a shadow's own indexes and keys are called: name + this


# For the index builds of a rebuild, on their own connections: 1 GiB (in kB) shared by
# the connections building at once, each never below the server's setting. With two,
# the sorts of a table of 3 million executions stay in memory (ADR 58).
_INDEX_MEMORY_KB = 1_048_576


_INDEX_MEMORY = (
    b"SELECT set_config('maintenance_work_mem', "
    b"greatest(setting::bigint, %s)::text || 'kB', false) "
    b"FROM pg_settings WHERE name = 'maintenance_work_mem'"
)


_INDEXES = (
    "SELECT ic.relname, pg_get_indexdef(i.indexrelid), c.conname, c.contype::text "
    "FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid "
    "LEFT JOIN pg_constraint c ON c.conindid = i.indexrelid AND c.conrelid = i.indrelid "
    "WHERE i.indrelid = to_regclass(%s) ORDER BY ic.relname"
)


# The owner, and whether it is the current user (who then owns the shadow already).
_OWNER = (
    "SELECT pg_get_userbyid(relowner), pg_get_userbyid(relowner) = current_user "
    "FROM pg_class WHERE oid = to_regclass(%s)"
)


_GRANTS = (
    "SELECT grantee, privilege_type FROM information_schema.role_table_grants "
    "WHERE table_schema = current_schema() AND table_name = %s AND grantee <> grantor "
    "ORDER BY grantee, privilege_type"
)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _hex_bytes(value: Any) -> Any:  # noqa: ANN401 (any column value)
    return "\\x" + value.hex() if isinstance(value, bytes) else value


_encoder = msgspec.json.Encoder()


class _QmarkCursor:
    def __init__(self, conn: psycopg.Connection[Any], cursor: psycopg.Cursor[Any]) -> None:
        self._conn = conn
        self._cursor = cursor

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:  # noqa: ANN401 (DB-API)
        return self._cursor.execute(_pg(sql), params)

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> Any:  # noqa: ANN401
        return self._cursor.executemany(_pg(sql), params)

    def execute_in(self, sql: str, values: Sequence[Any]) -> Any:  # noqa: ANN401 (DB-API)
        # One array parameter: the statement's text is the same for any number of values,
        # so it is parsed and prepared once, not once per length of list.
        return self._cursor.execute(_pg(f"{sql} (SELECT unnest(?::text[]))"), (list(values),))

    def write_rows(self, statement: RowsStatement, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self._cursor.execute(_pg(statement.whole), (_json_rows(statement.columns, rows),))

    def write_records(self, statement: RowsStatement, records: Sequence[Row]) -> None:
        if not records:
            return
        # The records are the recordset's objects already: encoded as they are, a page
        # builds no tuple and no second mapping per row (4.7 against 0.6 µs a row of
        # the executions table). A NUL, which PostgreSQL's text cannot hold, is rare:
        # seen in the encoding, the rows go the way that replaces it.
        encoded = _encoder.encode(records)
        if b"\\u0000" in encoded:
            self.write_rows(statement, row_values(records, statement.columns))
            return
        self._cursor.execute(_pg(statement.whole), (encoded.decode(),))

    def insert_rows(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        if rows:
            # Binary: each value is dumped as its column's type, without text to parse.
            self._cursor.execute(_COLUMN_TYPES, (list(columns), table))
            types = [str(name) for (name,) in self._cursor.fetchall()]
            statement = f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)"
            with self._cursor.copy(statement.encode()) as copy:
                copy.set_types(types)
                for row in rows:
                    copy.write_row(row)

    def create_shadow(self, table: str, shadow: str) -> None:
        self._cursor.execute(
            f"CREATE TABLE {shadow} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
            "INCLUDING GENERATED INCLUDING STORAGE)".encode()
        )

    def shadow_indexes(self, table: str, shadow: str) -> ShadowIndexes:
        builds: list[bytes] = []
        keys: list[bytes] = []
        for name, definition, constraint, kind in self._indexes(table):
            unique = "UNIQUE " if definition.startswith("CREATE UNIQUE ") else ""
            method = definition.split(" USING ", 1)[1]
            index = _quoted(name + _SHADOW_NAME)
            builds.append(f"CREATE {unique}INDEX {index} ON {shadow} USING {method}".encode())
            if constraint is not None:
                key = "PRIMARY KEY" if kind == "p" else "UNIQUE"
                keys.append(
                    f"ALTER TABLE {shadow} ADD CONSTRAINT {_quoted(constraint + _SHADOW_NAME)} "
                    f"{key} USING INDEX {index}".encode()
                )
        keys.append(f"ANALYZE {shadow}".encode())
        self._cursor.execute(b"SELECT coalesce(pg_relation_size(to_regclass(%s)), 0)", (shadow,))
        (size,) = self._cursor.fetchone() or (0,)
        return ShadowIndexes(tuple(builds), tuple(keys), int(size))

    def swap_shadow(self, table: str, shadow: str) -> None:
        owner, grants = self._owner_and_grants(table)
        if owner is not None:
            self._cursor.execute(f"ALTER TABLE {shadow} OWNER TO {_quoted(owner)}".encode())
        for grantee, privilege in grants:
            to = "PUBLIC" if grantee == "PUBLIC" else _quoted(grantee)
            self._cursor.execute(f"GRANT {privilege} ON {shadow} TO {to}".encode())
        self._cursor.execute(f"DROP TABLE {table}".encode())
        self._cursor.execute(f"ALTER TABLE {shadow} RENAME TO {table}".encode())
        for name, _definition, constraint, _kind in self._indexes(table):
            if constraint is not None and constraint.endswith(_SHADOW_NAME):
                original = _quoted(constraint.removesuffix(_SHADOW_NAME))
                rename = f"RENAME CONSTRAINT {_quoted(constraint)} TO {original}"
                self._cursor.execute(f"ALTER TABLE {table} {rename}".encode())
            elif constraint is None and name.endswith(_SHADOW_NAME):
                original = _quoted(name.removesuffix(_SHADOW_NAME))
                self._cursor.execute(f"ALTER INDEX {_quoted(name)} RENAME TO {original}".encode())

    def _indexes(self, table: str) -> list[tuple[str, str, str | None, str | None]]:
        """(name, definition, constraint, its kind) of each index of ``table``."""
        self._cursor.execute(_INDEXES, (table,))
        return [(str(a), str(b), c, d) for a, b, c, d in self._cursor.fetchall()]

    def _owner_and_grants(self, table: str) -> tuple[str | None, list[tuple[str, str]]]:
        self._cursor.execute(_OWNER, (table,))
        row = self._cursor.fetchone()
        owner = None if row is None or row[1] else str(row[0])
        self._cursor.execute(_GRANTS, (table,))
        grants = [(str(grantee), str(privilege)) for grantee, privilege in self._cursor.fetchall()]
        return owner, grants

    def asynchronous_commit(self) -> None:
        self._cursor.execute(b"SET LOCAL synchronous_commit = off")

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
