"""The checkpoint's tables on PostgreSQL: a rebuild reads the open entries with a
binary ``COPY``, the cheapest way to move a table to the client (no text to parse, no
cursor round trips)."""

from collections.abc import Generator
from typing import Any

import psycopg

from jobledger.adapters.sql.checkpoint import SqlCheckpoint
from jobledger.projections.database import Cursor
from jobledger.projections.queue.entries import EncodedEntry

# The casts pin the types that set_types names.
_COPY_ENTRIES = (
    "COPY (SELECT execution_id::text, queue::text, version::int4, state::text, "
    "priority::int2, lease_id::text, score::int8, item::bytea "
    "FROM jobledger_open_executions) TO STDOUT (FORMAT BINARY)"
)
_COPY_TYPES = ["text", "text", "int4", "text", "int2", "text", "int8", "bytea"]


class PostgresCheckpoint(SqlCheckpoint):
    """``SqlCheckpoint`` whose rebuild reads copy the open entries out."""

    def _entry_rows(
        self,
        cursor: Cursor,  # noqa: ARG002 (the raw cursor runs the COPY, in the same snapshot)
        raw: Any,  # noqa: ANN401 (the driver's cursor: a psycopg.Cursor here)
    ) -> Generator[EncodedEntry, None, None]:
        return _copied(raw)


def _copied(raw: psycopg.Cursor[Any]) -> Generator[EncodedEntry, None, None]:
    with raw.copy(_COPY_ENTRIES) as copy:
        copy.set_types(_COPY_TYPES)
        yield from copy.rows()
