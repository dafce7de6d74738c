"""The open-executions checkpoint: the queue fold kept in SQL with its position.

It lives in the event store's database and is updated exactly once per event: the rows
and the position commit in one transaction. A Redis rebuild reads it (cost grows with
open executions, not with all history) and then follows the log from its position.

Each row keeps the entry as the Redis queue stores it (``queue_entries``): the msgpack
item, and beside it the fields that place it (queue, state, priority, lease id, score).
A rebuild copies those bytes; only the embedded mode decodes them into items.

Each queue's pause record (``QueuePause``) and each named limit (``NamedLimit``) are
kept beside them, committed with the same position, so a rebuild from the checkpoint
pauses and limits what the log paused and limited.
"""

import contextlib
import itertools
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Any, TypeVar
from uuid import UUID

import msgspec
import psycopg

from jobledger.projections.database import (
    Cursor,
    Database,
    RowsStatement,
    chunked,
    recordset,
    upsert,
)
from jobledger.projections.log import positions
from jobledger.projections.log.positions import Position
from jobledger.projections.queue.backend import (
    NamedLimit,
    QueueChange,
    QueueItem,
    QueuePause,
    QueueState,
    decode_spec,
)
from jobledger.projections.queue.entries import EncodedEntry, decode_item, encode_item
from jobledger.projections.times import due_score

CHECKPOINT = "queue-checkpoint"
SNAPSHOT_BATCH = 10_000  # entries per batch of ``entries`` and ``snapshot``

_T = TypeVar("_T")
_Record = TypeVar("_Record", QueuePause, NamedLimit)
# The columns of a ``stored_row``, in its order.
COLUMNS = "execution_id, job_id, queue, version, state, priority, lease_id, score, item"
_TABLE = "jobledger_open_executions"
_ID_CHUNK = 500  # ids per IN (...) list, well below SQLite's parameter limit
# More open runs than any 500 jobs hold (each job's are few: its overlap policy, or
# its own pace, bounds them); fetchmany needs a bound.
_OPEN_ROWS = 1_000_000
_UPSERT = upsert(
    _TABLE,
    COLUMNS.split(", "),
    "ON CONFLICT (execution_id) DO UPDATE SET queue = excluded.queue, "
    "version = excluded.version, state = excluded.state, priority = excluded.priority, "
    "lease_id = excluded.lease_id, score = excluded.score, item = excluded.item "
    f"WHERE excluded.version > {_TABLE}.version",
)
# A removal leaves no tombstone here: it only deletes a row of an older version.
_DELETE = RowsStatement(
    ("execution_id", "version"),
    f"DELETE FROM {_TABLE} WHERE execution_id = ? AND version < ?",  # noqa: S608 (constant)
    f"DELETE FROM {_TABLE} USING {recordset(_TABLE)} "  # noqa: S608 (constant)
    f"WHERE {_TABLE}.execution_id = r.execution_id AND {_TABLE}.version < r.version",
)
_UPSERT_PAUSE = upsert(
    "jobledger_queue_pauses",
    ("queue", "version", "record"),
    "ON CONFLICT (queue) DO UPDATE SET version = excluded.version, record = excluded.record "
    "WHERE excluded.version > jobledger_queue_pauses.version",
)
_UPSERT_LIMIT = upsert(
    "jobledger_queue_limits",
    ("name", "version", "record"),
    "ON CONFLICT (name) DO UPDATE SET version = excluded.version, record = excluded.record "
    "WHERE excluded.version > jobledger_queue_limits.version",
)
_record_encoder = msgspec.msgpack.Encoder()
_pause_decoder = msgspec.msgpack.Decoder(QueuePause)
_limit_decoder = msgspec.msgpack.Decoder(NamedLimit)
# The columns of an ``EncodedEntry``, in its order.
_ENTRY = "execution_id, queue, version, state, priority, lease_id, score, item"
_SELECT_ENTRIES = f"SELECT {_ENTRY} FROM jobledger_open_executions"  # noqa: S608 (constant)
# PostgreSQL: binary COPY is the cheapest way to move a table to the client (no text
# to parse, no cursor round trips); the casts pin the types that set_types names.
_COPY_ENTRIES = (
    "COPY (SELECT execution_id::text, queue::text, version::int4, state::text, "
    "priority::int2, lease_id::text, score::int8, item::bytea "
    "FROM jobledger_open_executions) TO STDOUT (FORMAT BINARY)"
)
_COPY_TYPES = ["text", "text", "int4", "text", "int2", "text", "int8", "bytea"]


class Checkpoint:
    """Open executions and the log position they were folded to."""

    def __init__(self, database: Database, name: str = CHECKPOINT) -> None:
        self._database = database
        self.name = name
        self._position = Position(database, name)

    def position(self) -> int:
        return self._position.get()

    def commit(
        self,
        changes: Sequence[QueueChange],
        position: int | None,
        *,
        pauses: Sequence[QueuePause] = (),
        limits: Sequence[NamedLimit] = (),
    ) -> None:
        """Apply ``changes``, ``pauses`` and ``limits`` and move the position (unless
        None), in one transaction."""
        upserts = [stored_row(c.item) for c in changes if c.item is not None]
        deletes = [(str(c.execution_id), c.version) for c in changes if c.item is None]
        paused = [
            (p.queue, p.version, _record_encoder.encode(p)) for p in _latest(pauses, _queue_of)
        ]
        limited = [
            (n.name, n.version, _record_encoder.encode(n)) for n in _latest(limits, _name_of)
        ]
        with self._database.transaction(pipelined=True) as cursor:
            # The rows and the position commit together, and the log has both again.
            cursor.asynchronous_commit()
            cursor.write_rows(_UPSERT, upserts)
            cursor.write_rows(_DELETE, deletes)
            cursor.write_rows(_UPSERT_PAUSE, paused)
            cursor.write_rows(_UPSERT_LIMIT, limited)
            if position is not None:
                self._position.write(cursor, position)

    def clear(self) -> None:
        with self._database.transaction() as cursor:
            cursor.execute("DELETE FROM jobledger_open_executions")
            cursor.execute("DELETE FROM jobledger_queue_pauses")
            cursor.execute("DELETE FROM jobledger_queue_limits")
            self._position.write(cursor, 0)

    def pauses(self) -> list[QueuePause]:
        """Every queue's pause record (one row per queue ever paused: a few)."""
        return [_pause_decoder.decode(r) for r in self._records("jobledger_queue_pauses")]

    def limits(self) -> list[NamedLimit]:
        """Every named limit (one row per limit: a few)."""
        return [_limit_decoder.decode(r) for r in self._records("jobledger_queue_limits")]

    def _records(self, table: str) -> list[bytes]:
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute(f"SELECT record FROM {table}")  # noqa: S608 (a constant of this class)
            rows: list[Any] = []
            while batch := cursor.fetchmany(1000):
                rows += batch
        return [bytes(row[0]) for row in rows]

    def entries(self, batch: int = SNAPSHOT_BATCH) -> Iterator[tuple[int, list[EncodedEntry]]]:
        """Batches of open entries as stored, each with the position they belong to.

        An empty checkpoint yields one empty batch, so its position still comes from
        the same snapshot: read apart, a commit in between would slip past a rebuild.
        """
        with self._database.transaction(snapshot=True) as cursor:
            # ``execute`` hands back the driver's cursor (DB-API); on PostgreSQL its COPY
            # reads the rows in this same snapshot, elsewhere the rows are streamed.
            raw = cursor.execute(positions.READ, (self.name,))
            position = positions.fetched(cursor)
            rows = _copied(raw) if isinstance(raw, psycopg.Cursor) else _streamed(cursor)
            # Closed first when the reader stops early: a COPY or a named cursor must
            # end before its transaction can.
            with contextlib.closing(rows):
                empty = True
                for chunk in _batches(rows, batch):
                    empty = False
                    yield position, chunk
            if empty:
                yield position, []

    def load(self, execution_id: UUID) -> QueueItem | None:
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute(
                "SELECT item FROM jobledger_open_executions WHERE execution_id = ?",
                (str(execution_id),),
            )
            row = cursor.fetchone()
        return None if row is None else decode_item(bytes(row[0]))

    def pending_in(self, queue: str) -> list[UUID]:
        """The pending (not leased, not dead) executions of ``queue``, by id."""
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute(
                "SELECT execution_id FROM jobledger_open_executions "
                "WHERE queue = ? AND state = ? ORDER BY execution_id",
                (queue, QueueState.PENDING.value),
            )
            rows: list[Any] = []
            while batch := cursor.fetchmany(SNAPSHOT_BATCH):
                rows += batch
        return [UUID(str(row[0])) for row in rows]

    def open_counts(self, job_id: UUID) -> dict[QueueState, int]:
        """How many open executions of a job there are, by state (for overlap rules)."""
        return self.open_counts_of([job_id]).get(job_id, {})

    def open_counts_of(self, job_ids: Sequence[UUID]) -> dict[UUID, dict[QueueState, int]]:
        """How many open executions each job has, by state, in one query per 500 ids
        (a job with none is left out): a tick asks for all the due jobs it might hold
        back at once."""
        found: dict[UUID, dict[QueueState, int]] = {}
        for job_id, runs in self.open_runs_of(job_ids).items():
            counts = found.setdefault(job_id, {})
            for _run, state in runs:
                counts[state] = counts.get(state, 0) + 1
        return found

    def open_runs_of(self, job_ids: Sequence[UUID]) -> dict[UUID, list[tuple[UUID, QueueState]]]:
        """Each job's open executions (id and state), as ``open_counts_of`` counts them."""
        found: dict[UUID, list[tuple[UUID, QueueState]]] = {}
        if not job_ids:
            return found
        with self._database.transaction(snapshot=True) as cursor:
            for chunk in chunked([str(job_id) for job_id in job_ids], _ID_CHUNK):
                cursor.execute_in(
                    f"SELECT job_id, execution_id, state FROM {_TABLE} WHERE job_id IN",  # noqa: S608 (a constant name)
                    chunk,
                )
                for job_id, execution_id, state in cursor.fetchmany(_OPEN_ROWS):
                    runs = found.setdefault(UUID(job_id), [])
                    runs.append((UUID(str(execution_id)), QueueState(state)))
        return found


def _copied(raw: psycopg.Cursor[Any]) -> Generator[EncodedEntry, None, None]:
    with raw.copy(_COPY_ENTRIES) as copy:
        copy.set_types(_COPY_TYPES)
        yield from copy.rows()


def _streamed(cursor: Cursor) -> Generator[EncodedEntry, None, None]:
    for rows in cursor.stream(_SELECT_ENTRIES):
        yield from rows


def _queue_of(pause: QueuePause) -> str:
    return pause.queue


def _name_of(limit: NamedLimit) -> str:
    return limit.name


def _latest(records: Iterable[_Record], name: Callable[[_Record], str]) -> list[_Record]:
    """The newest record of each name: one statement may upsert a row only once, and the
    version guard would keep only the newest of them anyway."""
    latest: dict[str, _Record] = {}
    for record in records:
        kept = latest.get(name(record))
        if kept is None or record.version > kept.version:
            latest[name(record)] = record
    return [latest[key] for key in sorted(latest)]


def _batches(values: Iterable[_T], size: int) -> Iterator[list[_T]]:
    iterator = iter(values)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def stored_row(item: QueueItem) -> tuple[Any, ...]:
    """The row of ``item`` (the values of ``COLUMNS``)."""
    return (
        str(item.execution_id),
        _job_id(item),
        item.queue,
        item.version,
        item.state.value,
        item.priority,
        None if item.lease_id is None else str(item.lease_id),
        due_score(item.at),
        encode_item(item),
    )


def _job_id(item: QueueItem) -> str | None:
    job_id = decode_spec(item.spec).job_id if item.spec else None
    return None if job_id is None else str(job_id)
