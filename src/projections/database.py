"""The event store's own database, for the projection tables that live beside the log.

SQL is written once, with SQLite's ``?`` placeholders; the PostgreSQL side rewrites
them. PostgreSQL connections come from a pool: followers commit a transaction per
page, and a new connection per transaction costs more than the work.

A follower writes a page's rows with ``write_rows``: on SQLite one statement per row
(``executemany``); on PostgreSQL one statement for all of them, over the rows sent as
one JSON array and read back with the table's own row type (ADR 43). The server then
plans and runs one statement per page and table instead of one per row, and the client
encodes one value instead of binding every column of every row.
"""

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

STREAM_BATCH = 10_000


def chunked(values: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """``values`` in slices of at most ``size`` (ids per ``IN (...)`` list)."""
    for start in range(0, len(values), size):
        yield values[start : start + size]


Row = dict[str, Any]  # a table's row by column name


@dataclass(frozen=True)
class RowsStatement:
    """One statement over many rows of ``columns``: ``each`` binds one row (``?``
    placeholders, in column order); ``whole`` reads every row at once from the
    recordset ``r``."""

    columns: tuple[str, ...]
    each: str
    whole: str


def recordset(table: str) -> str:
    """Where ``RowsStatement.whole`` reads its rows from, as ``r``: the JSON parameter as
    records of ``table``'s row type, so each value is converted by its column's type."""
    return f"json_populate_recordset(NULL::{table}, ?::json) AS r"


def upsert(table: str, columns: Sequence[str], conflict: str) -> RowsStatement:
    """``INSERT`` of rows, then ``conflict`` (an ``ON CONFLICT ...`` clause)."""
    names = ", ".join(columns)
    marks = ", ".join("?" * len(columns))
    return RowsStatement(
        tuple(columns),
        f"INSERT INTO {table} ({names}) VALUES ({marks}) {conflict}",  # noqa: S608 (constant names)
        f"INSERT INTO {table} ({names}) SELECT {names} FROM {recordset(table)} {conflict}",  # noqa: S608 (constant names)
    )


class Cursor(Protocol):
    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any: ...  # noqa: ANN401 (DB-API)
    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> Any: ...  # noqa: ANN401
    def execute_in(self, sql: str, values: Sequence[Any]) -> Any:  # noqa: ANN401 (DB-API)
        """``sql``, which ends in ``IN``, for the list of ``values`` (not empty)."""
        ...

    def write_rows(self, statement: RowsStatement, rows: Sequence[Sequence[Any]]) -> None:
        """``statement`` over ``rows`` (values in the order of its columns); nothing if
        there are none."""
        ...

    def write_records(self, statement: RowsStatement, records: Sequence[Row]) -> None:
        """``write_rows`` of rows given by column name (keys beyond the statement's
        columns are ignored); the values are JSON's (text, numbers, flags, None)."""
        ...

    def insert_rows(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        """Insert ``rows`` (new ones: a key that exists fails the transaction) with one
        bulk statement: ``COPY`` on PostgreSQL; nothing if there are none."""
        ...

    def create_shadow(self, table: str, shadow: str) -> None:
        """Create ``shadow``: empty, with ``table``'s columns, without its indexes."""
        ...

    def shadow_indexes(self, table: str, shadow: str) -> "ShadowIndexes":
        """What gives ``shadow`` the indexes and keys of ``table`` (under names of its
        own) and fresh planner statistics; nothing where indexes cost nothing to keep."""
        ...

    def swap_shadow(self, table: str, shadow: str) -> None:
        """Put ``shadow``'s rows in ``table``'s place, with its indexes, owner and grants;
        ``shadow`` is gone afterwards."""
        ...

    def asynchronous_commit(self) -> None:
        """Let this transaction's commit return before it is on disk: for writes the log
        can rebuild (a projection's page with its position). A crash may lose such a
        commit, never part of one nor one that a later durable commit depended on."""
        ...

    def fetchone(self) -> Any: ...  # noqa: ANN401 (DB-API)
    def fetchmany(self, size: int) -> list[Any]: ...
    def stream(self, sql: str, params: Sequence[Any] = ()) -> Iterator[list[Any]]:
        """Rows in batches, without holding the whole result in memory first."""
        ...


@dataclass(frozen=True)
class ShadowIndexes:
    """The statements that index a rebuild's new table: ``builds`` (``CREATE INDEX``,
    each free to run beside the others, on any connection), then ``keys`` (the keys over
    those indexes, and the statistics), in one transaction once every build is done.
    ``size``: the table's bytes, so the largest is indexed first."""

    builds: tuple[bytes, ...] = ()
    keys: tuple[bytes, ...] = ()
    size: int = 0


class Database(Protocol):
    def build_indexes(self, statements: Sequence[bytes], *, connections: int) -> None:
        """Run the ``CREATE INDEX`` ``statements``, each in a transaction of its own, on
        up to ``connections`` connections at once, opened for them (a build that lasts
        minutes holds none of the pool's); a rebuild's sort memory each. The first
        failure is raised once the builds under way end; no build starts after it."""
        ...

    def transaction(
        self, *, snapshot: bool = False, pipelined: bool = False
    ) -> contextlib.AbstractContextManager[Cursor]:
        """A cursor inside one transaction; commits on success. ``snapshot``: a read-only
        view that stays consistent for the whole transaction. ``pipelined``: statements
        go out without waiting for each one's answer, and a fetch waits for what it
        needs (PostgreSQL's pipeline mode; no ``COPY`` in it): a follower's page of
        writes, begin and commit included, costs a round trip instead of one each."""
        ...

    def close(self) -> None: ...


def row_values(rows: Iterable[Row], columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """The values of ``rows`` in the order of ``columns``, each one storable."""
    return [tuple(_storable(row[c]) for c in columns) for row in rows]


def _storable(value: Any) -> Any:  # noqa: ANN401 (any column value)
    """PostgreSQL text cannot hold NUL; a handler's error text or an operator's reason
    may. Replacing it keeps one odd character from stopping the projection."""
    if isinstance(value, str) and "\x00" in value:
        return value.replace("\x00", "\ufffd")
    return value
