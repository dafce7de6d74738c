"""The ``Database`` port's contract (``projections.database``), run on both stores:
PostgreSQL (``PostgresDatabase``) and SQLite (``SqliteDatabase``). Transactions commit
or roll back whole, rows are written, upserted and streamed alike, and a shadow table
takes its table's place with the table's keys and indexes.

Each test makes tables of its own in a store its module shares."""

import sqlite3
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from jobledger.infra.settings import Settings
from jobledger.projections.database import (
    STREAM_BATCH,
    Cursor,
    Database,
    RowsStatement,
    upsert,
)

COLUMNS = ("id", "n", "x", "flag", "data", "note")
SHAPE = (
    "id text PRIMARY KEY, n bigint NOT NULL, x double precision, flag boolean, "
    "data bytea, note text"
)
INTEGRITY_ERRORS = (psycopg.IntegrityError, sqlite3.IntegrityError)


class RefusedError(Exception):
    """An error of the test's own, raised inside a transaction."""


@dataclass(frozen=True)
class Store:
    """A store's database and what the test reads of its catalog (which differs)."""

    database: Database
    postgres: bool

    def table(self, *, index: bool = False) -> str:
        """A new table of ``SHAPE`` (and an index on ``n``), named for this test alone."""
        name = f"t_{uuid.uuid4().hex[:10]}"
        with self.database.transaction() as cursor:
            cursor.execute(f"CREATE TABLE {name} ({SHAPE})")
            if index:
                cursor.execute(f"CREATE INDEX {name}_n ON {name} (n)")
        return name

    def indexes(self, table: str) -> set[str]:
        query = (
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = ?"
            if self.postgres
            else "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?"
        )
        with self.database.transaction(snapshot=True) as cursor:
            cursor.execute(query, (table,))
            return {str(name) for (name,) in cursor.fetchmany(100)}

    def tables(self, *names: str) -> set[str]:
        """Which of ``names`` are tables of the store."""
        query = (
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename IN"
            if self.postgres
            else "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN"
        )
        with self.database.transaction(snapshot=True) as cursor:
            cursor.execute_in(query, names)
            return {str(name) for (name,) in cursor.fetchmany(100)}

    def rows(self, table: str) -> list[tuple[Any, ...]]:
        with self.database.transaction(snapshot=True) as cursor:
            cursor.execute(f"SELECT {', '.join(COLUMNS)} FROM {table} ORDER BY id")  # noqa: S608 (a test table)
            return [tuple(row) for row in cursor.fetchmany(100_000)]


@pytest.fixture
def store(module_store: Settings, module_database: Database) -> Store:
    return Store(module_database, module_store.uses_postgres)


def upsert_all(table: str) -> RowsStatement:
    """Insert rows; a row whose id exists replaces that row's other values."""
    updates = ", ".join(f"{c} = excluded.{c}" for c in COLUMNS[1:])
    return upsert(table, COLUMNS, f"ON CONFLICT (id) DO UPDATE SET {updates}")


def insert(cursor: Cursor, table: str, *keys: str) -> None:
    cursor.executemany(
        f"INSERT INTO {table} (id, n) VALUES (?, ?)",  # noqa: S608 (a test table)
        [(key, n) for n, key in enumerate(keys)],
    )


def insert_each(
    store: Store, table: str, *keys: str, pipelined: bool = False, snapshot: bool = False
) -> None:
    """Each of ``keys`` inserted by a statement of its own, in one transaction."""
    with store.database.transaction(pipelined=pipelined, snapshot=snapshot) as cursor:
        for key in keys:
            insert(cursor, table, key)


def insert_then_raise(store: Store, table: str, key: str, *, pipelined: bool = False) -> None:
    with store.database.transaction(pipelined=pipelined) as cursor:
        insert(cursor, table, key)
        raise RefusedError(key)


def ids(store: Store, table: str) -> list[str]:
    return [str(row[0]) for row in store.rows(table)]


# ---- transactions ----------------------------------------------------------------------


def test_a_transaction_that_ends_well_commits_its_writes(store: Store) -> None:
    """If a transaction's block ends without an error, then its writes are committed:
    the next transaction reads them, and a fetch inside it saw the ones before it."""
    table = store.table()
    with store.database.transaction() as cursor:
        insert(cursor, table, "a", "b")
        cursor.execute(f"SELECT count(*) FROM {table}")  # noqa: S608 (a test table)
        assert cursor.fetchone()[0] == 2
    assert ids(store, table) == ["a", "b"]


@pytest.mark.parametrize("pipelined", [False, True], ids=["plain", "pipelined"])
def test_a_transaction_that_raises_keeps_none_of_its_writes(store: Store, pipelined: bool) -> None:
    """If a transaction's block raises (or one of its statements fails), then the error
    reaches the caller and none of its writes is kept, the ones before the failure
    included; the database serves the next transaction."""
    table = store.table()
    with store.database.transaction() as cursor:
        insert(cursor, table, "kept")
    with pytest.raises(RefusedError):
        insert_then_raise(store, table, "lost", pipelined=pipelined)
    with pytest.raises(INTEGRITY_ERRORS):
        insert_each(store, table, "lost too", "kept", pipelined=pipelined)
    assert ids(store, table) == ["kept"]


def test_a_pipelined_transaction_commits_all_or_nothing(store: Store) -> None:
    """If a pipelined transaction's statements all succeed, then their writes commit
    and a fetch in between sees the ones before it; if one fails, then the error is
    raised and none of its writes is kept."""
    table = store.table()
    with store.database.transaction(pipelined=True) as cursor:
        insert(cursor, table, "1", "2")
        cursor.execute(f"SELECT count(*) FROM {table}")  # noqa: S608 (a test table)
        assert cursor.fetchone()[0] == 2
    with pytest.raises(INTEGRITY_ERRORS):
        insert_each(store, table, "3", "1", pipelined=True)
    assert ids(store, table) == ["1", "2"]


def test_an_asynchronous_commit_still_commits_every_write(store: Store) -> None:
    """If a transaction lets its commit return before it is on disk, then its writes
    are committed all the same."""
    table = store.table()
    with store.database.transaction(pipelined=True) as cursor:
        cursor.asynchronous_commit()
        insert(cursor, table, "a", "b", "c")
    assert ids(store, table) == ["a", "b", "c"]


def test_a_snapshot_reads_no_write_committed_after_its_first_read(store: Store) -> None:
    """If another transaction commits a row while a snapshot is open (after its first
    read), then the snapshot reads the table as it was; the next transaction reads the
    row."""
    table = store.table()
    count = f"SELECT count(*) FROM {table}"  # noqa: S608 (a test table)

    def write() -> None:
        with store.database.transaction() as cursor:
            insert(cursor, table, "late")

    writer = threading.Thread(target=write)
    with store.database.transaction(snapshot=True) as cursor:
        cursor.execute(count)
        before = cursor.fetchone()[0]
        writer.start()
        # SQLite without a write-ahead log holds the writer until the snapshot ends.
        writer.join(timeout=0.5)
        cursor.execute(count)
        assert cursor.fetchone()[0] == before == 0
    writer.join()
    assert ids(store, table) == ["late"]


def test_a_snapshot_is_read_only(store: Store) -> None:
    """If a snapshot transaction writes, then the write fails and nothing is kept."""
    table = store.table()
    with pytest.raises((psycopg.Error, sqlite3.Error)):
        insert_each(store, table, "written", snapshot=True)
    assert ids(store, table) == []


# ---- rows written, upserted and read -----------------------------------------------------

ROWS = [
    ("a", 2**53 + 1, 0.1, True, b"\x00\xffspec", "caf\u00e9 \U0001f600"),
    ("b", -7, None, False, None, None),
    ("c", 0, 1e300, None, b"", ""),
]


def test_written_rows_are_inserted_or_update_their_key(store: Store) -> None:
    """If rows are written, then each is stored with its values as given (big integers,
    floats, flags, bytes, text beyond the BMP, NULLs); a row whose key exists updates
    that row; writing no rows runs no statement at all."""
    table = store.table()
    with store.database.transaction() as cursor:
        cursor.write_rows(upsert_all(table), ROWS)
    updated = ("b", 8, 2.5, True, b"new", "updated")
    with store.database.transaction() as cursor:
        cursor.write_rows(upsert_all(table), [updated, ("d", 1, None, None, None, None)])
        cursor.write_rows(RowsStatement(COLUMNS, "NOT SQL", "NOT SQL"), [])
    assert store.rows(table) == [ROWS[0], updated, ROWS[2], ("d", 1, None, None, None, None)]


def test_written_records_are_read_by_column_name(store: Store) -> None:
    """If rows are written as records by column name, then each column gets its
    record's value, keys that are no column of the statement are ignored, a NUL in a
    text (which PostgreSQL cannot hold) is stored as U+FFFD, and an existing key is
    updated; no records run no statement."""
    table = store.table()
    statement = upsert(
        table,
        ("id", "n", "note"),
        "ON CONFLICT (id) DO UPDATE SET n = excluded.n, note = excluded.note",
    )
    records = [
        {"note": "first", "n": 1, "id": "a", "x": 9.5, "unknown": [1]},
        {"id": "b", "n": 2, "note": "with \x00 in it"},
    ]
    with store.database.transaction() as cursor:
        cursor.write_records(statement, records)
        cursor.write_records(statement, [{"id": "a", "n": 3, "note": None}])
        cursor.write_records(RowsStatement(COLUMNS, "NOT SQL", "NOT SQL"), [])
    assert store.rows(table) == [
        ("a", 3, None, None, None, None),
        ("b", 2, None, None, None, "with \ufffd in it"),
    ]


def test_inserted_rows_are_new_rows_only(store: Store) -> None:
    """If rows are inserted in bulk, then they are stored as given; if one of them has a
    key that exists, then the transaction fails and none of its rows is kept; no rows
    insert nothing."""
    table = store.table()
    with store.database.transaction() as cursor:
        cursor.insert_rows(table, COLUMNS, ROWS)
        cursor.insert_rows(table, COLUMNS, [])
    with pytest.raises(INTEGRITY_ERRORS), store.database.transaction() as cursor:
        cursor.insert_rows(table, ("id", "n"), [("new", 1), ("a", 2)])
    assert store.rows(table) == ROWS


def test_a_stream_yields_every_row_in_batches(store: Store) -> None:
    """If a query's rows are streamed, then every row comes, in the query's order, in
    batches of at most STREAM_BATCH rows; a query without rows yields no batch."""
    table = store.table()
    count = STREAM_BATCH + 5
    with store.database.transaction() as cursor:
        cursor.insert_rows(table, ("id", "n"), [(f"r{n:06}", n) for n in range(count)])
    with store.database.transaction(snapshot=True) as cursor:
        query = f"SELECT n FROM {table} WHERE n >= ? ORDER BY n DESC"  # noqa: S608 (a test table)
        batches = list(cursor.stream(query, (1,)))
        assert list(cursor.stream(query, (count,))) == []
    assert [len(batch) for batch in batches] == [STREAM_BATCH, 4]
    assert [row[0] for batch in batches for row in batch] == list(range(count - 1, 0, -1))


def test_a_list_of_values_selects_the_rows_holding_one(store: Store) -> None:
    """If a statement ending in IN is run for a list of values (some in the table, some
    not, one named twice), then it selects the rows holding one of them."""
    table = store.table()
    with store.database.transaction() as cursor:
        insert(cursor, table, *(f"r{n}" for n in range(50)))
    wanted: Sequence[str] = ["r3", "r17", "r3", "nowhere", *(f"r{n}" for n in range(40, 45))]
    with store.database.transaction(snapshot=True) as cursor:
        cursor.execute_in(f"SELECT id FROM {table} WHERE id IN", wanted)  # noqa: S608 (a test table)
        found = sorted(str(row[0]) for row in cursor.fetchmany(100))
    assert found == ["r17", "r3", "r40", "r41", "r42", "r43", "r44"]


# ---- shadow tables -----------------------------------------------------------------------


def test_a_shadow_has_the_tables_columns_and_no_key_yet(store: Store) -> None:
    """If a shadow of a table is made, then it is empty, has the table's columns in its
    order, and takes two rows of one key (it has none of the table's indexes)."""
    table = store.table(index=True)
    shadow = f"{table}_shadow"
    with store.database.transaction() as cursor:
        insert(cursor, table, "old")
        cursor.create_shadow(table, shadow)
        cursor.execute(f"SELECT count(*) FROM {shadow}")  # noqa: S608 (a test table)
        assert cursor.fetchone()[0] == 0
        cursor.insert_rows(shadow, COLUMNS, [ROWS[0], ROWS[0]])
        cursor.execute(f"SELECT * FROM {shadow}")  # noqa: S608 (a test table)
        assert cursor.fetchmany(10) == [ROWS[0], ROWS[0]]
    assert store.indexes(shadow) == set()


def rebuild(store: Store, table: str, shadow: str, rows: Sequence[Sequence[Any]]) -> None:
    """What a rebuild does: a shadow filled with ``rows``, indexed, and swapped in."""
    with store.database.transaction() as cursor:
        cursor.create_shadow(table, shadow)
        cursor.insert_rows(shadow, COLUMNS, rows)
    with store.database.transaction() as cursor:
        plan = cursor.shadow_indexes(table, shadow)
    store.database.build_indexes(plan.builds, connections=2)
    with store.database.transaction() as cursor:
        for statement in plan.keys:
            cursor.execute(statement.decode())
        cursor.swap_shadow(table, shadow)


def test_a_swapped_in_shadow_takes_the_tables_place_with_its_keys(store: Store) -> None:
    """If a shadow is filled, indexed and swapped in, then the table holds the shadow's
    rows alone, under the indexes it had (same names), its key still refuses a second
    row of a key and still serves an upsert, and the shadow is gone."""
    table = store.table(index=True)
    shadow = f"{table}_shadow"
    with store.database.transaction() as cursor:
        insert(cursor, table, "old", "b")
    indexes = store.indexes(table)
    rebuild(store, table, shadow, ROWS)
    assert store.rows(table) == ROWS
    assert store.indexes(table) == indexes
    assert store.tables(table, shadow) == {table}
    with pytest.raises(INTEGRITY_ERRORS), store.database.transaction() as cursor:
        cursor.insert_rows(table, ("id", "n"), [("a", 5)])
    with store.database.transaction() as cursor:
        cursor.write_rows(upsert_all(table), [("a", 5, None, None, None, None)])
    assert store.rows(table)[0] == ("a", 5, None, None, None, None)


def swap_then_raise(store: Store, table: str, shadow: str) -> None:
    with store.database.transaction() as cursor:
        cursor.swap_shadow(table, shadow)
        raise RefusedError(table)


def test_a_swap_whose_transaction_fails_leaves_both_tables(store: Store) -> None:
    """If the transaction of a swap fails after the swap, then the table keeps its own
    rows and indexes, and the shadow is still there with its rows."""
    table = store.table(index=True)
    shadow = f"{table}_shadow"
    with store.database.transaction() as cursor:
        insert(cursor, table, "old")
        cursor.create_shadow(table, shadow)
        cursor.insert_rows(shadow, COLUMNS, ROWS)
    indexes = store.indexes(table)
    with pytest.raises(RefusedError):
        swap_then_raise(store, table, shadow)
    assert ids(store, table) == ["old"]
    assert store.indexes(table) == indexes
    assert store.rows(shadow) == ROWS


# ---- index builds ------------------------------------------------------------------------


def test_index_builds_stop_at_the_first_failure(store: Store) -> None:
    """If index builds run, then every one is there once they return; if one fails,
    then its error is raised and no build after it is made."""
    table = store.table()
    with store.database.transaction() as cursor:
        insert(cursor, table, *(f"r{n}" for n in range(100)))
    built = [f"{table}_a", f"{table}_b"]
    store.database.build_indexes(
        [
            f"CREATE INDEX {built[0]} ON {table} (n)".encode(),
            f"CREATE INDEX {built[1]} ON {table} (id, n)".encode(),
        ],
        connections=2,
    )
    assert set(built) <= store.indexes(table)
    with pytest.raises((psycopg.Error, sqlite3.Error), match="no_such_column"):
        store.database.build_indexes(
            [
                f"CREATE INDEX {table}_bad ON {table} (no_such_column)".encode(),
                f"CREATE INDEX {table}_after ON {table} (n, id)".encode(),
            ],
            connections=1,
        )
    assert f"{table}_after" not in store.indexes(table)


def test_index_builds_before_a_failure_are_kept(store: Store) -> None:
    """If one of several index builds fails, then the ones done before it are kept:
    each build is a transaction of its own."""
    table = store.table()
    with pytest.raises((psycopg.Error, sqlite3.Error), match="no_such_column"):
        store.database.build_indexes(
            [
                f"CREATE INDEX {table}_first ON {table} (n)".encode(),
                f"CREATE INDEX {table}_bad ON {table} (no_such_column)".encode(),
            ],
            connections=1,
        )
    assert f"{table}_first" in store.indexes(table)
