"""The open-executions checkpoint's tables: ``jobledger_open_executions`` (one row per
open execution: the fields that place its entry, and the entry's msgpack bytes), the
queues' pause records and the named limits, with the checkpoint's position, all moved
in one transaction."""

import contextlib
import itertools
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Any, TypeVar
from uuid import UUID

import msgspec

from jobledger.adapters.sql import positions
from jobledger.adapters.sql.positions import SqlPosition
from jobledger.projections.database import (
    Cursor,
    Database,
    RowsStatement,
    chunked,
    recordset,
    upsert,
)
from jobledger.projections.queue.backend import (
    NamedLimit,
    QueueChange,
    QueueItem,
    QueuePause,
    QueueState,
    decode_spec,
)
from jobledger.projections.queue.checkpoint import CHECKPOINT, SNAPSHOT_BATCH
from jobledger.projections.queue.entries import EncodedEntry, decode_item, encode_item
from jobledger.projections.times import due_score

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
SELECT_ENTRIES = f"SELECT {_ENTRY} FROM jobledger_open_executions"  # noqa: S608 (constant)


class SqlCheckpoint:
    """The checkpoint (``Checkpoint``) in the event store's database."""

    def __init__(self, database: Database, name: str = CHECKPOINT) -> None:
        self._database = database
        self.name = name
        self._position = SqlPosition(database, name)

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
        return [_pause_decoder.decode(r) for r in self._records("jobledger_queue_pauses")]

    def limits(self) -> list[NamedLimit]:
        return [_limit_decoder.decode(r) for r in self._records("jobledger_queue_limits")]

    def _records(self, table: str) -> list[bytes]:
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute(f"SELECT record FROM {table}")  # noqa: S608 (a constant of this class)
            rows: list[Any] = []
            while batch := cursor.fetchmany(1000):
                rows += batch
        return [bytes(row[0]) for row in rows]

    def entries(self, batch: int = SNAPSHOT_BATCH) -> Iterator[tuple[int, list[EncodedEntry]]]:
        with self._database.transaction(snapshot=True) as cursor:
            # ``execute`` hands back the driver's cursor (DB-API), for a store that reads
            # the entries through it in this same snapshot.
            raw = cursor.execute(positions.READ, (self.name,))
            position = positions.fetched(cursor)
            rows = self._entry_rows(cursor, raw)
            # Closed first when the reader stops early: a COPY or a named cursor must
            # end before its transaction can.
            with contextlib.closing(rows):
                empty = True
                for chunk in _batches(rows, batch):
                    empty = False
                    yield position, chunk
            if empty:
                yield position, []

    def _entry_rows(
        self,
        cursor: Cursor,
        raw: Any,  # noqa: ARG002, ANN401 (the driver's cursor, for a store that reads it otherwise)
    ) -> Generator[EncodedEntry, None, None]:
        """Every open entry, read in the transaction of ``cursor``."""
        for rows in cursor.stream(SELECT_ENTRIES):
            yield from rows

    def load(self, execution_id: UUID) -> QueueItem | None:
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute(
                "SELECT item FROM jobledger_open_executions WHERE execution_id = ?",
                (str(execution_id),),
            )
            row = cursor.fetchone()
        return None if row is None else decode_item(bytes(row[0]))

    def pending_in(self, queue: str) -> list[UUID]:
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

    def open_runs_of(self, job_ids: Sequence[UUID]) -> dict[UUID, list[tuple[UUID, QueueState]]]:
        # One query per 500 ids.
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
