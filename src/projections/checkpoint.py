"""The open-executions checkpoint: the queue fold kept in SQL with its position.

It lives in the event store's database and is updated exactly once per event: the rows
and the position commit in one transaction. A Redis rebuild reads it (cost grows with
open executions, not with all history) and then follows the log from its position.
"""

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from jobledger.projections.database import Cursor, Database
from jobledger.projections.queue import QueueChange, QueueItem, QueueState, decode_spec

CHECKPOINT = "queue-checkpoint"
_COLUMNS = "execution_id, queue, priority, version, state, at_ms, attempt, lease_id, spec, job_id"
_UPSERT = (
    f"INSERT INTO jobledger_open_executions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "  # noqa: S608 (constant column list)
    "ON CONFLICT (execution_id) DO UPDATE SET queue = excluded.queue, "
    "priority = excluded.priority, version = excluded.version, state = excluded.state, "
    "at_ms = excluded.at_ms, attempt = excluded.attempt, lease_id = excluded.lease_id, "
    "spec = excluded.spec WHERE excluded.version > jobledger_open_executions.version"
)
_DELETE = "DELETE FROM jobledger_open_executions WHERE execution_id = ? AND version < ?"
_POSITION = (
    "INSERT INTO jobledger_positions (name, position) VALUES (?, ?) "
    "ON CONFLICT (name) DO UPDATE SET position = excluded.position"
)


def to_ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


class Checkpoint:
    """Open executions and the log position they were folded to."""

    def __init__(self, database: Database, name: str = CHECKPOINT) -> None:
        self._database = database
        self.name = name

    def position(self) -> int:
        with self._database.transaction(snapshot=True) as cursor:
            return self._position(cursor)

    def commit(self, changes: Sequence[QueueChange], position: int) -> None:
        """Apply ``changes`` and move the position, in one transaction."""
        upserts = [_row(c.item) for c in changes if c.item is not None]
        deletes = [(str(c.execution_id), c.version) for c in changes if c.item is None]
        with self._database.transaction() as cursor:
            if upserts:
                cursor.executemany(_UPSERT, upserts)
            if deletes:
                cursor.executemany(_DELETE, deletes)
            cursor.execute(_POSITION, (self.name, position))

    def clear(self) -> None:
        with self._database.transaction() as cursor:
            cursor.execute("DELETE FROM jobledger_open_executions")
            cursor.execute(_POSITION, (self.name, 0))

    def snapshot(self) -> Iterator[tuple[int, list[QueueItem]]]:
        """Batches of open executions, each with the position they all belong to."""
        with self._database.transaction(snapshot=True) as cursor:
            position = self._position(cursor)
            query = f"SELECT {_COLUMNS} FROM jobledger_open_executions"  # noqa: S608 (constant)
            for rows in cursor.stream(query):
                yield position, [_item(row) for row in rows]

    def load(self, execution_id: UUID) -> QueueItem | None:
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute(
                f"SELECT {_COLUMNS} FROM jobledger_open_executions WHERE execution_id = ?",  # noqa: S608 (constant)
                (str(execution_id),),
            )
            row = cursor.fetchone()
        return None if row is None else _item(row)

    def open_counts(self, job_id: UUID) -> dict[QueueState, int]:
        """How many open executions of a job there are, by state (for overlap rules)."""
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute(
                "SELECT state, count(*) FROM jobledger_open_executions "
                "WHERE job_id = ? GROUP BY state",
                (str(job_id),),
            )
            rows = cursor.fetchmany(10)
        return {QueueState(state): int(count) for state, count in rows}

    def _position(self, cursor: Cursor) -> int:
        cursor.execute("SELECT position FROM jobledger_positions WHERE name = ?", (self.name,))
        row = cursor.fetchone()
        return 0 if row is None else int(row[0])


def _row(item: QueueItem) -> tuple[Any, ...]:
    return (
        str(item.execution_id),
        item.queue,
        item.priority,
        item.version,
        item.state.value,
        to_ms(item.at),
        item.attempt,
        None if item.lease_id is None else str(item.lease_id),
        item.spec,
        _job_id(item),
    )


def _job_id(item: QueueItem) -> str | None:
    job_id = decode_spec(item.spec).job_id if item.spec else None
    return None if job_id is None else str(job_id)


def _item(row: Sequence[Any]) -> QueueItem:
    return QueueItem(
        execution_id=UUID(row[0]),
        queue=row[1],
        priority=row[2],
        version=row[3],
        state=QueueState(row[4]),
        at=from_ms(row[5]),
        attempt=row[6],
        lease_id=None if row[7] is None else UUID(row[7]),
        spec=bytes(row[8]),
    )
